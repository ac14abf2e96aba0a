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

import collections
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
    assert "no state migration" in text
    migrating_text = explain("SELECT * FROM r, s WHERE r.a = s.a", cat, join_state="stairs")
    assert "state migrated when the greedy routing decisions change" in migrating_text


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


# ----------------------------------------------------------------- STAIR modules directly
def _stair_setup(tables: dict[str, pa.Table], sql: str):
    """The plan's StairJoins over preloaded stores, and its graph."""
    from eddies.engine.join_state import with_join_state
    from eddies.engine.planner import plan_query
    from eddies.modules.stair import StairJoin
    from eddies.router.routing_table import DestinationKind

    plan = with_join_state(plan_query(sql, make_catalog(tables)), "stairs")
    graph = plan.graph
    stores = {a.index: plan.tables[a.table].new_store() for a in graph.aliases}
    names = [a.name for a in graph.aliases]
    joins = {
        d.id: StairJoin(d.name, graph.predicates[d.predicate], stores, names)
        for d in plan.destinations
        if d.kind is DestinationKind.JOIN
    }
    return plan, graph, joins


def _singletons(graph, alias: int, rows):
    import numpy as np

    from eddies.router.tuple_batch import Signature, TupleBatch

    ids = np.asarray(rows, dtype=np.int64)
    return TupleBatch(Signature(1 << alias, 0, True), {alias: ids}, np.zeros(len(ids), np.int64))


def _route_to_completion(joins, graph, batch, choose) -> list[tuple]:
    """Route ``batch`` and everything it makes through the joins, ``choose(span)`` picking
    the join; the complete tuples as sorted tuples of row ids (alias order)."""
    from collections import deque

    done, queue = [], deque([batch])
    while queue:
        b = queue.popleft()
        if b.signature.span == graph.all_aliases:
            done += list(zip(*(b.rows[a.index] for a in graph.aliases), strict=True))
            continue
        queue.extend(joins[choose(b.signature.span)].route(b))
    return done


def _contents(joins, dead=frozenset()) -> collections.Counter:
    """Every stored tuple, except those with a ``dead`` (alias, row id) component."""
    out = collections.Counter()
    for d, join in joins.items():
        for alias, s in join.stairs.items():
            for sig, group in s.groups.items():
                cols = sorted(group.rows)
                for row in zip(*(group.rows[a].view() for a in cols), strict=True):
                    if any((a, int(i)) in dead for a, i in zip(cols, row, strict=True)):
                        continue
                    out[(d, alias, sig, tuple(cols), tuple(int(x) for x in row))] += 1
    return out


CHAIN = "SELECT * FROM r, s, t, u WHERE r.a = s.a AND s.b = t.b AND t.c = u.c"


@pytest.mark.parametrize("seed", range(8))
def test_migration_state_is_the_plan_state_and_results_come_once(seed):
    """Route random batches with random choices (a policy), migrate to a random plan at
    random points of stasis, go on: (1) the state right after a migration equals the
    state of routing every seen base tuple by that plan from scratch, in another order
    (up to tuples with a NULL join key, which join nothing);
    (2) every result of the full join is produced exactly once (stairs-2004 App. A)."""
    import numpy as np

    from eddies.modules.stair import GreedyPlan, StairMigrator
    from eddies.router.stats import RunStats

    rng = np.random.default_rng(seed)
    tables = {
        name: pa.table(
            {
                c: pa.array(
                    [None if rng.random() < 0.1 else int(rng.integers(0, 3)) for _ in range(n)],
                    pa.int64(),
                )
                for c in cols
            }
        )
        for name, cols, n in [("r", "a", 9), ("s", "ab", 12), ("t", "bc", 10), ("u", "c", 8)]
    }
    plan, graph, joins = _stair_setup(tables, CHAIN)
    stats = RunStats(graph, plan.destinations)
    # Rows with a NULL join key are in no result; a STAIR may or may not hold them (not
    # where that key is NULL), depending on the join they first went to: not compared.
    dead = {
        (a.index, i)
        for a in graph.aliases
        for c in tables[a.table].column_names
        for i, v in enumerate(tables[a.table].column(c).to_pylist())
        if v is None
    }
    migrator = StairMigrator(joins, graph, stats)
    pending = [(a.index, i) for a in graph.aliases for i in range(len(tables[a.table]))]
    rng.shuffle(pending)
    seen: list[tuple[int, int]] = []
    results: list[tuple] = []
    while pending:
        k = int(rng.integers(1, 4))
        chunk, pending = pending[:k], pending[k:]
        for alias in {a for a, _ in chunk}:
            rows = [i for a, i in chunk if a == alias]
            policy = GreedyPlan(joins, {}, np.random.default_rng(int(rng.integers(1 << 30))))
            results += _route_to_completion(
                joins, graph, _singletons(graph, alias, rows), policy.choice
            )
        seen += chunk
        if rng.random() < 0.4:  # a point of stasis: migrate to a random plan
            target = GreedyPlan(joins, {}, np.random.default_rng(int(rng.integers(1 << 30))))
            migrator.migrate(target)
            _, _, fresh = _stair_setup(tables, CHAIN)
            for alias, i in reversed(seen):
                _route_to_completion(fresh, graph, _singletons(graph, alias, [i]), target.choice)
            assert _contents(joins, dead) == _contents(fresh, dead)
    expected = duckdb_table(
        "SELECT r.i, s.i, t.i, u.i FROM "
        + ", ".join(f"(SELECT *, row_number() OVER () - 1 AS i FROM {n}) {n}" for n in "rstu")
        + " WHERE r.a = s.a AND s.b = t.b AND t.c = u.c",
        tables,
    )
    want = collections.Counter(zip(*(c.to_pylist() for c in expected.columns), strict=True))
    got = collections.Counter(tuple(int(x) for x in row) for row in results)
    assert got == want
    assert stats.stair_migrations > 0


def test_invariant_b_alone_allows_duplicates():
    """Why a migration rebuilds the state (docs/concepts.md, "STAIRs"): a state that keeps
    the paper's Invariant B (§3.1.2) — base s in both S.a and S.b, as demotion(S.b, r0s, s)
    leaves it — still makes a result twice once r and t arrive."""
    tables = {
        "r": pa.table({"a": [1]}),
        "s": pa.table({"a": [1], "b": [2]}),
        "t": pa.table({"b": [2]}),
    }
    _, graph, joins = _stair_setup(tables, "SELECT * FROM r, s, t WHERE r.a = s.a AND s.b = t.b")
    rs, st_ = joins.values()
    s_alias = next(a.index for a in graph.aliases if a.name == "s")
    for join in (rs, st_):  # s stored in both of its STAIRs
        side = join.stairs[s_alias]
        batch = _singletons(graph, s_alias, [0])
        keys, codes, valid = join.keys_of(batch, s_alias, grow=True)
        side.insert(batch, keys, codes, valid)
    r_alias = next(a.index for a in graph.aliases if a.name == "r")
    t_alias = next(a.index for a in graph.aliases if a.name == "t")
    boundary = {  # each span's only join
        1 << r_alias: 0,
        1 << r_alias | 1 << s_alias: 1,
        1 << t_alias: 1,
        1 << s_alias | 1 << t_alias: 0,
    }
    ids = list(joins)
    results = _route_to_completion(
        joins, graph, _singletons(graph, r_alias, [0]), lambda s: ids[boundary[s]]
    )
    results += _route_to_completion(
        joins, graph, _singletons(graph, t_alias, [0]), lambda s: ids[boundary[s]]
    )
    assert len(results) == 2 and results[0] == results[1]  # one result, made twice


@pytest.mark.parametrize("inline_visits", [True, False])
def test_migration_with_udf_selections_in_flight(inline_visits):
    """An async UDF's SM answers through its queue (the eddy keeps routing meanwhile):
    migrations wait for a point of stasis, with no Work in flight, and results stay
    DuckDB's."""
    import trio

    async def even(x):
        await trio.sleep(0)
        return x is not None and x % 2 == 0

    tables = _tables()
    sql = "SELECT r.x, t.c, u.y FROM r, s, t, u WHERE r.a = s.a AND s.b = t.b AND t.c = u.c"
    expected = duckdb_table(sql + " AND u.y % 2 = 0 AND r.x % 2 = 0", tables)
    cat = make_catalog(tables)
    cat.add_function("even", even, vectorized=False)
    udf_sql = sql + " AND even(u.y) AND even(r.x)"
    migrations = 0
    for seed in (None, 4):
        with migrating(random_seed=seed):
            for policy in ("lottery", "naive", "rank"):
                for bs in (1, 7):
                    run = run_query(
                        udf_sql,
                        cat,
                        join_state="stairs",
                        policy=policy,
                        batch_size=bs,
                        inline_visits=inline_visits,
                        debug=True,
                    )
                    assert_same_bag(run.table, sql, tables, expected=expected)
                    migrations += run.stats.stair_migrations
    assert migrations > 0  # some points of stasis came between UDF calls
