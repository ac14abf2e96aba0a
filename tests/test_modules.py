"""Unit tests for scan AMs (batching, delay, rate, streams), SMs and the output module."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import trio

from eddies.engine import Catalog, UdfError
from eddies.engine.plan.planner import plan_query
from eddies.modules.output import OutputModule
from eddies.modules.scan import ScanAM
from eddies.modules.selection import SelectionModule
from eddies.router.constraints import ConstraintViolation
from eddies.router.eddy_wiring import Source
from eddies.router.messages import SourceBatch, SourceDone, Work
from eddies.router.stats import ModuleStats
from eddies.router.tuple_batch import Signature, TupleBatch, singleton_batch
from eddies.sources.arrow_source import make_source

T = pa.table({"x": list(range(10)), "s": ["a", None, "b", "a", None, "c", "a", "b", "c", "a"]})


async def scan_all(source, batch_size: int) -> tuple[list[tuple[float, np.ndarray]], ScanAM]:
    """Run one scan AM to the end; (trio time, row ids) of every batch it delivered."""
    store = source.new_store()
    scan = ScanAM(source, 0, store, batch_size, built=True, stats=ModuleStats("scan:t", "scan"))
    send, receive = trio.open_memory_channel(100)
    slot = Source("scan:t", trio.Semaphore(100))
    delivered: list[tuple[float, np.ndarray]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(scan.run, send, slot, 0)
        async with receive:
            async for message in receive:
                if isinstance(message, SourceDone):
                    break
                assert isinstance(message, SourceBatch)
                delivered.append((trio.current_time(), message.batch.rows[0]))
    return delivered, scan


async def test_scan_delivers_every_row_once_in_batches():
    delivered, _ = await scan_all(make_source("t", T), batch_size=4)
    ids = [ids.tolist() for _, ids in delivered]
    assert ids == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


async def test_scan_of_a_stream_appends_to_the_store():
    reader = pa.RecordBatchReader.from_batches(T.schema, T.to_batches(max_chunksize=3))
    source = make_source("t", reader)
    delivered, scan = await scan_all(source, batch_size=2)
    assert np.concatenate([ids for _, ids in delivered]).tolist() == list(range(10))
    assert len(scan.store) == 10
    assert scan.store.gather("x", np.array([9, 0])).to_pylist() == [9, 0]


@pytest.mark.trio
async def test_scan_waits_for_its_delay_and_keeps_its_rate(autojump_clock):
    source = make_source("t", T, delay=2.0, rate=5.0)  # 5 rows/s after 2 s
    start = trio.current_time()
    delivered, _ = await scan_all(source, batch_size=5)
    times = [t - start for t, _ in delivered]
    assert times == pytest.approx([2.0, 3.0])  # second batch one second (5 rows) later


def sm_for(sql: str, functions=()):
    cat = Catalog()
    cat.add_table("t", T)
    for name, fn, vectorized in functions:
        cat.add_function(name, fn, vectorized=vectorized)
    plan = plan_query(sql, cat)
    store = plan.tables["t"].new_store()
    predicate = plan.graph.predicates[0]
    return SelectionModule(predicate, {0: store}), predicate


async def run_sm(sm, predicate) -> list[TupleBatch]:
    batch = singleton_batch(0, np.arange(10, dtype=np.int64), built=True)
    return await sm.process(Work(0, batch))


async def test_sm_keeps_only_true_rows_and_sets_its_done_bit():
    sm, predicate = sm_for("SELECT * FROM t WHERE t.s = 'a'")
    (out,) = await run_sm(sm, predicate)
    assert out.rows[0].tolist() == [0, 3, 6, 9]  # NULL = 'a' is NULL: dropped
    assert out.signature == Signature(1, predicate.bit, True)


@pytest.mark.parametrize("kind", ["sync-vectorized", "async-per-row"])
async def test_sm_runs_udfs(kind):
    if kind == "sync-vectorized":
        fn, vectorized = (lambda x: pa.compute.greater(x, 6)), True
    else:

        async def fn(x):
            await trio.sleep(0)
            return x > 6

        vectorized = False
    sm, predicate = sm_for("SELECT * FROM t WHERE big(t.x)", [("big", fn, vectorized)])
    (out,) = await run_sm(sm, predicate)
    assert out.rows[0].tolist() == [7, 8, 9]


async def test_sm_names_a_udf_that_returns_the_wrong_length():
    sm, predicate = sm_for(
        "SELECT * FROM t WHERE bad(t.x)", [("bad", lambda x: pa.array([True]), True)]
    )
    with pytest.raises(UdfError, match="bad"):
        await run_sm(sm, predicate)


async def test_output_module_gathers_columns_and_debug_catches_duplicates():
    store = make_source("t", T).new_store()
    send, receive = trio.open_memory_channel(10)
    output = OutputModule([(0, "x")], ["t.x"], {0: store}, send, debug=True)
    batch = TupleBatch(Signature(1, 0, True), {0: np.array([2, 5])}, np.array([1, 2]))
    await output.process(Work(0, batch))
    assert receive.receive_nowait().column(0).to_pylist() == [2, 5]
    await output.process(Work(0, batch))  # the same result tuples again
    with pytest.raises(ConstraintViolation, match="duplicate"):
        await output.close()
