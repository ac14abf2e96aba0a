"""An append-only equality index over int64 key codes: sorted runs, searched with NumPy.

A SteM keeps one such index per join column list (stems-2003 §2.1.4: "one main-memory
index ... on each column involved in a join predicate"). Builds arrive in batches, so the
index is a stack of sorted runs merged like a binary counter (a run is merged into the one
below while it is at least half that one's size): inserts cost O(n log n) amortized, a
probe costs one ``searchsorted`` pair per run (O(log n) runs). Everything is vectorized.
"""

from __future__ import annotations

import numpy as np


class SortedRunIndex:
    """Maps int64 keys to SteM positions; duplicates allowed.

    ``insert(keys, positions)`` adds entries; ``probe(keys)`` returns the matching
    ``(probe_index, position)`` pairs as two int64 arrays of equal length.
    """

    def __init__(self) -> None:
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []

    def __len__(self) -> int:
        return sum(len(keys) for keys, _ in self._runs)

    def insert(self, keys: np.ndarray, positions: np.ndarray) -> None:
        if len(keys) == 0:
            return
        order = np.argsort(keys, kind="stable")
        self._runs.append((keys[order], positions[order]))
        while len(self._runs) >= 2 and 2 * len(self._runs[-1][0]) >= len(self._runs[-2][0]):
            upper_keys, upper_pos = self._runs.pop()
            lower_keys, lower_pos = self._runs.pop()
            keys_all = np.concatenate([lower_keys, upper_keys])
            pos_all = np.concatenate([lower_pos, upper_pos])
            order = np.argsort(keys_all, kind="stable")  # timsort: two runs merge in O(n)
            self._runs.append((keys_all[order], pos_all[order]))

    def probe(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        probe_parts: list[np.ndarray] = []
        pos_parts: list[np.ndarray] = []
        for run_keys, run_pos in self._runs:
            lo = np.searchsorted(run_keys, keys, side="left")
            hi = np.searchsorted(run_keys, keys, side="right")
            counts = hi - lo
            total = int(counts.sum())
            if total == 0:
                continue
            hit = np.flatnonzero(counts)
            counts_hit = counts[hit]
            probe_idx = np.repeat(hit, counts_hit)
            # position j of the k-th hit's range: lo[k] + (j - start of that range)
            starts = np.repeat(lo[hit] - (np.cumsum(counts_hit) - counts_hit), counts_hit)
            pos = run_pos[starts + np.arange(total)]
            probe_parts.append(probe_idx)
            pos_parts.append(pos)
        if not probe_parts:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty
        if len(probe_parts) == 1:
            return probe_parts[0].astype(np.int64, copy=False), pos_parts[0]
        return np.concatenate(probe_parts).astype(np.int64, copy=False), np.concatenate(pos_parts)


class GrowableArray:
    """An append-only NumPy vector with amortized O(1) appends; ``view()`` is zero-copy."""

    def __init__(self, dtype: type, capacity: int = 1024) -> None:
        self._data = np.empty(capacity, dtype=dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def extend(self, values: np.ndarray) -> None:
        need = self._size + len(values)
        if need > len(self._data):
            grown = np.empty(max(need, 2 * len(self._data)), dtype=self._data.dtype)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : need] = values
        self._size = need

    def view(self) -> np.ndarray:
        return self._data[: self._size]
