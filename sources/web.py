"""Web sources: tables served over HTTP by a REST server, read page by page or by key.

The protocol (see ``docs/web_sources.md``; :mod:`eddies.sources.demo_server` serves it):

- ``GET /tables/{name}``: JSON ``{"name", "rows", "key", "schema"}``; ``schema`` is the
  base64 of the Arrow IPC-serialized schema, so types round-trip exactly.
- ``GET /tables/{name}/rows?offset=&limit=&format=arrow|json``: one page of rows in table
  order; the header ``X-Next-Offset`` (and, for JSON, ``next_offset``) says where the next
  page starts and is absent on the last page.
- ``GET /tables/{name}/lookup?<col>=<value>...&format=arrow|json``: the rows whose columns
  equal all the given values; values travel as strings the server casts to the column type.

:class:`WebTable` is the client: :meth:`WebTable.describe` (synchronous, for planning),
:meth:`WebTable.scan` (pages, retried with exponential backoff) and
:meth:`WebTable.session` (one connection pool per query, for
:meth:`WebSession.lookup` probes, each a single attempt: the engine's index access module
owns the retry policy for probes). Errors are :class:`WebSourceError` naming the URL and
the table. The module also holds the protocol's JSON row codec
(:func:`encode_json_rows` / :func:`decode_json_rows`), shared with the server.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import random
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import trio

from eddies.errors import DataSourceError
from eddies.sources.arrow_source import RETRY_AFTER_CAP, Throttled, check_row_keys

__all__ = [
    "ARROW_STREAM",
    "FORMATS",
    "MAX_RESPONSE_BYTES",
    "NEXT_OFFSET",
    "RETRY_AFTER_CAP",
    "WebSession",
    "WebSourceError",
    "WebTable",
    "WebThrottled",
    "decode_json_rows",
    "encode_json_rows",
]

#: Content type of Arrow IPC stream bodies.
ARROW_STREAM = "application/vnd.apache.arrow.stream"
#: Response header holding the offset of the next page (absent on the last page).
NEXT_OFFSET = "X-Next-Offset"
#: Body formats of the rows and lookup endpoints.
FORMATS = ("arrow", "json")
#: Default cap on one answer's (decoded) body: beyond it the client stops reading and the
#: request fails, so a runaway answer cannot take the client's memory.
MAX_RESPONSE_BYTES = 64 * 2**20

# Keep-alive connections per AsyncClient: the engine may run many probes at once.
_LIMITS = httpx.Limits(max_connections=128, max_keepalive_connections=128)


class WebSourceError(DataSourceError):
    """A web table cannot be read: unreachable server, HTTP error, timeout or a bad answer.

    The message names the URL and the table (and, for scans, the page offset).
    """


class WebThrottled(WebSourceError, Throttled):
    """The server answered 429 (Too Many Requests) to a lookup: back-pressure, not a
    failure; ``retry_after`` holds its ``Retry-After`` in seconds (0 if it sent none)."""


# --------------------------------------------------------------------------------------
# the JSON row codec (server and client)
# --------------------------------------------------------------------------------------


def _wire_type(type_: pa.DataType) -> pa.DataType:
    """The Arrow type a column has in JSON rows: temporal and decimal values as strings."""
    if (
        pa.types.is_timestamp(type_)
        or pa.types.is_date(type_)
        or pa.types.is_time(type_)
        or pa.types.is_decimal(type_)
    ):
        return pa.string()
    if pa.types.is_duration(type_):
        return pa.int64()  # a count of the type's unit
    return type_


def encode_json_rows(table: pa.Table) -> list[dict[str, Any]]:
    """``table`` as a list of JSON-ready row dicts (column name → value).

    Timestamps become ISO 8601 strings (``2013-01-01T05:00:00Z``, offsets kept, fractions
    of seconds as the unit has them), dates ``2013-01-01``, times ``05:00:00``, decimals
    strings (exact), durations integers in the column's unit; NULL is ``None``. Floats stay
    floats (NaN and infinities as Python's ``json`` writes them). Raises ``ValueError`` for
    binary columns, which have no JSON form (use the Arrow format).
    """
    columns = []
    for name, column in zip(table.column_names, table.columns, strict=True):
        type_ = column.type
        if pa.types.is_binary(type_) or pa.types.is_large_binary(type_):
            raise ValueError(f"column {name!r} of type {type_} has no JSON form; use format=arrow")
        if pa.types.is_fixed_size_binary(type_):
            raise ValueError(f"column {name!r} of type {type_} has no JSON form; use format=arrow")
        wire = _wire_type(type_)
        if wire != type_:
            column = column.cast(wire)
            if pa.types.is_timestamp(type_):
                # Arrow writes "2013-01-01 05:00:00Z"; ISO 8601 wants a T between the parts.
                column = pc.replace_substring(column, " ", "T", max_replacements=1)
        columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names).to_pylist()


def _from_wire(column: pa.ChunkedArray, type_: pa.DataType) -> pa.ChunkedArray:
    if column.type == type_:
        return column
    if pa.types.is_time(type_):
        # Arrow cannot cast strings to times; parse them as timestamps on 1970-01-01.
        stamps = pc.binary_join_element_wise("1970-01-01T", column, "")
        return stamps.cast(pa.timestamp(type_.unit)).cast(type_)
    return column.cast(type_)


def decode_json_rows(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """JSON rows (as :func:`encode_json_rows` writes them) back into a table of ``schema``.

    Every row must hold every column (NULL is an explicit ``null``): a missing or misspelt
    key raises DataSourceError naming it, never a column of NULLs; unknown keys alone are
    ignored. Raises ``pa.ArrowInvalid`` / ``pa.ArrowTypeError`` when a value does not fit
    its column's type.
    """
    check_row_keys(rows, schema.names, "JSON rows")
    wire = pa.schema([field.with_type(_wire_type(field.type)) for field in schema])
    table = pa.Table.from_pylist(rows, schema=wire)
    columns = [_from_wire(table.column(i), field.type) for i, field in enumerate(schema)]
    return pa.Table.from_arrays(columns, schema=schema)


# --------------------------------------------------------------------------------------
# decoding answers
# --------------------------------------------------------------------------------------


def _param(value: Any) -> str:
    """One lookup value as the string the server casts to the column's type."""
    if isinstance(value, pa.Scalar):
        value = value.as_py()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, str):
        return value
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # repr round-trips a float exactly
    if isinstance(value, dt.date | dt.time):  # datetime is a date subclass
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"cannot send a lookup value of type {type(value).__name__}: {value!r}")


def _server_error(response: httpx.Response) -> str:
    """``HTTP <status>: <the server's error text>`` for an error response."""
    try:
        text = str(response.json()["error"])
    except Exception:
        text = response.text.strip()[:200] or response.reason_phrase
    return f"HTTP {response.status_code}: {text}"


def _transport_error(exc: httpx.TransportError, timeout: float) -> str:
    """A readable reason for a failed request (timeouts say how long was waited)."""
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out after {timeout:g} s ({type(exc).__name__})"
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"connection dropped by the server: {detail}"
    return f"connection error ({type(exc).__name__}): {detail}"


def _read_table(response: httpx.Response, schema: pa.Schema) -> tuple[pa.Table, dict | None]:
    """The rows of a rows/lookup answer in ``schema``, and the parsed body if it was JSON.

    Raises ValueError, KeyError or an Arrow error on a malformed body.
    """
    if response.headers.get("content-type", "").startswith(ARROW_STREAM):
        table = pa.ipc.open_stream(pa.py_buffer(response.content)).read_all()
        if table.schema.equals(schema, check_metadata=False):
            return table.replace_schema_metadata(schema.metadata), None
        return table.select(schema.names).cast(schema), None
    body = response.json()
    return decode_json_rows(body["rows"], schema), body


class _Retryable(Exception):
    """A failed attempt worth repeating; ``wait`` is a server-imposed minimum delay."""

    def __init__(self, reason: str, wait: float = 0.0, *, throttled: bool = False) -> None:
        super().__init__(reason)
        self.wait = wait
        self.throttled = throttled  # a 429


# --------------------------------------------------------------------------------------
# the client
# --------------------------------------------------------------------------------------


class WebTable:
    """One table of a REST server speaking the web-source protocol.

    ``base_url`` is the server's root (``http://127.0.0.1:8080``), ``table`` the table's
    name there. ``format`` picks the body format of rows and lookups (``"arrow"``: Arrow IPC
    streams, exact and fast; ``"json"``: rows as JSON objects). ``timeout`` (seconds)
    bounds each request as a whole, from sending it to the last byte of the answer (a
    server trickling its answer cannot hold a query); ``max_response_bytes`` caps one
    answer's body: the client streams it and stops reading past the cap, failing the
    request with a :class:`WebSourceError` naming the URL and the cap; a scan page is
    tried ``1 + retries`` times with exponential backoff (``backoff * 2**attempt``
    seconds plus up to 10 % jitter); ``page_size`` is the rows per scan page; ``headers``
    are sent with every request.

    Raises :class:`WebSourceError` for a ``format`` other than arrow/json or a bad number.
    """

    def __init__(
        self,
        base_url: str,
        table: str,
        *,
        format: str = "arrow",
        timeout: float = 5.0,
        retries: int = 2,
        backoff: float = 0.1,
        page_size: int = 10_000,
        headers: Mapping[str, str] | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.table = table
        self.url = f"{self.base_url}/tables/{quote(table, safe='')}"
        if format not in FORMATS:
            raise self._error(f"format must be one of {FORMATS}, not {format!r}")
        if not timeout > 0 or retries < 0 or backoff < 0 or page_size < 1:
            raise self._error(
                "need timeout > 0, retries >= 0, backoff >= 0 and page_size >= 1; got "
                f"timeout={timeout}, retries={retries}, backoff={backoff}, page_size={page_size}"
            )
        if isinstance(max_response_bytes, bool) or not (
            isinstance(max_response_bytes, int) and max_response_bytes >= 1
        ):
            raise self._error(
                f"max_response_bytes must be a positive integer, got {max_response_bytes!r}"
            )
        self.max_response_bytes = max_response_bytes
        self.format = format
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.page_size = int(page_size)
        self.headers = dict(headers or {})
        self._description: tuple[pa.Schema, list[str] | None] | None = None

    def __repr__(self) -> str:
        return f"WebTable({self.base_url!r}, {self.table!r}, format={self.format!r})"

    def _error(self, reason: str) -> WebSourceError:
        return WebSourceError(f"web table {self.table!r} at {self.url}: {reason}")

    # -- describe -----------------------------------------------------------------------

    def _parse_description(self, response: httpx.Response) -> tuple[pa.Schema, list[str] | None]:
        if response.status_code >= 400:
            raise self._error(_server_error(response))
        try:
            body = response.json()
            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(body["schema"])))
            key = body.get("key")
            if key is not None and not (
                isinstance(key, list) and all(name in schema.names for name in key)
            ):
                raise ValueError(f"key {key!r} does not name columns of the schema")
        except Exception as exc:
            raise self._error(f"bad description from the server: {exc}") from exc
        self._description = (schema, list(key) if key is not None else None)
        return self._description

    def describe(self) -> tuple[pa.Schema, list[str] | None]:
        """``(schema, key)`` of the table: its exact Arrow schema and its primary-key
        columns (``None`` when the server declares none).

        Synchronous (one blocking HTTP request, meant for query planning); cached on the
        instance after the first success. Raises :class:`WebSourceError` if the server is
        unreachable, does not know the table, or answers something unreadable.
        """
        if self._description is not None:
            return self._description
        deadline = time.monotonic() + self.timeout
        try:
            with (
                httpx.Client(timeout=self.timeout, headers=self.headers) as client,
                client.stream("GET", self.url) as response,
            ):
                body = bytearray()
                for chunk in response.iter_bytes():
                    self._take(body, chunk, self.url)
                    if time.monotonic() > deadline:  # a trickle defeats the read timeout
                        raise httpx.ReadTimeout("the whole answer took too long")
        except httpx.TransportError as exc:
            raise self._error(_transport_error(exc, self.timeout)) from exc
        return self._parse_description(_complete(response, body))

    def _take(self, body: bytearray, chunk: bytes, url: str) -> None:
        """Append ``chunk`` to ``body``, or fail past ``max_response_bytes``."""
        body += chunk
        if len(body) > self.max_response_bytes:
            raise self._error(
                f"the answer from {url} exceeds max_response_bytes={self.max_response_bytes}"
                f" (read {len(body)} bytes); stopped reading"
            )

    async def _describe_async(
        self, client: httpx.AsyncClient
    ) -> tuple[pa.Schema, list[str] | None]:
        if self._description is not None:
            return self._description
        try:
            response = await _fetch(self, client, self.url, {})
        except trio.TooSlowError:
            raise self._error(f"timed out after {self.timeout:g} s (the whole request)") from None
        except httpx.TransportError as exc:
            raise self._error(_transport_error(exc, self.timeout)) from exc
        return self._parse_description(response)

    # -- sessions and scans -------------------------------------------------------------

    @asynccontextmanager
    async def session(self) -> AsyncIterator[WebSession]:
        """``async with table.session() as s:`` one connection pool for a query's requests.

        Fetches the description first if :meth:`describe` has not run (raising
        :class:`WebSourceError` like it). The pool holds up to 128 connections, so many
        concurrent :meth:`WebSession.lookup` calls are served without queueing.
        """
        async with httpx.AsyncClient(
            timeout=self.timeout, limits=_LIMITS, headers=self.headers
        ) as client:
            schema, _ = await self._describe_async(client)
            yield WebSession(self, client, schema)

    async def scan(self) -> AsyncIterator[pa.Table]:
        """Yield the table's rows as pages (``pa.Table`` of at most ``page_size`` rows in
        the described schema), in table order, over one session.

        An empty table yields one empty page. Each page request is retried on timeouts,
        connection errors, 429 and 5xx answers; after ``retries`` retries it raises
        :class:`WebSourceError` naming the URL, table, offset and last error. Other 4xx
        answers fail at once. An async generator: close it (``contextlib.aclosing``) when
        leaving a loop early.
        """
        async with self.session() as session:
            async for page in session.scan():
                yield page


class WebSession:
    """A :class:`WebTable` bound to an open ``httpx.AsyncClient``; made by
    :meth:`WebTable.session`, valid inside its ``async with`` block."""

    def __init__(self, table: WebTable, client: httpx.AsyncClient, schema: pa.Schema) -> None:
        self.table = table
        self.schema = schema
        self._client = client

    async def _get(self, url: str, params: dict[str, str], *, what: str) -> httpx.Response:
        """One GET, answered in full within the table's ``timeout``: a 2xx response, or
        :class:`_Retryable` / :class:`WebSourceError` (past the byte cap, a 4xx)."""
        try:
            response = await _fetch(self.table, self._client, url, params)
        except trio.TooSlowError:
            raise _Retryable(
                f"timed out after {self.table.timeout:g} s (the whole request)"
            ) from None
        except httpx.TransportError as exc:
            raise _Retryable(_transport_error(exc, self.table.timeout)) from exc
        if response.status_code == 429:
            raise _Retryable(_server_error(response), _retry_after(response), throttled=True)
        if response.status_code >= 500:
            raise _Retryable(_server_error(response))
        if response.status_code >= 400:
            raise self.table._error(f"{what}: {_server_error(response)}")
        return response

    async def lookup(self, bind: Mapping[str, Any]) -> pa.Table:
        """The rows whose columns equal all values in ``bind`` (column → Python value), as
        a ``pa.Table`` in the table's schema; empty if none match.

        One attempt, no retries. A ``None`` value matches nothing (NULL never joins), so
        no request is made. Raises :class:`WebThrottled` on a 429 (with its ``Retry-After``),
        :class:`WebSourceError` on a timeout, a connection error or drop, an HTTP error
        (its status and the server's message), a value that cannot be sent, an answer
        past ``max_response_bytes``, or a malformed answer.
        """
        if not bind:
            raise self.table._error("lookup needs at least one column value")
        if any(value is None for value in bind.values()):
            return self.schema.empty_table()
        what = "lookup " + ", ".join(f"{col}={value!r}" for col, value in bind.items())
        try:
            params = {col: _param(value) for col, value in bind.items()}
        except TypeError as exc:
            raise self.table._error(f"{what}: {exc}") from None
        params["format"] = self.table.format
        try:
            response = await self._get(f"{self.table.url}/lookup", params, what=what)
        except _Retryable as exc:
            if exc.throttled:
                message = self.table._error(f"{what}: {exc}")
                raise WebThrottled(str(message), exc.wait) from exc
            raise self.table._error(f"{what}: {exc}") from exc
        try:
            return _read_table(response, self.schema)[0]
        except Exception as exc:
            raise self.table._error(f"{what}: bad answer from the server: {exc}") from exc

    async def _page(self, offset: int) -> tuple[pa.Table, int | None]:
        """One page at ``offset`` with retries: ``(rows, next offset or None)``."""
        table = self.table
        params = {"offset": str(offset), "limit": str(table.page_size), "format": table.format}
        what = f"scan at offset {offset}"
        for attempt in range(table.retries + 1):
            try:
                response = await self._get(f"{table.url}/rows", params, what=what)
                break
            except _Retryable as exc:
                if attempt == table.retries:
                    raise table._error(
                        f"{what} failed after {attempt + 1} attempts: {exc}"
                    ) from exc
                delay = table.backoff * 2**attempt * (1 + 0.1 * random.random())
                await trio.sleep(max(delay, min(exc.wait, RETRY_AFTER_CAP)))
        try:
            rows, body = _read_table(response, self.schema)
            if body is not None:
                following = body.get("next_offset")
            else:
                following = response.headers.get(NEXT_OFFSET)
            following = int(following) if following is not None else None
        except Exception as exc:
            raise table._error(f"{what}: bad answer from the server: {exc}") from exc
        if following is not None and following <= offset:
            raise table._error(f"{what}: the server's next offset {following} goes backwards")
        return rows, following

    async def scan(self, offset: int = 0) -> AsyncIterator[pa.Table]:
        """Pages from ``offset`` to the end, as :meth:`WebTable.scan` describes."""
        next_offset: int | None = offset
        while next_offset is not None:
            page, next_offset = await self._page(next_offset)
            yield page


async def _fetch(
    table: WebTable, client: httpx.AsyncClient, url: str, params: Mapping[str, str]
) -> httpx.Response:
    """GET ``url`` and read the whole answer within ``table.timeout`` seconds (else
    ``trio.TooSlowError``: httpx's timeouts bound each read, which a trickle defeats),
    streaming the body and stopping past ``table.max_response_bytes``
    (:class:`WebSourceError`). Returns the response with its body read."""
    with trio.fail_after(table.timeout):
        async with client.stream("GET", url, params=params) as response:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                table._take(body, chunk, str(response.url))
    return _complete(response, body)


def _complete(response: httpx.Response, body: bytearray) -> httpx.Response:
    """A streamed ``response`` as an ordinary one holding ``body`` (already decoded)."""
    headers = [(k, v) for k, v in response.headers.items() if k.lower() != "content-encoding"]
    return httpx.Response(
        response.status_code, headers=headers, content=bytes(body), request=response.request
    )


def _retry_after(response: httpx.Response) -> float:
    """The 429's ``Retry-After`` in seconds (fractions allowed); 0 if absent or a date."""
    try:
        return max(0.0, float(response.headers.get("retry-after", "0")))
    except ValueError:
        return 0.0
