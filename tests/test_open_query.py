"""Streaming API and UDFs: open_query (pytest-trio), LIMIT stopping early, UDF predicates.

- open_query yields pa.RecordBatch objects incrementally; their union equals execute's
  result and DuckDB's; a result batch arrives while a source is still stalled.
- LIMIT over a large cross product stops the eddy early (checked on the run statistics).
- UDFs (sync/async, vectorized/per-row) give DuckDB's answer for the equivalent SQL.
- Run options (source rate/delay, queue_capacity=1, lottery windows) leave the answer alone;
  RunStats is consistent with the result.
"""

from __future__ import annotations

import functools
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import trio
from oracle import assert_same_bag, duckdb_table, make_catalog, table_rows

from eddies.engine import (
    POLICIES,
    Catalog,
    EddiesError,
    UdfError,
    execute,
    open_query,
    run_query,
)

rng = np.random.default_rng(7)


def _nullable(values: np.ndarray, null_every: int) -> pa.Array:
    mask = np.zeros(len(values), dtype=bool)
    mask[::null_every] = True
    return pa.array(values, mask=mask, type=pa.int64())


N_U = 120
U = pa.table(
    {
        "id": pa.array(np.arange(N_U), pa.int64()),
        "a": _nullable(rng.integers(-10, 30, N_U), 7),
        "b": _nullable(rng.integers(0, 6, N_U), 11),
        "c": pa.array(rng.integers(0, 5, N_U), pa.int64()),
        "k": pa.array(rng.integers(0, 8, N_U), pa.int64()),
    }
)
N_V = 40
V = pa.table(
    {
        "id": pa.array(np.arange(N_V), pa.int64()),
        "k": _nullable(rng.integers(0, 8, N_V), 9),
        "w": pa.array(rng.integers(-5, 40, N_V), pa.int64()),
    }
)
TABLES = {"u": U, "v": V}
JOIN_SQL = "SELECT u.id, v.id, u.a, v.w FROM u, v WHERE u.k = v.k AND u.a > 0"


async def collect(sql: str, cat: Catalog, **kw) -> tuple[list[pa.RecordBatch], object]:
    batches = []
    async with open_query(sql, cat, **kw) as results:
        async for batch in results:
            batches.append(batch)
        stats = results.stats
    return batches, stats


def to_table(batches: list[pa.RecordBatch], like: pa.Table) -> pa.Table:
    if not batches:
        return like.schema.empty_table()
    return pa.Table.from_batches(batches)


# ---------------------------------------------------------------------------- open_query
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("batch_size", [None, 1, 7])
async def test_union_of_batches_equals_execute(policy, batch_size):
    cat = make_catalog(TABLES)
    batches, stats = await collect(JOIN_SQL, cat, policy=policy, batch_size=batch_size, seed=1)
    assert all(isinstance(b, pa.RecordBatch) for b in batches), [type(b) for b in batches]
    executed = await trio.to_thread.run_sync(
        functools.partial(execute, JOIN_SQL, cat, policy=policy, batch_size=batch_size, seed=1)
    )
    streamed = to_table(batches, executed)
    assert sorted(table_rows(streamed)) == sorted(table_rows(executed))
    assert_same_bag(streamed, JOIN_SQL, TABLES, context=f"{policy} bs={batch_size}")
    assert stats.rows_out == streamed.num_rows


async def test_batches_arrive_incrementally():
    # per-tuple mode: many output rows must come as more than one batch
    cat = make_catalog(TABLES)
    batches, stats = await collect(JOIN_SQL, cat, batch_size=1)
    total = sum(b.num_rows for b in batches)
    assert total > 10
    assert len(batches) > 1, f"all {total} rows came in a single batch"
    assert stats.rows_out == total


async def test_stats_after_iteration():
    cat = make_catalog(TABLES)
    batches, stats = await collect(JOIN_SQL, cat)
    assert stats.rows_out == sum(b.num_rows for b in batches)
    assert "output" in stats.modules
    # every base row is scanned exactly once
    assert stats.modules["scan:u"].tuples_out == N_U
    assert stats.modules["scan:v"].tuples_out == N_V
    assert stats.routing, "no routing events recorded"


@pytest.mark.parametrize("batch_size", [1, None])
async def test_first_batch_while_source_is_stalled(batch_size):
    """A result batch must be delivered while a source still withholds its later rows.

    The source reader yields one batch, then blocks until the test has received a result
    batch (or 20 s pass, which counts as failure). An engine that waited for the whole input
    before producing output would hit the time-out.
    """
    schema = pa.schema([("id", pa.int64()), ("k", pa.int64())])
    first = pa.record_batch([pa.array([1, 2, 3]), pa.array([1, 2, 3])], schema=schema)
    second = pa.record_batch([pa.array([4, 5]), pa.array([1, 2])], schema=schema)
    released = threading.Event()
    state = {"timed_out": False}

    def gen():
        yield first
        state["timed_out"] = not released.wait(timeout=20)
        yield second

    cat = Catalog()
    cat.add_table("src", pa.RecordBatchReader.from_batches(schema, gen()))
    cat.add_table("v", V)
    sql = "SELECT src.id, v.id FROM src, v WHERE src.k = v.k"
    rows = []
    with trio.fail_after(120):
        async with open_query(sql, cat, batch_size=batch_size) as results:
            async for batch in results:
                if batch.num_rows:
                    released.set()
                rows.extend(table_rows(batch))
    released.set()
    assert not state["timed_out"], "no result batch arrived while the source was stalled"
    src = pa.Table.from_batches([first, second])
    expected = table_rows(duckdb_table(sql, {"src": src, "v": V}))
    assert sorted(rows) == sorted(expected)


async def test_break_out_early_then_reuse_catalog():
    big = pa.table({"x": pa.array(np.arange(2000), pa.int64())})
    cat = Catalog()
    cat.add_table("p", big)
    cat.add_table("q", big)
    with trio.fail_after(120):
        async with open_query("SELECT p.x, q.x FROM p, q", cat) as results:
            async for batch in results:
                assert batch.num_rows > 0
                break
    # the catalog (and trio) are still usable afterwards
    batches, _ = await collect("SELECT p.x FROM p WHERE p.x < 10", cat)
    assert sorted(table_rows(to_table(batches, big))) == [(i,) for i in range(10)]


async def test_open_query_error_is_eddies_error():
    cat = make_catalog(TABLES)
    with pytest.raises(EddiesError):
        async with open_query("SELECT u.nope FROM u", cat) as results:
            async for _ in results:
                pass


# ---------------------------------------------------------------------------- LIMIT
N_BIG = 3000


def _big_catalog() -> Catalog:
    t = pa.table({"x": pa.array(np.arange(N_BIG), pa.int64())})
    cat = Catalog()
    cat.add_table("p", t)
    cat.add_table("q", t)
    return cat


def _tuples_produced(stats) -> int:
    return max(m.tuples_out for m in stats.modules.values())


@pytest.mark.parametrize("policy", POLICIES)
async def test_limit_stops_cross_product_early(policy):
    cat = _big_catalog()
    with trio.fail_after(300):
        batches, stats = await collect(
            "SELECT p.x, q.x FROM p, q LIMIT 5", cat, policy=policy, seed=3
        )
    rows = [r for b in batches for r in table_rows(b)]
    assert len(rows) == 5
    assert all(0 <= a < N_BIG and 0 <= b < N_BIG for a, b in rows)
    assert stats.rows_out == 5
    full = N_BIG * N_BIG
    produced = _tuples_produced(stats)
    assert produced < full // 3, (
        f"LIMIT 5 did not stop the eddy early: a module produced {produced} of {full} tuples"
    )


def test_limit_stops_early_run_query():
    run = run_query("SELECT p.x, q.x FROM p, q WHERE p.x < q.x LIMIT 5", _big_catalog())
    assert run.table.num_rows == 5
    assert all(a < b for a, b in table_rows(run.table))
    assert run.stats.rows_out == 5
    assert _tuples_produced(run.stats) < N_BIG * N_BIG // 3


# ---------------------------------------------------------------------------- UDFs
def _mod3_vec(a: pa.Array) -> pa.Array:
    return pc.equal(pc.subtract(a, pc.multiply(pc.divide(a, 3), 3)), 0)


def _mod3_row(a):
    return None if a is None else a % 3 == 0


def _sum_gt5_vec(b: pa.Array, c: pa.Array) -> pa.Array:
    return pc.greater(pc.add(b, c), 5)


def _sum_gt5_row(b, c):
    return None if b is None or c is None else b + c > 5


def _make(fn, is_async: bool):
    if not is_async:
        return fn

    async def afn(*args):
        await trio.sleep(0)
        return fn(*args)

    return afn


UDF_KINDS = [
    pytest.param(v, a, id=f"{'async' if a else 'sync'}-{'vec' if v else 'row'}")
    for v in (True, False)
    for a in (False, True)
]


def _udf_catalog(vectorized: bool, is_async: bool) -> Catalog:
    cat = make_catalog(TABLES)
    cat.add_function(
        "cheap", _make(_mod3_vec if vectorized else _mod3_row, is_async), vectorized=vectorized
    )
    cat.add_function(
        "costly",
        _make(_sum_gt5_vec if vectorized else _sum_gt5_row, is_async),
        vectorized=vectorized,
    )
    return cat


@pytest.mark.parametrize(("vectorized", "is_async"), UDF_KINDS)
@pytest.mark.parametrize("policy", POLICIES)
def test_udf_predicates_single_table(vectorized, is_async, policy):
    cat = _udf_catalog(vectorized, is_async)
    sql = "SELECT u.id, u.a, u.b FROM u WHERE cheap(u.a) AND costly(u.b, u.c)"
    equivalent = "SELECT u.id, u.a, u.b FROM u WHERE u.a % 3 = 0 AND u.b + u.c > 5"
    for bs in (None, 1):
        ours = execute(sql, cat, policy=policy, batch_size=bs, debug=bs == 1, seed=5)
        assert_same_bag(ours, equivalent, TABLES, context=f"{policy} bs={bs}")


@pytest.mark.parametrize(("vectorized", "is_async"), UDF_KINDS)
@pytest.mark.parametrize("policy", POLICIES)
def test_udf_predicates_with_join(vectorized, is_async, policy):
    cat = _udf_catalog(vectorized, is_async)
    sql = (
        "SELECT u.id, v.id FROM u, v WHERE u.k = v.k AND cheap(u.a) "
        "AND costly(u.c, v.w) AND NOT cheap(v.w)"
    )
    equivalent = (
        "SELECT u.id, v.id FROM u, v WHERE u.k = v.k AND u.a % 3 = 0 "
        "AND u.c + v.w > 5 AND NOT (v.w % 3 = 0)"
    )
    for bs in (None, 1):
        ours = execute(sql, cat, policy=policy, batch_size=bs, debug=bs == 1, seed=5)
        assert_same_bag(ours, equivalent, TABLES, context=f"{policy} bs={bs}")


def test_udf_returning_numpy_and_list():
    cat = make_catalog(TABLES)
    cat.add_function(
        "np_pos", lambda a: np.asarray(pc.fill_null(pc.greater(a, 0), False)), vectorized=True
    )
    cat.add_function("list_even", lambda a: [x is not None and x % 2 == 0 for x in a.to_pylist()])
    sql = "SELECT u.id FROM u WHERE np_pos(u.a) AND list_even(u.b)"
    equivalent = (
        "SELECT u.id FROM u WHERE COALESCE(u.a > 0, FALSE) AND COALESCE(u.b % 2 = 0, FALSE)"
    )
    for bs in (None, 1):
        assert_same_bag(execute(sql, cat, batch_size=bs), equivalent, TABLES)


@pytest.mark.parametrize("vectorized", [True, False])
def test_udf_in_select_list(vectorized):
    cat = make_catalog(TABLES)
    if vectorized:
        cat.add_function("triple", lambda a: pc.multiply(a, 3), return_type=pa.int64())
    else:
        cat.add_function(
            "triple",
            lambda a: None if a is None else 3 * a,
            vectorized=False,
            return_type=pa.int64(),
        )
    sql = "SELECT u.id, triple(u.a) FROM u WHERE u.b > 2"
    assert_same_bag(execute(sql, cat), "SELECT u.id, u.a * 3 FROM u WHERE u.b > 2", TABLES)


async def test_async_udf_through_open_query():
    calls = []

    async def slow_pos(a):
        await trio.sleep(0.001)
        calls.append(len(a))
        return pc.greater(a, 0)

    cat = make_catalog(TABLES)
    cat.add_function("slow_pos", slow_pos)
    sql = "SELECT u.id, v.id FROM u, v WHERE u.k = v.k AND slow_pos(u.a)"
    batches, _ = await collect(sql, cat)
    assert calls, "the async UDF was never called"
    equivalent = "SELECT u.id, v.id FROM u, v WHERE u.k = v.k AND u.a > 0"
    assert_same_bag(to_table(batches, U), equivalent, TABLES)


# ---------------------------------------------------------------------------- run options
THREE_WAY_SQL = (
    "SELECT u.id, v.id, x.id FROM u, v, v AS x "
    "WHERE u.k = v.k AND v.w = x.w AND u.a > 0 AND x.id < 30"
)


@pytest.mark.parametrize("policy", POLICIES)
def test_sources_with_rate_and_delay(policy):
    # u arrives late and slowly, v at once: routing adapts, the answer must not change
    cat = Catalog()
    cat.add_table("u", U, batch_size=16, rate=20_000, delay=0.02)
    cat.add_table("v", V, batch_size=4)
    for bs in (None, 1):
        ours = execute(THREE_WAY_SQL, cat, policy=policy, batch_size=bs, seed=9)
        assert_same_bag(ours, THREE_WAY_SQL, TABLES, context=f"{policy} bs={bs}")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("batch_size", [None, 1])
def test_queue_capacity_one(policy, batch_size):
    # the smallest queues: back-pressure everywhere, and still no deadlock or lost tuple
    cat = make_catalog(TABLES)
    with_limit = THREE_WAY_SQL
    ours = execute(with_limit, cat, policy=policy, batch_size=batch_size, queue_capacity=1, seed=4)
    assert_same_bag(ours, with_limit, TABLES, context=f"{policy} bs={batch_size}")


@pytest.mark.parametrize("window", [0.0005, 0.01, 10.0])
def test_lottery_window_sizes(window):
    cat = make_catalog(TABLES)
    for bs in (None, 1):
        ours = execute(
            THREE_WAY_SQL, cat, policy="lottery-window", window=window, batch_size=bs, seed=2
        )
        assert_same_bag(ours, THREE_WAY_SQL, TABLES, context=f"window={window} bs={bs}")


def test_run_stats_api():
    run = run_query(THREE_WAY_SQL, make_catalog(TABLES), batch_size=4)
    stats = run.stats
    assert stats.rows_out == run.table.num_rows
    assert stats.elapsed_seconds > 0
    text = stats.format()
    assert isinstance(text, str) and "output" in text
    rt = stats.routing_table()
    assert isinstance(rt, pa.Table)
    assert rt.num_rows == len(stats.routing)
    for event in stats.routing:
        assert event.destination in stats.modules, event
        assert event.tuples > 0, event
        assert set(event.span) <= {"u", "v", "x"}, event
    # the output module receives exactly the result rows (no aggregation, no LIMIT)
    assert stats.modules["output"].tuples_in == run.table.num_rows


async def test_udf_error_surfaces_from_open_query():
    async def boom(a):
        await trio.sleep(0)
        raise RuntimeError("kaboom")

    cat = make_catalog(TABLES)
    cat.add_function("boom", boom)
    with pytest.raises(UdfError, match="boom"):
        async with open_query("SELECT u.id FROM u WHERE boom(u.a)", cat) as results:
            async for _ in results:
                pass
