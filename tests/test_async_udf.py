"""Concurrent per-row UDFs (issue 10 item 4; stems-2003 §2.1.3's latency hiding, applied to
predicates): max_concurrency calls in flight, each distinct argument tuple called once per
query, timeouts and retries ending in a UdfError, sync functions on a bounded number of
threads, and results equal to DuckDB's with the equivalent sync function as a DuckDB UDF.

No wall-clock asserts: async tests run under trio's MockClock (autojump) and count calls
in flight; the thread test counts threads inside the function.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import trio
from oracle import assert_same_bag, make_catalog

from eddies.engine import POLICIES, Catalog, EddiesError, UdfError, execute, open_query

rng = np.random.default_rng(10)
N = 120
# Duplicates (x in 0..24) and NULLs in the UDF's arguments.
T = pa.table(
    {
        "id": pa.array(np.arange(N), pa.int64()),
        "x": pa.array(
            [None if i % 11 == 3 else int(v) for i, v in enumerate(rng.integers(0, 25, N))]
        ),
        "y": pa.array(
            [None if i % 13 == 5 else int(v) for i, v in enumerate(rng.integers(0, 4, N))]
        ),
    }
)
TABLES = {"t": T}
SQL = "SELECT t.id, t.x, t.y FROM t WHERE t.id % 3 <> 1 AND pick(t.x, t.y)"
ONLY_UDF = "SELECT t.id, t.x FROM t WHERE pick(t.x, t.y)"  # every row reaches the UDF


def keep_sync(x, y):
    """The predicate, as DuckDB and the sync UDF run it (NULL in: NULL out)."""
    if x is None or y is None:
        return None
    return (x + y) % 3 == 0


class Probe:
    """An async per-row UDF that counts calls per argument tuple and calls in flight."""

    def __init__(self, latency: float = 1.0, fail: int = 0) -> None:
        self.latency = latency
        self.fail = fail  # attempts that raise before one succeeds, per argument tuple
        self.calls: Counter = Counter()
        self.in_flight = 0
        self.peak = 0

    async def __call__(self, x, y):
        self.calls[(x, y)] += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await trio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        if self.calls[(x, y)] <= self.fail:
            raise ConnectionError("service unavailable")
        return keep_sync(x, y)


def as_async(probe: Probe):
    async def keep(x, y):  # add_function needs an ``async def`` to await it
        return await probe(x, y)

    return keep


async def run(sql: str, cat: Catalog, **options):
    async with open_query(sql, cat, **options) as results:
        batches = [b async for b in results]
    table = pa.Table.from_batches(batches, schema=results.schema)
    return table, results.stats


def duckdb_with_udf(sql: str) -> pa.Table:
    con = duckdb.connect(":memory:")
    try:
        con.register("t", T)
        con.create_function(
            "pick", keep_sync, [duckdb.sqltype("BIGINT")] * 2, "BOOLEAN", null_handling="special"
        )
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


# -------------------------------------------------------------------- concurrency, dedup
@pytest.mark.parametrize("batch_size", [None, 7, 1])
async def test_max_concurrency_is_reached_and_not_exceeded(autojump_clock, batch_size):
    # 200 distinct arguments. At batch sizes 7 and 1 a batch has fewer distinct arguments
    # than the limit: the limit is reached only if the SM works on several batches at once.
    probe = Probe()
    cat = make_catalog({"t": pa.table({"x": np.arange(200), "y": np.zeros(200, np.int64)})})
    cat.add_function("pick", as_async(probe), vectorized=False, max_concurrency=16)
    table, stats = await run("SELECT t.x FROM t WHERE pick(t.x, t.y)", cat, batch_size=batch_size)
    assert probe.peak == 16
    assert sorted(table.column(0).to_pylist()) == list(range(0, 200, 3))
    assert stats.functions["pick"].calls == 200


@pytest.mark.parametrize("batch_size", [None, 7, 1])
async def test_each_distinct_argument_is_called_once(autojump_clock, batch_size):
    probe = Probe()
    cat = make_catalog(TABLES)
    cat.add_function("pick", as_async(probe), vectorized=False, max_concurrency=4)
    table, stats = await run(ONLY_UDF, cat, batch_size=batch_size, seed=1)
    assert set(probe.calls.values()) == {1}  # NULL arguments included
    reached = list(zip(T["x"].to_pylist(), T["y"].to_pylist(), strict=True))
    assert set(probe.calls) == set(reached)
    f = stats.functions["pick"]
    assert f.calls == len(set(reached))
    assert f.cache_hits == len(reached) - len(set(reached)) > 0
    assert f.waited_seconds > 0
    text = stats.format()  # the functions table: a row per function, its cache hits
    assert re.search(r"^pick\s+[\d,]+\s", text, re.M) and "cache hits" in text
    assert_same_bag(table, ONLY_UDF, TABLES, expected=duckdb_with_udf(ONLY_UDF))


async def test_cache_false_calls_once_per_row(autojump_clock):
    probe = Probe()
    cat = make_catalog(TABLES)
    cat.add_function("pick", as_async(probe), vectorized=False, cache=False)
    table, stats = await run(ONLY_UDF, cat, batch_size=7)
    assert sum(probe.calls.values()) == stats.functions["pick"].calls == N
    assert stats.functions["pick"].cache_hits == 0
    assert_same_bag(table, ONLY_UDF, TABLES, expected=duckdb_with_udf(ONLY_UDF))


async def test_cache_is_per_query(autojump_clock):
    probe = Probe()
    cat = make_catalog(TABLES)
    cat.add_function("pick", as_async(probe), vectorized=False)
    await run(ONLY_UDF, cat)
    await run(ONLY_UDF, cat)
    assert set(probe.calls.values()) == {2}


async def test_same_function_in_where_and_select_shares_calls(autojump_clock):
    probe = Probe()
    cat = make_catalog(TABLES)
    cat.add_function("pick", as_async(probe), vectorized=False)
    sql = "SELECT t.id, pick(t.x, t.y) FROM t WHERE pick(t.x, t.y) IS NOT NULL"
    table, _ = await run(sql, cat, batch_size=7)
    assert set(probe.calls.values()) == {1}
    assert_same_bag(table, sql, TABLES, expected=duckdb_with_udf(sql))


@pytest.mark.parametrize("calls, limit", [(100, 32), (64, 32), (7, 3)])
async def test_calls_run_in_back_to_back_waves(autojump_clock, calls, limit):
    # Under the mock clock only waiting takes time: ``calls`` distinct calls of 1 s with
    # ``limit`` in flight take exactly ceil(calls / limit) s — a worker starts its next
    # call the moment its last one ends (the wave bound of bench/adaptive_async.py).
    probe = Probe()
    cat = make_catalog({"t": pa.table({"x": np.arange(calls), "y": np.zeros(calls, np.int64)})})
    cat.add_function("pick", as_async(probe), vectorized=False, max_concurrency=limit)
    started = trio.current_time()
    table, stats = await run("SELECT t.x FROM t WHERE pick(t.x, t.y)", cat)
    assert trio.current_time() - started == pytest.approx(-(-calls // limit) * probe.latency)
    assert probe.peak == limit and stats.functions["pick"].calls == calls
    assert table.num_rows == len(range(0, calls, 3))


# ------------------------------------------------------------------- timeouts and retries
async def test_a_failed_call_without_retries_is_an_error_at_once(autojump_clock):
    probe = Probe(fail=1)
    cat = make_catalog({"t": pa.table({"x": [41], "y": [7]})})
    cat.add_function("pick", as_async(probe), vectorized=False)  # no timeout, no retries
    with pytest.raises(UdfError) as info:
        await run("SELECT t.x FROM t WHERE pick(t.x, t.y)", cat)
    message = str(info.value)
    assert "'pick'" in message and "(41, 7)" in message
    assert "ConnectionError: service unavailable" in message and "attempts" not in message
    assert probe.calls[(41, 7)] == 1


async def test_timeout_and_retries_then_udf_error_naming_function_and_arguments(autojump_clock):
    probe = Probe(latency=10.0)
    cat = make_catalog({"t": pa.table({"x": [41], "y": [7]})})
    cat.add_function("pick", as_async(probe), vectorized=False, timeout=1.0, retries=2, backoff=0.5)
    with pytest.raises(UdfError) as info:
        await run("SELECT t.x FROM t WHERE pick(t.x, t.y)", cat)
    assert type(info.value) is UdfError  # not an ExceptionGroup, not a subclass
    message = str(info.value)
    assert "'pick'" in message and "(41, 7)" in message
    assert "timed out after 1.0 s" in message and "3 attempts" in message
    assert probe.calls[(41, 7)] == 3


async def test_retries_recover_a_flaky_function(autojump_clock):
    probe = Probe(fail=2)
    cat = make_catalog(TABLES)
    cat.add_function("pick", as_async(probe), vectorized=False, retries=2, max_concurrency=8)
    table, stats = await run(SQL, cat, batch_size=7)
    assert set(probe.calls.values()) == {3}
    assert stats.functions["pick"].retries == 2 * stats.functions["pick"].calls
    assert_same_bag(table, SQL, TABLES, expected=duckdb_with_udf(SQL))


async def test_many_failing_calls_raise_one_udf_error(autojump_clock):
    probe = Probe(fail=5)
    cat = make_catalog(TABLES)
    cat.add_function("pick", as_async(probe), vectorized=False, retries=1)
    with pytest.raises(UdfError) as info:
        await run(SQL, cat, batch_size=7)
    assert type(info.value) is UdfError
    assert "ConnectionError: service unavailable" in str(info.value)


def test_sync_per_row_failure_after_retries():
    calls = Counter()

    def flaky(x, y):
        calls[(x, y)] += 1
        raise ValueError("bad input")

    cat = make_catalog({"t": pa.table({"x": [1, 1], "y": [2, 2]})})
    cat.add_function("pick", flaky, vectorized=False, retries=1, backoff=0.0)
    with pytest.raises(UdfError) as info:
        execute("SELECT t.x FROM t WHERE pick(t.x, t.y)", cat)
    assert type(info.value) is UdfError
    assert "'pick'" in str(info.value) and "(1, 2)" in str(info.value)
    assert "ValueError: bad input" in str(info.value)
    assert calls == {(1, 2): 2}


# ------------------------------------------------------------------------------- threads
@pytest.mark.parametrize("timeout", [None, 30.0])
def test_sync_per_row_thread_count_is_honoured(timeout):
    lock = threading.Lock()
    state = {"now": 0, "peak": 0, "threads": set()}

    def keep(x, y):
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
            state["threads"].add(threading.get_ident())
        time.sleep(0.02)  # long enough for the other threads to start
        with lock:
            state["now"] -= 1
        return keep_sync(x, y)

    cat = make_catalog(TABLES)
    cat.add_function("pick", keep, vectorized=False, max_concurrency=3, timeout=timeout)
    table = execute(SQL, cat)
    assert state["peak"] == 3
    assert_same_bag(table, SQL, TABLES, expected=duckdb_with_udf(SQL))


# ---------------------------------------------------------------- differential vs DuckDB
@pytest.mark.parametrize("kind", ["async", "sync"])
@pytest.mark.parametrize("policy", POLICIES)
def test_results_equal_duckdb_under_every_policy_and_batch_size(kind, policy):
    async def keep_async(x, y):
        await trio.sleep(0)
        return keep_sync(x, y)

    cat = make_catalog(TABLES)
    cat.add_function(
        "pick", keep_async if kind == "async" else keep_sync, vectorized=False, max_concurrency=5
    )
    sqls = [
        SQL,
        "SELECT t.id, pick(t.y, t.x) FROM t WHERE NOT pick(t.x, t.id % 4)",
        "SELECT a.id, b.id FROM t a, t b WHERE a.y = b.y AND pick(a.x, b.x) AND a.id < 40",
    ]
    for sql in sqls:
        expected = duckdb_with_udf(sql)
        for bs in (None, 7, 1):
            ours = execute(sql, cat, policy=policy, batch_size=bs, seed=3, debug=bs == 1)
            assert_same_bag(ours, sql, TABLES, context=f"{policy} bs={bs}", expected=expected)


# ----------------------------------------------------------------------- option checking
@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max_concurrency", 0),
        ("max_concurrency", 2.5),
        ("max_concurrency", True),
        ("timeout", 0),
        ("timeout", -1.0),
        ("timeout", "1s"),
        ("retries", -1),
        ("retries", 1.5),
        ("backoff", -0.1),
        ("cache", "yes"),
        ("vectorized", 1),
        ("return_type", "bool"),
    ],
)
def test_bad_add_function_option_is_an_error_naming_it(option, value):
    cat = Catalog()
    with pytest.raises(EddiesError) as info:
        cat.add_function("pick", keep_sync, **{option: value})
    assert option in str(info.value) and "'pick'" in str(info.value)


@pytest.mark.parametrize("max_concurrency, expected_peak", [(None, 1), (3, 3)])
async def test_vectorized_async_udf_takes_one_batch_call_at_a_time_unless_told(
    autojump_clock, max_concurrency, expected_peak
):
    """A vectorized function gets one batch call at a time by default (the SM's queue then
    fills: back-pressure, eddies-2000 §4.2); ``max_concurrency`` opts in to more."""
    state = {"in_flight": 0, "peak": 0, "calls": 0}

    async def even(x):
        state["calls"] += 1
        state["in_flight"] += 1
        state["peak"] = max(state["peak"], state["in_flight"])
        try:
            await trio.sleep(0.01)
        finally:
            state["in_flight"] -= 1
        return pa.compute.equal(pa.compute.bit_wise_and(x, 1), 0)

    cat = make_catalog({"t": pa.table({"x": np.arange(400)})})
    options = {} if max_concurrency is None else {"max_concurrency": max_concurrency}
    cat.add_function("even", even, **options)
    table, _ = await run("SELECT t.x FROM t WHERE even(t.x)", cat, batch_size=10)
    assert sorted(table.column(0).to_pylist()) == list(range(0, 400, 2))
    assert state["calls"] >= 40 and state["peak"] == expected_peak
