"""Web sources against the demo server, in-process on a free port: describe, scans and
lookups in both formats, and every injected fault (503, latency past the timeout, dropped
connections, 429, fail_after, kill) surfacing as a WebSourceError naming the URL."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import signal
import subprocess
import sys

import httpx
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import trio

from eddies.engine.cli import main
from eddies.sources.demo_server import (
    DemoServerConfig,
    DemoServerError,
    make_app,
    open_demo_server,
    parse_fault_flag,
)
from eddies.sources.web import WebSourceError, WebTable, decode_json_rows, encode_json_rows

UTC = dt.UTC


def _events() -> pa.Table:
    """Ten rows with NULLs, strings, tz-aware and naive timestamps, dates, floats (NaN
    included), decimals, times and a duplicated row; schema metadata to round-trip."""
    t0 = dt.datetime(2013, 1, 1, 5, tzinfo=UTC)
    table = pa.table(
        {
            "id": pa.array([1, 2, 2, 3, 4, 5, 6, 7, 8, None], pa.int64()),
            "name": ["ann", "bob", "bob", None, "cy", "dé", "", "eve", "fay", "gus"],
            "at": pa.array(
                [t0 + dt.timedelta(hours=h % 3) for h in range(9)] + [None],
                pa.timestamp("s", tz="UTC"),
            ),
            "local": pa.array(
                [dt.datetime(2020, 5, 17, 8, 30, 0, 250_000)] * 9 + [None], pa.timestamp("us")
            ),
            "day": pa.array([dt.date(2020, 1, 1 + i % 2) for i in range(10)], pa.date32()),
            "score": [1.5, 0.1, 0.1, float("nan"), None, -2.0, 1e300, 3.25, 0.0, 7.0],
            "price": pa.array(
                [decimal.Decimal("12.30")] * 8 + [None, decimal.Decimal("-0.01")],
                pa.decimal128(10, 2),
            ),
            "clock": pa.array([dt.time(5, 0, 1, 5000)] * 9 + [None], pa.time64("us")),
            "ok": [True, False, False, None, True, True, False, True, False, True],
        }
    )
    return table.replace_schema_metadata({"source": "test"})


EVENTS = _events()
KEYS = {"events": ["id"]}


def _rows(table: pa.Table) -> list[dict]:
    """Rows with NaN replaced by a marker, so that equal tables compare equal."""
    return [
        {k: ("NaN" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        for row in table.to_pylist()
    ]


def assert_same_table(got: pa.Table, want: pa.Table) -> None:
    assert got.schema.equals(want.schema, check_metadata=True), (got.schema, want.schema)
    assert _rows(got) == _rows(want)


def _server(config: DemoServerConfig | None = None, tables: dict | None = None):
    return open_demo_server(tables or {"events": EVENTS}, KEYS, config)


# --------------------------------------------------------------------------------------
# the protocol
# --------------------------------------------------------------------------------------


async def test_describe_round_trips_the_schema_and_key():
    async with _server() as server:
        web = WebTable(server.url, "events")
        schema, key = await trio.to_thread.run_sync(web.describe)
        assert schema.equals(EVENTS.schema, check_metadata=True)
        assert key == ["id"]
        assert web.describe() is web._description  # cached: no server needed any more
        async with httpx.AsyncClient() as client:
            listing = (await client.get(f"{server.url}/tables")).json()
        assert listing == {"tables": [{"name": "events", "rows": 10}]}


@pytest.mark.parametrize("fmt", ["arrow", "json"])
async def test_scan_pages_concatenate_to_the_table(fmt):
    async with _server() as server:
        web = WebTable(server.url, "events", format=fmt, page_size=3)
        pages = [page async for page in web.scan()]
    assert [page.num_rows for page in pages] == [3, 3, 3, 1]
    assert_same_table(pa.concat_tables(pages), EVENTS)


@pytest.mark.parametrize("fmt", ["arrow", "json"])
async def test_scan_of_an_empty_table_yields_one_empty_page(fmt):
    empty = EVENTS.schema.empty_table()
    async with _server(tables={"events": empty}) as server:
        pages = [page async for page in WebTable(server.url, "events", format=fmt).scan()]
    assert len(pages) == 1
    assert_same_table(pages[0], empty)


def _where(**equal) -> pa.Table:
    mask = None
    for column, value in equal.items():
        test = pc.equal(EVENTS[column], pa.scalar(value, EVENTS.schema.field(column).type))
        mask = test if mask is None else pc.and_(mask, test)
    return EVENTS.filter(mask)


@pytest.mark.parametrize("fmt", ["arrow", "json"])
async def test_lookup_equals_filter(fmt):
    binds = [
        {"id": 2},  # a duplicated row: both copies
        {"name": "bob", "id": 2},  # two columns, ANDed
        {"name": "dé"},  # non-ASCII, percent-encoded
        {"name": ""},  # the empty string is a value, not NULL
        {"at": dt.datetime(2013, 1, 1, 6, tzinfo=UTC)},  # tz-aware timestamp
        {"local": dt.datetime(2020, 5, 17, 8, 30, 0, 250_000)},  # naive, with microseconds
        {"day": dt.date(2020, 1, 2), "ok": True},  # date and boolean
        {"score": 0.1},  # float by repr
        {"price": decimal.Decimal("12.30")},
        {"id": 99},  # no match: an empty table
    ]
    async with _server() as server:
        async with WebTable(server.url, "events", format=fmt).session() as session:
            for bind in binds:
                got = await session.lookup(bind)
                assert_same_table(got, _where(**bind))
            assert (await session.lookup({"id": 99})).num_rows == 0
            # NULL never joins: no request, no rows.
            assert (await session.lookup({"id": None})).num_rows == 0
        assert server.app.counts["lookup 200"] == len(binds) + 1


async def test_one_session_serves_many_concurrent_lookups():
    # The server holds every lookup until all 60 have arrived: the query can only end if
    # the session has them all in flight at once (one after another it would hang, and
    # fail_after turns that into a failure). Counts, not wall time, so load cannot flake it.
    n = 60
    found: dict[int, int] = {}
    in_flight = max_in_flight = 0
    all_arrived = trio.Event()
    async with _server() as server, WebTable(server.url, "events").session() as session:
        faults = server.app._faults

        async def held_faults(endpoint: str, table: str):
            nonlocal in_flight, max_in_flight
            in_flight += 1
            max_in_flight = max(max_in_flight, in_flight)
            if in_flight == n:
                all_arrived.set()
            await all_arrived.wait()
            in_flight -= 1
            return await faults(endpoint, table)

        server.app._faults = held_faults

        async def probe(i: int) -> None:
            found[i] = (await session.lookup({"id": i})).num_rows

        with trio.fail_after(60):  # a hang guard only: passing runs take milliseconds
            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(probe, i % 10)
    assert max_in_flight == n
    assert server.app.counts["lookup 200"] == n
    assert found == {i: _where(id=i).num_rows for i in range(10)}


async def test_lookup_errors_carry_the_status_and_the_servers_message():
    async with _server() as server:
        async with WebTable(server.url, "events").session() as session:
            with pytest.raises(WebSourceError, match=r"HTTP 400: .*no column 'nope'"):
                await session.lookup({"nope": 1})
            with pytest.raises(WebSourceError, match=r"HTTP 400: .*'abc'.*does not cast to int64"):
                await session.lookup({"id": "abc"})
        with pytest.raises(WebSourceError, match=r"HTTP 404: no table 'missing'") as info:
            # describe() blocks: run it in a thread so that the server can answer.
            await trio.to_thread.run_sync(WebTable(server.url, "missing").describe)
        assert f"{server.url}/tables/missing" in str(info.value)


def test_json_codec_round_trips_every_column_type():
    rows = encode_json_rows(EVENTS)
    assert rows[0]["at"] == "2013-01-01T05:00:00Z"
    assert rows[0]["local"] == "2020-05-17T08:30:00.250000"
    assert rows[0]["price"] == "12.30" and rows[0]["day"] == "2020-01-01"
    assert_same_table(decode_json_rows(rows, EVENTS.schema), EVENTS)


# --------------------------------------------------------------------------------------
# faults
# --------------------------------------------------------------------------------------


async def test_failure_rate_one_fails_every_lookup():
    config = DemoServerConfig(faults={"events.lookup": {"failure_rate": 1.0}}, seed=1)
    async with _server(config) as server:
        async with WebTable(server.url, "events").session() as session:
            with pytest.raises(WebSourceError, match="HTTP 503: injected failure") as info:
                await session.lookup({"id": 1})
        assert server.url in str(info.value) and "'events'" in str(info.value)
        # Scans are another endpoint: unaffected.
        pages = [page async for page in WebTable(server.url, "events").scan()]
        assert_same_table(pa.concat_tables(pages), EVENTS)


async def test_scan_retries_through_intermittent_failures():
    config = DemoServerConfig(faults={"scan": {"failure_rate": 0.5}}, seed=7)
    async with _server(config) as server:
        web = WebTable(server.url, "events", page_size=2, retries=8, backoff=0.001)
        pages = [page async for page in web.scan()]
        assert_same_table(pa.concat_tables(pages), EVENTS)
        assert server.app.counts["scan 503"] > 0 and server.app.counts["scan 200"] == 5


async def test_scan_gives_up_after_its_retries_naming_the_offset():
    config = DemoServerConfig(faults={"scan": {"failure_rate": 1.0}})
    async with _server(config) as server:
        web = WebTable(server.url, "events", retries=2, backoff=0.001)
        with pytest.raises(WebSourceError, match=r"offset 0 failed after 3 attempts: HTTP 503"):
            _ = [page async for page in web.scan()]
        assert server.app.counts["scan 503"] == 3


async def test_latency_past_the_timeout_is_an_error():
    # The answer would take an hour; the client gives up after its 0.05 s timeout and says
    # so (the message proves it was the timeout, not some other error).
    config = DemoServerConfig(faults={"lookup": {"latency": 3600.0}})
    async with _server(config) as server:
        web = WebTable(server.url, "events", timeout=0.05)
        async with web.session() as session:
            with trio.fail_after(60), pytest.raises(WebSourceError, match=r"timed out after"):
                await session.lookup({"id": 1})
        assert server.app.counts["lookup 200"] == 0


class _SleepRecorder:
    """Stands in for the ``trio`` module inside demo_server: records every ``sleep``
    (the latency and jitter the server adds) and otherwise is trio."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    def __getattr__(self, name: str):
        return getattr(trio, name)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await trio.sleep(seconds)


async def test_latency_and_jitter_delay_the_answer(monkeypatch):
    from eddies.sources import demo_server

    recorder = _SleepRecorder()
    monkeypatch.setattr(demo_server, "trio", recorder)
    config = DemoServerConfig(faults={"*": {"latency": 0.05, "jitter": 0.02}}, seed=3)
    async with _server(config) as server, WebTable(server.url, "events").session() as session:
        for i in range(5):
            await session.lookup({"id": i})
    # Each answer waited its latency plus a jitter drawn in [0, 0.02), and not all the same.
    assert len(recorder.sleeps) == 5
    assert all(0.05 <= delay < 0.07 for delay in recorder.sleeps), recorder.sleeps
    assert len(set(recorder.sleeps)) > 1


async def test_a_dropped_connection_is_an_error():
    config = DemoServerConfig(faults={"lookup": {"drop_rate": 1.0}})
    async with _server(config) as server:
        async with WebTable(server.url, "events").session() as session:
            with pytest.raises(WebSourceError, match="connection dropped by the server"):
                await session.lookup({"id": 1})
        async with httpx.AsyncClient() as client:  # really no answer at all
            with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
                await client.get(f"{server.url}/tables/events/lookup?id=1")
        assert server.app.counts["lookup drop"] == 2


class _WaitedClock:
    """Stands in for ``trio`` in demo_server (its clock) and in the web client (its
    sleeps): the server's time is what the client has waited, so requests are as far
    apart as the client's waits make them, however slow the machine (on the wall clock
    a stall of 0.1 s between two requests would refill the bucket). Otherwise trio."""

    def __init__(self) -> None:
        self.now = 0.0

    def __getattr__(self, name: str):
        return getattr(trio, name)

    def current_time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await trio.sleep(seconds)


async def test_scan_waits_out_the_rate_limit(monkeypatch):
    from eddies.sources import demo_server
    from eddies.sources import web as web_source

    clock = _WaitedClock()
    monkeypatch.setattr(demo_server, "trio", clock)
    monkeypatch.setattr(web_source, "trio", clock)
    config = DemoServerConfig(faults={"events.scan": {"rate_limit": 10.0}})
    async with _server(config) as server:
        # 10 per second, no bursts: a second request within 0.1 s is turned away.
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{server.url}/tables/events/rows")).status_code == 200
            throttled = await client.get(f"{server.url}/tables/events/rows")
            assert throttled.status_code == 429
            assert 0 < float(throttled.headers["retry-after"]) <= 0.1
            # Other endpoints and tables have buckets of their own (here: none).
            assert (await client.get(f"{server.url}/tables/events/lookup?id=1")).status_code == 200
        web = WebTable(server.url, "events", page_size=4, retries=2, backoff=0.001)
        pages = [page async for page in web.scan()]
        assert_same_table(pa.concat_tables(pages), EVENTS)
        # Each page was turned away once and fetched after its 0.1 s wait (the client's
        # second request was the fourth 429).
        assert server.app.counts["scan 429"] == 4 and server.app.counts["scan 200"] == 4
        assert clock.now == pytest.approx(3 * 0.1)


async def test_fail_after_fails_every_request():
    async with _server(DemoServerConfig(fail_after=600.0)) as server:
        web = WebTable(server.url, "events", retries=1, backoff=0.001)
        async with web.session() as session:
            assert (await session.lookup({"id": 1})).num_rows == 1
            # Let the 600 s pass without waiting them: move the server's start back.
            server.app.started_at -= 600.0
            with pytest.raises(WebSourceError, match="HTTP 503: server failed") as info:
                await session.lookup({"id": 1})
            assert server.url in str(info.value)
            with pytest.raises(WebSourceError, match="offset 0 failed after 2 attempts"):
                _ = [page async for page in session.scan()]


async def test_kill_refuses_connections():
    async with _server() as server:
        web = WebTable(server.url, "events", retries=1, backoff=0.001)
        async with web.session() as session:
            assert (await session.lookup({"id": 1})).num_rows == 1
            server.kill()
            with pytest.raises(WebSourceError, match="connection error") as info:
                await session.lookup({"id": 1})
            assert server.url in str(info.value)
            with pytest.raises(WebSourceError, match="offset 0 failed after 2 attempts"):
                _ = [page async for page in session.scan()]
        with pytest.raises(WebSourceError, match=f"{server.url}.*connection error"):
            await trio.to_thread.run_sync(WebTable(server.url, "events").describe)


# --------------------------------------------------------------------------------------
# configuration and the command line
# --------------------------------------------------------------------------------------


def test_fault_flags_parse_into_the_most_specific_setting():
    assert parse_fault_flag("latency", "0.05") == ("*", 0.05)
    assert parse_fault_flag("latency", "lookup=0.1") == ("lookup", 0.1)
    assert parse_fault_flag("rate_limit", "planes.lookup=5") == ("planes.lookup", 5.0)
    config = DemoServerConfig.from_flags(
        latency=["0.05", "lookup=0.1", "planes.lookup=0.2"], failure_rate=["scan=0.5"]
    )
    assert config.value("latency", "lookup", "planes") == 0.2
    assert config.value("latency", "lookup", "airports") == 0.1
    assert config.value("latency", "scan", "planes") == 0.05
    assert config.value("failure_rate", "lookup", "planes") == 0.0
    assert config.resolve("failure_rate", "scan", "flights") == ("scan", 0.5)


@pytest.mark.parametrize(
    ("setting", "text", "message"),
    [
        ("latency", "abc", "not a number"),
        ("latency", "-1", "at least 0"),
        ("failure_rate", "1.5", "at most 1"),
        ("rate_limit", "0", "more than 0"),
        ("latency", "rows=1", "unknown endpoint 'rows'"),
        ("latency", ".scan=1", "unknown endpoint"),
        ("drop_rate", "lookup=", "not a number"),
    ],
)
def test_bad_fault_flags_are_rejected(setting, text, message):
    with pytest.raises(DemoServerError, match=message):
        parse_fault_flag(setting, text)


def test_faults_and_keys_must_name_served_tables():
    with pytest.raises(DemoServerError, match="unknown table 'planes'"):
        make_app({"events": EVENTS}, None, DemoServerConfig(faults={"planes.scan": {}}))
    with pytest.raises(DemoServerError, match=r"no column\(s\) \['nope'\]"):
        make_app({"events": EVENTS}, {"events": ["nope"]})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--latency", "lookup=abc"], "--latency 'lookup=abc'"),
        (["--failure-rate", "2"], "--failure-rate '2'"),
        (["--tables", "planes,nope"], "unknown table(s) nope"),
        (["--tables", "planes", "--drop-rate", "flights.scan=0.1"], "unknown table 'flights'"),
    ],
)
def test_serve_demo_rejects_bad_flags(capsys, args, message):
    assert main(["serve-demo", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err


def test_serve_demo_argparse_errors_exit_2(capsys):
    assert main(["serve-demo", "--fail-after", "-1"]) == 2
    assert main(["serve-demo", "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("stop", "code", "message"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "stopped by SIGTERM")],
)
def test_serve_demo_serves_until_ctrl_c(stop, code, message):
    command = [sys.executable, "-m", "eddies.engine.cli", "serve-demo", "--port", "0"]
    command += ["--tables", "airlines", "--latency", "lookup=0.01"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = [process.stdout.readline() for _ in range(7)]  # up to the faults line
        assert banner[0].startswith("eddies demo server at http://127.0.0.1:"), banner
        assert "/tables/{name}/lookup?" in banner[4], banner
        assert banner[6] == "faults: lookup: latency=0.01\n", banner
        url = banner[0].split()[4]
        web = WebTable(url, "airlines", format="json")
        assert web.describe()[1] == ["carrier"]

        async def lookup() -> pa.Table:
            async with web.session() as session:
                return await session.lookup({"carrier": "AA"})

        assert trio.run(lookup)["name"].to_pylist() == ["American Airlines Inc."]
        process.send_signal(stop)
        _, err = process.communicate(timeout=120)  # a hang guard: ~2 s on a loaded machine
    finally:
        process.kill()
    assert process.returncode == code, err
    assert "Traceback" not in err and message in err, err
