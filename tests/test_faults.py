"""Faults found by held-out probes (issue 9, "Must have" 4): each test failed before its fix.

No wall-clock assertions: timeouts run under trio's MockClock (autojump), everything else
counts what happened. Servers listen on 127.0.0.1 only.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import trio
import trio.testing

from eddies.engine import Catalog, open_query, run_query
from eddies.engine.errors import DataSourceError, EddiesError
from eddies.engine.streaming import BackgroundQuery

# ---------------------------------------------------------------------------------------
# LIMIT over a table with two scan AMs: the eddy must not outlive its modules' queues


def test_limit_over_two_scan_ams_never_breaks_a_module_queue():
    # LIMIT cancels the query while the eddy may hold a message taken just before: it
    # routed it on synchronously into a module whose queue the cancel had closed, and the
    # query raised trio.BrokenResourceError (13 of these 200 seeds).
    te = pa.table({"id": list(range(300)), "v": [i % 7 for i in range(300)]})
    cat = Catalog()
    cat.add_table("te", te)
    cat.add_table("te", te)
    for seed in range(200):
        ids = run_query("SELECT id FROM te LIMIT 10", cat, batch_size=7, seed=seed).table
        values = ids.column("id").to_pylist()
        assert len(values) == 10 and len(set(values)) == 10
        assert set(values) <= set(range(300))


# ---------------------------------------------------------------------------------------
# a deadline around a query running a slow sync UDF


def test_a_cancelled_query_does_not_wait_for_a_sync_udf_thread():
    # The UDF blocks its worker thread until the test releases it, which the test does only
    # after the query has returned. Before the fix the cancel waited for the thread: the
    # query returned only when the UDF gave up waiting (``released`` never set in time).
    release = threading.Event()
    finished = threading.Event()
    started = threading.Event()

    def slow(x):
        started.set()
        released = release.wait(timeout=5.0)  # a hang guard for the unfixed engine
        finished.set()
        return pc.greater(x, -1) if released else pc.greater(x, 10**9)

    cat = Catalog()
    cat.add_table("t", pa.table({"x": list(range(10))}))
    cat.add_function("slow", slow)
    outcome = {}

    async def main():
        with trio.move_on_after(1.0) as scope:
            async with open_query("SELECT x FROM t WHERE slow(x)", cat) as results:
                async for _ in results:
                    pass
        outcome["cancelled"] = scope.cancelled_caught
        outcome["udf_finished_at_return"] = finished.is_set()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    release.set()
    assert started.is_set()
    assert outcome == {"cancelled": True, "udf_finished_at_return": False}
    assert finished.wait(timeout=10.0)  # the abandoned thread still ends on its own


# ---------------------------------------------------------------------------------------
# a push into a stream whose BackgroundQuery failed to start


@pytest.mark.parametrize(
    ("sql", "options"),
    [
        ("SELECT no_such_column FROM ticks", {}),  # a planning error
        ("SELECT * FROM ticks", {"batch_size": 0}),  # a bad option
        ("SELEC * FROM ticks", {}),  # not even parsed
    ],
)
def test_a_push_into_a_stream_whose_query_failed_to_start_raises_its_error(sql, options):
    cat = Catalog()
    ticks = cat.add_stream("ticks", pa.schema([("x", pa.int64())]))
    raised: list[BaseException] = []

    def producer():
        try:
            ticks.push(pa.table({"x": [1, 2]}), 0, start_timeout=30.0)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()  # waits for a query to read the stream
    query = BackgroundQuery(sql, cat, **options)
    with pytest.raises(EddiesError) as failed:
        query.result(timeout=30.0)
    thread.join(timeout=20.0)  # a hang guard only: the push must raise at once
    assert not thread.is_alive(), "push still waits for a query that failed"
    assert raised == [failed.value]
    with pytest.raises(EddiesError) as again:  # and so does every later push
        ticks.push(pa.table({"x": [3]}), 1, start_timeout=30.0)
    assert again.value is failed.value


# ---------------------------------------------------------------------------------------
# a lookup answering a list of dicts with a missing or misspelt column

PLANES = pa.table({"tailnum": ["N1", "N2"], "seats": [100, 200]})
FLIGHTS = pa.table({"id": [1, 2, 3], "tailnum": ["N1", "N2", "N1"]})
JOIN = "SELECT f.id, p.seats FROM flights f JOIN planes p ON f.tailnum = p.tailnum"


@pytest.mark.parametrize(
    ("rename", "named"),
    [
        ({"seats": "seat"}, "lacks columns ['seats'] and has unexpected keys ['seat']"),
        ({"seats": None}, "lacks columns ['seats']"),
    ],
)
def test_a_lookup_answering_dicts_without_a_column_fails_clearly(rename, named):
    calls = []

    async def lookup(bind):
        calls.append(bind)
        rows = PLANES.filter(pc.equal(PLANES["tailnum"], bind["tailnum"])).to_pylist()
        return [
            {rename.get(k, k): v for k, v in row.items() if rename.get(k, k) is not None}
            for row in rows
        ]

    cat = Catalog()
    cat.add_table("flights", FLIGHTS)
    cat.add_index("planes", PLANES.schema, on=["tailnum"], lookup=lookup, retries=2)
    with pytest.raises(DataSourceError) as failed:
        run_query(JOIN, cat)  # before the fix: 3 rows with seats NULL
    message = str(failed.value)
    assert "table 'planes'" in message and named in message
    assert len(calls) == len({b["tailnum"] for b in calls})  # no retries of a bad shape


def test_a_lookup_answering_complete_dicts_still_joins():
    async def lookup(bind):
        return PLANES.filter(pc.equal(PLANES["tailnum"], bind["tailnum"])).to_pylist()

    cat = Catalog()
    cat.add_table("flights", FLIGHTS)
    cat.add_index("planes", PLANES.schema, on=["tailnum"], lookup=lookup)
    got = run_query(JOIN, cat).table
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "seats": 100},
        {"id": 2, "seats": 200},
        {"id": 3, "seats": 100},
    ]
