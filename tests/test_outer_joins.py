"""Outer joins and [NOT] IN / [NOT] EXISTS subqueries (JoinSteps) against DuckDB.

Fixed queries over small tables with NULLs and duplicate keys run under every policy
(lottery, rank, bandit, random, static) at batch sizes 1 (debug: routing constraints
and duplicate avoidance checked), 7 and the default; a hypothesis property test draws
FROM chains of INNER / LEFT / RIGHT / FULL joins with equi and non-equi ON terms, WHERE
terms on either side, and correlated subqueries (whose table is sometimes served by an
index AM only: an EOT-gated step). Index AMs and mirrors serve tables of the region and
the steps' tables; what is not exact is refused by name.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import assert_same_bag, check_all, duckdb_table, make_catalog
from test_differential import tables_st

from eddies.engine import Catalog, DataSourceError, UnsupportedQueryError, execute, explain

POLICIES = ("lottery", "rank", "bandit", "random", "static")
EXAMPLES = int(os.environ.get("EDDIES_OUTER_EXAMPLES", "50"))
BATCH_SIZES = (None, 1, 7)


def _t(**cols) -> pa.Table:
    return pa.table({k: pa.array(v, pa.int64()) for k, v in cols.items()})


A = _t(k=[1, 2, 2, None, 5, 6], v=[10, 20, 30, 40, 50, None])
B = _t(k=[2, 2, 3, None, 1, 1], w=[1, 2, 3, 4, None, 6])
C = _t(k=[2, 3, None, 6, 6], z=[7, 8, 9, 1, 2])
EMPTY = _t(k=[], w=[])
TABLES = {"a": A, "b": B, "c": C, "e": EMPTY}

OUTER = [
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k",
    "SELECT * FROM a RIGHT OUTER JOIN b ON a.k = b.k",
    "SELECT * FROM a FULL JOIN b ON a.k = b.k AND b.w > 1",
    "SELECT * FROM a LEFT JOIN b ON a.k < b.k",  # no hashed key: residual only
    "SELECT * FROM a LEFT JOIN b ON a.v > 15",  # a condition on the preserved side alone
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k WHERE b.w IS NULL",  # WHERE not pushed down
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k AND b.w IS NULL",
    "SELECT * FROM a FULL JOIN b ON a.k = b.k WHERE a.v > 15 OR b.w > 2",
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k JOIN c ON c.k = a.k",
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k LEFT JOIN c ON c.k = b.k",
    "SELECT * FROM a JOIN c ON c.k = a.k FULL JOIN b ON a.k = b.k AND a.v < b.w * 20",
    "SELECT * FROM a JOIN c ON a.k = c.k RIGHT JOIN b ON b.k = a.k WHERE c.z > 7",
    "SELECT * FROM a FULL JOIN e ON a.k = e.k",
    "SELECT * FROM e RIGHT JOIN a ON a.k = e.k",
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k, c WHERE c.z < 8",
    "SELECT a.k, count(*), count(b.w), sum(b.w) FROM a FULL JOIN b ON a.k = b.k GROUP BY a.k",
    "SELECT * FROM a AS x LEFT JOIN a AS y ON x.k = y.k AND x.v < y.v",  # self-join
]

SUBQUERIES = [
    "SELECT * FROM a WHERE a.k IN (SELECT k FROM b)",
    "SELECT * FROM a WHERE a.k NOT IN (SELECT k FROM b)",  # b.k has a NULL: no rows
    "SELECT * FROM a WHERE a.k NOT IN (SELECT k FROM c WHERE c.z < 9)",  # NULL a.k: dropped
    "SELECT * FROM a WHERE a.k NOT IN (SELECT k FROM e)",  # empty: every row, NULLs too
    "SELECT * FROM a WHERE NOT a.k IN (SELECT k + 1 FROM b WHERE b.w > 1)",
    "SELECT * FROM a WHERE a.k NOT IN (SELECT b.k FROM b WHERE b.w = a.v / 10)",  # correlated
    "SELECT * FROM a WHERE EXISTS (SELECT * FROM b WHERE b.k = a.k AND b.w > 1)",
    "SELECT * FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k)",
    "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM c WHERE c.z > a.v / 10)",
    "SELECT * FROM a WHERE NOT EXISTS (SELECT 1 FROM e)",
    "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM a AS x WHERE x.k = a.k AND x.v > a.v)",
    "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM b WHERE k = a.k)",  # inner name first
    "SELECT a.k, b.w FROM a JOIN b ON a.k = b.k WHERE a.v IN (SELECT z * 10 FROM c) "
    "AND NOT EXISTS (SELECT 1 FROM c WHERE c.k = b.w)",
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k WHERE b.w NOT IN (SELECT z FROM c)",
    # NOT IN hashed: a NULL y inside the correlation, a NULL x with a non-empty S
    "SELECT * FROM a WHERE a.v / 10 NOT IN (SELECT b.w FROM b WHERE b.k = a.k)",
    "SELECT * FROM b WHERE b.k NOT IN (SELECT a.k FROM a WHERE a.v > b.w * 10)",
    "SELECT * FROM a WHERE a.k NOT IN (SELECT c.k FROM c WHERE c.z = a.v / 10 + 6)",
    "SELECT * FROM a WHERE a.k IN (SELECT b.k FROM b WHERE b.w = a.v / 10 AND b.k = a.k)",
]

EXTRA = [
    "SELECT * FROM a FULL JOIN b ON 1 = 0",
    "SELECT * FROM a LEFT JOIN b ON b.w > 2",  # the stored filter alone
    "SELECT * FROM a RIGHT JOIN b ON a.k = b.k AND a.v = b.w * 10 AND b.w IS NOT NULL",
    "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM c WHERE c.z > 8)",  # uncorrelated
    "SELECT * FROM a WHERE NOT EXISTS (SELECT 1 FROM c WHERE c.z > 9)",
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k ORDER BY a.v NULLS FIRST, b.w LIMIT 4",
    # LEFT JOIN USING / NATURAL: the USING column is the left side's
    "SELECT k, v, w FROM a LEFT OUTER JOIN b USING (k) WHERE k > 1",
    "SELECT * FROM a NATURAL LEFT JOIN b",
    "SELECT * FROM a LEFT JOIN b USING (k) JOIN c USING (k)",
    "SELECT * FROM a LEFT JOIN b USING (k) LEFT JOIN c USING (k)",
]


@pytest.mark.parametrize("sql", OUTER + SUBQUERIES + EXTRA)
def test_fixed_queries_match_duckdb(sql):
    check_all(sql, TABLES, policies=POLICIES, batch_sizes=BATCH_SIZES)


def test_explain_lists_the_steps_and_their_order():
    text = explain("SELECT * FROM a JOIN c ON a.k = c.k FULL JOIN b ON a.k = b.k", _cat())
    assert "step:b  full" in text
    assert "after the region {a, c}" in text


def _cat() -> Catalog:
    return make_catalog(TABLES)


# ------------------------------------------------------------------------ index AMs, mirrors
def _lookup_over(table: pa.Table, yields: int = 0):
    async def lookup(bind: dict) -> pa.Table:
        for _ in range(hash(tuple(sorted(bind.items()))) % yields if yields else 0):
            await trio.lowlevel.checkpoint()  # lookups finish out of order
        mask = None
        for col, value in bind.items():
            same = pa.compute.equal(table[col], pa.scalar(value, table.schema.field(col).type))
            mask = same if mask is None else pa.compute.and_(mask, same)
        return table.filter(mask)

    return lookup


@pytest.mark.parametrize(
    "ams",
    ["b-scan+index", "b-two-scans", "b-fast-and-slow-scans", "a-index-only", "c-scan+index"],
)
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM c JOIN a ON a.k = c.k FULL JOIN b ON a.k = b.k",
        "SELECT * FROM c JOIN a ON a.k = c.k WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k)",
        "SELECT * FROM c JOIN a ON a.k = c.k LEFT JOIN b ON b.k = a.k AND b.w < a.v",
        # b in the region (looked up by c) and as a subquery step table
        "SELECT * FROM c JOIN b ON b.k = c.k WHERE EXISTS (SELECT 1 FROM b AS x WHERE x.w = c.z)",
    ],
)
def test_index_ams_and_mirrors(ams, sql):
    cat = Catalog()
    if ams == "a-index-only":  # a is reached only by lookups from c (in the region)
        cat.add_index("a", A.schema, on=["k"], lookup=_lookup_over(A))
    else:
        cat.add_table("a", A)
    cat.add_table("b", B, batch_size=2, access_name="b_scan")
    if ams == "b-scan+index":
        cat.add_index("b", B.schema, on=["k"], lookup=_lookup_over(B), access_name="b_index")
    if ams == "b-two-scans":
        cat.add_table(
            "b", B.take(list(range(B.num_rows))[::-1]), batch_size=3, access_name="b_scan2"
        )
    if ams == "b-fast-and-slow-scans":  # the slow one is stopped with batches still queued
        cat.add_table("b", B.take(list(range(B.num_rows))[::-1]), batch_size=1, access_name="b_1")
        cat.add_table("b", B.take([1, 0, 3, 2, 5, 4]), batch_size=1, access_name="b_2")
    cat.add_table("c", C, access_name="c_scan")
    if ams == "c-scan+index":
        cat.add_index("c", C.schema, on=["k"], lookup=_lookup_over(C), access_name="c_index")
    expected = duckdb_table(sql, TABLES)
    for policy in POLICIES:
        for bs in BATCH_SIZES:
            ours = execute(sql, cat, policy=policy, batch_size=bs, debug=bs == 1, seed=3)
            ctx = f"{ams} policy={policy} batch_size={bs}"
            assert_same_bag(ours, sql, TABLES, context=ctx, expected=expected)


# ------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("SELECT * FROM a FULL JOIN b USING (k)", "FULL JOIN with USING"),
        ("SELECT * FROM a NATURAL RIGHT JOIN b", "NATURAL"),
        ("SELECT * FROM a, c RIGHT JOIN b ON c.k = b.k", "RIGHT JOIN after a comma"),
        # uncorrelated, these bodies run (tests/test_membership_bodies.py); correlated, refused
        (
            "SELECT * FROM a WHERE a.k = 1 OR a.k IN (SELECT k FROM b WHERE b.w > a.v LIMIT 2)",
            "IN / EXISTS subquery with LIMIT",
        ),
        ("SELECT (SELECT max(b.k + a.k) FROM b WHERE b.k = a.k) FROM a", "subquer"),
        ("SELECT * FROM a WHERE a.k IN (SELECT k, w FROM b)", "exactly one column"),
        ("SELECT * FROM a WHERE a.k IN (SELECT k FROM b WHERE b.w > a.v GROUP BY k)", "GROUP"),
        ("SELECT * FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k LIMIT 1)", "LIMIT"),
        (
            "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM b JOIN c ON b.k = c.k "
            "WHERE c.k = a.k LIMIT 1)",
            "LIMIT",
        ),
        (
            "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k IN (SELECT k FROM c) "
            "AND b.k < a.k GROUP BY b.k)",
            "GROUP",
        ),
    ],
)
def test_refused_by_name(sql, words):
    with pytest.raises(UnsupportedQueryError) as info:
        execute(sql, _cat())
    assert words.lower() in str(info.value).lower()


@pytest.mark.parametrize("mirrors", [1, 2])
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM a LEFT JOIN b ON a.k = b.k AND b.w > 1 AND a.v > 10",
        "SELECT * FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k)",
        "SELECT * FROM a WHERE a.k IN (SELECT k FROM b)",
        "SELECT * FROM a WHERE a.v / 10 NOT IN (SELECT b.w FROM b WHERE b.k = a.k)",
        "SELECT * FROM a JOIN c ON a.k = c.k LEFT JOIN b ON b.k = c.k",
        "SELECT * FROM a LEFT JOIN c ON a.k = c.k LEFT JOIN b ON b.k = c.k",  # NULL keys
    ],
)
def test_index_only_step_table_waits_for_eots(sql, mirrors):
    # b has no scan: each tuple looks its key up first, and the step answers it once the
    # lookup's EOT is in b's SteM (lookups yield, so they finish out of order).
    cat = Catalog()
    cat.add_table("a", A)
    cat.add_table("c", C)
    for i in range(mirrors):
        cat.add_index("b", B.schema, on=["k"], lookup=_lookup_over(B, 3), access_name=f"b{i}")
    expected = duckdb_table(sql, TABLES)
    for policy in POLICIES:
        for bs in BATCH_SIZES:
            ours = execute(sql, cat, policy=policy, batch_size=bs, debug=bs is not None, seed=2)
            ctx = f"mirrors={mirrors} policy={policy} batch_size={bs}"
            assert_same_bag(ours, sql, TABLES, context=ctx, expected=expected)


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("SELECT * FROM a RIGHT JOIN b ON a.k = b.k", "whole SteM"),
        ("SELECT * FROM a LEFT JOIN b ON a.k < b.k", "bind none of its index AMs"),
        ("SELECT * FROM a WHERE a.k NOT IN (SELECT k FROM b)", "bind none"),
    ],
)
def test_index_only_step_table_refused_where_lookups_cannot_answer(sql, words):
    cat = Catalog()
    cat.add_table("a", A)
    cat.add_index("b", B.schema, on=["k"], lookup=_lookup_over(B))
    with pytest.raises(UnsupportedQueryError, match="no scan access method") as info:
        execute(sql, cat)
    assert words in str(info.value)


# ------------------------------------------------------------------------------- streams
@pytest.mark.parametrize("window", [None, 2], ids=["unbounded", "row-window-2"])
def test_stream_preserved_side_with_a_static_step_table(window):
    from eddies.engine.streaming.thread_runner import BackgroundQuery
    from eddies.modules.window import RowWindow

    cat = Catalog()
    # The window bounds the stream's SteM, which no step reads: every row still counts.
    events = cat.add_stream("a", A.schema, window=RowWindow(window) if window else None)
    cat.add_table("b", B)
    cat.add_table("c", C)
    sql = (
        "SELECT * FROM a LEFT JOIN b ON a.k = b.k "
        "WHERE NOT EXISTS (SELECT 1 FROM c WHERE c.k = a.k AND c.z > 7)"
    )
    query = BackgroundQuery(sql, cat, batch_size=2, policy="lottery", debug=True)
    for i in range(A.num_rows):
        assert events.push(A.slice(i, 1), i)
    events.close()
    assert_same_bag(query.result(timeout=60), sql, TABLES)


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("SELECT * FROM b LEFT JOIN a ON a.k = b.k", "stream"),
        ("SELECT * FROM a FULL JOIN b ON a.k = b.k", "FULL JOIN over the stream"),
        ("SELECT * FROM b WHERE b.k IN (SELECT k FROM a)", "stream"),
    ],
)
def test_streams_refused_where_not_exact(sql, words):
    cat = Catalog()
    cat.add_stream("a", A.schema)
    cat.add_table("b", B)
    with pytest.raises(UnsupportedQueryError) as info:
        execute(sql, cat)
    assert words.lower() in str(info.value).lower()


# ------------------------------------------------------------------------- property test
@st.composite
def outer_scenarios(draw):
    n = draw(st.integers(2, 3))
    names = ["t0", "t1", "t2"][:n]
    tables = {name: draw(tables_st(12)) for name in names}
    from_sql = "t0"
    for i in range(1, n):
        kind = draw(st.sampled_from(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"]))
        other = f"t{draw(st.integers(0, i - 1))}"
        col = draw(st.sampled_from(["k1", "k2"]))
        terms = [f"t{i}.{col} = {other}.{draw(st.sampled_from(['k1', 'k2']))}"]
        extra = draw(st.sampled_from(["", "noneq", "right", "left", "string"]))
        if extra == "noneq":
            terms.append(f"{other}.v < t{i}.v")
        elif extra == "right":
            terms.append(f"t{i}.v > {draw(st.integers(-1, 4))}")
        elif extra == "left":
            terms.append(f"{other}.v IS NOT NULL")
        elif extra == "string":
            terms = [f"t{i}.s = {other}.s"]
        if kind == "LEFT JOIN" and i == 1 and draw(st.integers(0, 4)) == 0:
            from_sql += f" LEFT JOIN t1 USING ({col})"  # the left copy is the USING column
            continue
        from_sql += f" {kind} t{i} ON " + " AND ".join(terms)
    where = []
    if draw(st.booleans()):
        t = draw(st.sampled_from(names))
        where.append(
            draw(
                st.sampled_from(
                    [f"{t}.v > 1", f"{t}.k1 IS NULL", f"coalesce({t}.v, 0) < 3", f"{t}.s <> 'a'"]
                )
            )
        )
    sub = draw(st.sampled_from(["", "in", "notin", "exists", "notexists"]))
    outer = draw(st.sampled_from(names))
    index_on = None  # u served by an index AM only (EOT-gated step), when its keys bind it
    if sub:
        tables["u"] = draw(tables_st(8))
        corr = draw(st.booleans())
        cond = f" WHERE u.k2 = {outer}.k2" if corr else " WHERE u.v > 0"
        if (corr or sub == "in") and draw(st.booleans()):
            index_on = "k2" if corr else "k1"
        if sub in ("in", "notin"):
            neg = "NOT " if sub == "notin" else ""
            where.append(f"{outer}.k1 {neg}IN (SELECT u.k1 FROM u{cond})")
        else:
            neg = "NOT " if sub == "notexists" else ""
            where.append(f"{neg}EXISTS (SELECT 1 FROM u{cond})")
    select = draw(st.sampled_from(["*", "agg"]))
    if select == "agg":
        sql = f"SELECT count(*), count({names[-1]}.v), sum(t0.v) FROM {from_sql}"
    else:
        sql = f"SELECT * FROM {from_sql}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    policy = draw(st.sampled_from(POLICIES))
    return sql, tables, policy, index_on


@pytest.mark.slow  # about 20 s
@settings(max_examples=EXAMPLES, deadline=None, report_multiple_bugs=False)
@given(scenario=outer_scenarios())
def test_outer_joins_and_subqueries_property(scenario):
    sql, tables, policy, index_on = scenario
    expected = duckdb_table(sql, tables)
    cat = Catalog()
    for name, data in tables.items():
        if name == "u" and index_on is not None:
            cat.add_index("u", data.schema, on=[index_on], lookup=_lookup_over(data, 3))
        else:
            cat.add_table(name, data)
    runs = [(p, None) for p in POLICIES] + [(policy, 1), ("lottery", 7), ("bandit", 7)]
    for run_policy, bs in runs:
        ours = execute(sql, cat, policy=run_policy, batch_size=bs, debug=bs is not None, seed=1)
        ctx = f"policy={run_policy} batch_size={bs}"
        assert_same_bag(ours, sql, tables, context=ctx, expected=expected)


def test_index_only_step_table_whose_lookups_fail_fails_the_query():
    async def down(bind: dict) -> pa.Table:
        raise ConnectionError("down")

    cat = Catalog()
    cat.add_table("a", A)
    cat.add_index("b", B.schema, on=["k"], lookup=down, retries=0)
    with pytest.raises(DataSourceError, match="every access method"):
        execute("SELECT * FROM a LEFT JOIN b ON a.k = b.k", cat)
