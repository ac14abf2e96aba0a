"""A SteM's index on one join column list: key codes -> stored positions, caught up lazily.

stems-2003 §2.1.4 gives a SteM "one main-memory index ... on each column involved in a
join predicate". Here each is a :class:`~eddies.modules.stem.index.SortedRunIndex` over
the columns' int64 key codes (:mod:`eddies.modules.key_encoding`), brought up to date
when a probe (or a SteM filter) needs it: a build only appends to the SteM. A large
preloaded table keyed by one integer column gets its direct-address table filled in a
worker thread while its builds arrive instead (:mod:`eddies.modules.stem.direct_build`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from eddies.modules.key_encoding import KIND_INT, KeyDictionary, encode_rows, uses_dictionary
from eddies.modules.stem.direct_build import DirectBuild, background_enabled
from eddies.modules.stem.index import SortedRunIndex
from eddies.modules.stem.storage import GrowableArray, RowIds
from eddies.settings import current
from eddies.sources.table_store import TableStore


@dataclass
class ColumnIndex:
    """A SteM's index on one column list: key codes -> stored positions."""

    columns: tuple[str, ...]
    kinds: tuple[str, ...]
    dictionaries: list[KeyDictionary | None] = field(default_factory=list)
    index: SortedRunIndex = field(default_factory=SortedRunIndex)
    column_codes: list[GrowableArray] = field(default_factory=list)
    indexed: int = 0  # stored positions [0, indexed) are in the index

    combined: KeyDictionary | None = None
    # Its direct-address table being filled in the background until the first catch-up
    # (eddies.modules.stem.direct_build); None once read, or where the index does not qualify.
    builder: DirectBuild | None = None

    def __post_init__(self) -> None:
        self.dictionaries = [KeyDictionary() if uses_dictionary(k) else None for k in self.kinds]
        if len(self.columns) > 1:  # codes kept per column to verify multi-column matches
            self.column_codes = [GrowableArray(np.int64) for _ in self.columns]
            # Mixed 64-bit keys are sparse; dense codes for them allow CSR lookups.
            self.combined = KeyDictionary()

    def encode(
        self, store: TableStore, columns: tuple[str, ...], row_ids: np.ndarray, grow: bool
    ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray | None]:
        """(mixed keys, per-column codes, validity mask or None) for ``row_ids``."""
        keys, codes, valid = encode_rows(
            store, columns, row_ids, self.kinds, self.dictionaries, grow
        )
        if self.combined is not None:
            keys = self.combined.encode(pa.array(keys), grow)
        return keys, codes, valid

    def catch_up(self, store: TableStore, stored: RowIds) -> ColumnIndex:
        """Index the tuples built since this index was last probed (``stored``: the SteM's
        row ids by stored position, rows of ``store``); returns this index.

        Indexes are built lazily: a SteM that is rarely probed (often the largest table's,
        whose tuples arrive after the small tables' probes have passed) never pays for them.
        """
        if self.builder is not None:  # its direct-address table, built in the background
            builder, self.builder = self.builder, None
            run = builder.finish()
            if run is not None:
                self.index.insert_run(run)
                self.indexed = builder.covered
        n_stored = len(stored)
        if self.indexed == n_stored:
            return self
        positions = np.arange(self.indexed, n_stored, dtype=np.int64)
        if stored.is_positions:  # known as a range: encoded as a slice, no check
            row_ids = store.row_range(self.indexed, n_stored)
        else:
            row_ids = stored.view()[self.indexed :]
        keys, codes, valid = self.encode(store, self.columns, row_ids, grow=True)
        for store_codes, col_codes in zip(self.column_codes, codes, strict=False):
            store_codes.extend(col_codes)
        if valid is None:
            self.index.insert(keys, positions)
        else:  # NULL never joins: not indexed at all
            self.index.insert(keys[valid], positions[valid])
        self.indexed = n_stored
        return self


def start_direct_builds(indexes: dict[tuple[str, ...], ColumnIndex], store: TableStore) -> None:
    """Give a builder to each index whose direct-address table is built in the background
    as tuples are stored (eddies.modules.stem.direct_build): one integer column without
    NULLs, of a preloaded table of at least ``Tuning.direct_build_background_min_rows``
    rows (read here, as the SteM is created). The caller leaves out streams."""
    rows = store.preloaded_rows
    if (
        rows is None
        or rows < current().direct_build_background_min_rows
        or not background_enabled()
    ):
        return
    for index in indexes.values():
        if index.kinds != (KIND_INT,):
            continue
        whole = store.int64_column(index.columns[0])
        if whole is not None:
            index.builder = DirectBuild(whole)


def stop_direct_builds(indexes: dict[tuple[str, ...], ColumnIndex]) -> None:
    """Abandon the background builds not read yet (their tables are never read)."""
    for index in indexes.values():
        if index.builder is not None:
            index.builder.abandon()
            index.builder = None
