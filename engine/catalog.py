"""The catalog: the tables a query can name, each with its access methods, and functions.

stems-2003 §2.2 and §3.2: a table may be served by several access methods (AMs) — scans
of different mirrors, index lookups on different bind columns — and the eddy runs them in
competition, all building into the table's one SteM. So a catalog table is a schema plus
a list of AMs: every ``add_table`` / ``add_index`` / ``add_web_table`` call on a name adds
one AM to that table (the schemas must agree). Duplicates that competing AMs deliver are
removed when they are built into the SteM (rows identified by the table's ``key`` when one
is given, else by all their values; see :mod:`eddies.modules.stem.row_identity`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from eddies.errors import DataSourceError, EddiesError, UdfError
from eddies.modules.window import Window, check_window
from eddies.router.expressions import DEFAULT_UDF_BACKOFF, FunctionSpec
from eddies.sources.arrow_source import TableSource, make_source, plain_schema
from eddies.sources.index_access import (
    DEFAULT_BACKOFF,
    DEFAULT_LOOKUP_TIMEOUT,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_RETRIES,
    IndexAccess,
    LookupFn,
)
from eddies.sources.stream import StreamTable
from eddies.sources.table_store import TableStore

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ACCESS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


@dataclass
class CatalogTable:
    """One table: its schema, optional row key, and its AMs (scans and index lookups)."""

    name: str
    schema: pa.Schema
    key: tuple[str, ...] | None = None
    scans: list[TableSource] = field(default_factory=list)
    indexes: list[IndexAccess] = field(default_factory=list)
    window: Window | None = None  # a stream table's SteM window

    @property
    def stream(self) -> StreamTable | None:
        """The StreamTable feeding this table, if it is a stream table."""
        return self.scans[0].stream if len(self.scans) == 1 else None

    @property
    def access_count(self) -> int:
        return len(self.scans) + len(self.indexes)

    @property
    def deduplicates(self) -> bool:
        """True when competing AMs can deliver a row twice (stems-2003 §3.2)."""
        return self.access_count > 1

    @property
    def built(self) -> bool:
        """False when the table's tuples are never built (relaxed BuildFirst, §3.5)."""
        return all(s.build for s in self.scans) or bool(self.indexes)

    @property
    def table(self) -> pa.Table | None:
        """All rows when the table is one in-memory scan (its size ranks sources)."""
        if len(self.scans) == 1 and not self.indexes:
            return self.scans[0].table
        return None

    def new_store(self) -> TableStore:
        """The row store a query's AMs append to (preloaded for one in-memory scan)."""
        if self.table is not None:
            scan = self.scans[0]
            return TableStore.preloaded(
                self.name, scan.table, schema=scan.schema, column=scan.plain_column
            )
        return TableStore(self.name, self.schema)


class Catalog:
    """Named tables (each with one or more AMs) and functions usable in SQL.

    Example::

        cat = Catalog()
        cat.add_table("flights", "flights.parquet")               # a scan AM
        cat.add_index("planes", schema, on=["tailnum"], lookup=fetch_plane)  # an index AM
        cat.add_function("is_long", lambda d: pc.greater(d, 2000))
    """

    def __init__(self) -> None:
        self._tables: dict[str, CatalogTable] = {}
        self._functions: dict[str, FunctionSpec] = {}
        self._version = 0  # bumped by every change (engine/plan/plan_cache.py keys plans on it)

    def add_table(
        self,
        name: str,
        data: Any,
        *,
        batch_size: int | None = None,
        rate: float | None = None,
        delay: float = 0.0,
        key: Sequence[str] | None = None,
        access_name: str | None = None,
        build: bool = True,
    ) -> None:
        """Add a scan AM over ``data`` to table ``name`` (created if new; case-insensitive).

        data: pyarrow Table or RecordBatchReader (scanned once), pandas DataFrame, or a
        path to a Parquet or CSV file. batch_size: rows per scan batch (default: the
        query's); rate: rows/second the scan AM delivers (None: as fast as it can); delay:
        seconds before its first batch; key: columns identifying a row, used to remove
        duplicates when the table has several AMs; access_name: the AM's name in plans and
        statistics (default: the table name, then ``<table>_2``, ...). A second AM on the
        same table competes with the first (stems-2003 §3.2). build=False: never build this
        table's tuples into a SteM (the relaxed BuildFirst of stems-2003 §3.5, for a large
        table or a stream): they probe the other tables' SteMs, and probe again, with a
        LastMatchTimeStamp, until those are complete; allowed for a table with this one
        scan AM, used once in a query whose other tables are each read by one scan.
        Raises DataSourceError for unusable data or a schema that differs from the table's.
        """
        key_name = _check_name(name, "table", DataSourceError)
        source = make_source(key_name, data, batch_size=batch_size, rate=rate, delay=delay)
        source.build = build
        self._add_scan(key_name, source, key, access_name)

    def add_scan(
        self,
        name: str,
        schema: pa.Schema,
        pages: Callable[[], Any],
        *,
        key: Sequence[str] | None = None,
        access_name: str | None = None,
    ) -> None:
        """Add a scan AM whose rows come from ``pages()``, an async iterator of pyarrow
        Tables or RecordBatches (e.g. a paged web scan). Errors it raises fail this AM; the
        eddy then goes on with the table's other scan AMs, if any."""
        key_name = _check_name(name, "table", DataSourceError)
        if not isinstance(schema, pa.Schema):
            raise DataSourceError(f"table {name!r}: schema must be a pyarrow Schema")
        if not callable(pages):
            raise DataSourceError(f"table {name!r}: pages must be a callable")
        source = TableSource(key_name, plain_schema(schema), pages=pages)
        self._add_scan(key_name, source, key, access_name)

    def add_stream(
        self,
        name: str,
        schema: pa.Schema,
        *,
        key: Sequence[str] | None = None,
        access_name: str | None = None,
        window: Window | None = None,
    ) -> StreamTable:
        """Add a table fed by pushes from another thread; returns the :class:`StreamTable`
        to push micro-batches into (``push(batch, batch_id)``, then ``close()``) while a
        query runs, e.g. under :class:`eddies.engine.streaming.thread_runner.BackgroundQuery`. A
        replayed
        ``batch_id`` adds no rows.

        window: bound the table's SteM (stems-2003 §2.3): ``RowWindow(n)`` keeps the last
        n tuples, ``EventTimeWindow(column, span)`` the tuples whose event time is within
        ``span`` of the newest seen (see :mod:`eddies.modules.window` for the exact
        semantics). None: every tuple is kept for the life of the query.
        Raises DataSourceError for a bad schema or window.
        """
        key_name = _check_name(name, "table", DataSourceError)
        if not isinstance(schema, pa.Schema):
            raise DataSourceError(f"table {name!r}: schema must be a pyarrow Schema")
        if name.lower() in self._tables:
            raise DataSourceError(
                f"table {name!r} already exists; a stream table has exactly one AM, its stream"
            )
        stream = StreamTable(key_name, schema)
        if window is not None:
            check_window(window, stream.schema, f"stream {name!r}")
        source = TableSource(key_name, stream.schema, pages=stream.pages, stream=stream)
        self._add_scan(key_name, source, key, access_name)
        self._tables[key_name].window = window
        self._version += 1
        return stream

    def add_index(
        self,
        name: str,
        schema: pa.Schema,
        *,
        on: Sequence[str],
        lookup: LookupFn | None = None,
        session: Callable[[], AbstractAsyncContextManager[LookupFn]] | None = None,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        timeout: float | None = DEFAULT_LOOKUP_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        key: Sequence[str] | None = None,
        access_name: str | None = None,
    ) -> None:
        """Add an asynchronous index AM to table ``name``: any async lookup by column values.

        ``lookup(bind)`` is awaited with a dict ``{column: value}`` for the columns ``on``
        (never NULL) and returns all rows of the table with those values: a pyarrow Table
        or RecordBatch, a list of dicts, or a pandas DataFrame, with the columns of
        ``schema`` (extra columns are ignored, rows with other values are dropped). It can
        wrap a database, a web service or a model. A query can use the table only where a
        join binds every column of ``on`` (stems-2003 §2.2, bind-field constraints).
        max_concurrency: lookups in flight at once; timeout: seconds per lookup;
        retries/backoff: retries of a failed lookup, ``backoff * 2**k`` seconds apart, after
        which the AM counts as failed and the eddy uses the table's other AMs. Raises
        DataSourceError for a bad argument.
        """
        key_name = _check_name(name, "table", DataSourceError)
        if not isinstance(schema, pa.Schema):
            raise DataSourceError(f"table {name!r}: schema must be a pyarrow Schema")
        schema = plain_schema(schema)
        on_columns = _columns(name, schema, on, "on")
        if not on_columns:
            raise DataSourceError(f"table {name!r}: an index needs at least one column in on=")
        if (lookup is None) == (session is None):
            raise DataSourceError(f"table {name!r}: give exactly one of lookup= and session=")
        if lookup is not None and not callable(lookup):
            raise DataSourceError(f"table {name!r}: lookup {lookup!r} is not callable")
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise DataSourceError(
                f"table {name!r}: max_concurrency must be a positive integer, "
                f"got {max_concurrency!r}"
            )
        if timeout is not None and not timeout > 0:
            raise DataSourceError(f"table {name!r}: timeout must be > 0 seconds, got {timeout}")
        if retries < 0 or backoff < 0:
            raise DataSourceError(f"table {name!r}: retries and backoff must be >= 0")
        entry = self._entry(key_name, schema, key)
        access = IndexAccess(
            self._access_name(key_name, access_name, f"{key_name}_by_{'_'.join(on_columns)}"),
            key_name,
            on_columns,
            lookup,
            session,
            max_concurrency,
            timeout,
            retries,
            backoff,
        )
        self._register(entry, key)
        entry.indexes.append(access)

    def add_web_table(
        self,
        name: str,
        url: str,
        *,
        table: str | None = None,
        scan: bool = True,
        lookup_on: Sequence[Sequence[str] | str] = (),
        format: str = "arrow",
        max_concurrency: int = 16,
        timeout: float = 5.0,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        page_size: int = 10_000,
        access_name: str | None = None,
        max_response_bytes: int | None = None,
    ) -> None:
        """Add the AMs of one REST mirror of a table (protocol: ``docs/web_sources.md``).

        Fetches the schema and key from ``{url}/tables/{table}`` now (DataSourceError if the
        server cannot be reached). ``scan=True`` adds a paged scan AM; each entry of
        ``lookup_on`` (a column or a list of columns) adds an index AM that looks rows up
        by those columns. Call it once per mirror: the mirrors' AMs compete, and when one
        times out, answers 5xx or drops connections past its retries, the eddy fails over
        to the others. access_name defaults to ``<table>.<host>-<port>``.
        ``max_response_bytes`` caps one answer's body (default
        :data:`eddies.sources.web.MAX_RESPONSE_BYTES`, 64 MiB): a larger answer fails the
        request with a DataSourceError naming the URL and the cap.
        """
        from eddies.sources.web import MAX_RESPONSE_BYTES, WebTable  # httpx: web tables only

        key_name = _check_name(name, "table", DataSourceError)
        remote = WebTable(
            url,
            table or key_name,
            format=format,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            page_size=page_size,
            max_response_bytes=MAX_RESPONSE_BYTES
            if max_response_bytes is None
            else max_response_bytes,
        )
        schema, key = remote.describe()
        base = access_name or f"{key_name}.{_host_of(url)}"
        if not scan and not lookup_on:
            raise DataSourceError(f"table {name!r}: give scan=True or lookup_on=[...]")
        if scan:
            self.add_scan(key_name, schema, remote.scan, key=key, access_name=base)
        for cols in lookup_on:
            on = [cols] if isinstance(cols, str) else list(cols)
            suffix = "" if len(lookup_on) == 1 and not scan else f"_by_{'_'.join(on)}"
            self.add_index(
                key_name,
                schema,
                on=on,
                session=lambda remote=remote: _web_lookup(remote),
                max_concurrency=max_concurrency,
                timeout=timeout,
                retries=retries,
                backoff=backoff,
                key=key,
                access_name=base + suffix,
            )

    def drop_table(self, name: str) -> None:
        """Remove table ``name`` and all its AMs (KeyError-free: unknown names are ignored)."""
        self._tables.pop(name.lower(), None)
        self._version += 1

    def add_function(
        self,
        name: str,
        fn: Callable[..., Any],
        *,
        vectorized: bool = True,
        return_type: pa.DataType | None = None,
        max_concurrency: int | None = None,
        timeout: float | None = None,
        retries: int = 0,
        backoff: float = DEFAULT_UDF_BACKOFF,
        cache: bool = True,
    ) -> None:
        """Register a Python function callable from SQL, typically an expensive predicate.

        vectorized=True: ``fn(*pyarrow.Array) -> array-like`` of the batch's length;
        vectorized=False: ``fn(*values) -> value``, called per row. ``async def`` functions
        are awaited on the trio thread; plain functions run in worker threads, so a slow
        one never stalls the eddy. return_type defaults to boolean (a predicate).

        Per query (stems-2003 §2.1.3's latency hiding, applied to predicates; see
        :mod:`eddies.router.udf_calls`): max_concurrency: calls in flight at once for a
        per-row ``async def`` function (default 32), worker threads for a per-row plain one
        (default 4), batch calls at once for a vectorized one (default 1: a batch call is
        usually CPU work, and one at a time keeps the SM's back-pressure; raise it for a
        latency-bound batch endpoint);
        cache: a per-row function is called once per distinct argument tuple (False: once
        per row, for volatile functions); timeout: seconds per attempt (None: no limit);
        retries: further attempts of a failed call, ``backoff * 2**k`` seconds apart,
        after which the query fails with a UdfError naming the function and arguments.
        Raises UdfError for a bad name or function, EddiesError naming a bad option.
        """
        key = _check_name(name, "function", UdfError)
        if not callable(fn):
            raise UdfError(f"function {name!r}: {fn!r} is not callable")
        where = f"add_function({name!r})"
        if not isinstance(vectorized, bool):
            raise UdfError(f"{where}: vectorized must be True or False, got {vectorized!r}")
        if return_type is not None and not isinstance(return_type, pa.DataType):
            raise UdfError(f"{where}: return_type must be a pyarrow DataType, got {return_type!r}")
        if max_concurrency is not None and (
            isinstance(max_concurrency, bool)
            or not isinstance(max_concurrency, int)
            or max_concurrency < 1
        ):
            raise UdfError(
                f"{where}: max_concurrency must be a positive integer, got {max_concurrency!r}"
            )
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
        ):
            raise UdfError(f"{where}: timeout must be > 0 seconds or None, got {timeout!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise UdfError(f"{where}: retries must be an integer >= 0, got {retries!r}")
        if isinstance(backoff, bool) or not isinstance(backoff, int | float) or not backoff >= 0:
            raise UdfError(f"{where}: backoff must be >= 0 seconds, got {backoff!r}")
        if not isinstance(cache, bool):
            raise UdfError(f"{where}: cache must be True or False, got {cache!r}")
        self._functions[key] = FunctionSpec(
            key,
            fn,
            vectorized,
            return_type or pa.bool_(),
            max_concurrency=max_concurrency,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            cache=cache,
        )
        self._version += 1

    def table(self, name: str) -> CatalogTable:
        return self._tables[name.lower()]

    def has_table(self, name: str) -> bool:
        return name.lower() in self._tables

    @property
    def tables(self) -> list[str]:
        return list(self._tables)

    @property
    def functions(self) -> dict[str, FunctionSpec]:
        return dict(self._functions)

    @property
    def version(self) -> int:
        """A counter that every added, replaced or dropped table or function advances."""
        return self._version

    # -- helpers ---------------------------------------------------------------------

    def _add_scan(
        self, name: str, source: TableSource, key: Sequence[str] | None, access_name: str | None
    ) -> None:
        entry = self._entry(name, source.schema, key)
        source.access_name = self._access_name(name, access_name, name)
        self._register(entry, key)
        entry.scans.append(source)

    def _register(self, entry: CatalogTable, key: Sequence[str] | None) -> None:
        """Keep ``entry`` (checked by :meth:`_entry`) and its key, once all checks passed."""
        self._tables[entry.name] = entry
        self._version += 1
        if key is not None:
            entry.key = _columns(entry.name, entry.schema, key, "key")

    def _entry(self, name: str, schema: pa.Schema, key: Sequence[str] | None) -> CatalogTable:
        """The table ``name`` (a new, not yet registered one if unknown), after checking
        that an AM with ``schema`` and ``key`` may join it; DataSourceError if not."""
        _check_unique_columns(name, schema)
        key_columns = _columns(name, schema, key, "key") if key is not None else None
        entry = self._tables.get(name)
        if entry is None:
            return CatalogTable(name, schema, key_columns)
        if entry.stream is not None:
            raise DataSourceError(
                f"table {name!r} is a stream table: it has exactly one AM, its stream"
            )
        if not _same_schema(entry.schema, schema):
            raise DataSourceError(
                f"table {name!r}: the new access method's schema differs from the table's: "
                f"{_schema_diff(entry.schema, schema)} (AMs of one table must agree)"
            )
        if key_columns is not None and entry.key is not None and entry.key != key_columns:
            raise DataSourceError(
                f"table {name!r}: key {list(key_columns)} differs from the table's key "
                f"{list(entry.key)}"
            )
        return entry

    def _access_name(self, table: str, wanted: str | None, default: str) -> str:
        taken = {s.access_name for t in self._tables.values() for s in t.scans}
        taken |= {i.name for t in self._tables.values() for i in t.indexes}
        if wanted is not None:
            if not isinstance(wanted, str) or not _ACCESS_NAME.match(wanted):
                raise DataSourceError(
                    f"table {table!r}: access_name {wanted!r} must be letters, digits, "
                    "'_', '.', '-' (no spaces)"
                )
            if wanted in taken:
                raise DataSourceError(f"table {table!r}: access_name {wanted!r} is already used")
            return wanted
        name, k = default, 2
        while name in taken:
            name, k = f"{default}_{k}", k + 1
        return name


@asynccontextmanager
async def _web_lookup(remote):
    """Open ``remote``'s HTTP session for one query and yield its lookup function."""
    async with remote.session() as web:
        yield web.lookup


def _host_of(url: str) -> str:
    host = re.sub(r"^[a-z]+://", "", url).split("/", 1)[0]
    return re.sub(r"[^A-Za-z0-9_.\-]", "-", host)


def _columns(
    table: str, schema: pa.Schema, columns: Sequence[str] | str, what: str
) -> tuple[str, ...]:
    if isinstance(columns, str):
        columns = [columns]
    names = {f.name.lower(): f.name for f in schema}
    out: list[str] = []
    for col in columns:
        actual = names.get(str(col).lower())
        if actual is None:
            raise DataSourceError(
                f"table {table!r}: {what}= names column {col!r}, which is not in its schema "
                f"{schema.names}"
            )
        out.append(actual)
    return tuple(out)


def _check_unique_columns(table: str, schema: pa.Schema) -> None:
    """DataSourceError if two columns of ``schema`` have the same name. SQL names are
    case-insensitive (as in DuckDB), so ``A`` and ``a`` are the same name: a query could not
    tell them apart."""
    seen: dict[str, str] = {}
    for column in schema.names:
        first = seen.get(column.lower())
        seen.setdefault(column.lower(), column)
        if first is not None:
            same = f"{first!r} and {column!r}" if first != column else f"{column!r} twice"
            raise DataSourceError(
                f"table {table!r}: duplicate column name: it has {same} (column names are "
                "case-insensitive); rename one before adding the table"
            )


def _same_schema(a: pa.Schema, b: pa.Schema) -> bool:
    return a.names == b.names and all(x.type == y.type for x, y in zip(a, b, strict=True))


def _schema_diff(a: pa.Schema, b: pa.Schema) -> str:
    if a.names != b.names:
        return f"columns {a.names} vs {b.names}"
    diffs = [f"{x.name}: {x.type} vs {y.type}" for x, y in zip(a, b, strict=True) if x != y]
    return "; ".join(diffs)


def _check_name(name: str, what: str, error: type[EddiesError]) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise error(f"{what} name {name!r} is not a plain SQL identifier")
    return name.lower()
