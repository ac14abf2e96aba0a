"""Membership filters over a complete SteM's join keys (SteM filters, issue 11).

Sideways information passing: once a SteM holds every qualifying row of its table, the
set of its join keys tells a tuple of the other side of the edge whether it can ever
join. Robust Predicate Transfer (Yang et al., SIGMOD 2025) passes Bloom filters along a
join graph's edges before the joins run; DataFusion's dynamic filters push a hash join's
build-side keys into the probe side's scan. Here the keys are the SteM index's int64
codes (:mod:`eddies.modules.key_encoding`: integers as themselves, strings through the
index's dictionary, several columns mixed), so the filter is exact on codes: a bitmap
over ``[min, max]`` (one byte a code) when the codes are dense (surrogate keys, dictionary
codes) or the range is at most ``BYTEMAP_MAX``, a packed bitmap (one bit a code) when it is
at most ``PACKED_MAX_BITS``, else the
sorted distinct codes, probed by binary search. A code match only says "may join" for
mixed multi-column keys (a hash may collide); it never drops a tuple that joins.
"""

from __future__ import annotations

import numpy as np

#: A bitmap is used when the key range is at most this many times the number of keys.
BITMAP_DENSITY = 8
#: A packed bitmap (range / 8 bytes, 8 MB at most) below this range. TPC-H SF1: 5,262
#: orderkeys over a range of 6 M, 32,768 codes probed: 96 µs, against 2.1 ms by binary
#: search (random probes into a sorted array miss the cache) and 334 µs by pc.is_in.
PACKED_MAX_BITS = 1 << 26
#: A bitmap of one byte a code, with a False sentinel at each end, is used up to this
#: range (8 MB) when the codes lie within +-2**62 (so that ``code - low`` can wrap only
#: far outside the range): two NumPy passes a probe — subtract, and a gather that clips —
#: 65,536 codes in 75-110 µs, against 170-530 µs through the packed bits or a mask.
BYTEMAP_MAX = 1 << 23
_SAFE = 1 << 62


class KeyFilter:
    """Which int64 key codes are present. ``keys``: the codes (any order, repeats fine).

    ``kind`` is ``"bitmap"``, ``"packed"``, ``"sorted"`` or ``"empty"``; ``size`` the codes given,
    ``distinct`` the distinct ones. No
    distinct step (a hash ``unique`` of 100k codes costs ~16 ms): a bitmap is set by
    scatter, sorted codes keep their repeats.
    """

    def __init__(self, keys: np.ndarray) -> None:
        keys = np.asarray(keys, dtype=np.int64)
        self.size = len(keys)
        self._bitmap: np.ndarray | None = None
        self._packed: np.ndarray | None = None
        self._sorted = keys
        self.kind = "empty" if not self.size else "sorted"
        self.distinct = 0
        if self.size:
            lo, hi = int(keys.min()), int(keys.max())
            span = hi - lo + 1
            dense = span <= max(64, BITMAP_DENSITY * self.size)
            if dense or (span <= BYTEMAP_MAX and lo > -_SAFE and hi < _SAFE):
                self._lo, self._hi = lo, hi
                # bitmap[code - lo + 1]; bitmap[0] and bitmap[span + 1] stay False
                self._bitmap = np.zeros(span + 2, dtype=bool)
                self._bitmap[keys - lo + 1] = True  # keys - lo is in [0, span)
                self.kind = "bitmap"
                self.distinct = int(np.count_nonzero(self._bitmap))
            elif hi - lo + 1 <= PACKED_MAX_BITS:
                self._lo, self._hi = lo, hi
                bits = np.zeros(hi - lo + 1, dtype=bool)
                bits[keys - lo] = True
                self.distinct = int(np.count_nonzero(bits))
                self._packed = np.packbits(bits, bitorder="little")
                self.kind = "packed"
            else:
                self._sorted = np.sort(keys)
                self.distinct = 1 + int(np.count_nonzero(np.diff(self._sorted)))

    @classmethod
    def of_present(cls, present: np.ndarray, low: int, size: int) -> KeyFilter | None:
        """The filter of the codes ``low + i`` for which ``present[i]`` (bool) holds, each
        given once (``size`` of them): read off a SteM index's direct-address table
        (eddies.modules.stem.index) in one sequential pass, where the constructor gathers
        every key and scatters it at random. None where the constructor would not make a
        bitmap of that range (then make it from the keys)."""
        span = len(present)
        lo, hi = low, low + span - 1
        dense = span <= max(64, BITMAP_DENSITY * size)
        if not size or not (dense or span <= BYTEMAP_MAX) or lo <= -_SAFE or hi >= _SAFE:
            return None
        out = cls(np.empty(0, dtype=np.int64))
        out.size = out.distinct = size
        out._lo, out._hi = lo, hi
        out._bitmap = np.zeros(span + 2, dtype=bool)
        out._bitmap[1:-1] = present
        out.kind = "bitmap"
        return out

    def dense_range(self) -> tuple[int, int] | None:
        """``(lo, hi)`` when the filter holds every code from lo to hi and no other (a
        bitmap with every slot set), else None."""
        if self._bitmap is None or self.distinct != self._hi - self._lo + 1:
            return None
        return self._lo, self._hi

    @property
    def unique(self) -> bool:
        """Every code given once: a probe by these keys matches each tuple at most once."""
        return self.distinct == self.size

    def contains(self, keys: np.ndarray) -> np.ndarray:
        """Boolean mask, per code in ``keys``: whether it is present."""
        keys = np.asarray(keys, dtype=np.int64)
        if self.kind == "empty":
            return np.zeros(len(keys), dtype=bool)
        if self._bitmap is not None:
            if self._lo > -_SAFE and self._hi < _SAFE:
                # A code outside the range, wrapped or not, clips onto a sentinel (take's
                # own clipping: one pass fewer than np.clip, 131k codes 125 µs vs 188).
                return np.take(self._bitmap, keys - (self._lo - 1), mode="clip")
            inside = (keys >= self._lo) & (keys <= self._hi)
            found = np.zeros(len(keys), dtype=bool)
            found[inside] = self._bitmap[keys[inside] - self._lo + 1]
            return found
        if self._packed is not None:
            inside = (keys >= self._lo) & (keys <= self._hi)
            offset = np.where(inside, keys - self._lo, 0)  # no wrap-around: range < 2**26
            byte = self._packed[offset >> 3]
            return ((byte >> (offset & 7).astype(np.uint8)) & 1).astype(bool) & inside
        pos = np.searchsorted(self._sorted, keys)
        pos[pos == self.size] = self.size - 1
        return self._sorted[pos] == keys
