"""run.lower: a plan becomes the parts of a query without starting anything (no trio run).

The split of run_plan (issue 9, item 5): lowering is synchronous and inspectable; spawning
only starts one task per part. Hooks (a stream's wait for static tables, the commit
points' idle callback) are given at construction.
"""

from __future__ import annotations

import pyarrow as pa
import trio

from eddies.engine import Catalog, RunOptions
from eddies.engine.execution.run import DEFAULT_QUEUE_CAPACITY, lower
from eddies.engine.plan.planner import plan_query
from eddies.router.routing_table import DestinationKind
from eddies.router.stats import RunStats


def _lowered(sql: str, cat: Catalog, **options):
    plan = plan_query(sql, cat)
    send, _ = trio.open_memory_channel(1)
    return plan, lower(plan, RunOptions(**options), send, RunStats(plan.graph, plan.destinations))


def _catalog() -> Catalog:
    cat = Catalog()
    cat.add_table("r", pa.table({"a": [1, 2, 3], "b": [1, 1, 2]}))
    cat.add_table("s", pa.table({"a": [1, 2], "c": [5, 6]}))
    cat.add_table("s", pa.table({"a": [1, 2], "c": [5, 6]}), key=["a"])  # a mirror
    return cat


def test_lowering_a_join_outside_trio():
    assert not trio.lowlevel.in_trio_run()
    plan, parts = _lowered(
        "SELECT r.b, s.c FROM r JOIN s ON r.a = s.a WHERE r.b < 2", _catalog(), queue_capacity=3
    )
    assert set(parts.modules) == {"stem:r", "stem:s", "sm1", "sm2", "output"}
    assert set(parts.inboxes) == set(parts.modules)
    # every destination's queue is its module's inbox, with the asked capacity
    for d, queue in zip(plan.destinations, parts.eddy.queues, strict=True):
        assert queue.statistics().max_buffer_size == 3
        assert d.module in parts.modules
    kinds = {d.kind for d in plan.destinations}
    assert {DestinationKind.BUILD, DestinationKind.PROBE, DestinationKind.OUTPUT} <= kinds
    # one scan AM per access path: r, and s with its mirror; one Source each
    assert sorted(s.name for s in parts.scans) == ["scan:r", "scan:s", "scan:s_2"]
    assert [s.name for s in parts.sources] == [s.name for s in parts.scans]
    assert parts.commits is None and parts.streams == []
    assert parts.eddy.on_idle is None
    assert all(scan.start_after is None for scan in parts.scans)


def test_default_queue_capacity():
    _, parts = _lowered("SELECT r.a FROM r", _catalog())
    (queue,) = parts.eddy.queues[-1:]
    assert queue.statistics().max_buffer_size == DEFAULT_QUEUE_CAPACITY


def test_stream_hooks_are_given_at_construction():
    cat = _catalog()
    cat.add_stream("st", pa.schema([("a", pa.int64()), ("x", pa.int64())]))
    _, parts = _lowered("SELECT st.x, r.b FROM st JOIN r ON st.a = r.a", cat)
    assert parts.commits is not None
    assert parts.eddy.on_idle == parts.commits.changed
    stream_scans = [s for s in parts.scans if s.name == "scan:st"]
    static_scans = [s for s in parts.scans if s.name != "scan:st"]
    assert stream_scans and static_scans
    assert all(s.start_after is parts.commits.streams_may_start for s in stream_scans)
    assert all(s.start_after is None for s in static_scans)
    assert parts.streams == [cat.table("st").stream]


def test_default_batch_size_scales_with_the_table_and_sources_rank_by_rows():
    """A large in-memory table is scanned in 1/16 of its rows a batch (at most 2**19);
    a small one in DEFAULT_BATCH_SIZE; a batch size given wins. The eddy prefers the
    smaller table's ready batches (the largest table probes last, as a hash join's probe
    side), whatever the join edges."""
    import numpy as np

    from eddies.engine.execution.run import DEFAULT_BATCH_SIZE, MAX_DEFAULT_BATCH_SIZE

    cat = Catalog()
    cat.add_table("big", pa.table({"a": np.arange(3_000_000) % 7}))
    cat.add_table("mid", pa.table({"a": np.arange(100_000) % 7, "b": np.arange(100_000)}))
    cat.add_table("small", pa.table({"b": np.arange(10)}))
    sql = "SELECT count(*) FROM big, mid, small WHERE big.a = mid.a AND mid.b = small.b"
    _, parts = _lowered(sql, cat)
    sizes = {scan.name: scan.batch_size for scan in parts.scans}
    assert sizes == {
        "scan:big": 3_000_000 // 16,
        "scan:mid": DEFAULT_BATCH_SIZE,
        "scan:small": DEFAULT_BATCH_SIZE,
    }
    ranked = sorted(parts.sources, key=lambda s: s.rank)
    assert [s.name for s in ranked] == ["scan:small", "scan:mid", "scan:big"]
    _, parts = _lowered(sql, cat, batch_size=1000)
    assert {scan.batch_size for scan in parts.scans} == {1000}
    assert MAX_DEFAULT_BATCH_SIZE == 1 << 19


def test_a_cast_of_a_constant_is_folded_once():
    """``DATE '1996-01-01'`` (a CAST of a string literal) becomes a literal at compile
    time; a CAST that fails is left unfolded, and planning's type check reports it as
    before."""
    import pytest

    from eddies.errors import QueryTypeError
    from eddies.router.expressions import Literal

    cat = Catalog()
    cat.add_table("t", pa.table({"d": pa.array([1, 2], pa.date32())}))
    plan = plan_query("SELECT d FROM t WHERE d > DATE '1970-01-02'", cat)
    (pred,) = plan.graph.predicates
    folded = pred.expr.args[1]
    assert isinstance(folded, Literal) and folded.value == pa.scalar(1, pa.date32())
    with pytest.raises(QueryTypeError, match="'nope'"):
        plan_query("SELECT d FROM t WHERE d > CAST('nope' AS DATE)", cat)


def test_a_query_releases_its_stems_and_stairs_when_it_ends():
    """Module.release (issue 11): once spawn returns, no SteM or STAIR holds tuples, indexes
    or key filters, so their arrays are freed with the query instead of at the cycle
    collector's next pass; the rows delivered before are DuckDB's."""
    from oracle import assert_bags_equal, duckdb_rows, table_rows

    from eddies.engine.execution.run import spawn
    from eddies.modules.stair import StairJoin
    from eddies.modules.stem import SteM

    r = pa.table({"a": [1, 2, 3, None, 2], "b": [1, 1, 2, 2, None]})
    s = pa.table({"a": [1, 2, 2, None], "c": [5, 6, 7, 8]})
    cat = Catalog()
    cat.add_table("r", r)
    cat.add_table("s", s)
    sql = "SELECT r.b, s.c FROM r JOIN s ON r.a = s.a WHERE r.b < 2"
    for join_state in ("stems", "eddyjoins"):
        for batch_size in (1, 7, None):
            from eddies.engine.plan.join_state import with_join_state

            plan = with_join_state(plan_query(sql, cat), join_state)
            options = RunOptions(batch_size=batch_size, join_state=join_state)
            send, receive = trio.open_memory_channel(1000)
            parts = lower(plan, options, send, RunStats(plan.graph, plan.destinations))
            joins = [m for m in parts.modules.values() if isinstance(m, SteM | StairJoin)]
            assert joins
            trio.run(spawn, parts, send)
            batches = []
            while True:
                try:
                    batches.append(receive.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            got = [row for b in batches for row in table_rows(b)]
            assert_bags_equal(got, duckdb_rows(sql, {"r": r, "s": s}), sql)
            for module in joins:
                if isinstance(module, SteM):
                    assert len(module) == 0 and not module.indexes and not module._key_filters
                else:
                    assert all(len(stair) == 0 for stair in module.stairs.values())
