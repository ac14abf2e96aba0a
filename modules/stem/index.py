"""An append-only equality index over int64 key codes: sorted runs, searched with NumPy.

A SteM keeps one such index per join column list (stems-2003 §2.1.4: "one main-memory
index ... on each column involved in a join predicate"). Builds arrive in batches, so the
index is a stack of sorted runs merged like a binary counter (a run is merged into the one
below while it is at least half that one's size): inserts cost O(n log n) amortized, a
probe costs one lookup per run (O(log n) runs). A run whose keys are dense (dictionary
codes of strings, surrogate ids) also gets CSR offsets by key, so its lookup is two gathers
instead of a binary search; one whose dense keys are also unique (a primary key) is a
direct-address table, built by one scatter. Other runs answer a large probe
(``HASH_PROBES`` keys or more) through a hash table of their distinct keys (a pandas
Index, built on first use: O(1) per key, where two binary searches of 1.5 M unsorted keys
cost 0.25 s) and a small one with ``searchsorted``. A probe's per-run bounds are
computed once (:meth:`SortedRunIndex.bounds`) and shared by the match counts and the
matches. Everything is vectorized.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: From this many probe keys on, a sparse run is searched through a hash table of its keys
#: (measured: pandas' get_indexer beats two ``searchsorted`` calls from ~2k keys up).
HASH_PROBES = 2048

#: Per-run [lo, hi) bounds of a probe's keys, with the runs they index (a snapshot).
Bounds = list[tuple["Run", np.ndarray, np.ndarray]]


class SortedRunIndex:
    """Maps int64 keys to SteM positions; duplicates allowed.

    ``insert(keys, positions)`` adds entries; ``probe(keys)`` returns the matching
    ``(probe_index, position)`` pairs as two int64 arrays of equal length.
    """

    def __init__(self) -> None:
        self._runs: list[Run] = []

    def __len__(self) -> int:
        return sum(run.size for run in self._runs)

    @property
    def runs(self) -> list[Run]:
        """The sorted runs, oldest (largest) first; read-only."""
        return self._runs

    def insert(self, keys: np.ndarray, positions: np.ndarray) -> None:
        """Add entries (int64 keys and their stored positions, equal lengths)."""
        if len(keys) == 0:
            return
        self.insert_run(Run.of(keys, positions))

    def insert_run(self, run: Run) -> None:
        """Add a run made elsewhere (a direct run built in the background,
        eddies.modules.stem.direct_build), merging as :meth:`insert` does."""
        self._runs.append(run)
        while len(self._runs) >= 2 and 2 * self._runs[-1].size >= self._runs[-2].size:
            upper_keys, upper_positions = self._runs.pop().entries()
            lower_keys, lower_positions = self._runs.pop().entries()
            self._runs.append(
                Run.of(
                    np.concatenate([lower_keys, upper_keys]),
                    np.concatenate([lower_positions, upper_positions]),
                )
            )

    def without(self, dead: np.ndarray) -> SortedRunIndex:
        """The index with the entries whose position is marked in ``dead`` (bool, one per
        position) removed and the others renumbered densely (``position - dead before``):
        each run filtered in place of order, no sort (STAIR demotions, stairs-2004 §3.1.1)."""
        renumber = np.cumsum(~dead) - 1
        out = SortedRunIndex()
        for run in self._runs:
            keys, positions = run.entries()
            keep = ~dead[positions]
            if keep.any():
                out._runs.append(Run.sorted_of(keys[keep], renumber[positions[keep]]))
        return out

    def bounds(self, keys: np.ndarray) -> Bounds:
        """Per run, ``[lo, hi)`` of each key's entries: one lookup, for :meth:`counts` and
        :meth:`probe` to share (the runs are kept with them, so later merges do not
        matter)."""
        return [(run, *run.bounds(keys)) for run in self._runs]

    def probe(
        self, keys: np.ndarray, bounds: Bounds | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Matching ``(probe index, position)`` pairs; ``bounds`` from :meth:`bounds` of
        the same keys, if computed already."""
        if bounds is None and len(self._runs) == 1 and self._runs[0].direct:
            return self._runs[0].lookup(keys)  # a primary key: one gather
        probe_parts: list[np.ndarray] = []
        pos_parts: list[np.ndarray] = []
        for run, lo, hi in self.bounds(keys) if bounds is None else bounds:
            run_pos = run.positions
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

    def counts(self, keys: np.ndarray, bounds: Bounds | None = None) -> np.ndarray:
        """Per probe key, how many entries it matches (int64, length ``len(keys)``)."""
        total = np.zeros(len(keys), dtype=np.int64)
        for _, lo, hi in self.bounds(keys) if bounds is None else bounds:
            total += hi - lo
        return total

    def positions_of(self, key: int, lo: int, hi: int, limit: int) -> tuple[np.ndarray, int | None]:
        """The positions in ``[lo, hi)`` of ``key``'s entries, ascending, at most ``limit``
        of them; and the next such position beyond those (None when all were returned).

        Positions are inserted in increasing order and runs are merged oldest first, so one
        key's positions ascend within a run and from each run to the next: a position is
        therefore a stable cursor into one key's matches, however the runs merge meanwhile.
        """
        found: list[np.ndarray] = []
        n = 0
        probe = np.array([key], dtype=np.int64)
        for run in self._runs:
            rlo, rhi = run.bounds(probe)
            segment = run.positions[int(rlo[0]) : int(rhi[0])]
            if not len(segment):
                continue
            a, b = np.searchsorted(segment, [lo, hi])
            if a < b:
                found.append(segment[a : min(b, a + limit + 1 - n)])
                n += len(found[-1])
                if n > limit:
                    break
        positions = np.concatenate(found) if found else np.empty(0, dtype=np.int64)
        if len(positions) > limit:
            return positions[:limit], int(positions[limit])
        return positions, None


#: A run of unique keys is a direct-address table while its key range is at most this many
#: slots (8 bytes each) a key, plus 1024.
DIRECT_SPREAD = 16


class Run:
    """One sorted run; with CSR offsets by key when its key range is small (dense), else
    with a hash table of its distinct keys, built when a large probe first needs it.

    A *direct* run (unique keys over a small range: a primary key) is a direct-address
    table instead: ``positions[k - low]`` is key k's one position, or -1; an entry's
    ``[lo, hi)`` is then ``[k - low, k - low + 1)`` when present. One array of the key
    range, where sorted entries and CSR offsets take three (and as many fresh pages to
    touch: 1 M keys built in 7 ms instead of 13)."""

    __slots__ = ("_distinct", "_starts", "direct", "keys", "low", "offsets", "positions", "size")

    def __init__(
        self,
        keys: np.ndarray | None,
        positions: np.ndarray,
        low: int,
        offsets: np.ndarray | None,
        size: int | None = None,
    ) -> None:
        self.keys = keys  # sorted; None for a direct run
        self.positions = positions
        self.low = low
        self.offsets = offsets  # offsets[k - low] .. offsets[k - low + 1]: key k's entries
        self.direct = keys is None
        self.size = len(positions) if size is None else size  # entries
        self._distinct: pd.Index | None = None  # sparse runs: distinct keys, hashed
        self._starts: np.ndarray | None = None  # their entries: _starts[i] .. _starts[i+1]

    @classmethod
    def of(cls, keys: np.ndarray, positions: np.ndarray) -> Run:
        """Sort ``keys`` (with their positions) into a run; O(n) for dense unique keys."""
        low, high = int(keys.min()), int(keys.max())
        span = high - low + 1
        slot = keys - low
        # Unique keys (a primary key) first: scatter each position to its key's slot; no
        # slot was written twice iff as many slots are filled as there are keys. The run
        # is then read off in key order, no sort and no gather (1 M permuted keys: 12 ms,
        # against 33 ms counting, scattering the order and gathering keys and positions).
        # Also for unique keys spread up to DIRECT_SPREAD slots a key (a filtered primary
        # key: 100k of 1 M keys in 1.5 ms instead of a 7 ms sort, and probed by a gather
        # instead of a hash lookup).
        if len(keys) <= span <= DIRECT_SPREAD * len(keys) + 1024:  # else some key repeats
            where = np.full(span, -1, dtype=np.int64)
            where[slot] = positions  # positions are >= 0: -1 marks an empty slot
            if int(np.count_nonzero(where >= 0)) == len(keys):
                return cls(None, where, low, None, len(keys))  # direct-address
            del where
        if span > 4 * len(keys) + 1024:  # sparse: comparison sort, binary search later
            order = np.argsort(keys, kind="stable")
            return cls(keys[order], positions[order], low, None)
        counts = np.bincount(slot, minlength=span)
        offsets = np.zeros(span + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        if bool((keys[1:] >= keys[:-1]).all()):  # already in key order (a clustered table)
            return cls(keys, positions, low, offsets)
        elif span <= 1 << 16:  # NumPy sorts 16-bit keys stably by radix: O(n)
            order = np.argsort(slot.astype(np.uint16), kind="stable")
        else:
            order = np.argsort(slot, kind="stable")
        return cls(keys[order], positions[order], low, offsets)

    @classmethod
    def direct_of(cls, where: np.ndarray, low: int, size: int) -> Run:
        """A direct run from its table: ``where[k - low]`` is key k's position or -1,
        ``size`` slots filled (the caller has counted them)."""
        return cls(None, where, low, None, size)

    @classmethod
    def sorted_of(cls, keys: np.ndarray, positions: np.ndarray) -> Run:
        """A run of ``keys`` already in key order (offsets counted when dense)."""
        low, high = int(keys[0]), int(keys[-1])
        span = high - low + 1
        if span > 4 * len(keys) + 1024:
            return cls(keys, positions, low, None)
        offsets = np.zeros(span + 1, dtype=np.int64)
        np.cumsum(np.bincount(keys - low, minlength=span), out=offsets[1:])
        return cls(keys, positions, low, offsets)

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, positions) of the run's entries in key order."""
        if not self.direct:
            assert self.keys is not None
            return self.keys, self.positions
        present = self.positions >= 0
        return np.flatnonzero(present) + self.low, self.positions[present]

    def lookup(self, probe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A direct run's matches: (index of each probe key found, its one position)."""
        slot = probe - self.low if self.low else probe
        size = len(self.positions)
        if len(slot) and int(slot.min()) >= 0 and int(slot.max()) < size:
            found = self.positions[slot]
        else:
            inside = (slot >= 0) & (slot < size)
            found = np.full(len(slot), -1, dtype=np.int64)
            found[inside] = self.positions[slot[inside]]
        hit = np.flatnonzero(found >= 0)
        return hit, found[hit]

    def bounds(self, probe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per probe key, [lo, hi) of its entries in this run."""
        if self.direct:
            slot = probe - self.low
            inside = (slot >= 0) & (slot < len(self.positions))
            slot = np.where(inside, slot, 0)
            found = inside & (self.positions[slot] >= 0)
            return slot, slot + found
        if self.offsets is None and len(probe) >= HASH_PROBES:
            distinct, starts = self._hashed()
            code = distinct.get_indexer(probe)  # -1: not in this run
            found = code >= 0
            code = np.where(found, code, 0)
            lo = starts[code]
            return lo, np.where(found, starts[code + 1], lo)
        if self.offsets is None:
            return (
                np.searchsorted(self.keys, probe, side="left"),
                np.searchsorted(self.keys, probe, side="right"),
            )
        slot = probe - self.low
        inside = (slot >= 0) & (slot < len(self.offsets) - 1)
        slot = np.where(inside, slot, 0)
        lo = self.offsets[slot]
        hi = np.where(inside, self.offsets[slot + 1], lo)
        return lo, hi

    def _hashed(self) -> tuple[pd.Index, np.ndarray]:
        """The run's distinct keys as a pandas Index (a hash table once probed) and the
        offsets of their entries; built once, on first use."""
        if self._distinct is None:
            keys = self.keys
            first = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
            self._starts = np.append(first, len(keys)).astype(np.int64)
            self._distinct = pd.Index(keys[first])
        assert self._starts is not None
        return self._distinct, self._starts
