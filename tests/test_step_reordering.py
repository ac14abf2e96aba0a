"""JoinSteps that commute, taken in the order the eddy's policy picks, against DuckDB.

Each step needs the region, the aliases its condition reads, and any RIGHT / FULL join
before it (engine/plan/outer_and_semi_joins.py: step_needs); the steps a tuple spans the needs of
are
all offered, and the policy picks. Fixed queries and a hypothesis property test mix
several LEFT joins from the region, LEFT joins reading earlier step tables, inner and
comma joins after an outer join, semi- / anti-joins and NOT IN, WHERE terms on the
null-supplied sides, RIGHT / FULL barriers in between, NULLs and duplicate keys; each
runs under every policy at batch sizes 1, 7 and the default with ``debug=True`` (the
constraint checker's "join order" rule is checked on every routed batch). A counting
test shows the eddy taking the steps in more than one order: under ``rank``, a selective
anti-join goes before a fanning LEFT join written first, once estimates exist.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import assert_same_bag, duckdb_table, make_catalog
from test_differential import tables_st

from eddies.engine import Catalog, explain, run_query

POLICIES = ("lottery", "rank", "bandit", "hybrid", "random", "static")
BATCH_SIZES = (None, 1, 7)
EXAMPLES = int(os.environ.get("EDDIES_REORDER_EXAMPLES", "40"))


def _t(**cols) -> pa.Table:
    return pa.table({k: pa.array(v, pa.int64()) for k, v in cols.items()})


A = _t(k=[1, 2, 2, None, 5, 6, 6], v=[10, 20, 30, 40, 50, None, 60])
B = _t(k=[2, 2, 3, None, 1, 1, 6], w=[1, 2, 3, 4, None, 6, 6])
C = _t(k=[2, 3, None, 6, 6, 1], z=[7, 8, 9, 1, 2, None])
TABLES = {"a": A, "b": B, "c": C}

COMMUTING = [
    # several LEFT joins from the region
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k LEFT JOIN c ON c.k = a.k",
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k LEFT JOIN c ON c.k = a.k AND c.z > 1 "
    "LEFT JOIN b AS y ON y.w = a.v / 10",
    # WHERE on the null-supplied sides: evaluated after their steps only
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k LEFT JOIN c ON c.k = a.k "
    "WHERE b.w IS NULL OR c.z > 7",
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k LEFT JOIN c ON c.k = a.k WHERE c.z IS NULL",
    # a LEFT join reading an earlier step's table follows it
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k LEFT JOIN c ON c.k = b.w",
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k LEFT JOIN c ON c.k = a.k AND c.z > b.w",
    # LEFT + semi + anti + NOT IN
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k WHERE NOT EXISTS (SELECT 1 FROM c "
    "WHERE c.k = a.k) AND a.k IN (SELECT k FROM b AS y WHERE y.w > 1)",
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k LEFT JOIN c ON c.k = a.k "
    "WHERE a.k NOT IN (SELECT k FROM c AS x WHERE x.z < 9) "
    "AND EXISTS (SELECT 1 FROM b AS y WHERE y.k = a.k)",
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k WHERE a.v / 10 NOT IN "
    "(SELECT w FROM b AS y WHERE y.k = a.k) AND NOT EXISTS (SELECT 1 FROM c WHERE c.z = b.w)",
    # a subquery correlated with a null-supplied table follows its step
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k WHERE EXISTS (SELECT 1 FROM c WHERE c.k = b.k)",
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k WHERE b.w NOT IN (SELECT z FROM c)",
    # inner and comma joins after an outer join
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k JOIN c ON c.k = a.k",
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k JOIN c ON c.k = b.k",  # reads b: after it
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k JOIN c ON c.k = a.k WHERE b.w IS NULL",
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k, c WHERE c.z < 8 AND b.w IS NOT NULL",
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k, c LEFT JOIN b AS y ON y.k = c.k "
    "WHERE NOT EXISTS (SELECT 1 FROM c AS x WHERE x.z = a.v / 10)",
    # a region of two tables
    "SELECT * FROM a JOIN c ON a.k = c.k LEFT JOIN b ON b.k = c.k "
    "LEFT JOIN b AS y ON y.w = a.v / 10 WHERE EXISTS (SELECT 1 FROM b AS x WHERE x.k = c.k)",
    # RIGHT / FULL barriers between commuting steps
    "SELECT * FROM a LEFT JOIN b ON a.k = b.k LEFT JOIN c ON c.k = a.k "
    "FULL JOIN b AS y ON y.k = a.k LEFT JOIN c AS x ON x.k = y.k "
    "WHERE NOT EXISTS (SELECT 1 FROM b AS u WHERE u.w = y.w)",
    "SELECT * FROM a LEFT JOIN c ON c.k = a.k RIGHT JOIN b ON b.k = a.k "
    "LEFT JOIN c AS x ON x.k = b.k WHERE a.v IS NULL OR x.z > 1",
    # aggregates over reordered steps
    "SELECT a.k, count(*), count(b.w), count(c.z) FROM a LEFT JOIN b ON a.k = b.k "
    "LEFT JOIN c ON c.k = a.k WHERE a.v NOT IN (SELECT w * 10 FROM b AS x "
    "WHERE x.w IS NOT NULL) GROUP BY a.k",
]


@pytest.mark.parametrize("sql", COMMUTING)
def test_commuting_steps_match_duckdb(sql):
    cat = make_catalog(TABLES)
    expected = duckdb_table(sql, TABLES)
    for policy in POLICIES:
        for bs in BATCH_SIZES:
            ours = run_query(sql, cat, policy=policy, batch_size=bs, debug=True, seed=5).table
            ctx = f"policy={policy} batch_size={bs}"
            assert_same_bag(ours, sql, TABLES, context=ctx, expected=expected)


@pytest.mark.parametrize(
    ("sql", "needs"),
    [
        (
            "SELECT * FROM a LEFT JOIN b ON a.k = b.k LEFT JOIN c ON c.k = a.k "
            "WHERE NOT EXISTS (SELECT 1 FROM c AS x WHERE x.k = b.k)",
            {"b": "a", "c": "a", "x": "a, b"},
        ),
        (
            "SELECT * FROM a LEFT JOIN b ON a.k = b.k JOIN c ON c.k = b.k "
            "LEFT JOIN c AS y ON y.k = a.k",
            {"b": "a", "c": "a, b", "y": "a"},
        ),
        (  # RIGHT / FULL: a barrier in its FROM place
            "SELECT * FROM a LEFT JOIN b ON a.k = b.k FULL JOIN c ON c.k = a.k "
            "LEFT JOIN b AS y ON y.k = a.k WHERE a.k IN (SELECT k FROM c AS x)",
            {"b": "a", "c": "a, b", "y": "a, b, c", "x": "a, b, c"},
        ),
    ],
)
def test_explain_shows_each_steps_needs(sql, needs):
    text = explain(sql, make_catalog(TABLES))
    for alias, aliases in needs.items():
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(f"step:{alias} "))
        assert line.split(" needs ")[1].startswith("{" + aliases + "}"), line


def test_a_step_table_with_a_later_barrier_keeps_where_after_it():
    # WHERE a.v > 15 reads a, which the FULL join pads: it needs the FULL step too.
    sql = "SELECT * FROM a LEFT JOIN b ON a.k = b.k FULL JOIN c ON c.k = a.k WHERE a.v > 15"
    text = explain(sql, make_catalog(TABLES))
    assert "a.v > 15  [a, b, c]" in text


# ------------------------------------------------------------------ the order is learnt
def _fanning_left_and_selective_anti() -> tuple[Catalog, str]:
    n = 20_000
    cat = Catalog()
    # a arrives in many batches; b and s are read first (fewer rows) and complete early
    cat.add_table("a", pa.table({"k": np.arange(n) % 200, "v": np.arange(n) % 20}), batch_size=500)
    cat.add_table("b", pa.table({"k": np.repeat(np.arange(200), 5), "w": np.arange(1000)}))
    cat.add_table("s", pa.table({"g": np.arange(19)}))  # drops 19 of every 20 a rows
    sql = (
        "SELECT count(*), count(b.w) FROM a LEFT JOIN b ON a.k = b.k "
        "WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.g = a.v)"
    )
    return cat, sql


@pytest.mark.parametrize("batch_size", [None, 1])
def test_rank_takes_a_selective_anti_join_before_a_fanning_left_join(batch_size):
    cat, sql = _fanning_left_and_selective_anti()
    run = run_query(sql, cat, policy="rank", batch_size=batch_size, seed=0)
    assert run.table.to_pylist() == [{"COUNT(*)": 5000, "COUNT(b.w)": 5000}]
    at_region = run.stats.routing_summary()[("a", "-")]
    # Both orders were taken (step:b first for the pilot, step:s first after it) ...
    assert at_region.get("step:b", 0) > 0 and at_region.get("step:s", 0) > 0
    # ... and once estimates exist, the anti-join (selectivity 1/20) goes first: most
    # tuples reach step:b having passed step:s, not the other way round.
    assert at_region["step:s"] > 10 * at_region["step:b"]
    summary = run.stats.routing_summary()
    after_s = sum(v.get("step:b", 0) for (span, _), v in summary.items() if span == "a,s")
    after_b = sum(v.get("step:s", 0) for (span, _), v in summary.items() if span == "a,b")
    assert after_s > 0 and after_b > 0
    assert after_s < 20_000 // 10  # only the survivors of the anti-join


def test_static_keeps_its_order_of_steps():
    cat, sql = _fanning_left_and_selective_anti()
    run = run_query(sql, cat, policy="static", seed=0)
    assert run.table.to_pylist() == [{"COUNT(*)": 5000, "COUNT(b.w)": 5000}]
    assert run.stats.routing_summary()[("a", "-")] == {"step:b": 20_000}
    run = run_query(sql, cat, policy="static", order=["step:s", "step:b"], seed=0)
    assert run.table.to_pylist() == [{"COUNT(*)": 5000, "COUNT(b.w)": 5000}]
    assert run.stats.routing_summary()[("a", "-")] == {"step:s": 20_000}


# ------------------------------------------------------------------------- property test
@st.composite
def commuting_scenarios(draw):
    """A region t0 (sometimes t0 JOIN t1), then 1-3 joins after a LEFT JOIN (LEFT, inner,
    comma, sometimes RIGHT / FULL), each reading the region or an earlier table, WHERE
    terms on any side, and 0-2 subqueries correlated with any FROM table."""
    region = draw(st.integers(1, 2))
    n_steps = draw(st.integers(1, 3))
    names = [f"t{i}" for i in range(region + n_steps)]
    tables = {name: draw(tables_st(10)) for name in names}
    from_sql = "t0" + (" JOIN t1 ON t1.k1 = t0.k1" if region == 2 else "")
    group = 0  # an ON clause sees only its comma group; no RIGHT / FULL after a comma
    for i in range(region, region + n_steps):
        kinds = ["LEFT JOIN"] * 3 + ["JOIN", ","] + (["FULL JOIN"] if group == 0 else [])
        kind = draw(st.sampled_from(kinds if i > region else ["LEFT JOIN"]))
        if kind == ",":
            from_sql += f", t{i}"
            group = i
            continue
        other = f"t{draw(st.integers(group, i - 1))}"
        terms = [f"t{i}.{draw(st.sampled_from(['k1', 'k2']))} = {other}.k1"]
        extra = draw(st.sampled_from(["", "noneq", "own", "other"]))
        if extra == "noneq":
            terms.append(f"{other}.v < t{i}.v")
        elif extra == "own":
            terms.append(f"t{i}.v > {draw(st.integers(-1, 3))}")
        elif extra == "other":
            terms.append(f"{other}.v IS NOT NULL")
        from_sql += f" {kind} t{i} ON " + " AND ".join(terms)
    where = []
    for _ in range(draw(st.integers(0, 2))):
        t = draw(st.sampled_from(names))
        where.append(
            draw(st.sampled_from([f"{t}.v > 1", f"{t}.k1 IS NULL", f"coalesce({t}.v, 0) < 3"]))
        )
    for j in range(draw(st.integers(0, 2))):
        u = f"u{j}"
        tables[u] = draw(tables_st(8))
        outer = draw(st.sampled_from(names))
        cond = draw(st.sampled_from([f" WHERE {u}.k2 = {outer}.k2", f" WHERE {u}.v > 0", ""]))
        sub = draw(st.sampled_from(["in", "notin", "exists", "notexists"]))
        if sub in ("in", "notin"):
            neg = "NOT " if sub == "notin" else ""
            where.append(f"{outer}.k1 {neg}IN (SELECT {u}.k1 FROM {u}{cond})")
        else:
            neg = "NOT " if sub == "notexists" else ""
            where.append(f"{neg}EXISTS (SELECT 1 FROM {u}{cond})")
    sql = f"SELECT * FROM {from_sql}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql, tables


@pytest.mark.slow  # about 60 s at 40 examples
@settings(max_examples=EXAMPLES, deadline=None, report_multiple_bugs=False)
@given(scenario=commuting_scenarios())
def test_commuting_steps_property(scenario):
    _check(scenario)


@settings(max_examples=6, deadline=None, report_multiple_bugs=False)
@given(scenario=commuting_scenarios())
def test_commuting_steps_property_quick(scenario):
    _check(scenario)


def _check(scenario) -> None:
    sql, tables = scenario
    expected = duckdb_table(sql, tables)
    cat = make_catalog(tables)
    for policy in POLICIES:
        for bs in BATCH_SIZES:
            ours = run_query(sql, cat, policy=policy, batch_size=bs, debug=True, seed=1).table
            ctx = f"policy={policy} batch_size={bs}"
            assert_same_bag(ours, sql, tables, context=ctx, expected=expected)


# ---------------------------------------------------------- EOT-gated steps among others
@pytest.mark.parametrize("mirrors", [1, 2])
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM a LEFT JOIN b ON b.k = a.k LEFT JOIN c ON c.k = a.k "
        "WHERE NOT EXISTS (SELECT 1 FROM b AS x WHERE x.k = a.k AND x.w > 1)",
        "SELECT * FROM a LEFT JOIN c ON c.k = a.k LEFT JOIN b ON b.k = a.k "
        "WHERE a.k IN (SELECT k FROM c AS y WHERE y.z < 9) AND (b.w IS NULL OR c.z > 1)",
        "SELECT * FROM a LEFT JOIN c ON c.k = a.k JOIN b ON b.k = c.k "
        "LEFT JOIN c AS y ON y.k = a.k",
    ],
)
def test_eot_gated_steps_commute_with_complete_ones(sql, mirrors):
    # b has no scan: its steps look their keys up first (lookup:b*), offered beside the
    # steps over complete SteMs; a tuple that looked up takes that step next.
    from test_outer_joins import _lookup_over

    cat = Catalog()
    cat.add_table("a", A)
    cat.add_table("c", C)
    for i in range(mirrors):
        cat.add_index("b", B.schema, on=["k"], lookup=_lookup_over(B, 3), access_name=f"b{i}")
    expected = duckdb_table(sql, TABLES)
    for policy in POLICIES:
        for bs in BATCH_SIZES:
            ours = run_query(sql, cat, policy=policy, batch_size=bs, debug=True, seed=2).table
            ctx = f"mirrors={mirrors} policy={policy} batch_size={bs}"
            assert_same_bag(ours, sql, TABLES, context=ctx, expected=expected)
