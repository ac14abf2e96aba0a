"""Faults found by held-out probes (issue 9, "Must have" 4): each test failed before its fix.

No wall-clock assertions: timeouts run under trio's MockClock (autojump), everything else
counts what happened. Servers listen on 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import threading
from contextlib import asynccontextmanager

import httpx
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import trio
import trio.testing
from servers import demo_server

from eddies.engine import Catalog, open_query, run_query
from eddies.engine.streaming.thread_runner import BackgroundQuery
from eddies.errors import DataSourceError, EddiesError
from eddies.sources.demo_server import DemoServerConfig, DemoServerError, open_demo_server
from eddies.sources.web import WebSourceError, WebTable, decode_json_rows

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
        scope = trio.CancelScope()

        async def query():
            with scope:
                async with open_query("SELECT x FROM t WHERE slow(x)", cat) as results:
                    async for _ in results:
                        pass

        async with trio.open_nursery() as nursery:
            nursery.start_soon(query)
            # Cancel only once the UDF is running in its thread (a deadline or SIGINT).
            assert await trio.to_thread.run_sync(started.wait, 10.0)
            scope.cancel()
        outcome["cancelled"] = scope.cancelled_caught
        outcome["udf_finished_at_return"] = finished.is_set()

    trio.run(main)
    release.set()
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
    with pytest.raises(EddiesError) as failed:  # a bad option fails at construction
        BackgroundQuery(sql, cat, **options).result(timeout=30.0)
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


# ---------------------------------------------------------------------------------------
# web answers: a total deadline per request, a byte cap, 429s on lookups

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
DESCRIPTION = json.dumps(
    {
        "name": "t",
        "rows": 1,
        "key": ["k"],
        "schema": base64.b64encode(SCHEMA.serialize().to_pybytes()).decode(),
    }
).encode()


def _head(status: str, length: int, extra: str = "", kind: str = "application/json") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {length}\r\n{extra}\r\n"
    ).encode()


@asynccontextmanager
async def raw_server(answer):
    """A bare HTTP/1.1 server on 127.0.0.1: ``answer(stream, target)`` writes each answer
    (the description of table ``t`` is answered here); yields its base URL."""

    async def connection(stream: trio.SocketStream) -> None:
        async with stream:
            buffer = b""
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                while True:
                    while b"\r\n\r\n" not in buffer:
                        data = await stream.receive_some()
                        if not data:
                            return
                        buffer += data
                    head, buffer = buffer.split(b"\r\n\r\n", 1)
                    target = head.split(b" ")[1].decode()
                    if target == "/tables/t":
                        await stream.send_all(_head("200 OK", len(DESCRIPTION)) + DESCRIPTION)
                    else:
                        await answer(stream, target)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, connection, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        yield f"http://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


async def test_a_scan_page_trickling_a_byte_a_second_times_out(autojump_clock):
    # httpx's timeouts bound each read; one byte a second never trips them. Before the fix
    # the client read the whole 100-byte page, a byte a (virtual) second.
    sent = []

    async def trickle(stream, target):
        await stream.send_all(_head("200 OK", 100))
        for _ in range(100):
            await trio.sleep(1.0)
            await stream.send_all(b" ")
            sent.append(1)

    async with raw_server(trickle) as url:
        web = WebTable(url, "t", timeout=3.0, retries=0)
        with pytest.raises(WebSourceError, match=r"timed out after 3 s \(the whole request\)"):
            async for _ in web.scan():
                pass
    assert len(sent) <= 3


async def test_a_lookup_trickling_a_byte_a_second_times_out(autojump_clock):
    sent = []

    async def trickle(stream, target):
        await stream.send_all(_head("200 OK", 100))
        for _ in range(100):
            await trio.sleep(1.0)
            await stream.send_all(b" ")
            sent.append(1)

    async with raw_server(trickle) as url, WebTable(url, "t", timeout=3.0).session() as session:
        with pytest.raises(WebSourceError, match="timed out after 3 s"):
            await session.lookup({"k": 1})
    assert len(sent) <= 3


CHUNK = b"x" * 65536


async def test_an_answer_past_the_byte_cap_stops_the_client_reading():
    # The server would send 1 GiB; the client must stop near its 1 MiB cap (the kernel's
    # socket buffers hold a few MiB more of what the server wrote). Before the fix the
    # client read the whole body.
    huge = 2**30
    sent = [0]

    async def endless(stream, target):
        await stream.send_all(_head("200 OK", huge, kind="application/vnd.apache.arrow.stream"))
        while sent[0] < huge:
            await stream.send_all(CHUNK)
            sent[0] += len(CHUNK)

    cap = 2**20
    async with raw_server(endless) as url:
        web = WebTable(url, "t", timeout=600.0, retries=0, max_response_bytes=cap)
        with pytest.raises(WebSourceError) as failed:
            async for _ in web.scan():
                pass
    message = str(failed.value)
    assert f"{url}/tables/t/rows" in message and f"max_response_bytes={cap}" in message
    assert sent[0] < 64 * 2**20


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_max_response_bytes_is_validated(bad):
    with pytest.raises(WebSourceError, match="max_response_bytes"):
        WebTable("http://127.0.0.1:1", "t", max_response_bytes=bad)


async def test_a_throttled_lookup_waits_for_retry_after_and_succeeds(autojump_clock):
    # A healthy server rate-limits the first 5 lookups (429, Retry-After: 2). Before the
    # fix each 429 counted as a failed attempt: past 2 retries the AM was declared failed.
    answers = []
    row = pa.table({"k": [1], "v": ["one"]}, schema=SCHEMA)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, SCHEMA) as writer:
        writer.write_table(row)
    body = sink.getvalue().to_pybytes()

    async def throttle(stream, target):
        answers.append(target)
        if len(answers) <= 5:
            error = b'{"error": "slow down"}'
            await stream.send_all(_head("429 Too Many Requests", len(error), "retry-after: 2\r\n"))
            await stream.send_all(error)
        else:
            await stream.send_all(
                _head("200 OK", len(body), kind="application/vnd.apache.arrow.stream") + body
            )

    async with raw_server(throttle) as url:
        cat = Catalog()
        cat.add_table("r", pa.table({"k": [1]}))
        add = functools.partial(
            cat.add_web_table, "t", url, scan=False, lookup_on=["k"], retries=2, max_concurrency=1
        )
        await trio.to_thread.run_sync(add)  # describes the table: a blocking request
        started = trio.current_time()
        async with open_query("SELECT r.k, t.v FROM r JOIN t ON r.k = t.k", cat) as results:
            rows = [row async for batch in results for row in batch.to_pylist()]
        waited = trio.current_time() - started  # virtual seconds (MockClock)
    assert rows == [{"k": 1, "v": "one"}]
    assert results.stats.failures == []
    assert results.stats.lookups["t.127.0.0.1-" + url.rsplit(":", 1)[1]].retries == 5
    assert len(answers) == 6 and waited >= 5 * 2.0


@pytest.mark.parametrize("fmt", ["arrow", "json"])
async def test_demo_server_pages_never_exceed_their_byte_budget(fmt):
    # Before the fix a page was cut by rows only: 1,000 rows of 1 KiB here, ~1 MiB a page.
    wide = pa.table({"k": list(range(1000)), "v": ["x" * 1024] * 1000})
    budget = 50_000
    config = DemoServerConfig(max_page_bytes=budget)
    async with open_demo_server({"w": wide}, {"w": ["k"]}, config) as server:
        offset, sizes, pages = 0, [], []
        async with httpx.AsyncClient() as client:
            while offset is not None:
                answer = await client.get(
                    f"{server.url}/tables/w/rows",
                    params={"offset": offset, "limit": 1000, "format": fmt},
                )
                assert answer.status_code == 200
                sizes.append(len(answer.content))
                following = answer.headers.get("x-next-offset")
                offset = int(following) if following is not None else None
        web = WebTable(server.url, "w", format=fmt, page_size=1000)
        async for page in web.scan():
            pages.append(page)
    assert max(sizes) <= budget and len(sizes) >= 1024 * 1000 // budget
    assert pa.concat_tables(pages).equals(wide)


@pytest.mark.parametrize("bad", [0, True, 2.5])
def test_demo_server_byte_budget_is_validated(bad):
    with pytest.raises(DemoServerError, match="max_page_bytes"):
        DemoServerConfig(max_page_bytes=bad)


def test_json_rows_from_a_web_server_missing_a_column_raise():
    # A server answering JSON rows without a column (or with it misspelt) used to give a
    # column of NULLs silently; it is a bad answer, like a lookup's dicts above.
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    with pytest.raises(DataSourceError, match=r"lacks columns \['v'\].*unexpected keys \['w'\]"):
        decode_json_rows([{"k": 1, "v": "a"}, {"k": 2, "w": "b"}], schema)
    explicit_null = decode_json_rows([{"k": 1, "v": None}], schema)
    assert explicit_null.to_pylist() == [{"k": 1, "v": None}]


def test_add_web_table_passes_its_byte_cap_to_the_requests():
    with demo_server({"planes": pa.table({"tailnum": ["N1"], "seats": [100]})}) as url:
        cat = Catalog()
        # The cap applies from the first request (describe): a tiny cap fails it, clearly.
        with pytest.raises(DataSourceError, match="max_response_bytes=16"):
            cat.add_web_table("planes", url, max_response_bytes=16)
        cat.add_web_table("planes", url, max_response_bytes=2**20)
        assert "planes" in cat.tables
