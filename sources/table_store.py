"""Per-table row stores: where base-table tuples live while row ids travel the eddy.

The PostgreSQL eddy keeps "an array of pointers to source tuples" per intermediate tuple
(eddies-in-postgresql §2.2); here a tuple holds int64 row ids into a :class:`TableStore` and
columns are gathered (``take``) only when a predicate, a SteM or the output needs them.
A store is append-only: a scan AM appends batches as they arrive, or the whole table is
registered at once for in-memory data (then appending costs nothing).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np
import pyarrow as pa


class TableStore:
    """Append-only columnar store of one base table's rows, addressed by int64 row ids.

    The rows stay in the chunks they came in (registration is zero-copy, issue 11): a
    gather whose row ids lie in one chunk (a scan's range, most batches) takes from that
    chunk; only a gather whose ids span several chunks copies the column into one array,
    once per store, so only the columns a query gathers across chunks are copied, and only
    while the query runs.
    """

    def __init__(self, name: str, schema: pa.Schema, table: pa.Table | None = None) -> None:
        self.name = name
        self.schema = schema
        self._chunks: list[pa.RecordBatch] = []
        self._table: pa.Table = schema.empty_table() if table is None else table
        self._layout = _Layout(self._table)
        self._preloaded = False
        # A preloaded table's columns in the store's schema (None: the table's own).
        self._plain_column: Callable[[str], pa.ChunkedArray] | None = None
        self._columns: dict[str, pa.Array] = {}
        self._int64: dict[str, np.ndarray | None] = {}
        # Row-id arrays handed out as ranges (row_range), by id: known ranges in O(1).
        self._ranges: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()

    @classmethod
    def preloaded(
        cls,
        name: str,
        table: pa.Table,
        schema: pa.Schema | None = None,
        column: Callable[[str], pa.ChunkedArray] | None = None,
    ) -> TableStore:
        """A store that already holds all of ``table`` (rows 0..n-1), without copying it.

        ``schema``: the store's, when some of ``table``'s columns have other types (view
        or dictionary columns registered as they came); ``column(name)`` then gives a
        column in the store's type, chunked as ``table`` (cast on first use, by the
        caller's cache: eddies.sources.arrow_source.TableSource.plain_column)."""
        store = cls(name, schema or table.schema, table)  # no empty table made first
        store._preloaded = True
        if store.schema != table.schema:
            if column is None or store._layout.table is not table:
                store._set(table.cast(store.schema))  # chunks remade: cast them here
            else:
                store._plain_column = column
        return store

    def _chunked(self, name: str) -> pa.ChunkedArray:
        """Column ``name`` of the store's table, in the store's schema."""
        if self._plain_column is not None:
            return self._plain_column(name)
        return self._layout.table.column(name)

    def __len__(self) -> int:
        return self._table.num_rows

    @property
    def preloaded_rows(self) -> int | None:
        return self._table.num_rows if self._preloaded else None

    def append(self, batch: pa.RecordBatch) -> np.ndarray:
        """Add rows; returns their row ids (int64, consecutive)."""
        start = self._table.num_rows
        self._chunks.append(batch)
        table = pa.Table.from_batches(self._chunks, schema=self.schema)
        if len(self._chunks) > 32:  # keep the chunks few: amortized O(n) compaction
            table = table.combine_chunks()
            self._chunks = table.to_batches() or []
        self._set(table)
        return self.row_range(start, start + batch.num_rows)

    def _set(self, table: pa.Table) -> None:
        # Layout first: a reader that sees the new table must not see the old layout.
        self._plain_column = None
        self._layout = _Layout(table)
        self._table = table
        self._columns.clear()
        self._int64.clear()

    def compact(self, kept: np.ndarray) -> None:
        """Keep only the rows ``kept`` (row ids, in the order wanted); they become rows
        0..len(kept)-1. Only safe where no row id of this store is in flight (a windowed
        stream's SteM evicting at a quiescent point, see eddies.modules.window)."""
        table = self._table
        if self._plain_column is not None:
            columns = [self._plain_column(n) for n in self.schema.names]
            table = pa.Table.from_arrays(columns, schema=self.schema)
        table = table.take(pa.array(kept, pa.int64())).combine_chunks()
        self._chunks = table.to_batches() or []
        self._preloaded = False
        self._set(table)

    def column(self, name: str) -> pa.Array:
        """All values of one column as a single Array (a copy when the store holds several
        chunks; cached until the next append).

        Safe to call from a worker thread while the trio thread appends: the cached column
        is used only if it is as long as the table snapshot taken here.
        """
        table = self._table
        col = self._columns.get(name)
        if col is None or len(col) != table.num_rows:
            chunked = self._chunked(name) if self._preloaded else table.column(name)
            col = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
            self._columns[name] = col
        return col

    def int64_column(self, name: str) -> np.ndarray | None:
        """The whole column as int64 NumPy values, for gathers by plain indexing (a SteM's
        join keys); None unless the store is preloaded in one chunk and the column is an
        integer type without NULLs that fits int64. Zero-copy for int64 columns, else
        converted once and cached; an Arrow ``take`` per probe costs ~25 µs more."""
        if name in self._int64:
            return self._int64[name]
        values = None
        if self._preloaded and self._layout.num_chunks == 1:
            col = self._chunked(name).chunk(0)
            kind = col.type
            fits = pa.types.is_signed_integer(kind) or (
                pa.types.is_unsigned_integer(kind) and kind.bit_width <= 32
            )
            if fits and col.null_count == 0:
                values = col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        self._int64[name] = values
        return values

    def row_range(self, start: int, end: int) -> np.ndarray:
        """The row ids ``start .. end-1`` (int64), remembered as a range: a scan's batch,
        whose gathers are then slices without checking every id (:meth:`range_start`).
        The array must not be changed in place (no row-id array of a tuple ever is)."""
        ids = np.arange(start, end, dtype=np.int64)
        self._ranges[id(ids)] = ids
        return ids

    def range_start(self, row_ids: np.ndarray) -> int | None:
        """The first id when ``row_ids`` are consecutive ascending ids, else None: O(1)
        for an array from :meth:`row_range`, else a check of every id where the first
        and last differ by ``len - 1``."""
        n = len(row_ids)
        if not n:
            return None
        if self._ranges.get(id(row_ids)) is row_ids:
            return int(row_ids[0])
        first = int(row_ids[0])
        if int(row_ids[-1]) - first != n - 1 or not (n == 1 or is_range(row_ids)):
            return None
        return first

    def int64_values(self, name: str, row_ids: np.ndarray) -> np.ndarray | None:
        """Column ``name`` at ``row_ids`` as int64 NumPy values (a SteM's join keys), or
        None unless the store is preloaded, the column is an integer type that fits int64,
        and the chunks read have no NULLs (the caller then gathers through Arrow).

        A range of ids in one chunk is a zero-copy, read-only slice (a scan's batch; a
        SteM holding a whole table); other ids are NumPy gathers, one per chunk they
        touch, split by binary search where they ascend (a filtered scan batch, a probe's
        output) instead of locating every id's chunk."""
        n = len(row_ids)
        whole = self.int64_column(name)
        if whole is None and (not self._preloaded or self._layout.num_chunks <= 1 or not n):
            return None
        start = self.range_start(row_ids) if n > 1 else None
        if whole is not None:
            return whole[row_ids] if start is None else whole[start : start + n]
        if start is not None:
            return self._int64_pieces(name, np.array([start]), n)
        if n > 1 and not bool((row_ids[1:] >= row_ids[:-1]).all()):
            chunk = self._layout.single_chunk(row_ids)
            values = None if chunk is None else self._int64_chunk(name, chunk)
            if values is None:
                return None
            offset = int(self._layout.starts[chunk])
            return values[row_ids - offset if offset else row_ids]
        return self._int64_pieces(name, row_ids, n)

    def _int64_pieces(self, name: str, row_ids: np.ndarray, n: int) -> np.ndarray | None:
        """Ascending ``row_ids`` (or, as one id, the start of a range of ``n``) read chunk
        by chunk; zero-copy where they lie in one chunk and form a range."""
        starts = self._layout.starts
        ranged = len(row_ids) == 1 and n > 1
        lo, hi = int(row_ids[0]), int(row_ids[0]) + n - 1 if ranged else int(row_ids[-1])
        first = int(np.searchsorted(starts, lo, side="right")) - 1
        last = int(np.searchsorted(starts, hi, side="right")) - 1
        if first == last:
            values = self._int64_chunk(name, first)
            if values is None:
                return None
            offset = int(starts[first])
            if ranged:
                return values[lo - offset : hi - offset + 1]
            return values[row_ids - offset if offset else row_ids]
        out = np.empty(n, dtype=np.int64)
        # where each chunk's ids begin in the batch (binary search: the ids ascend)
        cuts = np.arange(first + 1, last + 1)
        if ranged:
            at = np.concatenate([[0], starts[cuts] - lo, [n]])
        else:
            at = np.concatenate([[0], np.searchsorted(row_ids, starts[cuts]), [n]])
        for i, k in enumerate(range(first, last + 1)):
            a, b = int(at[i]), int(at[i + 1])
            if a == b:
                continue
            values = self._int64_chunk(name, k)
            if values is None:
                return None
            offset = int(starts[k])
            if ranged:
                out[a:b] = values[lo + a - offset : lo + b - offset]
            else:
                out[a:b] = values[row_ids[a:b] - offset]
        return out

    def _int64_chunk(self, name: str, chunk: int) -> np.ndarray | None:
        """One chunk of an integer column as int64 NumPy values (zero-copy for int64),
        cached; None if it has NULLs or the type does not fit int64."""
        key = f"{name}\x00{chunk}"
        if key in self._int64:
            return self._int64[key]
        col = self._chunked(name).chunk(chunk)
        kind = col.type
        fits = pa.types.is_signed_integer(kind) or (
            pa.types.is_unsigned_integer(kind) and kind.bit_width <= 32
        )
        values = None
        if fits and col.null_count == 0:
            values = col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        self._int64[key] = values
        return values

    def gather(self, name: str, row_ids: np.ndarray) -> pa.Array:
        """Values of column ``name`` at ``row_ids`` (a slice when the ids are a range)."""
        layout = self._layout
        table = layout.table
        # The column as chunked as the layout: of this snapshot while appends may run.
        whole = self._chunked if self._preloaded else table.column
        n = len(row_ids)
        start = self.range_start(row_ids)
        if start is not None:
            part = whole(name).slice(start, n)
            return part.chunk(0) if part.num_chunks == 1 else part.combine_chunks()
        if layout.num_chunks <= 1:
            return self.column(name).take(pa.array(row_ids))
        cached = self._columns.get(name)
        if cached is not None and len(cached) == table.num_rows:
            return cached.take(pa.array(row_ids))
        if n == 0:
            return whole(name).chunk(0).slice(0, 0)
        chunk = layout.single_chunk(row_ids)
        if chunk is not None:  # all in one chunk: the common case of scan-ordered ids
            local = row_ids - layout.starts[chunk] if chunk else row_ids
            return whole(name).chunk(chunk).take(pa.array(local))
        if n * SMALL_GATHER < table.num_rows:
            return _take_by_chunk(whole(name), layout.starts, row_ids)
        return self.column(name).take(pa.array(row_ids))


#: A gather across chunks of fewer than 1/SMALL_GATHER of the rows takes from each chunk
#: instead of copying the whole column into one array first (a 32k-row lineitem batch
#: straddling two of the 53 chunks of TPC-H SF1 copied 6 M keys, ~30 ms and 48 MB).
SMALL_GATHER = 4


def _take_by_chunk(column: pa.ChunkedArray, starts: np.ndarray, row_ids: np.ndarray) -> pa.Array:
    """``column`` at ``row_ids`` (chunk ``k`` holds ids ``starts[k]..starts[k+1]-1``),
    taken chunk by chunk and put back in the order of ``row_ids``."""
    order = None
    if len(row_ids) > 1 and not bool((row_ids[1:] >= row_ids[:-1]).all()):
        chunk_of = np.searchsorted(starts, row_ids, side="right") - 1
        order = np.argsort(chunk_of, kind="stable")
        row_ids = row_ids[order]
    # ascending ids: where each chunk's ids begin, by binary search
    first = int(np.searchsorted(starts, row_ids[0], side="right")) - 1
    last = int(np.searchsorted(starts, row_ids[-1], side="right")) - 1
    bounds = np.searchsorted(row_ids, starts[first : last + 2])
    bounds[-1] = len(row_ids)
    parts = [
        column.chunk(k).take(pa.array(row_ids[bounds[i] : bounds[i + 1]] - starts[k]))
        for i, k in enumerate(range(first, last + 1))
        if bounds[i + 1] > bounds[i]
    ]
    out = pa.concat_arrays(parts)
    if order is None:
        return out
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return out.take(pa.array(inverse))


class _Layout:
    """A snapshot of the store's table (empty chunks dropped) with its chunks' start
    offsets: row ids ``starts[k] .. starts[k+1]-1`` live in chunk ``k``."""

    __slots__ = ("num_chunks", "starts", "table")

    def __init__(self, table: pa.Table) -> None:
        if table.num_columns and any(len(c) == 0 for c in table.column(0).chunks):
            table = pa.Table.from_batches(
                [b for b in table.to_batches() if b.num_rows], schema=table.schema
            )
        self.table = table
        lengths = [len(c) for c in table.column(0).chunks] if table.num_columns else []
        self.num_chunks = len(lengths)
        self.starts = np.zeros(self.num_chunks + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.starts[1:])

    def single_chunk(self, row_ids: np.ndarray) -> int | None:
        """The one chunk holding every row id, or None when they span several (chunks
        are consecutive ranges, so the smallest and largest id decide)."""
        ends = np.array([row_ids[0], row_ids[-1]], dtype=np.int64)
        first, last = np.searchsorted(self.starts, ends, side="right") - 1
        if first != last:  # no need to look at the others
            return None
        ends = np.array([row_ids.min(), row_ids.max()], dtype=np.int64)
        first, last = np.searchsorted(self.starts, ends, side="right") - 1
        return int(first) if first == last else None


def is_range(row_ids: np.ndarray) -> bool:
    """Whether ids whose last minus first is ``len - 1`` are that range: exactly when they
    strictly increase (one bool per id; ``np.diff`` made int64 differences first, 1.8x
    slower over a 375k-id lineitem batch)."""
    return bool((row_ids[1:] > row_ids[:-1]).all())
