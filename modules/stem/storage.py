"""A SteM's per-tuple columns: growable arrays, and the two often implied (row ids, Done bits).

A SteM stores, per built tuple, its row id, build TimeStamp and Done bits (stems-2003
§2.1; the Done bits of SMs passed before the build, so a probe's result carries them).
Two of those are usually known without being stored: a SteM that builds a whole in-memory
table in scan order holds row id ``i`` at position ``i``, and every tuple of a table whose
SMs all ran before (or all after) its build has the same Done bits. Writing them out cost
8 bytes a tuple each, twice per tuple of the Wisconsin 5x1M star's 2.6 M built tuples,
and a probe then gathered them back at random positions. These columns hold nothing while
the pattern lasts and write the values out once it breaks (issue 11: memory and time that
follow the work).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from eddies.sources.table_store import is_range


class GrowableArray:
    """An append-only NumPy vector with amortized O(1) appends; ``view()`` is zero-copy.

    Also what a STAIR's groups store their row ids and key codes in
    (:mod:`eddies.modules.stair`).
    """

    def __init__(self, dtype: type, capacity: int = 1024) -> None:
        self._data = np.empty(capacity, dtype=dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def _reserve(self, need: int) -> None:
        """Room for ``need`` values: at least double the capacity when it grows."""
        if need > len(self._data):
            grown = np.empty(max(need, 2 * len(self._data)), dtype=self._data.dtype)
            grown[: self._size] = self._data[: self._size]
            self._data = grown

    def extend(self, values: np.ndarray) -> None:
        """Append ``values`` (cast to the array's dtype)."""
        need = self._size + len(values)
        self._reserve(need)
        self._data[self._size : need] = values
        self._size = need

    def extend_constant(self, n: int, value) -> None:
        """Append ``n`` copies of ``value`` (no temporary array)."""
        need = self._size + n
        self._reserve(need)
        self._data[self._size : need] = value
        self._size = need

    def view(self) -> np.ndarray:
        """The values appended so far (a view: do not keep it across appends)."""
        return self._data[: self._size]


def _range_start(row_ids: np.ndarray) -> int | None:
    """The first id when ``row_ids`` (not empty) are consecutive ascending ids, else None."""
    first, n = int(row_ids[0]), len(row_ids)
    if int(row_ids[-1]) - first != n - 1 or not (n == 1 or is_range(row_ids)):
        return None
    return first


class RowIds:
    """Row ids of the stored tuples, by stored position (int64).

    ``is_positions``: every stored row id equals its position (nothing is written then).
    """

    def __init__(
        self,
        capacity: int,
        implied: bool = True,
        range_start: Callable[[np.ndarray], int | None] | None = None,
    ) -> None:
        self._capacity = capacity
        # The first id of row ids that are consecutive ascending ids, else None (the row
        # store's TableStore.range_start: O(1) for a scan's batch); None: check each id.
        self._range_start = range_start or _range_start
        # Written out once they are not the positions (from the start unless ``implied``:
        # a stream's SteM reads them whole at every build).
        self._values: GrowableArray | None = None
        self._n = 0
        if not implied:
            self._values = GrowableArray(np.int64, capacity)

    def __len__(self) -> int:
        return self._n

    @property
    def is_positions(self) -> bool:
        """Every stored row id equals its position (nothing written)."""
        return self._values is None

    def extend(self, row_ids: np.ndarray) -> None:
        """Append the row ids of one build (in build order)."""
        n = len(row_ids)
        if not n:
            return
        if self._values is None:
            start = self._n
            if int(row_ids[0]) == start and self._range_start(row_ids) == start:
                self._n += n
                return
            self._values = GrowableArray(np.int64, max(self._capacity, start + n))
            self._values.extend(np.arange(start, dtype=np.int64))
        self._values.extend(row_ids)
        self._n += n

    def view(self) -> np.ndarray:
        """All stored row ids (a fresh array while they are the positions: do not keep
        it for later appends)."""
        if self._values is None:
            return np.arange(self._n, dtype=np.int64)
        return self._values.view()

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The row ids at ``positions`` (no gather while they are the positions)."""
        return positions if self._values is None else self._values.view()[positions]


class DoneBits:
    """Stored Done bits by position, interned: each stored tuple holds the int64 code of
    its bits in :attr:`masks`. A query's Done bits may pass 64 (many predicates and SteM
    filters, issue 26) while a SteM's tuples carry few distinct sets (the SMs of their own
    table passed before the build), so codes keep per-tuple work on int64 vectors whatever
    the width. ``constant``: the bits every stored tuple has (0 when none is stored), or
    None once they differ."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._values: GrowableArray | None = None  # codes, once the bits differ
        self._first: int | None = None
        self._n = 0
        self.masks: list[int] = []  # by code: the Done bits it stands for
        self._ids: dict[int, int] = {}

    def __len__(self) -> int:
        return self._n

    @property
    def constant(self) -> int | None:
        """The Done bits every stored tuple has, or None once they differ."""
        if self._values is not None:
            return None
        return self._first or 0

    def _code(self, done: int) -> int:
        found = self._ids.get(done)
        if found is None:
            found = self._ids[done] = len(self.masks)
            self.masks.append(done)
        return found

    def extend_constant(self, n: int, done: int) -> None:
        """Append ``n`` tuples with Done bits ``done``."""
        if not n:
            return
        if self._values is None and self._first in (None, done):
            self._first = done
            self._n += n
            return
        self._write_out()
        assert self._values is not None
        self._values.extend_constant(n, self._code(done))
        self._n += n

    def extend(self, done: np.ndarray) -> None:
        """Append per-tuple Done bits (a checkpoint's restore): integers of any width
        (uint64, or Python ints in an object array)."""
        if not len(done):
            return
        self._write_out()
        assert self._values is not None
        distinct, inverse = np.unique(np.asarray(done), return_inverse=True)
        codes = np.array([self._code(int(m)) for m in distinct], dtype=np.int64)
        self._values.extend(codes[inverse.reshape(-1)])
        self._n += len(done)

    def _write_out(self) -> None:
        if self._values is None:
            self._values = GrowableArray(np.int64, max(self._capacity, self._n + 1024))
            self._values.extend_constant(self._n, self._code(self._first or 0))

    def codes(self) -> np.ndarray:
        """Every stored tuple's code (int64; a fresh array while the bits are constant):
        its Done bits are ``masks[code]``."""
        if self._values is None:
            return np.full(self._n, self._code(self._first or 0), dtype=np.int64)
        return self._values.view()

    def lacking(self, bit: int) -> np.ndarray:
        """Per stored tuple, whether its Done bits lack ``bit`` (bool)."""
        table = np.array([not m & bit for m in self.masks] or [True], dtype=bool)
        return table[self.codes()]

    def view(self) -> np.ndarray:
        """All stored Done bits, a fresh array: uint64 while every set fits 64 bits, else
        Python ints in an object array (what a checkpoint saves)."""
        codes = self.codes()
        wide = any(m >> 64 for m in self.masks)
        return np.array(self.masks or [0], dtype=object if wide else np.uint64)[codes]
