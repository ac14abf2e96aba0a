"""Table sources: what ``Catalog.add_table`` accepts, normalized for scan AMs.

Accepted data: a pyarrow Table, a pandas DataFrame, a Polars DataFrame (zero-copy to
Arrow), a DuckDB relation (run again by each scan), any other object with
``__arrow_c_stream__`` (a pyarrow RecordBatchReader, another library's Arrow stream:
one-shot streams, scanned once), a ``pyarrow.dataset.Dataset``, or a path: a Parquet or CSV file, a
directory of them or a glob, hive partitions included (see
:mod:`eddies.sources.dataset_source`; read lazily, batch by batch, at query time in a worker
thread, with the query's projection and pushed-down filter). Anything else, or a file that
cannot be read, raises DataSourceError naming the table and the path. ``rate``
(rows/second) and ``delay`` (seconds before the first batch)
shape delivery for experiments on slow or bursty sources.
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from eddies.errors import DataSourceError
from eddies.sources.dataset_source import CSV_CONVERT, open_path, scan_batches
from eddies.sources.table_store import TableStore

#: Longest wait (seconds) a 429's ``Retry-After`` may impose on one retry (a scan page or a
#: lookup): a query would rather fail than stall for minutes behind a throttled server.
RETRY_AFTER_CAP = 5.0

__all__ = ["CSV_CONVERT", "TableSource", "conform", "make_source", "plain_schema"]


class Throttled(DataSourceError):
    """A source asks to be asked again later (HTTP 429): back-pressure, not a failure.

    Raised by a lookup function; ``retry_after`` is the wait in seconds the source asked
    for (0: none given). The index AM waits and retries without counting a failure.
    """

    def __init__(self, message: str, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class TableSource:
    """One catalog table: its schema and how to read its rows.

    table: all rows, for in-memory data, as registered (zero-copy: view and dictionary
    columns are cast to :attr:`schema`'s plain types only when a query first reads them,
    :meth:`plain_column`); otherwise ``open_batches`` yields RecordBatches
    (from ``dataset``, files read lazily; ``reader``, a one-shot stream; or ``stream_of``,
    an object whose ``__arrow_c_stream__`` is called again by each scan), or, for an
    asynchronous source (a paged web scan), ``pages()`` is an async iterator of Tables or
    RecordBatches. path: what a file-backed table was registered from (for plans and
    errors). access_name: the scan AM's name (set by the catalog).
    """

    name: str
    schema: pa.Schema
    table: pa.Table | None = None
    path: str | None = None
    dataset: ds.Dataset | None = None
    reader: pa.RecordBatchReader | None = None
    stream_of: Any = None
    batch_size: int | None = None
    rate: float | None = None
    delay: float = 0.0
    pages: Callable[[], AsyncIterator[Any]] | None = None
    access_name: str = ""
    build: bool = True  # False: relaxed BuildFirst (see Catalog.add_table)
    stream: Any = None  # the StreamTable feeding ``pages``, for a stream table
    # Columns of ``table`` cast to the plain schema, by name (see plain_column).
    _plain: dict[str, pa.ChunkedArray] = field(default_factory=dict, repr=False, compare=False)

    def plain(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """A batch in :attr:`schema` (dictionary-encoded columns decoded)."""
        return batch if batch.schema == self.schema else batch.cast(self.schema)

    def plain_column(self, name: str) -> pa.ChunkedArray:
        """Column ``name`` of :attr:`table` in :attr:`schema`'s type, chunked as the table.

        A string_view or dictionary column is cast the first time a query reads it and kept
        for the next ones: registering a table copies nothing (issue 11: the SF1 TPC-H
        tables' 14 string_view columns had cost 336 MB at add_table), and a query copies
        only the columns it reads, once."""
        column = self._plain.get(name)
        if column is None:
            assert self.table is not None
            column = self.table.column(name)
            wanted = self.schema.field(name).type
            if column.type != wanted:
                column = column.cast(wanted)
            self._plain[name] = column
        return column

    def new_store(self) -> TableStore:
        if self.table is not None:
            return TableStore.preloaded(
                self.name, self.table, schema=self.schema, column=self.plain_column
            )
        return TableStore(self.name, self.schema)

    @property
    def prunable(self) -> bool:
        """Whether a scan can read only some columns and push a filter (a dataset)."""
        return self.dataset is not None

    def open_batches(
        self,
        batch_size: int,
        columns: list[str] | None = None,
        filter: Any = None,
        counts: Any = None,
        dynamic: Any = None,
    ) -> Iterator[pa.RecordBatch]:
        """Batches of at most ``batch_size`` rows in :attr:`schema` (blocking I/O: call from
        a thread). For a dataset, ``columns`` are the only ones read (the others come as
        NULLs, never looked at by the query) and ``filter`` and the ``dynamic`` filter (a
        :class:`~eddies.sources.dataset_source.DynamicFilter`) are pushed into the scan (see
        :func:`eddies.sources.dataset_source.scan_batches`; ``counts`` gets what was
        skipped); other sources ignore all three. Raises DataSourceError for a one-shot stream
        scanned twice."""
        if self.table is not None:
            batches: Iterator[pa.RecordBatch] = iter(self.table.to_batches(batch_size))
        elif self.dataset is not None:
            batches = self._dataset_batches(batch_size, columns, filter, counts, dynamic)
        elif self.stream_of is not None:
            batches = iter(pa.RecordBatchReader.from_stream(self.stream_of))
        elif self.reader is not None:
            reader, self.reader = self.reader, None
            batches = iter(reader)
        else:
            raise DataSourceError(
                f"table {self.name!r}: its stream (a RecordBatchReader or another one-shot "
                "Arrow stream) was used up by an earlier scan; a one-shot stream can be "
                "scanned once (pass pa.table(stream) to query it again)"
            )
        for batch in batches:
            batch = self.plain(batch)
            for start in range(0, batch.num_rows, batch_size):
                yield batch.slice(start, batch_size)

    def _dataset_batches(
        self,
        batch_size: int,
        columns: list[str] | None,
        filter: Any,
        counts: Any,
        dynamic: Any = None,
    ) -> Iterator[pa.RecordBatch]:
        assert self.dataset is not None
        wanted = None if columns is None else [c for c in self.schema.names if c in columns]
        try:
            for batch in scan_batches(self.dataset, batch_size, wanted, filter, counts, dynamic):
                if wanted is not None and len(wanted) < len(self.schema):
                    batch = _fill_unread(batch, self.schema)
                yield batch
        except (pa.ArrowInvalid, OSError) as exc:
            where = self.path or "its dataset"
            raise DataSourceError(f"table {self.name!r}: reading {where!r} failed: {exc}") from exc


def _fill_unread(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` (some columns of ``schema``, in the dataset's own types) with every column
    of ``schema``: the unread ones all NULL (the query never looks at them)."""
    n = batch.num_rows
    present = set(batch.schema.names)
    fields = [batch.schema.field(f.name) if f.name in present else f for f in schema]
    arrays = [batch.column(f.name) if f.name in present else pa.nulls(n, f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with dictionary-encoded columns (pandas categoricals, Parquet
    dictionaries) as their value type and view types (Polars' strings) as plain ones:
    Arrow kernels such as LIKE and the join-key encodings work on plain arrays, and a
    dictionary column must join a plain one."""
    return pa.schema([_plain_field(f) for f in schema], metadata=schema.metadata)


def _plain_field(f: pa.Field) -> pa.Field:
    if pa.types.is_dictionary(f.type):
        return _plain_field(f.with_type(f.type.value_type))
    if pa.types.is_string_view(f.type):
        return f.with_type(pa.string())
    if pa.types.is_binary_view(f.type):
        return f.with_type(pa.binary())
    return f


def conform(data: Any, schema: pa.Schema, where: str, *, rows_ok: bool = False) -> pa.Table:
    """``data`` as a pyarrow Table in ``schema`` (its columns selected in order and cast).

    Accepts a Table, a RecordBatch, a pandas DataFrame and, with ``rows_ok``, a list of
    dicts, each with every column of ``schema`` (see :func:`check_row_keys`). Raises
    DataSourceError that starts with ``where`` (e.g. "lookup of 'planes_am'") and names
    what is wrong: the type, missing columns, or values that do not cast.
    """
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    elif rows_ok and isinstance(data, list):
        check_row_keys(data, schema.names, where)
        try:
            data = pa.Table.from_pylist(data, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise DataSourceError(f"{where}: rows that do not fit: {exc}") from exc
    elif _is_pandas(data):
        data = pa.Table.from_pandas(data, preserve_index=False)
    if not isinstance(data, pa.Table):
        accepted = (
            "return a pyarrow Table or RecordBatch, a list of dicts or a pandas DataFrame"
            if rows_ok
            else "push a pyarrow Table or RecordBatch or a pandas DataFrame"
        )
        raise DataSourceError(f"{where}: got {type(data).__name__}; {accepted}")
    if data.schema == schema:
        return data
    present = set(data.column_names)
    missing = [n for n in schema.names if n not in present]
    if missing:
        raise DataSourceError(f"{where}: the data lacks columns {missing}")
    try:
        return data.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DataSourceError(f"{where}: columns of the wrong type: {exc}") from exc


def check_row_keys(rows: list, names: list[str], where: str) -> None:
    """Raise DataSourceError (starting with ``where``) unless every row is a dict holding
    every column of ``names``. A row dict is held to what a Table is: a missing (or
    misspelt) column is an error naming the missing and the unexpected keys, never a
    column of NULLs; NULL is an explicit ``None``. Extra keys alone are ignored, as a
    Table's extra columns are."""
    wanted = set(names)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataSourceError(f"{where}: row {i} is a {type(row).__name__}, not a dict")
        if not wanted <= row.keys():
            missing = [n for n in names if n not in row]
            unexpected = [k for k in row if k not in wanted]
            also = f" and has unexpected keys {unexpected}" if unexpected else ""
            raise DataSourceError(
                f"{where}: row {i} lacks columns {missing}{also}; the columns are {names}"
            )


def _without_empty_chunks(table: pa.Table) -> pa.Table:
    """``table`` without its empty chunks (zero-copy), so that a query's row store can
    take its chunks as they are (eddies.sources.table_store)."""
    if table.num_columns and any(len(c) == 0 for c in table.column(0).chunks):
        return pa.Table.from_batches(
            [b for b in table.to_batches() if b.num_rows], schema=table.schema
        )
    return table


def _number(value: Any) -> bool:
    """A finite real number that is not a bool."""
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def make_source(
    name: str,
    data: Any,
    *,
    batch_size: int | None = None,
    rate: float | None = None,
    delay: float = 0.0,
) -> TableSource:
    """Normalize ``data`` into a :class:`TableSource`; DataSourceError if it cannot be used."""
    if rate is not None and not (_number(rate) and rate > 0):
        raise DataSourceError(f"table {name!r}: rate must be > 0 rows/second, got {rate!r}")
    if not (_number(delay) and delay >= 0):
        raise DataSourceError(f"table {name!r}: delay must be >= 0 seconds, got {delay!r}")
    if batch_size is not None and not (
        isinstance(batch_size, Integral) and not isinstance(batch_size, bool) and batch_size >= 1
    ):
        raise DataSourceError(
            f"table {name!r}: batch_size must be a positive integer, got {batch_size!r}"
        )
    options = {"batch_size": batch_size, "rate": rate, "delay": delay}
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        # Zero-copy: chunks kept, view and dictionary columns cast when first read.
        data = _without_empty_chunks(data)
        return TableSource(name, plain_schema(data.schema), table=data, **options)
    if isinstance(data, pa.RecordBatchReader):
        return TableSource(name, plain_schema(data.schema), reader=data, **options)
    if _is_pandas(data):
        try:
            table = pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:  # ValueError: a
            # duplicate column name
            raise DataSourceError(f"table {name!r}: cannot convert the DataFrame: {exc}") from exc
        table = _without_empty_chunks(table)
        return TableSource(name, plain_schema(table.schema), table=table, **options)
    if isinstance(data, str | os.PathLike):
        dataset = open_path(data, f"table {name!r}")
        return TableSource(
            name, plain_schema(dataset.schema), path=os.fspath(data), dataset=dataset, **options
        )
    if isinstance(data, ds.Dataset):
        return TableSource(name, plain_schema(data.schema), dataset=data, **options)
    if hasattr(data, "__arrow_c_stream__"):
        return _stream_source(name, data, options)
    raise DataSourceError(
        f"table {name!r}: unsupported data of type {type(data).__name__}; pass a pyarrow "
        "Table, RecordBatchReader or Dataset, a pandas or Polars DataFrame, a DuckDB "
        "relation, an object with __arrow_c_stream__, or a path to Parquet/CSV files (a "
        "file, a directory or a glob)"
    )


def _stream_source(name: str, data: Any, options: dict[str, Any]) -> TableSource:
    """A source over an Arrow C stream (the PyCapsule protocol): a Polars DataFrame is
    taken whole (it is in memory; zero-copy), a DuckDB relation is run again by each scan
    (lazy, rescannable), anything else is one stream, scanned once."""
    where = f"table {name!r}"
    module = type(data).__module__.split(".")[0].lstrip("_")
    try:
        if module == "polars":
            return make_source(name, pa.table(data), **options)
        reader = pa.RecordBatchReader.from_stream(data)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise DataSourceError(f"{where}: cannot read its Arrow stream: {exc}") from exc
    if module == "duckdb" and type(data).__name__ == "DuckDBPyRelation":
        schema = reader.schema
        reader.close()  # each scan runs the relation again
        return TableSource(name, plain_schema(schema), stream_of=data, **options)
    return TableSource(name, plain_schema(reader.schema), reader=reader, **options)


def _is_pandas(data: Any) -> bool:
    return type(data).__module__.startswith("pandas") and hasattr(data, "columns")
