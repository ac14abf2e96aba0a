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
    """Append-only columnar store of one base table's rows, addressed by int64 row ids."""

    def __init__(self, name: str, schema: pa.Schema) -> None:
        self.name = name
        self.schema = schema
        self._chunks: list[pa.RecordBatch] = []
        self._table: pa.Table = schema.empty_table()
        self._preloaded = False
        self._columns: dict[str, pa.Array] = {}

    @classmethod
    def preloaded(cls, name: str, table: pa.Table) -> TableStore:
        """A store that already holds all of ``table`` (rows 0..n-1)."""
        store = cls(name, table.schema)
        store._table = table.combine_chunks()
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
        self._table = pa.Table.from_batches(self._chunks, schema=self.schema)
        if len(self._chunks) > 32:  # keep take() on few chunks: amortized O(n) compaction
            self._table = self._table.combine_chunks()
            self._chunks = self._table.to_batches() or []
        self._columns.clear()
        return np.arange(start, start + batch.num_rows, dtype=np.int64)

    def compact(self, kept: np.ndarray) -> None:
        """Keep only the rows ``kept`` (row ids, in the order wanted); they become rows
        0..len(kept)-1. Only safe where no row id of this store is in flight (a windowed
        stream's SteM evicting at a quiescent point, see eddies.modules.window)."""
        self._table = self._table.take(pa.array(kept, pa.int64())).combine_chunks()
        self._chunks = self._table.to_batches() or []
        self._preloaded = False
        self._columns.clear()

    def column(self, name: str) -> pa.Array:
        """All values of one column as a single Array (cached until the next append).

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

    def gather(self, name: str, row_ids: np.ndarray) -> pa.Array:
        """Values of column ``name`` at ``row_ids`` (a slice when the ids are a range)."""
        col = self.column(name)
        n = len(row_ids)
        if n and int(row_ids[-1] - row_ids[0]) == n - 1 and (n == 1 or _is_range(row_ids)):
            return col.slice(int(row_ids[0]), n)
        return col.take(pa.array(row_ids))


def _is_range(row_ids: np.ndarray) -> bool:
    return bool((np.diff(row_ids) == 1).all())
