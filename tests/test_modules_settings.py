"""The SteM and STAIR knobs of eddies.settings reach the modules of a query.

Each knob is set for one query with ``RunOptions(tuning=Tuning(...))`` (or for a block with
``tuned``), and something the modules do because of it is counted — probe parts handed back
as continuations, direct-address tables built in the background, vectorized work run in
worker threads, STAIR migrations, merged batches — never time; every answer stays
DuckDB's.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import trio
from oracle import assert_same_bag, chain_tables, make_catalog

from eddies.engine import RunOptions, run_query
from eddies.modules.stem import SteM
from eddies.router.messages import Returned
from eddies.settings import DEFAULT, Tuning, current, tuned

MANY_TO_MANY = "SELECT a.v, b.v FROM a JOIN b ON a.k = b.k"


def _bag_tables() -> dict[str, pa.Table]:
    """Keys from a tiny domain: one probe tuple has dozens of matches."""
    rng = np.random.default_rng(3)
    return {
        name: pa.table({"k": rng.integers(0, 3, n), "v": rng.integers(0, 10, n)})
        for name, n in (("a", 40), ("b", 30))
    }


@pytest.fixture
def probe_parts(monkeypatch) -> list[tuple[int, bool]]:
    """(tuples returned, handed back a rest) of every SteM probe Work of the test."""
    parts: list[tuple[int, bool]] = []
    real = SteM.probe_work

    async def counted(self, work):
        answer = await real(self, work)
        outputs = answer.outputs if isinstance(answer, Returned) else answer
        rest = isinstance(answer, Returned) and answer.rest is not None
        parts.append((sum(len(b) for b in outputs), rest))
        return answer

    monkeypatch.setattr(SteM, "probe_work", counted)
    return parts


@pytest.mark.parametrize("bound", [1, 7, 50])
def test_stem_max_output_rows_from_run_options_bounds_every_probe_part(probe_parts, bound):
    """A probe Work returns at most the bound; the larger probes are handed back in parts
    (continuations), and the answer is DuckDB's."""
    tables = _bag_tables()
    options = RunOptions(tuning=Tuning(stem_max_output_rows=bound), seed=0)
    run = run_query(MANY_TO_MANY, make_catalog(tables), options=options)
    assert_same_bag(run.table, MANY_TO_MANY, tables)
    assert probe_parts and max(n for n, _ in probe_parts) <= bound
    assert any(rest for _, rest in probe_parts)
    assert current() is DEFAULT  # in force for that run only


def test_default_bound_makes_no_continuation(probe_parts):
    tables = _bag_tables()
    run = run_query(MANY_TO_MANY, make_catalog(tables), seed=0)
    assert_same_bag(run.table, MANY_TO_MANY, tables)
    assert probe_parts and not any(rest for _, rest in probe_parts)


def test_run_options_tuning_wins_over_the_block_in_force(probe_parts):
    """``tuned`` sets the knobs of every query started in its block, unless the query's
    own RunOptions.tuning replaces them."""
    tables = _bag_tables()
    cat = make_catalog(tables)
    with tuned(stem_max_output_rows=5):
        run_query(MANY_TO_MANY, cat, seed=0)
        blocked = list(probe_parts)
        probe_parts.clear()
        run = run_query(MANY_TO_MANY, cat, options=RunOptions(tuning=DEFAULT, seed=0))
    assert max(n for n, _ in blocked) <= 5 and any(rest for _, rest in blocked)
    assert not any(rest for _, rest in probe_parts)
    assert_same_bag(run.table, MANY_TO_MANY, tables)


STAR = "SELECT a.v, b.w FROM a, b WHERE a.k = b.k AND b.w < 40"


def test_direct_build_background_min_rows_reaches_the_stems(direct_build_finishes):
    """Tables of at least the knob's rows get their direct-address tables built in the
    background (counted as they finish); below it (the default, here) none."""
    finished = direct_build_finishes
    rng = np.random.default_rng(5)
    tables = {
        "a": pa.table({"k": rng.permutation(200), "v": np.arange(200)}),
        "b": pa.table({"k": rng.permutation(200), "w": rng.integers(0, 100, 200)}),
    }
    cat = make_catalog(tables)
    run = run_query(STAR, cat, seed=0)
    assert_same_bag(run.table, STAR, tables)
    assert finished == []
    options = RunOptions(tuning=Tuning(direct_build_background_min_rows=1), seed=0)
    run = run_query(STAR, cat, options=options)
    assert_same_bag(run.table, STAR, tables)
    assert any(built is not None and built.direct for built in finished)


def test_offload_rows_sends_stem_work_to_worker_threads(monkeypatch):
    """With ``offload_rows`` set, SteM builds and probes of batches that large run in
    worker threads (counted at trio.to_thread); by default none does."""
    offloaded: list[str] = []
    real = trio.to_thread.run_sync

    async def counted(fn, *args, **kwargs):
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, SteM):
            offloaded.append(fn.__name__)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counted)
    tables = _bag_tables()
    cat = make_catalog(tables)
    run = run_query(MANY_TO_MANY, cat, seed=0)
    assert_same_bag(run.table, MANY_TO_MANY, tables)
    assert offloaded == []
    run = run_query(MANY_TO_MANY, cat, options=RunOptions(tuning=Tuning(offload_rows=1), seed=0))
    assert_same_bag(run.table, MANY_TO_MANY, tables)
    assert {"build", "probe"} <= set(offloaded)


def _misrouted() -> tuple[dict[str, pa.Table], str, dict]:
    """stairs-2004 §3.2 in small (as in test_stairs): a static order sends every s tuple
    to r ⋈ s first, though s ⋈ t matches almost nothing; 640 source rows in all."""
    n = 400
    tables = {
        "r": pa.table({"a": [i % 40 for i in range(n // 2)]}),
        "s": pa.table(
            {"a": [i % 40 for i in range(n)], "b": [i if i % 50 == 0 else -i for i in range(n)]}
        ),
        "t": pa.table({"b": list(range(0, n, 10))}),
    }
    sql = "SELECT COUNT(*) FROM r, s, t WHERE r.a = s.a AND s.b = t.b"
    kwargs = {
        "join_state": "stairs",
        "batch_size": 10,
        "policy": "static",
        "order": ("join:r-s", "join:s-t"),
        "debug": True,
    }
    return tables, sql, kwargs


def test_stair_check_every_and_costs_reach_the_migrator():
    """By default the greedy policy's first check would come after 1000 admitted tuples,
    more than this query has: no migration. Checked every 50, with free migrations, the
    misrouted s cohort moves; both answers are DuckDB's."""
    tables, sql, kwargs = _misrouted()
    cat = make_catalog(tables)
    run = run_query(sql, cat, **kwargs)
    assert_same_bag(run.table, sql, tables)
    assert run.stats.stair_migrations == 0
    knobs = Tuning(stair_check_every=50, stair_migration_cost=0, stair_visit_cost=0)
    run = run_query(sql, cat, options=RunOptions(tuning=knobs, **kwargs))
    assert_same_bag(run.table, sql, tables)
    assert run.stats.stair_migrations >= 1 and run.stats.stair_demotions > 0


def test_stair_greedy_routing_and_initial_plan_seed_reach_the_routing():
    """With ``stair_greedy_routing``, EddyJoins route among the joins by the greedy plan,
    which before its first check (after 1000 tuples: never, here) has every fan-out 1 and
    sends every s tuple to the lower join id, r ⋈ s; ``stair_initial_plan_seed`` draws
    another plan, which sends s elsewhere (stairs-2004 §4.1, §5.3)."""
    tables, sql, _ = _misrouted()
    cat = make_catalog(tables)
    kwargs = {"join_state": "eddyjoins", "batch_size": 10, "policy": "lottery", "seed": 0}

    def r_s_tuples(**knobs) -> int:
        run = run_query(sql, cat, options=RunOptions(tuning=Tuning(**knobs), **kwargs))
        assert_same_bag(run.table, sql, tables, context=str(knobs))
        assert run.stats.stair_migrations == 0  # EddyJoins never migrate
        return run.stats.modules["join:r-s"].tuples_in

    every_r_and_s = len(tables["r"]) + len(tables["s"])
    assert r_s_tuples(stair_greedy_routing=True) == every_r_and_s
    assert r_s_tuples(stair_greedy_routing=True, stair_initial_plan_seed=1) < every_r_and_s


def test_stair_coalesce_below_reaches_the_eddy():
    """EddyJoins routed at random make small batches of one signature whose paths meet
    again: merged by default (``stair_coalesce_below`` 128), never with 0."""
    tables = chain_tables()
    sql = "SELECT r.x, u.y FROM r, s, t, u WHERE r.a = s.a AND s.b = t.b AND t.c = u.c"
    cat = make_catalog(tables)
    kwargs = {"join_state": "eddyjoins", "policy": "random", "seed": 0, "debug": True}
    merged = {}
    for below in (0, 128):
        options = RunOptions(tuning=Tuning(stair_coalesce_below=below), **kwargs)
        run = run_query(sql, cat, options=options)
        assert_same_bag(run.table, sql, tables, context=f"below={below}")
        merged[below] = run.stats.coalesced_batches
    assert merged[0] == 0 and merged[128] > 0
