"""STAIRs (stairs-2004): join_state="eddyjoins" and "stairs" against DuckDB; refusals.

The differential property reuses the query generator of test_differential (chains, stars
and cycles of equi-joins, multi-column and string keys, NULLs, duplicate rows, single-table
and non-equi predicates, aggregates, ORDER BY/LIMIT) restricted to what STAIRs run: every
table once, joined to the others by equalities. Each query runs under every policy with
batch sizes 1, 7 and the default (and once under ``static`` with a shuffled destination
order), in three modes: EddyJoins; STAIRs whose greedy policy checks for migration at every
point of stasis; and STAIRs migrating to a random plan at every point of stasis. Every
result must equal DuckDB's as a bag of rows (in order for ORDER BY); ``debug=True`` makes
the output check that no result is produced twice.
"""

from __future__ import annotations

import contextlib
import os
import random
import re

import pyarrow as pa
import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st
from oracle import assert_same_bag, assert_same_ordered, duckdb_table, make_catalog
from test_differential import scenarios

from eddies.engine import POLICIES, Catalog, execute, explain, run_query
from eddies.engine.errors import EddiesError, UnsupportedQueryError
from eddies.modules import stair

MAX_EXAMPLES = int(os.environ.get("EDDIES_STAIRS_EXAMPLES", "10"))


@contextlib.contextmanager
def migrating(check_every: int = 1, random_seed: int | None = None):
    """STAIR state migration checked at every point of stasis (instead of every 1000
    tuples), by the greedy policy or, with ``random_seed``, to random plans each time."""
    saved = stair.CHECK_EVERY, stair.RANDOM_PLANS_SEED
    stair.CHECK_EVERY, stair.RANDOM_PLANS_SEED = check_every, random_seed
    try:
        yield
    finally:
        stair.CHECK_EVERY, stair.RANDOM_PLANS_SEED = saved


#: (join_state, migration seed): EddyJoins; STAIRs migrating greedily; STAIRs migrating to
#: random plans at every point of stasis.
MODES = [("eddyjoins", None), ("stairs", None), ("stairs", 11)]


def run_all_policies(sql: str, tables: dict, order_keys=None) -> None:
    for join_state, seed in MODES:
        with migrating(random_seed=seed):
            run_mode(sql, tables, order_keys, join_state, seed)


def run_mode(sql: str, tables: dict, order_keys, join_state: str, seed) -> None:
    expected = duckdb_table(sql, tables)
    cat = make_catalog(tables)
    names = re.search(
        r"destinations \(default static order\):\s*(.+)", explain(sql, cat, join_state=join_state)
    ).group(1)
    order = [n.strip() for n in names.split(",")]
    random.Random(len(sql)).shuffle(order)  # a static plan of its own
    runs = [(policy, bs, None) for policy in POLICIES for bs in (1, 7, None)]
    runs.append(("static", 3, order))
    for policy, bs, static in runs:
        ours = execute(
            sql,
            cat,
            policy=policy,
            batch_size=bs,
            debug=True,
            seed=3,
            join_state=join_state,
            order=static,
        )
        ctx = (
            f"join_state={join_state} random plans={seed} policy={policy} batch_size={bs} "
            f"order={static}"
        )
        if order_keys is None:
            assert_same_bag(ours, sql, tables, context=ctx, expected=expected)
        else:
            assert_same_ordered(ours, sql, tables, order_keys, context=ctx, expected=expected)


@pytest.mark.slow  # ~15-40 s per shape size (three join-state modes)
@pytest.mark.parametrize("n_refs", [2, 3, 4])
@settings(max_examples=MAX_EXAMPLES, deadline=None, report_multiple_bugs=False)
@given(data=st.data())
def test_stairs_differential(n_refs, data):
    sc = data.draw(scenarios(n_refs), label="scenario")
    if len(sc.tables) != n_refs or "cross product" in sc.notes:
        reject()  # self-joins and cross products are refused with STAIRs (below)
    try:
        explain(sc.sql, make_catalog(sc.tables), join_state="eddyjoins")
    except UnsupportedQueryError as exc:
        assert "cross products" in str(exc)  # only a non-equi-only join may be refused
        reject()
    run_all_policies(sc.sql, sc.tables, sc.order_keys)


def _tables() -> dict[str, pa.Table]:
    r = pa.table({"a": [1, 2, 2, None, 3, 2], "x": [1, 2, 3, 4, 5, 2]})
    s = pa.table({"a": [1, 2, 2, 3, None, 2], "b": ["p", "q", "q", None, "r", "q"]})
    t = pa.table({"b": ["p", "q", "q", "r", None], "c": [0, 1, 1, 2, 2]})
    u = pa.table({"c": [0, 1, 1, 2, None], "y": [1, 2, 2, 3, 4]})
    return {"r": r, "s": s, "t": t, "u": u}


@pytest.mark.parametrize(
    "sql",
    [
        # chain, with a selection and a non-equi predicate
        "SELECT r.x, s.b, t.c FROM r, s, t WHERE r.a = s.a AND s.b = t.b AND r.x > 1",
        # a four-table chain, JOIN ... ON, and an aggregate above the eddy
        "SELECT t.c, COUNT(*) FROM r JOIN s ON r.a = s.a JOIN t ON s.b = t.b "
        "JOIN u ON t.c = u.c GROUP BY t.c",
        # a star around s
        "SELECT * FROM s, r, t WHERE r.a = s.a AND t.b = s.b AND r.x <> t.c",
        # a cycle: r.x = u.y closes it (an SM over composite tuples)
        "SELECT r.x, u.y FROM r, s, t, u WHERE r.a = s.a AND s.b = t.b AND t.c = u.c AND r.x = u.y",
        # a multi-column edge
        "SELECT r.x FROM r, s WHERE r.a = s.a AND r.x = s.a",
    ],
)
def test_eddyjoins_shapes(sql):
    run_all_policies(sql, _tables())


def test_eddyjoins_order_by_limit():
    sql = "SELECT r.x, t.c FROM r, s, t WHERE r.a = s.a AND s.b = t.b ORDER BY r.x DESC, t.c"
    run_all_policies(sql, _tables(), order_keys=[0, 1])


def test_explain_shows_stairs_and_their_signatures():
    cat = make_catalog(_tables())
    text = explain(
        "SELECT * FROM r, s, t WHERE r.a = s.a AND s.b = t.b AND r.x = t.c",
        cat,
        join_state="eddyjoins",
    )
    assert "join:r-s" in text and "join:s-t" in text
    # s's STAIR of r ⋈ s holds base s tuples, and the st tuples routed there
    assert re.search(r"STAIR s\.\(a\) holds: \{s\}; \{s,t\} done \{sm2\}", text), text
    assert "sm3 closes a cycle" in text
    assert "build:" not in text and "probe:" not in text


def test_stats_name_the_joins_and_count_no_migration():
    cat = make_catalog(_tables())
    run = run_query(
        "SELECT r.x FROM r, s, t WHERE r.a = s.a AND s.b = t.b", cat, join_state="eddyjoins"
    )
    stats = run.stats
    assert stats.modules["join:r-s"].tuples_in > 0
    assert stats.stair_migrations == 0
    assert stats.stair_promotions == 0 and stats.stair_demotions == 0
    assert stats.stair_migrated_tuples == 0
    assert "STAIR" in stats.format()


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT * FROM r LEFT JOIN s ON r.a = s.a", "inner equi-joins only"),
        ("SELECT * FROM r WHERE r.a IN (SELECT a FROM s)", "inner equi-joins only"),
        ("SELECT * FROM r, s", "cross products"),
        ("SELECT * FROM r, s WHERE r.x < s.a", "cross products"),
        ("SELECT * FROM r r1, r r2 WHERE r1.a = r2.a", "self-join"),
    ],
)
def test_refused_queries(sql, message):
    cat = make_catalog(_tables())
    with pytest.raises(UnsupportedQueryError, match=message):
        execute(sql, cat, join_state="eddyjoins")
    with pytest.raises(UnsupportedQueryError, match=message):
        explain(sql, cat, join_state="eddyjoins")


def test_refused_access_methods_and_streams():
    tables = _tables()
    cat = make_catalog(tables)

    async def lookup(keys):
        return tables["s"]

    cat.add_index("s", tables["s"].schema, on=["a"], lookup=lookup)
    with pytest.raises(UnsupportedQueryError, match="index access methods"):
        execute("SELECT * FROM r, s WHERE r.a = s.a", cat, join_state="eddyjoins")
    cat = Catalog()
    cat.add_table("r", tables["r"])
    cat.add_stream("st", tables["s"].schema)
    with pytest.raises(UnsupportedQueryError, match="stream"):
        explain("SELECT * FROM r, st WHERE r.a = st.a", cat, join_state="eddyjoins")


def test_bad_join_state_values():
    cat = make_catalog(_tables())
    with pytest.raises(EddiesError, match="join_state must be one of"):
        execute("SELECT * FROM r", cat, join_state="stair")
    with pytest.raises(EddiesError, match="join_state must be one of"):
        explain("SELECT * FROM r", cat, join_state=None)


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_stairs_migrate_and_count(seed):
    """Migrations happen (to random plans: at every point of stasis; greedy: when the
    decisions change), are counted, and the result stays DuckDB's."""
    tables = _tables()
    sql = "SELECT r.x, t.c, u.y FROM r, s, t, u WHERE r.a = s.a AND s.b = t.b AND t.c = u.c"
    with migrating(random_seed=seed):
        run = run_query(sql, make_catalog(tables), join_state="stairs", batch_size=1, debug=True)
    assert_same_bag(run.table, sql, tables)
    stats = run.stats
    if seed is not None:
        assert stats.stair_migrations > 5
        assert stats.stair_demotions > 0 and stats.stair_promotions > 0
        assert stats.stair_migrated_tuples >= stats.stair_promotions
    assert f"{stats.stair_migrations} migrations" in stats.format()


def test_greedy_migration_follows_reversing_selectivities():
    """stairs-2004 §5.4 in small: over the first half of the tables r ⋈ s fans out and
    s ⋈ t matches nothing, over the second half the reverse. The greedy policy sees the
    decision for s tuples change and migrates; the result is DuckDB's."""
    n = 200
    half = n // 2
    r = pa.table({"a": [i % half for i in range(n)] * 1})
    # ... and a few s tuples in the middle that join both ways
    s = pa.table(
        {
            "a": [i if i < half else -1 - i for i in range(n)][:half]
            + [0, 1, 2]
            + [-1 - i for i in range(half, n)],
            "b": [-1 - i for i in range(half)] + [half, half + 1, half + 1] + list(range(half, n)),
        }
    )
    t = pa.table({"b": [half + i % half for i in range(n)]})
    tables = {"r": r, "s": s, "t": t}
    sql = "SELECT COUNT(*) FROM r, s, t WHERE r.a = s.a AND s.b = t.b"
    with migrating(check_every=50):
        run = run_query(sql, make_catalog(tables), join_state="stairs", batch_size=10, seed=1)
    assert_same_bag(run.table, sql, tables)
    assert run.stats.stair_migrations >= 1


def test_single_table_runs_with_stairs():
    run_all_policies("SELECT r.x FROM r WHERE r.a = 2", _tables())
