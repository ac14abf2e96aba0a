"""Per-table row stores: where base-table tuples live while row ids travel the eddy.

The PostgreSQL eddy keeps "an array of pointers to source tuples" per intermediate tuple
(eddies-in-postgresql §2.2); here a tuple holds int64 row ids into a :class:`TableStore` and
columns are gathered (``take``) only when a predicate, a SteM or the output needs them.
A store is append-only: a scan AM appends batches as they arrive, or the whole table is
registered at once for in-memory data (then appending costs nothing).
"""

from __future__ import annotations

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
        self._columns: dict[str, pa.Array] = {}
        self._int64: dict[str, np.ndarray | None] = {}

    @classmethod
    def preloaded(cls, name: str, table: pa.Table) -> TableStore:
        """A store that already holds all of ``table`` (rows 0..n-1), without copying it."""
        store = cls(name, table.schema, table)  # no empty table made first (~0.1 ms)
        store._preloaded = True
        return store

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
        return np.arange(start, start + batch.num_rows, dtype=np.int64)

    def _set(self, table: pa.Table) -> None:
        # Layout first: a reader that sees the new table must not see the old layout.
        self._layout = _Layout(table)
        self._table = table
        self._columns.clear()
        self._int64.clear()

    def compact(self, kept: np.ndarray) -> None:
        """Keep only the rows ``kept`` (row ids, in the order wanted); they become rows
        0..len(kept)-1. Only safe where no row id of this store is in flight (a windowed
        stream's SteM evicting at a quiescent point, see eddies.modules.window)."""
        table = self._table.take(pa.array(kept, pa.int64())).combine_chunks()
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
            chunked = table.column(name)
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
            col = self._table.column(name).chunk(0)
            kind = col.type
            fits = pa.types.is_signed_integer(kind) or (
                pa.types.is_unsigned_integer(kind) and kind.bit_width <= 32
            )
            if fits and col.null_count == 0:
                values = col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        self._int64[name] = values
        return values

    def gather(self, name: str, row_ids: np.ndarray) -> pa.Array:
        """Values of column ``name`` at ``row_ids`` (a slice when the ids are a range)."""
        layout = self._layout
        table = layout.table
        n = len(row_ids)
        if n and int(row_ids[-1] - row_ids[0]) == n - 1 and (n == 1 or is_range(row_ids)):
            part = table.column(name).slice(int(row_ids[0]), n)
            return part.chunk(0) if part.num_chunks == 1 else part.combine_chunks()
        if layout.num_chunks <= 1:
            return self.column(name).take(pa.array(row_ids))
        cached = self._columns.get(name)
        if cached is not None and len(cached) == table.num_rows:
            return cached.take(pa.array(row_ids))
        if n == 0:
            return table.column(name).chunk(0).slice(0, 0)
        chunk = layout.single_chunk(row_ids)
        if chunk is not None:  # all in one chunk: the common case of scan-ordered ids
            local = row_ids - layout.starts[chunk] if chunk else row_ids
            return table.column(name).chunk(chunk).take(pa.array(local))
        if n * SMALL_GATHER < table.num_rows:
            return _take_by_chunk(table.column(name), layout.starts, row_ids)
        return self.column(name).take(pa.array(row_ids))


#: A gather across chunks of fewer than 1/SMALL_GATHER of the rows takes from each chunk
#: instead of copying the whole column into one array first (a 32k-row lineitem batch
#: straddling two of the 53 chunks of TPC-H SF1 copied 6 M keys, ~30 ms and 48 MB).
SMALL_GATHER = 4


def _take_by_chunk(column: pa.ChunkedArray, starts: np.ndarray, row_ids: np.ndarray) -> pa.Array:
    """``column`` at ``row_ids`` (chunk ``k`` holds ids ``starts[k]..starts[k+1]-1``),
    taken chunk by chunk and put back in the order of ``row_ids``."""
    chunk_of = np.searchsorted(starts, row_ids, side="right") - 1
    order = None
    if len(chunk_of) > 1 and (np.diff(chunk_of) < 0).any():
        order = np.argsort(chunk_of, kind="stable")
        row_ids, chunk_of = row_ids[order], chunk_of[order]
    first, last = int(chunk_of[0]), int(chunk_of[-1])
    bounds = np.searchsorted(chunk_of, np.arange(first, last + 2))
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
        ends = np.array([row_ids.min(), row_ids.max()], dtype=np.int64)
        first, last = np.searchsorted(self.starts, ends, side="right") - 1
        return int(first) if first == last else None


def is_range(row_ids: np.ndarray) -> bool:
    """Whether ids whose last minus first is ``len - 1`` are that range: exactly when they
    strictly increase (one bool per id; ``np.diff`` made int64 differences first, 1.8x
    slower over a 375k-id lineitem batch)."""
    return bool((row_ids[1:] > row_ids[:-1]).all())
