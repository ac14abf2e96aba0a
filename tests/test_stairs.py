"""STAIRs (stairs-2004): join_state="eddyjoins" and "stairs" against DuckDB; refusals.

The differential property reuses the query generator of test_differential (chains, stars
and cycles of equi-joins, multi-column and string keys, NULLs, duplicate rows, single-table
and non-equi predicates, aggregates, ORDER BY/LIMIT) restricted to what STAIRs run: every
table once, joined to the others by equalities. Each query runs under every policy with
batch sizes 1, 7 and the default (and once under ``static`` with a shuffled destination
order), in three modes: EddyJoins; STAIRs whose greedy policy checks for migration at every
point of stasis; and STAIRs forced to migrate (promote, relocate, demote) from a random
initial plan to random plans at random points of stasis. Every result must equal DuckDB's
as a bag of rows (in order for ORDER BY); ``debug=True`` makes the output check that no
result is produced twice.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import re

import pyarrow as pa
import pytest
from hypothesis import example, given, reject, settings
from hypothesis import strategies as st
from oracle import assert_same_bag, assert_same_ordered, chain_tables, duckdb_table, make_catalog
from test_differential import scenarios

from eddies.engine import POLICIES, Catalog, execute, explain, run_query
from eddies.errors import EddiesError, UnsupportedQueryError
from eddies.modules import stair
from eddies.modules.stair import row_id_sets
from eddies.settings import tuned

MAX_EXAMPLES = int(os.environ.get("EDDIES_STAIRS_EXAMPLES", "10"))


@contextlib.contextmanager
def migrating(check_every: int = 1, random_seed: int | None = None, p: float = 0.5, cost: int = 0):
    """STAIR state migration checked at every point of stasis (instead of every 1000
    tuples), by the greedy policy or, with ``random_seed``, forced: from a random initial
    plan to random plans at random points of stasis (each with probability ``p``). The
    guard counts a migration, and each module visit it causes, as ``cost`` intermediate
    tuples (0: the small tables here migrate, so that the tests exercise migrations)."""
    with tuned(
        stair_check_every=check_every,
        stair_migration_cost=cost,
        stair_visit_cost=cost,
        stair_random_plans_seed=random_seed,
        stair_random_migration_p=p,
    ):
        yield


#: (join_state, migration seed, greedy routing): EddyJoins; STAIRs migrating greedily;
#: STAIRs migrating to random plans at every point of stasis; then EddyJoins and STAIRs
#: routing among the joins by the greedy plan of §4.1 (from a random initial plan), as
#: the paper's do (bench/stairs.py).
MODES = [
    ("eddyjoins", None, False),
    ("stairs", None, False),
    ("stairs", 11, False),
    ("eddyjoins", None, True),
    ("stairs", None, True),
]


@contextlib.contextmanager
def greedy_routing(on: bool, initial_plan_seed: int | None = 5):
    """STAIRs and EddyJoins route among the joins by the greedy plan (§4.1) when ``on``,
    starting from the random plan of ``initial_plan_seed``."""
    with tuned(stair_greedy_routing=on, stair_initial_plan_seed=initial_plan_seed if on else None):
        yield


@pytest.fixture
def tuning():
    """``tuning(**knobs)`` puts eddies.settings knobs in force for the rest of the test
    (each call on top of the last; all restored when the test ends)."""
    with contextlib.ExitStack() as stack:
        yield lambda **knobs: stack.enter_context(tuned(**knobs))


def run_all_policies(sql: str, tables: dict, order_keys=None) -> None:
    for join_state, seed, greedy in MODES:
        with migrating(random_seed=seed), greedy_routing(greedy):
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


@pytest.mark.parametrize(
    ("seed", "greedy_routing"), [(None, False), (None, True), (1, False), (2, False)]
)
def test_stairs_migrate_and_count(seed, greedy_routing):
    """Migrations happen (forced: at every point of stasis; greedy: when they pay), are
    counted, and the result stays DuckDB's — also when STAIRs route by the greedy plan."""
    tables = _tables()
    sql = "SELECT r.x, t.c, u.y FROM r, s, t, u WHERE r.a = s.a AND s.b = t.b AND t.c = u.c"
    with tuned(stair_greedy_routing=greedy_routing), migrating(random_seed=seed, p=1.0):
        run = run_query(sql, make_catalog(tables), join_state="stairs", batch_size=1, debug=True)
    assert_same_bag(run.table, sql, tables)
    stats = run.stats
    if seed is not None:
        assert stats.stair_migrations > 2
        assert stats.stair_demotions > 0 and stats.stair_promotions > 0
        assert stats.stair_migrated_tuples >= stats.stair_promotions
    assert f"{stats.stair_migrations} migrations" in stats.format()


@pytest.mark.parametrize("greedy_routing", [False, True])
def test_greedy_migration_undoes_a_routing_mistake(greedy_routing):
    """stairs-2004 §3.2 in small: a static policy sends every s tuple to r ⋈ s first,
    where each joins 5 r tuples, though s ⋈ t matches almost nothing. The greedy policy
    sees it from the router's estimates and migrates the s cohort to s ⋈ t (while the
    policy keeps routing new s tuples to r ⋈ s, later cohorts move too): the result is
    DuckDB's and the joins make fewer intermediate tuples than EddyJoins on that plan.
    With greedy routing, new s tuples follow the plan too."""
    n = 400
    r = pa.table({"a": [i % 40 for i in range(n // 2)]})  # 5 r per key
    s = pa.table(
        {"a": [i % 40 for i in range(n)], "b": [i if i % 50 == 0 else -i for i in range(n)]}
    )
    t = pa.table({"b": list(range(0, n, 10))})
    tables = {"r": r, "s": s, "t": t}
    sql = "SELECT COUNT(*) FROM r, s, t WHERE r.a = s.a AND s.b = t.b"
    cat = make_catalog(tables)
    runs = {}
    for join_state in ("eddyjoins", "stairs"):
        with tuned(stair_greedy_routing=greedy_routing), migrating(check_every=50):
            runs[join_state] = run_query(
                sql,
                cat,
                join_state=join_state,
                batch_size=10,
                policy="static",
                order=("join:r-s", "join:s-t"),
                debug=True,
            )
        assert_same_bag(runs[join_state].table, sql, tables)
    stats = runs["stairs"].stats
    assert stats.stair_migrations >= 1 and stats.stair_demotions > 0

    def made(st):
        return sum(m.tuples_out for m in st.modules.values() if m.kind == "join")

    assert made(stats) + stats.stair_promotions < made(runs["eddyjoins"].stats)


@pytest.mark.parametrize("initial_plan_seed", [None, 1, 2, 3])
@pytest.mark.parametrize("batch_size", [1, 7, None])
def test_eddyjoins_route_by_the_greedy_plan_without_migrating(initial_plan_seed, batch_size):
    """With greedy routing, EddyJoins follow the §4.1 plan as STAIRs do (the paper's
    baseline) but never migrate; the static policy keeps its own join order (SHJ plans):
    both give DuckDB's result, and each initial plan a different routing history."""
    tables = _tables()
    sql = "SELECT r.x, t.c, u.y FROM r, s, t, u WHERE r.a = s.a AND s.b = t.b AND t.c = u.c"
    cat = make_catalog(tables)
    with greedy_routing(True, initial_plan_seed), migrating(check_every=2):
        for policy in POLICIES:
            run = run_query(
                sql, cat, join_state="eddyjoins", policy=policy, batch_size=batch_size, debug=True
            )
            assert_same_bag(run.table, sql, tables, context=f"policy={policy}")
            assert run.stats.stair_migrations == 0 and run.stats.stair_migrated_tuples == 0
        for order in (("join:r-s", "join:s-t", "join:t-u"), ("join:t-u", "join:s-t", "join:r-s")):
            run = run_query(
                sql,
                cat,
                join_state="eddyjoins",
                policy="static",
                order=order,
                batch_size=batch_size,
            )
            assert_same_bag(run.table, sql, tables, context=f"order={order}")
            # the static order, not the greedy plan: the first join of the order takes
            # every row of its two tables (each's first join in the order) and nothing else
            first, x, y = order[0], order[0][5], order[0][7]
            assert run.stats.modules[first].tuples_in == len(tables[x]) + len(tables[y])


def test_initial_plan_seed_draws_a_plan_of_the_joins_alone():
    """The random initial plan (stairs-2004 §5.3) depends on the seed and the joins only,
    so STAIRs and EddyJoins of one setup start from the same plan; no seed: all 1."""
    from eddies.modules.stair import GreedyPlan, initial_fanouts

    _, graph, joins = _stair_setup(_tables(), CHAIN)
    assert initial_fanouts(joins, None) == {}
    a, b = initial_fanouts(joins, 7), initial_fanouts(joins, 7)
    assert a == b and len(a) == 2 * len(joins)
    assert all(0.01 <= f <= 100 for f in a.values())
    plans = {
        tuple(
            GreedyPlan(joins, initial_fanouts(joins, seed)).choice(1 << a.index)
            for a in graph.aliases
        )
        for seed in range(40)
    }
    assert len(plans) > 1  # the seeds draw different plans


def test_single_table_runs_with_stairs():
    run_all_policies("SELECT r.x FROM r WHERE r.a = 2", _tables())


# ----------------------------------------------------------------- STAIR modules directly
def _stair_setup(tables: dict[str, pa.Table], sql: str):
    """The plan's StairJoins over preloaded stores, and its graph."""
    from eddies.engine.plan.join_state import with_join_state
    from eddies.engine.plan.planner import plan_query
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
STAR = "SELECT * FROM r, s, t, u WHERE r.a = s.a AND s.b = t.b AND s.a = u.c"


@pytest.mark.parametrize("seed", range(12))
def test_random_migrations_give_every_result_once(seed):
    """Route random batches with random choices (a policy), migrate a random part of a
    random cohort to a random other join at random points of stasis, go on: every result
    of the full join is produced exactly once (stairs-2004 App. A), and right after each
    migration the cohort has left its join and every base tuple is stored at most once."""
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
    sql = CHAIN if seed % 2 else STAR
    plan, graph, joins = _stair_setup(tables, sql)
    stats = RunStats(graph, plan.destinations)
    migrator = StairMigrator(joins, graph, stats, np.random.default_rng(seed))
    pending = [(a.index, i) for a in graph.aliases for i in range(len(tables[a.table]))]
    rng.shuffle(pending)
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
        cohorts = migrator.cohorts(None)
        if cohorts and rng.random() < 0.5:  # a point of stasis: migrate a random cohort
            cohort = cohorts[int(rng.integers(len(cohorts)))]
            target = GreedyPlan(joins, {}, np.random.default_rng(int(rng.integers(1 << 30))))
            migrator.migrate(cohort, target)
            span = 1 << cohort.alias
            stored = collections.Counter(
                int(i)
                for j in joins.values()
                if cohort.alias in (j.edge.left, j.edge.right)
                for b in j.stairs[cohort.alias].batches(span)
                for i in b.rows[cohort.alias]
            )
            source = joins[cohort.source].stairs[cohort.alias].batches(span)
            left = {int(i) for b in source for i in b.rows[cohort.alias]}
            assert not left & set(cohort.ids.tolist())  # the cohort left its join
            assert all(c == 1 for c in stored.values())  # each base tuple stored once
    where = sql.split("WHERE")[1]
    expected = duckdb_table(
        "SELECT r.i, s.i, t.i, u.i FROM "
        + ", ".join(f"(SELECT *, row_number() OVER () - 1 AS i FROM {n}) {n}" for n in "rstu")
        + " WHERE "
        + where,
        tables,
    )
    want = collections.Counter(zip(*(c.to_pylist() for c in expected.columns), strict=True))
    got = collections.Counter(tuple(int(x) for x in row) for row in results)
    assert got == want


def _figure6(s_total: int, s_rows: range):
    """stairs-2004 Figure 6's R ⋈a S ⋈b T, every r, ``s_rows`` of s and every t routed by
    the first plan (S to R ⋈ S); ``s_total`` s tuples in all. Returns (joins, graph, stats,
    migrator, first plan, (rs, st), (r, s, t))."""
    from eddies.modules.stair import StairMigrator
    from eddies.router.stats import RunStats

    tables = {
        "r": pa.table({"a": [1, 1, 2, 3]}),
        "s": pa.table({"a": [1, 2, 9, 7], "b": [5, 6, 5, 5]}),
        "t": pa.table({"b": [5, 7]}),
    }
    sql = "SELECT * FROM r, s, t WHERE r.a = s.a AND s.b = t.b"
    plan, graph, joins = _stair_setup(tables, sql)
    rs, st_ = joins
    r, s, t = (next(a.index for a in graph.aliases if a.name == n) for n in "rst")
    stats = RunStats(graph, plan.destinations)
    migrator = StairMigrator(joins, graph, stats, totals={r: 4, s: s_total, t: 2})
    first = {1 << r: rs, 1 << s: rs, 1 << t: st_, 1 << r | 1 << s: st_, 1 << s | 1 << t: rs}
    for alias, rows in ((r, range(4)), (s, s_rows), (t, range(2))):
        _route_to_completion(joins, graph, _singletons(graph, alias, rows), first.get)
    return joins, graph, stats, migrator, first, (rs, st_), (r, s, t)


def test_migration_moves_only_the_cohort_tuples_that_pay(tuning):
    """stairs-2004 Figure 6: R ⋈ S ⋈ T with S tuples sent to R ⋈ S (the cohort S^R); the
    plan now sends S to S ⋈ T. The guard keeps the s tuples that made no RS tuple (s2)
    where they are; the others are relocated from S.a to S.b, their RS tuples in S.b
    demoted, and they are promoted through T.b to ST tuples in S.a. R, T and the s tuple
    routed to S ⋈ T stay put. With nothing left to come, nothing pays; nor does it when
    a migration's own cost (stair_migration_cost) exceeds what the cohort saves."""
    from eddies.modules.stair import GreedyPlan

    tuning(stair_migration_cost=0)
    joins, graph, stats, migrator, first, (rs, st_), (r, s, t) = _figure6(4, range(3))
    s3 = {**first, 1 << s: st_}  # s3 went to S ⋈ T
    _route_to_completion(joins, graph, _singletons(graph, s, [3]), s3.get)
    assert joins[st_].stairs[s].count(1 << r | 1 << s) == 3  # r0s0, r1s0, r2s1
    r_stair = joins[rs].stairs[r].groups.copy()
    greedy = GreedyPlan(joins, {(rs, s): 5.0, (st_, s): 0.5})
    assert migrator.cohorts(greedy, admitted=10) == []  # nothing left to come
    migrator._looked.clear()
    tuning(stair_migration_cost=1000)
    assert migrator.cohorts(greedy, admitted=1) == []  # saves a few tuples only
    tuning(stair_migration_cost=0)
    migrator._looked.clear()
    (cohort,) = migrator.cohorts(greedy, admitted=1)  # 9 rows to come per one admitted
    assert (cohort.alias, cohort.source, cohort.target) == (s, rs, st_)
    assert cohort.ids.tolist() == [0, 1]  # s2 made nothing: not worth moving
    migrator.migrate(cohort, greedy)
    assert joins[rs].stairs[s].count(1 << s) == 1  # s2
    assert joins[st_].stairs[s].count(1 << s) == 3  # s0, s1 relocated beside s3
    assert joins[st_].stairs[s].count(1 << r | 1 << s) == 0  # demoted
    assert joins[rs].stairs[s].count(1 << s | 1 << t) == 2  # s0t0 promoted, s3t0 kept
    assert joins[rs].stairs[r].groups == r_stair  # untouched
    assert (stats.stair_demotions, stats.stair_promotions) == (3, 1)
    assert stats.stair_migrated_tuples == 2 + 3 + 1


def test_invariant_b_alone_allows_duplicates():
    """Invariant B of stairs-2004 (§3.1.2 and App. A.1: "A STAIR never contains two tuples
    t1 ∈ T1 and t2 ∈ T2 such that t1 and t2 agree on all base-table components
    corresponding to the relations in T1 ∩ T2") is a rule per STAIR. Theorem A.2 (stated
    without proof) says that if it holds when a tuple enters, no duplicate is made. It does
    not: on R ⋈a S ⋈b T, route s to R ⋈ S (S.a holds s), then r0 (r0s is made and sent to
    S ⋈ T: S.b holds r0s), then apply the legal demotion(S.b, r0s, s) of §3.1.1. S.a and
    S.b each hold just s: Invariant B holds. A new r then makes rs, stored in S.b beside s
    (B broken by processing alone), and a new t makes rst twice — through rs in S.b and
    through st routed back to R ⋈ S. Hence migrations here keep the state a plan state
    (StairMigrator), not merely Invariant B."""
    tables = {
        "r": pa.table({"a": [1, 1]}),
        "s": pa.table({"a": [1], "b": [2]}),
        "t": pa.table({"b": [2]}),
    }
    _, graph, joins = _stair_setup(tables, "SELECT * FROM r, s, t WHERE r.a = s.a AND s.b = t.b")
    rs, st_ = joins.values()
    r, s, t = (next(a.index for a in graph.aliases if a.name == n) for n in "rst")
    only = {1 << r: rs, 1 << s: rs, 1 << r | 1 << s: st_, 1 << t: st_, 1 << s | 1 << t: rs}
    ids = {id(j): d for d, j in joins.items()}
    choose = lambda span: ids[id(only[span])]  # noqa: E731
    results = _route_to_completion(joins, graph, _singletons(graph, s, [0]), choose)
    results += _route_to_completion(joins, graph, _singletons(graph, r, [0]), choose)
    assert st_.stairs[s].count(1 << r | 1 << s) == 1 and not results
    # demotion(S.b, r0s, s): replace r0s by its sub-tuple s
    st_.stairs[s].take(1 << r | 1 << s)
    st_.store(_singletons(graph, s, [0]))
    for stair_ in (rs.stairs[s], st_.stairs[s]):
        assert stair_.signatures() == [_singletons(graph, s, [0]).signature]  # Invariant B
    results += _route_to_completion(joins, graph, _singletons(graph, r, [1]), choose)
    results += _route_to_completion(joins, graph, _singletons(graph, t, [0]), choose)
    # r0st once (t probing S.b's s, then st meeting r0 and r1 in R.a) and r1st twice
    assert collections.Counter(results) == {(0, 0, 0): 1, (1, 0, 0): 2}


@pytest.mark.parametrize("inline_visits", [True, False])
def test_migration_with_udf_selections_in_flight(inline_visits):
    """An async UDF's SM answers through its queue (the eddy keeps routing meanwhile):
    migrations wait for a point of stasis, with no Work in flight, and results stay
    DuckDB's. Seeded (routing and trio's task order), since whether a point of stasis
    with stored tuples comes depends on both: unseeded, most of these runs migrate
    nothing (rank's, which weigh measured costs, hardly ever do) and all twelve could;
    seeded, the lottery and naive runs at batch size 1 repeat, and migrate."""
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
        with migrating(random_seed=seed, p=1.0):
            for policy in ("lottery", "naive", "rank"):
                for bs in (1, 7):
                    run = run_query(
                        udf_sql,
                        cat,
                        join_state="stairs",
                        policy=policy,
                        batch_size=bs,
                        inline_visits=inline_visits,
                        seed=0,
                        debug=True,
                    )
                    assert_same_bag(run.table, sql, tables, expected=expected)
                    migrations += run.stats.stair_migrations
    if inline_visits:  # joins visited inline: points of stasis come between UDF calls
        assert migrations > 0
    # (through queues, the sources may deliver everything before the first point of
    # stasis with stored tuples: how many come depends on scheduling, not asserted)


@pytest.mark.parametrize("seed", range(6))
def test_sorted_run_index_without_equals_a_fresh_index(seed):
    """SortedRunIndex.without (STAIR demotions) answers every probe as an index built
    from the kept entries, renumbered, would — dense and sparse runs, duplicates."""
    import numpy as np

    from eddies.modules.stem.index import SortedRunIndex

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    high = 50 if seed % 2 else 1 << 40
    keys = rng.integers(0, high, n)
    index = SortedRunIndex()
    start = 0
    while start < n:  # several inserts: several runs
        stop = min(n, start + int(rng.integers(1, 700)))
        index.insert(keys[start:stop], np.arange(start, stop, dtype=np.int64))
        start = stop
    dead = rng.random(n) < rng.random()
    kept = np.flatnonzero(~dead)
    fresh = SortedRunIndex()
    if len(kept):
        fresh.insert(keys[kept], np.arange(len(kept), dtype=np.int64))
    probe = np.concatenate([keys[rng.integers(0, n, 200)], rng.integers(0, high, 50)])

    def pairs(ix):
        p, pos = ix.probe(probe)
        return sorted(zip(p.tolist(), pos.tolist(), strict=True))

    assert pairs(index.without(dead)) == pairs(fresh)


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.integers(0, 60), max_size=80),
    ids=st.sets(st.integers(0, 60), max_size=30),
    factor=st.sampled_from([0, 1, 8, 1000]),
)
def test_row_id_membership_dense_or_binary_search(values, ids, factor):
    """The guard's and demotion's row-id tests (row_id_sets.among, .occurrences) equal
    numpy's isin and a count, whether through a dense table or a binary search."""
    import numpy as np

    saved = row_id_sets.DENSE_FACTOR
    row_id_sets.DENSE_FACTOR = factor
    try:
        v = np.asarray(values, dtype=np.int64)
        s = np.asarray(sorted(ids), dtype=np.int64)
        assert (row_id_sets.among(v, s) == np.isin(v, s)).all()
        counts = collections.Counter(values)
        assert row_id_sets.occurrences(v, s).tolist() == [counts[i] for i in sorted(ids)]
    finally:
        row_id_sets.DENSE_FACTOR = saved


@settings(max_examples=100, deadline=None)
@given(
    stored=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(0, 2), st.booleans()),
        max_size=40,
    ),
    probes=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2), st.booleans()), max_size=30),
    columns=st.sampled_from([1, 2]),
    skip_span=st.sampled_from([None, 1, 3]),
)
@example(stored=[(0, 1, 0, True), (1, 1, 0, True)], probes=[(1, 0, True)], columns=1, skip_span=1)
@example(stored=[(0, 4, 1, True), (2, 1, 1, True)], probes=[(4, 1, True)], columns=2, skip_span=1)
def test_stair_match_counts_equal_the_probe(stored, probes, columns, skip_span):
    """Stair.match_counts (the guard's count of a cohort's partners at its target) equals
    the per-key count of Stair.probe's matches: several stored signatures, NULL keys
    (not valid), single- and two-column keys (mixed keys that collide, checked per
    column), a skipped signature."""
    import numpy as np

    from eddies.router.tuple_batch import Signature, TupleBatch

    s = stair.Stair(0, ("a", "b")[:columns], "r.a")
    for group in range(3):
        rows = [r for r in stored if r[0] == group]
        if not rows:
            continue
        sig = Signature(1 | (group << 1), 0, True)
        ids = np.arange(len(rows), dtype=np.int64)
        batch = TupleBatch(sig, {a: ids for a in range(3) if sig.span >> a & 1}, ids * 0)
        first = np.asarray([r[1] for r in rows], dtype=np.int64)
        second = np.asarray([r[2] for r in rows], dtype=np.int64)
        codes = [first, second][:columns]
        keys = first if columns == 1 else first % 3  # mixed keys collide on purpose
        valid = np.asarray([r[3] for r in rows]) if any(not r[3] for r in rows) else None
        s.insert(batch, keys, codes, valid)
    first = np.asarray([p[0] for p in probes], dtype=np.int64)
    second = np.asarray([p[1] for p in probes], dtype=np.int64)
    codes = [first, second][:columns]
    keys = first if columns == 1 else first % 3
    valid = np.asarray([p[2] for p in probes], dtype=bool) if probes else None
    skip = None if skip_span is None else (lambda sig: sig.span == skip_span)
    expected = np.zeros(len(probes), dtype=np.int64)
    for _, probe_idx, _ in s.probe(keys, codes, valid, skip):
        expected += np.bincount(probe_idx, minlength=len(probes))
    assert s.match_counts(keys, codes, valid, skip).tolist() == expected.tolist()


@pytest.mark.parametrize("seed", range(16))
def test_may_pay_is_a_bound_on_the_guard(seed, tuning):
    """StairMigrator.may_pay bounds, from counts alone, what the guard (worth_moving)
    could save: whenever it says no, worth_moving moves nothing, so skipping the guard's
    per-tuple scans never changes a decision. Random states (random routing of random
    tables), plans (random fan-outs), admitted counts and migration costs; and the bound
    does refuse some cohorts while the guard moves others."""
    import numpy as np

    from eddies.modules.stair import Cohort, GreedyPlan, StairMigrator
    from eddies.router.stats import RunStats

    rng = np.random.default_rng(seed)
    tables = {
        name: pa.table({c: pa.array(rng.integers(0, 4, n).tolist(), pa.int64()) for c in cols})
        for name, cols, n in [("r", "a", 30), ("s", "ab", 40), ("t", "bc", 25), ("u", "c", 20)]
    }
    sql = CHAIN if seed % 2 else STAR
    plan, graph, joins = _stair_setup(tables, sql)
    totals = {a.index: len(tables[a.table]) * 3 for a in graph.aliases}
    migrator = StairMigrator(joins, graph, RunStats(graph, plan.destinations), totals=totals)
    router = GreedyPlan(joins, {}, np.random.default_rng(seed))
    for a in graph.aliases:
        _route_to_completion(
            joins, graph, _singletons(graph, a.index, range(len(tables[a.table]))), router.choice
        )
    refused = moved = 0
    for trial in range(40):
        tuning(stair_migration_cost=int(rng.choice([0, 10, 100, 1000])))
        fanout = {
            (d, side): float(10 ** rng.uniform(-2, 2))
            for d, j in joins.items()
            for side in (j.edge.left, j.edge.right)
        }
        greedy = GreedyPlan(joins, fanout)
        admitted = int(rng.integers(1, 400))
        for alias, options in migrator.topology.choosing:
            span = 1 << alias
            for d in options:
                waiting = joins[d].stairs[alias].count(span)
                if not waiting:
                    continue
                target = next(o for o in options if o != d)
                ids = np.sort(
                    np.concatenate([b.rows[alias] for b in joins[d].stairs[alias].batches(span)])
                )
                moving = migrator.worth_moving(Cohort(alias, d, target, ids), admitted, greedy)
                moved += len(moving) > 0
                if not migrator.may_pay(alias, d, target, waiting, admitted, greedy):
                    refused += 1
                    assert len(moving) == 0, (trial, alias, d)
    assert refused > 0 and moved > 0  # both answers occur: the test can fail


def test_routing_entries_forgotten_only_when_the_greedy_plan_changes(monkeypatch, tuning):
    """With greedy routing, a check tells the routing table to forget its entries
    (on_plan_change) only when the new plan chooses differently for a span it was asked
    about: recomputing every entry at every check cost as much as the check itself."""
    from eddies.modules.stair import StairMigrator
    from eddies.router.stats import RunStats

    tuning(stair_greedy_routing=True, stair_initial_plan_seed=None, stair_check_every=1)
    plan, graph, joins = _stair_setup(_tables(), CHAIN)
    migrator = StairMigrator(joins, graph, RunStats(graph, plan.destinations), migrates=False)
    forgotten = []
    migrator.on_plan_change = lambda: forgotten.append(True)
    s = next(a.index for a in graph.aliases if a.name == "s")
    rs, st_ = (d for d, j in joins.items() if s in (j.edge.left, j.edge.right))
    fanouts = {}
    monkeypatch.setattr(migrator, "_fanouts", lambda observed=None: dict(fanouts))
    asked = migrator.choice(1 << s)
    migrator.at_stasis(1)  # the same fan-outs (all 1): the same plan
    assert forgotten == [] and migrator.choice(1 << s) == asked
    fanouts.update({(asked, s): 50.0})  # s's first join now looks bad
    migrator.at_stasis(2)
    assert forgotten == [True] and migrator.choice(1 << s) != asked
    migrator.at_stasis(3)  # unchanged since
    assert forgotten == [True]
    fanouts.update({(rs, s): 0.1, (st_, s): 20.0})  # a span not asked about may change
    migrator.plan._choices.pop(1 << s)  # as if s was never asked (no entry made)
    migrator.at_stasis(4)
    assert forgotten == [True]


@pytest.mark.parametrize("batch_size", [1, 7, None])
def test_small_batches_of_one_signature_merged_before_routing_on(batch_size, tuning):
    """STAIR join states: small returned batches of one signature waiting in the eddy's
    priority buffer are merged and routed on in one visit. Routed by random choices,
    EddyJoins' STAIRs hold tuples of several spans, so a probe returns several batches
    whose paths meet again: merged, with DuckDB's result (each row once: debug); without
    merging (stair_coalesce_below = 0) nothing is merged. Seeded (routing and trio's task order),
    since whether paths meet depends on both: at batch size 1 seeds 1 and 6 merge
    nothing; seeds 0 and 2 each merge at every batch size."""
    tables = chain_tables()
    sql = "SELECT r.x, u.y FROM r, s, t, u WHERE r.a = s.a AND s.b = t.b AND t.c = u.c"
    cat = make_catalog(tables)
    for below in (0, 128):
        tuning(stair_coalesce_below=below)
        merged = 0
        for policy, seed in (("random", 0), ("random", 2), ("lottery", 0)):
            run = run_query(
                sql,
                cat,
                join_state="eddyjoins",
                policy=policy,
                batch_size=batch_size,
                seed=seed,
                debug=True,
            )
            assert_same_bag(run.table, sql, tables, context=f"{policy} seed={seed} below={below}")
            merged += run.stats.coalesced_batches
        assert (merged > 0) == (below > 0)


def test_priority_buffer_merges_small_batches_of_the_popped_signature():
    """Eddy._pop_priority: the oldest batch, when small, takes along every other small
    batch of its signature (in buffer order), leaves the rest in order, and keeps the
    buffered-tuple and per-signature counts right; big batches, EOT-carrying ones and
    other signatures are left alone."""
    import numpy as np

    from eddies.router.eddy import Eddy
    from eddies.router.stats import RunStats
    from eddies.router.tuple_batch import Eot, Signature, TupleBatch

    a, b = Signature(3, 1, True), Signature(7, 3, True)

    def batch(sig, first, n, eot=None):
        ids = np.arange(first, first + n, dtype=np.int64)
        return TupleBatch(sig, {0: ids, 1: ids + 100}, ids * 10, eot)

    eddy = object.__new__(Eddy)
    eddy._priority, eddy._buffered, eddy._small = collections.deque(), 0, {}
    eddy._coalesce_below = 10
    eddy.stats = object.__new__(RunStats)
    eddy.stats.coalesced_batches = 0
    eddy.stats.peak_buffered_tuples = 0
    eot = Eot(("a",), (np.asarray([1]),))
    for bt in (
        batch(a, 0, 2),
        batch(b, 50, 3),
        batch(a, 10, 20),  # big: stays
        batch(a, 30, 4),
        batch(a, 40, 1, eot),  # carries EOT tuples: stays
        batch(a, 60, 5),
    ):
        eddy._buffer(bt)
    assert eddy._buffered == 35 and eddy._small == {a: 3, b: 1}
    first = eddy._pop_priority()
    assert first.signature == a and first.rows[0].tolist() == [
        0,
        1,
        30,
        31,
        32,
        33,
        60,
        61,
        62,
        63,
        64,
    ]
    assert first.rows[1].tolist() == [i + 100 for i in first.rows[0].tolist()]
    assert first.ts.tolist() == [i * 10 for i in first.rows[0].tolist()]
    assert eddy.stats.coalesced_batches == 2 and eddy._small == {b: 1}
    assert [len(x) for x in eddy._priority] == [3, 20, 1] and eddy._buffered == 24
    assert eddy._pop_priority().rows[0].tolist() == [50, 51, 52]  # alone of its signature
    assert len(eddy._pop_priority()) == 20 and len(eddy._pop_priority()) == 1
    assert eddy._buffered == 0 and eddy._small == {} and eddy.stats.coalesced_batches == 2


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_merging_under_random_migrations_gives_every_result_once(seed):
    """Merged batches and migrations together (forced random migrations, batch sizes 1
    and 7, every policy): DuckDB's result, each row once (debug). Seeded (routing and
    trio's task order): whether paths meet and merge depends on both, and unseeded most
    runs merge nothing (lottery, rank, bandit, hybrid 10 to 15 of 15 runs); seeded, the
    random and naive runs repeat, and each merges."""
    tables = chain_tables(40)
    sql = "SELECT r.x, u.y FROM r, s, t, u WHERE r.a = s.a AND s.b = t.b AND t.c = u.c"
    cat = make_catalog(tables)
    merged = migrations = 0
    with migrating(random_seed=seed, p=1.0):
        for policy in POLICIES:
            for bs in (1, 7):
                run = run_query(
                    sql,
                    cat,
                    join_state="stairs",
                    policy=policy,
                    batch_size=bs,
                    seed=0,
                    debug=True,
                )
                assert_same_bag(run.table, sql, tables, context=f"policy={policy} bs={bs}")
                merged += run.stats.coalesced_batches
                migrations += run.stats.stair_migrations
    assert merged > 0 and migrations > 0


def test_guard_counts_the_visits_a_migration_adds(tuning):
    """stairs-2004 Figure 6 without s3: every s tuple went to R ⋈ S. Moving the cohort
    S^R to S ⋈ T stores spans no STAIR holds yet — s singletons in S ⋈ T's S.b, st tuples
    in R ⋈ S's S.a — so each later probe of those STAIRs answers with one batch more.
    The guard counts them (stair_visit_cost per visit: later batches ≈ ``ahead`` × those routed
    so far, half from each side): free visits, the cohort moves; dear ones, it stays."""
    from eddies.modules.stair import GreedyPlan

    tuning(stair_migration_cost=0)
    joins, _graph, stats, migrator, _, (rs, st_), (_r, s, _t) = _figure6(8, range(4))
    greedy = GreedyPlan(joins, {(rs, s): 5.0, (st_, s): 0.5})
    assert migrator.new_signatures(s, st_, greedy) == [(st_, s), (rs, s)]
    assert migrator.new_signatures(s, rs, greedy) == []  # where they are: nothing new
    for d in joins:
        stats.modules[joins[d].name].batches_in = 40
    assert migrator.visits_caused(s, st_, greedy, ahead=0.5) == 2 * 40 * 0.5 / 2
    tuning(stair_visit_cost=0)
    (cohort,) = migrator.cohorts(greedy, admitted=1)
    assert cohort.ids.tolist() == [0, 1]
    tuning(stair_visit_cost=100)
    migrator._looked.clear()
    assert migrator.cohorts(greedy, admitted=1) == []  # 11 × 40 / 2 visits: not worth it
    for d in joins:
        stats.modules[joins[d].name].batches_in = 0
    migrator._looked.clear()
    assert [c.ids.tolist() for c in migrator.cohorts(greedy, admitted=1)] == [[0, 1]]


def test_join_selectivity_counts_the_pairs_looked_at():
    """StairJoin.selectivity: matches per (probe tuple, stored tuple) pair over the
    probes of both sides; a probe that meets an empty dual, or a NULL key, looks at no
    pair. r.a = s.a with r = [1, 1, 2, NULL] and s = [1, 3]."""
    tables = {
        "r": pa.table({"a": pa.array([1, 1, 2, None], pa.int64())}),
        "s": pa.table({"a": pa.array([1, 3], pa.int64())}),
    }
    _plan, graph, joins = _stair_setup(tables, "SELECT * FROM r, s WHERE r.a = s.a")
    (join,) = joins.values()
    r, s = (next(a.index for a in graph.aliases if a.name == n) for n in "rs")
    assert join.selectivity() is None
    join.route(_singletons(graph, r, [0, 1]))  # the dual is empty: nothing looked at
    assert join.selectivity() is None
    out = join.route(_singletons(graph, s, [0, 1]))  # 2 probes × 2 stored, 2 matches
    assert sum(len(b) for b in out) == 2
    assert join.selectivity() == pytest.approx(2 / 4, rel=1e-3)
    join.route(_singletons(graph, r, [2, 3]))  # 1 valid probe × 2 stored, no match
    assert join.selectivity() == pytest.approx(2 / 6, rel=1e-3)


def test_fanout_of_an_abandoned_join_follows_its_state():
    """The greedy plan's fan-out of a join is its selectivity times the dual STAIR's
    size, not the fan-out last observed from that side: while the eddy sends s tuples to
    s ⋈ t, the t tuples stored in s ⋈ t raise what an s tuple would meet there, though no
    s tuple probes it (the plan would otherwise turn back to the join it left: TPC-H
    §5.2's routing thrash, bench/stairs.py Fig. 7(i))."""
    from eddies.modules.stair import StairMigrator
    from eddies.router.stats import RunStats

    tables = {
        "r": pa.table({"a": list(range(10))}),
        "s": pa.table({"a": list(range(10)), "b": list(range(10))}),
        "t": pa.table({"b": [i % 10 for i in range(40)]}),
    }
    plan, graph, joins = _stair_setup(tables, "SELECT * FROM r, s, t WHERE r.a = s.a AND s.b = t.b")
    _rs, st_ = joins
    s, t = (next(a.index for a in graph.aliases if a.name == n) for n in "st")
    migrator = StairMigrator(joins, graph, RunStats(graph, plan.destinations))
    joins[st_].route(_singletons(graph, s, range(10)))  # s tuples first, into s ⋈ t
    joins[st_].route(_singletons(graph, t, range(10)))  # 10 × 10 pairs, 10 matches
    assert migrator._fanouts()[(st_, s)] == pytest.approx(0.1 * 10, rel=1e-3)
    joins[st_].route(_singletons(graph, t, range(10, 40)))  # 30 more t, probing s only
    assert migrator._fanouts()[(st_, s)] == pytest.approx(0.1 * 40, rel=1e-3)
    assert migrator._fanouts()[(st_, t)] == pytest.approx(0.1 * 10, rel=1e-3)


def test_a_remnant_that_would_cost_visits_moves_with_its_cohort(tuning):
    """Figure 6's cohort again (s3 went to S ⋈ T): s2 would meet more partners at S ⋈ T
    than it saves, so it is not worth moving on its own. Left behind it keeps S^R's group
    in R ⋈ S, and each later probe there meeting it answers with a small batch more to
    route on; when the probe batches still to come are many, those visits cost more than
    moving s2 too, and the whole cohort moves."""
    import numpy as np

    from eddies.modules.stair import Cohort, GreedyPlan

    tuning(stair_migration_cost=0)
    joins, graph, stats, migrator, first, (rs, st_), (r, s, _t) = _figure6(4, range(3))
    s3 = {**first, 1 << s: st_}
    _route_to_completion(joins, graph, _singletons(graph, s, [3]), s3.get)
    greedy = GreedyPlan(joins, {(rs, s): 5.0, (st_, s): 0.5, (rs, r): 5.0})
    assert migrator.new_signatures(s, st_, greedy) == []  # no visit added by moving
    cohort = Cohort(s, rs, st_, np.asarray([0, 1, 2], dtype=np.int64))
    assert migrator.worth_moving(cohort, 1, greedy).tolist() == [0, 1]
    stats.modules[joins[rs].name].batches_in = 1000  # many probes to come
    assert migrator.worth_moving(cohort, 1, greedy).tolist() == [0, 1, 2]
    tuning(stair_visit_cost=0)  # visits free: s2 stays again
    assert migrator.worth_moving(cohort, 1, greedy).tolist() == [0, 1]
