"""Stream tables pushed into a query running in its own thread (the groundwork for Spark's
``foreachBatch``): results equal DuckDB's over the union of the batches, a replayed batch
id adds nothing, and misuse fails with a clear DataSourceError."""

from __future__ import annotations

import random
import threading

import pyarrow as pa
import pytest
from oracle import assert_same_bag

from eddies.engine import Catalog, DataSourceError, EddiesError, run_query
from eddies.engine.streaming.sinks import MemorySink
from eddies.engine.streaming.thread_runner import BackgroundQuery

EVENTS = pa.table(
    {
        "k": pa.array([i % 7 if i % 11 else None for i in range(300)], pa.int64()),
        "v": pa.array(list(range(300)), pa.int64()),
    }
)
DIM = pa.table({"k": pa.array([0, 1, 2, 3, 3, None], pa.int64()), "name": list("abcdef")})
OTHER = pa.table({"k": pa.array([1, 2, 2, 5, None] * 4, pa.int64()), "w": list(range(20))})

JOIN = "SELECT e.v, d.name FROM events e JOIN dim d ON e.k = d.k WHERE e.v % 3 <> 0"
AGG = "SELECT d.name, count(*) AS n, sum(e.v) AS s FROM events e, dim d WHERE e.k = d.k GROUP BY 1"
TWO_STREAMS = "SELECT e.v, o.w FROM events e JOIN other o ON e.k = o.k"


def _pieces(table: pa.Table, seed: int) -> list[pa.Table]:
    rng = random.Random(seed)
    pieces, start = [], 0
    while start < table.num_rows:
        size = rng.randint(1, 60)
        pieces.append(table.slice(start, size))
        start += size
    return pieces


@pytest.mark.parametrize("sql", [JOIN, AGG])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pushed_micro_batches_with_replays_give_duckdbs_result(sql, seed):
    cat = Catalog()
    events = cat.add_stream("events", EVENTS.schema)
    cat.add_table("dim", DIM)
    query = BackgroundQuery(sql, cat, batch_size=16, policy="lottery", debug=True)
    pieces = _pieces(EVENTS, seed)
    rng = random.Random(seed)
    for batch_id, piece in enumerate(pieces):
        assert events.push(piece, batch_id)
        if rng.random() < 0.3:  # the producer replays an earlier batch after a "failure"
            again = rng.randrange(batch_id + 1)
            assert not events.push(pieces[again], again)
    events.close()
    result = query.result(timeout=60)
    assert_same_bag(result, sql, {"events": EVENTS, "dim": DIM})
    assert events.rows_taken == EVENTS.num_rows


def test_two_streams_join_each_other():
    cat = Catalog()
    events = cat.add_stream("events", EVENTS.schema)
    other = cat.add_stream("other", OTHER.schema)
    query = BackgroundQuery(TWO_STREAMS, cat, batch_size=8, debug=True)
    for i, (left, right) in enumerate(zip(_pieces(EVENTS, 5), _pieces(OTHER, 6), strict=False)):
        events.push(left, i)
        other.push(right, i)
    for i, piece in enumerate(_pieces(EVENTS, 5)):
        events.push(piece, i)  # all replays by now, or new pieces past the zip
    for i, piece in enumerate(_pieces(OTHER, 6)):
        other.push(piece, i)
    events.close()
    other.close()
    assert_same_bag(query.result(60), TWO_STREAMS, {"events": EVENTS, "other": OTHER})


def test_results_reach_a_callback_as_they_are_produced():
    got: list[pa.RecordBatch] = []
    cat = Catalog()
    events = cat.add_stream("events", EVENTS.schema)
    cat.add_table("dim", DIM)
    query = BackgroundQuery(JOIN, cat, on_batch=got.append, batch_size=16)
    events.push(EVENTS.slice(0, 100), "a")
    events.push(EVENTS.slice(100), "b")
    events.close()
    assert query.result(60).num_rows == 0  # delivered to the callback instead
    assert_same_bag(pa.Table.from_batches(got), JOIN, {"events": EVENTS, "dim": DIM})


def test_misuse_fails_clearly():
    cat = Catalog()
    events = cat.add_stream("events", EVENTS.schema)
    with pytest.raises(DataSourceError, match="no query read it within"):
        events.push(EVENTS, 1, start_timeout=0.05)
    with pytest.raises(DataSourceError, match=r"lacks columns \['v'\]"):
        events.push(EVENTS.select(["k"]), 2)
    with pytest.raises(DataSourceError, match="push a pyarrow Table"):
        events.push([1, 2, 3], 3)
    cat.add_table("dim", DIM)
    query = BackgroundQuery(JOIN, cat)
    events.push(EVENTS, 4)
    events.close()
    query.result(60)
    with pytest.raises(DataSourceError, match=r"closed|no query"):
        events.push(EVENTS, 5, start_timeout=0.05)


def test_a_long_runs_routing_log_is_bounded_and_its_summary_exact():
    """A continuous query makes routing decisions forever: the log keeps the latest ones
    and folds the rest into per-signature totals."""
    from eddies.settings import Tuning

    cat = Catalog()
    cat.add_table("a", pa.table({"k": list(range(1000))}))
    cat.add_table("b", pa.table({"k": list(range(1000))}))
    tuning = Tuning(route_log_max_records=50)
    run = run_query("SELECT * FROM a JOIN b ON a.k = b.k", cat, batch_size=5, seed=3, tuning=tuning)
    stats = run.stats
    assert len(stats.routing) <= 51 < stats.decisions
    routed = sum(sum(per.values()) for per in stats.routing_summary().values())
    assert routed == sum(m.tuples_in for m in stats.modules.values() if m.kind != "scan")


async def test_inside_trio_results_are_an_async_iterator_with_commit_points():
    """open_query over a stream fed from a worker thread; commit() cuts increments."""
    import trio

    from eddies.engine import open_query

    cat = Catalog()
    s = cat.add_stream("s", pa.schema([("k", pa.int64()), ("v", pa.int64())]))
    cat.add_table("d", pa.table({"k": pa.array([1, 2, 2], pa.int64()), "n": list("abc")}))
    seen = []
    async with open_query("SELECT s.v, d.n FROM s JOIN d ON s.k = d.k", cat) as results:
        results.keep_increments = True

        async def consume():
            async for batch in results:
                seen.append(batch.num_rows)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            increments = []
            for i, keys in enumerate([[1, 2], [3], [2, 2, None]]):
                batch = pa.table({"k": pa.array(keys, pa.int64()), "v": list(range(len(keys)))})
                await trio.to_thread.run_sync(s.push, batch, i)
                increments.append(sum(b.num_rows for b in await results.commit(i)))
            await trio.to_thread.run_sync(s.close)
    assert increments == [3, 0, 4]
    assert sum(seen) == 7


async def test_a_commit_asked_before_the_query_task_starts_waits_for_it():
    """open_query hands out its results before the query's task attaches the commit
    points; a commit asked at once (BackgroundQuery.commit from a producer thread can be
    that quick) waits for them instead of failing as if the query read no stream."""
    import trio

    from eddies.engine import open_query

    cat = Catalog()
    s = cat.add_stream("s", pa.schema([("v", pa.int64())]))
    async with open_query("SELECT s.v FROM s WHERE s.v > 1", cat) as results:
        assert results.commit_points is None and results.over_streams
        results.keep_increments = True
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: _drain(results))
            await trio.to_thread.run_sync(s.push, pa.table({"v": [1, 2, 3]}), 0)
            first = await results.commit(0)
            await trio.to_thread.run_sync(s.close)
    assert sum(b.num_rows for b in first) == 2


async def _drain(results) -> None:
    async for _ in results:
        pass


def test_commit_on_a_query_over_no_stream_is_an_error():
    query = BackgroundQuery("SELECT t.v FROM t", _static_catalog())
    with pytest.raises(EddiesError, match="only for queries over stream tables"):
        query.commit(0, timeout=30)
    query.result(30)


def _static_catalog() -> Catalog:
    cat = Catalog()
    cat.add_table("t", pa.table({"v": [1, 2]}))
    return cat


def test_commit_points_go_on_after_one_of_two_streams_ends():
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    cat = Catalog()
    a = cat.add_stream("a", schema)
    b = cat.add_stream("b", schema)
    query = BackgroundQuery("SELECT a.v, b.v FROM a JOIN b ON a.k = b.k", cat, sink=MemorySink())
    a.push(pa.table({"k": [1, 2], "v": [10, 20]}, schema), 0)
    assert query.commit(("a", 0), timeout=30) == 0
    a.close()
    counts = []

    def feed_b():
        for i in range(3):
            b.push(pa.table({"k": [1, 2, 2], "v": [i, i, i]}, schema), i)
            counts.append(query.commit(("b", i), timeout=30))

    feeder = threading.Thread(target=feed_b, daemon=True)
    feeder.start()
    feeder.join(30)
    assert not feeder.is_alive(), "a commit point never came: the ended stream blocks it"
    b.close()
    query.result(30)
    assert counts == [3, 3, 3]
