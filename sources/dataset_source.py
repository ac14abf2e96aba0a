"""File inputs as ``pyarrow.dataset`` Datasets: one file, a directory, a glob, hive partitions.

A file-backed table is opened here once, at registration, reading only metadata (Parquet
footers, a CSV's first block); its rows are read at query time by :func:`scan_batches`,
fragment by fragment and batch by batch, with the query's column projection and, where a
selection allows, a filter pushed into the scan AM (stems-2003 §2.1.3: an AM may apply a
selection it can evaluate on its own). Partition pruning skips whole files, Parquet
row-group statistics skip row groups; both are counted.

Hive partitions (``year=2024/month=1/...``) become columns typed as DuckDB's
``hive_partitioning`` types them: DATE, then TIMESTAMP, then BIGINT when every value of
the key is one (written the way DuckDB would print it), else VARCHAR;
``__HIVE_DEFAULT_PARTITION__`` is NULL; values are %-decoded; partition columns follow the
file columns, sorted by name.
"""

from __future__ import annotations

import datetime as dt
import glob as globmod
import os
import pathlib
import re
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from eddies.errors import DataSourceError

#: Empty CSV fields are NULL in every column, as in DuckDB's read_csv.
CSV_CONVERT = pacsv.ConvertOptions(strings_can_be_null=True)

#: Suffixes read as Parquet and as CSV.
PARQUET_SUFFIXES = (".parquet", ".pq")
CSV_SUFFIXES = (".csv", ".tsv", ".txt")

#: The partition value DuckDB (and Hive) write for NULL.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"

_GLOB_CHARS = re.compile(r"[*?\[]")
_PART = re.compile(r"^([^=/]+)=([^/]*)$")


@dataclass
class ScanCounts:
    """What one scan read and skipped: files (fragments) and Parquet row groups."""

    fragments: int = 0
    fragments_skipped: int = 0
    row_groups: int = 0
    row_groups_skipped: int = 0
    dynamic_row_groups_skipped: int = 0
    dynamic_rows_filtered: int = 0


class DynamicFilter:
    """A filter that arrives while a scan runs (sideways information passing, issue 11).

    DataFusion's dynamic filters and Robust Predicate Transfer (Yang et al., SIGMOD 2025)
    pass a join's build-side keys to the probe side's scan. Here a complete SteM's join
    keys arrive as, per key column, a ``pyarrow.compute.Expression`` (a range, and an
    ``isin`` when the key set is small) and the sorted distinct int64 key codes (integers
    as themselves, DATEs as days; :mod:`eddies.modules.scan_filter`). :func:`scan_batches`
    skips every row group not read yet whose statistics hold none of the keys of some
    column (its [min, max] contains no key, or it is all NULL: NULL never joins), and
    filters the rows of the batches it still reads by the expressions. Set on the trio
    thread, read by the scan's worker thread between row groups and batches, so a lock
    guards it. ``sources``: what each part came from (for explain).

    The caller keeps it exact: a row it removes must be one that can join no qualifying
    row of the SteM's table in an inner equi-join.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.expression: Any = None
        self.keys: list[tuple[str, Any]] = []  # (column, sorted distinct int64 codes)
        self.empty = False  # a SteM with no qualifying key: no row of this scan can join
        self.sources: list[str] = []

    def add(self, parts: list[tuple[str, Any, Any]] | None, source: str) -> None:
        """AND in ``parts``: (column, expression, sorted int64 codes) per key column; None
        when the SteM holds no key, so nothing can join."""
        with self._lock:
            self.sources.append(source)
            if parts is None:
                self.empty = True
                return
            for column, expression, codes in parts:
                self.keys = [*self.keys, (column, codes)]
                if self.expression is None:
                    self.expression = expression
                else:
                    self.expression = self.expression & expression

    def current(self) -> tuple[bool, Any, list[tuple[str, Any]]]:
        """(empty, expression, keys) as of now."""
        with self._lock:
            return self.empty, self.expression, self.keys


def is_glob(text: str) -> bool:
    """Whether ``text`` has glob characters (``*``, ``?``, ``[``)."""
    return bool(_GLOB_CHARS.search(text))


def file_format(path: str, where: str) -> str:
    """``"parquet"`` or ``"csv"`` by the file name's suffix; DataSourceError otherwise."""
    suffix = pathlib.PurePath(path).suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if suffix in CSV_SUFFIXES:
        return "csv"
    raise DataSourceError(
        f"{where}: cannot tell the format of {path!r}; use .parquet or .csv files"
    )


def list_files(spec: str, where: str) -> tuple[list[str], str]:
    """The data files ``spec`` names (a file, a directory read recursively, or a glob with
    ``**``), sorted, and the base directory hive partitions are read below.

    Hidden files and files starting with ``_`` (``_SUCCESS``, ``_metadata``) are skipped
    in a directory, as pyarrow and Spark do. Raises DataSourceError naming ``spec`` when
    nothing matches or the path does not exist.
    """
    path = pathlib.Path(spec).expanduser()
    if is_glob(spec):
        files = sorted(f for f in globmod.glob(str(path), recursive=True) if os.path.isfile(f))
        if not files:
            raise DataSourceError(f"{where}: the glob {spec!r} matches no file")
        prefix = str(path)[: _GLOB_CHARS.search(str(path)).start()]
        base = prefix if prefix.endswith(os.sep) else os.path.dirname(prefix)
        return files, base or "."
    if path.is_dir():
        files = sorted(
            str(f)
            for f in path.rglob("*")
            if f.is_file() and not any(p.startswith((".", "_")) for p in f.relative_to(path).parts)
        )
        if not files:
            raise DataSourceError(f"{where}: the directory {spec!r} holds no data file")
        return files, str(path)
    if path.is_file():
        return [str(path)], str(path.parent)
    raise DataSourceError(f"{where}: no such file or directory {spec!r}")


def _partition_values(files: list[str], base: str, where: str) -> dict[str, list[str | None]]:
    """Per hive key, its value in each file (None: NULL); keys must agree across files."""
    keys: list[str] | None = None
    values: dict[str, list[str | None]] = {}
    for f in files:
        rel = os.path.relpath(os.path.dirname(f) or ".", base)
        parts = [_PART.match(p) for p in pathlib.PurePath(rel).parts if p not in (".", "")]
        found = {m.group(1): m.group(2) for m in parts if m is not None}
        if keys is None:
            keys = list(found)
        elif sorted(found) != sorted(keys):
            raise DataSourceError(
                f"{where}: mixed hive partitioning: {f!r} has partition keys "
                f"{sorted(found)}, {files[0]!r} has {sorted(keys)}"
            )
        for key, raw in found.items():
            text = urllib.parse.unquote(raw)
            values.setdefault(key, []).append(None if text == HIVE_NULL else text)
    return values


def _is_date(text: str) -> bool:
    try:
        return dt.date.fromisoformat(text).isoformat() == text and len(text) == 10
    except ValueError:
        return False


def _is_timestamp(text: str) -> bool:
    try:
        stamp = dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return False
    return stamp.strftime("%Y-%m-%d %H:%M:%S") == text


def _is_bigint(text: str) -> bool:
    return bool(re.fullmatch(r"-?(0|[1-9][0-9]*)", text)) and -(2**63) <= int(text) < 2**63


def hive_type(values: list[str | None]) -> pa.DataType:
    """The type DuckDB's ``hive_partitioning`` gives a key with these values (None: NULL):
    DATE, TIMESTAMP, BIGINT if every non-NULL value is one, else VARCHAR."""
    present = [v for v in values if v is not None]
    if not present:
        return pa.string()
    for test, type_ in (
        (_is_date, pa.date32()),
        (_is_timestamp, pa.timestamp("us")),
        (_is_bigint, pa.int64()),
    ):
        if all(test(v) for v in present):
            return type_
    return pa.string()


def _check_schemas(files: list[str], fmt: str, where: str) -> pa.Schema:
    """The files' common schema (every Parquet footer read; a CSV's header and first
    block); DataSourceError naming the first file that differs or cannot be read."""
    first: pa.Schema | None = None
    for f in files:
        try:
            if fmt == "parquet":
                schema = pq.read_schema(f)
            else:
                with pacsv.open_csv(f, convert_options=CSV_CONVERT) as reader:
                    schema = reader.schema
            schema.names  # noqa: B018 - decodes the names: pyarrow does not check them
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataSourceError(f"{where}: cannot read {f!r}: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise DataSourceError(
                f"{where}: the column names of {f!r} are not UTF-8 text ({exc})"
            ) from exc
        schema = schema.remove_metadata()
        if first is None:
            first = schema
        elif schema.names != first.names or schema.types != first.types:  # nullability aside
            raise DataSourceError(
                f"{where}: incompatible schemas: {f!r} has ({_fields(schema)}) but "
                f"{files[0]!r} has ({_fields(first)})"
            )
    assert first is not None
    return first


def _fields(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)


def open_path(spec: str | os.PathLike, where: str) -> ds.Dataset:
    """A Dataset over the files ``spec`` names (see :func:`list_files`), hive partitions
    typed as DuckDB types them. Reads metadata only. Raises DataSourceError naming the
    path: nothing matches, a file of unknown format, formats or schemas that differ,
    mixed partitioning, an unreadable file."""
    text = os.fspath(spec)
    files, base = list_files(text, where)
    formats = {file_format(f, where) for f in files}
    if len(formats) > 1:
        raise DataSourceError(f"{where}: {text!r} mixes Parquet and CSV files")
    (fmt,) = formats
    file_schema = _check_schemas(files, fmt, where)
    partitions = _partition_values(files, base, where)
    clash = [k for k in partitions if k in file_schema.names]
    if clash:
        raise DataSourceError(
            f"{where}: hive partition key {clash[0]!r} is also a column of the files of {text!r}"
        )
    fields = [pa.field(k, hive_type(partitions[k])) for k in sorted(partitions)]
    partitioning = ds.partitioning(pa.schema(fields), flavor="hive") if fields else None
    if fmt == "parquet":
        file_format_: ds.FileFormat = ds.ParquetFileFormat()
    else:
        file_format_ = ds.CsvFileFormat(convert_options=CSV_CONVERT)
    try:
        return ds.dataset(
            files,
            schema=pa.schema(list(file_schema) + fields),
            format=file_format_,
            partitioning=partitioning,
            partition_base_dir=base,
        )
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataSourceError(f"{where}: cannot read {text!r}: {exc}") from exc


def scan_batches(
    dataset: ds.Dataset,
    batch_size: int,
    columns: list[str] | None = None,
    filter: Any = None,
    counts: Any = None,
    dynamic: DynamicFilter | None = None,
) -> Iterator[pa.RecordBatch]:
    """RecordBatches of ``dataset`` (blocking I/O: call from a worker thread).

    columns: the columns to read (None: all); filter: a ``pyarrow.compute.Expression``
    rows must satisfy (files whose partition values refute it, and Parquet row groups
    whose statistics do, are skipped and counted in ``counts``, an object with the
    fields of :class:`ScanCounts`). The caller keeps the filter exact: a row it removes
    must be one the query's selection removes (see eddies.engine.plan.pushdown).
    dynamic: a :class:`DynamicFilter` that may arrive mid-scan; the Parquet files are then
    read row group by row group, so it can skip every row group not read yet
    (``dynamic_row_groups_skipped``) and filter the rows of the batches that follow
    (``dynamic_rows_filtered``); ``columns`` must then include its key columns.
    """
    fragments = list(dataset.get_fragments()) if filter is not None else None
    kept = dataset.get_fragments(filter=filter) if filter is not None else dataset.get_fragments()
    kept = list(kept)
    if counts is not None:
        counts.fragments += len(kept)
        if fragments is not None:
            counts.fragments_skipped += len(fragments) - len(kept)
    for fragment in kept:
        if filter is not None and isinstance(fragment, ds.ParquetFileFragment):
            groups = fragment.num_row_groups
            fragment = fragment.subset(filter=filter, schema=dataset.schema)
            if counts is not None:
                counts.row_groups += groups
                counts.row_groups_skipped += groups - fragment.num_row_groups
            if not fragment.num_row_groups:
                continue
        elif isinstance(fragment, ds.ParquetFileFragment) and counts is not None:
            counts.row_groups += fragment.num_row_groups
        if dynamic is None:
            yield from _fragment_batches(fragment, dataset.schema, columns, filter, batch_size)
            continue
        parts = (
            fragment.split_by_row_group()
            if isinstance(fragment, ds.ParquetFileFragment)
            else [fragment]
        )
        for part in parts:
            if isinstance(part, ds.ParquetFileFragment) and _refuted(part, dynamic):
                if counts is not None:
                    counts.dynamic_row_groups_skipped += 1
                continue
            for batch in _fragment_batches(part, dataset.schema, columns, filter, batch_size):
                yield _dynamic_rows(batch, dynamic, counts)


def _refuted(part: ds.ParquetFileFragment, dynamic: DynamicFilter) -> bool:
    """Whether the dynamic filter, as of now, refutes every row of this one-row-group
    fragment by its statistics: for some key column, the row group is all NULL or its
    [min, max] holds no key. (pyarrow's own statistics pruning keeps a row group with
    any NULL in the column, so it is not used here.)"""
    empty, _, keys = dynamic.current()
    if empty:
        return True
    if not keys:
        return False
    meta = part.metadata
    group = meta.row_group(part.row_groups[0].id)
    if group.num_rows == 0:  # no row to keep (and often no statistics to say so)
        return True
    paths = {meta.schema.column(j).path: j for j in range(meta.num_columns)}
    for column, codes in keys:
        j = paths.get(column)
        if j is None:  # a partition column: its files were pruned, if at all, already
            continue
        stats = group.column(j).statistics
        if stats is None:
            continue
        if stats.has_null_count and stats.null_count == group.num_rows:
            return True
        if not stats.has_min_max:
            continue
        lo, hi = _code(stats.min), _code(stats.max)
        if lo is None or hi is None:
            continue
        at = int(np.searchsorted(codes, lo))
        if at == len(codes) or codes[at] > hi:
            return True
    return False


_EPOCH = dt.date(1970, 1, 1)


def _code(value: Any) -> int | None:
    """A statistics bound as a key code (ints as themselves, dates as days); None for
    anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return (value - _EPOCH).days
    return None


def _fragment_batches(
    fragment: ds.Fragment, schema: pa.Schema, columns: Any, filter: Any, batch_size: int
) -> Iterator[pa.RecordBatch]:
    """The fragment's batches, ``filter`` applied. pyarrow cannot filter view columns
    (``array_filter`` has no string_view kernel, as Polars and tpchgen write them): when
    the scan reads one, they are cast to plain types first and filtered here."""
    read = schema.names if columns is None else columns
    views = filter is not None and any(_is_view(schema.field(c).type) for c in read)
    scanner = ds.Scanner.from_fragment(
        fragment,
        schema=schema,
        columns=columns,
        filter=None if views else filter,
        batch_size=batch_size,
        use_threads=False,  # one scan AM is one reader; the eddy runs beside it
    )
    if not views:
        return scanner.to_batches()
    return (_plain_views(b).filter(filter) for b in scanner.to_batches())


def _is_view(t: pa.DataType) -> bool:
    return pa.types.is_string_view(t) or pa.types.is_binary_view(t)


def _plain_views(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with string_view / binary_view columns cast to string / binary."""
    plain = {pa.types.is_string_view: pa.string(), pa.types.is_binary_view: pa.binary()}
    arrays, fields = [], []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        target = next((t for test, t in plain.items() if test(column.type)), None)
        arrays.append(column if target is None else column.cast(target))
        fields.append(field if target is None else field.with_type(target))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _dynamic_rows(batch: pa.RecordBatch, dynamic: DynamicFilter, counts: Any) -> pa.RecordBatch:
    """The rows of ``batch`` the dynamic filter keeps (it may have arrived mid-row-group)."""
    empty, expression, _ = dynamic.current()
    if not empty and expression is None:
        return batch
    if not empty and any(_is_view(t) for t in batch.schema.types):
        batch = _plain_views(batch)  # pyarrow cannot filter view columns
    kept = batch.slice(0, 0) if empty else batch.filter(expression)
    if counts is not None:
        counts.dynamic_rows_filtered += batch.num_rows - kept.num_rows
    return kept
