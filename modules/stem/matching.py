"""Which stored tuples a SteM probe matches, and the joined tuples it returns.

stems-2003 §2.1.4 and §3.1: a probe of tuple t in the role ``target`` finds the stored
tuples u with the probe's join key whose TimeStamp key ``ts * n_aliases + alias`` is
below t's (the alias tiebreak makes the rule exact for self-joins). Build TimeStamps
increase with the stored position, so the rule is a window of positions per probe tuple;
a floating tuple's LastMatchTimeStamp (§3.5) is its lower end. A probe with no join edge
(a cross product) matches every stored tuple in the window. Matches of mixed
multi-column keys are verified column by column; joined tuples carry the stored tuples'
Done bits and must lie inside their streams' windows (:mod:`eddies.modules.window`).
"""

from __future__ import annotations

import numpy as np

from eddies.modules.stem.column_index import ColumnIndex
from eddies.modules.stem.core import SteMCore
from eddies.modules.window import valid_mask
from eddies.router.query_graph import Predicate
from eddies.router.tuple_batch import Signature, TupleBatch


class SteMMatches(SteMCore):
    """A SteM's matching: probe windows, probe keys, match counts and joined tuples."""

    def _window(
        self, batch: TupleBatch, target: int, horizon: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per probe tuple, the stored positions ``[lo, hi)`` it may match (int64 each).

        Build timestamps increase with the stored position, so the TimeStamp rule (match
        u only if key(u) < key(t)) is a position below ``hi``, and a floating tuple's
        LastMatchTimeStamp a position from ``lo`` on; nothing at or above the horizon.
        """
        ts = self.build_ts.view()[:horizon]
        n = len(batch)
        if batch.signature.floating:
            lo = (
                np.zeros(n, dtype=np.int64)
                if batch.lmts is None
                else np.searchsorted(ts, batch.lmts, side="right").astype(np.int64)
            )
            return lo, np.full(n, horizon, dtype=np.int64)
        newest = (batch.ts - target - 1) // self.n_aliases  # ts*n + target < key(t)
        hi = np.searchsorted(ts, newest, side="right").astype(np.int64)
        return np.zeros(n, dtype=np.int64), hi

    def _probe_keys(self, batch: TupleBatch, target: int, predicate: Predicate):
        """(index, probe keys, per-column codes, validity or None) of a keyed probe."""
        edge = predicate.edge
        assert edge is not None
        probe_alias = edge.other(target)
        index = self.caught_up(self.indexes[edge.side(target)])
        keys, codes, valid = index.encode(
            self.stores[probe_alias], edge.side(probe_alias), batch.rows[probe_alias], grow=False
        )
        return index, keys, codes, valid

    def candidate_counts(
        self, batch: TupleBatch, target: int, predicate: Predicate | None, horizon: int
    ) -> tuple[np.ndarray, tuple | None]:
        """Per probe tuple, an upper bound of its matches below ``horizon`` (exact for a
        cross product): how a probe is cut into parts of at most ``max_output_rows``.
        Also the probe keys of a keyed probe (see :meth:`_probe_keys`) and their index
        bounds, to reuse."""
        if horizon == 0:  # an empty SteM (a hub probed by its neighbours before its scan)
            return np.zeros(len(batch), dtype=np.int64), None
        lo, hi = self._window(batch, target, horizon)
        span = np.maximum(hi - lo, 0)
        if predicate is None:
            return span, None
        keyed = self._probe_keys(batch, target, predicate)
        index, keys, _, valid = keyed
        bounds = index.index.bounds(keys)  # one lookup, shared with the probe
        counts = np.minimum(index.index.counts(keys, bounds), span)
        if valid is not None:
            counts[~valid] = 0  # NULL never joins
        return counts, (*keyed, bounds, (lo, hi))

    def _matches(
        self,
        batch: TupleBatch,
        target: int,
        predicate: Predicate | None,
        horizon: int,
        keyed: tuple | None = None,
    ):
        """Candidate (probe index, stored position) pairs in the tuples' windows, which
        enforce the TimeStamp rule (or a floating tuple's LastMatchTimeStamp)."""
        if keyed is not None and len(keyed) > 5:  # from candidate_counts
            lo, hi = keyed[5]
        else:
            lo, hi = self._window(batch, target, horizon)
        if predicate is None:  # cross product: every stored tuple in the window
            counts = np.maximum(hi - lo, 0)
            probe_idx = np.repeat(np.arange(len(batch), dtype=np.int64), counts)
            pos = np.arange(len(probe_idx), dtype=np.int64) + np.repeat(
                lo - (np.cumsum(counts) - counts), counts
            )
            return probe_idx, pos
        if keyed is None:
            keyed = self._probe_keys(batch, target, predicate)
        index, keys, codes, valid = keyed[:4]
        bounds = keyed[4] if len(keyed) > 4 else None  # from candidate_counts
        if valid is None:
            probe_idx, pos = index.index.probe(keys, bounds)
        else:
            live = np.flatnonzero(valid)
            if bounds is not None:
                bounds = [(run, lo[live], hi[live]) for run, lo, hi in bounds]
            probe_idx, pos = index.index.probe(keys[live], bounds)
            probe_idx = live[probe_idx]
        inside = (pos >= lo[probe_idx]) & (pos < hi[probe_idx])
        if not inside.all():
            probe_idx, pos = probe_idx[inside], pos[inside]
        return self._verified(index, codes, probe_idx, pos)

    @staticmethod
    def _verified(index: ColumnIndex, codes: list[np.ndarray], probe_idx, pos):
        """Drop pairs whose mixed multi-column key collided: compare every column."""
        if len(codes) > 1 and len(pos):
            same = np.ones(len(pos), dtype=bool)
            for stored, probe_codes in zip(index.column_codes, codes, strict=True):
                same &= stored.view()[pos] == probe_codes[probe_idx]
            probe_idx, pos = probe_idx[same], pos[same]
        return probe_idx, pos

    def probe_slice(
        self,
        one: TupleBatch,
        target: int,
        predicate: Predicate | None,
        horizon: int,
        from_pos: int,
        limit: int,
    ) -> tuple[list[TupleBatch], int | None]:
        """The matches of one probe tuple at stored positions from ``from_pos`` on, at
        most ``limit`` of them; and the position to go on from (None: all returned). For a
        tuple whose own matches exceed the output bound."""
        lo, hi = self._window(one, target, horizon)
        start, end = max(int(lo[0]), from_pos), int(hi[0])
        if predicate is None:
            stop = min(end, start + limit)
            pos = np.arange(start, stop, dtype=np.int64)
            next_from = stop if stop < end else None
            probe_idx = np.zeros(len(pos), dtype=np.int64)
        else:
            index, keys, codes, valid = self._probe_keys(one, target, predicate)
            if valid is not None and not valid[0]:
                return [], None
            pos, next_from = index.index.positions_of(int(keys[0]), start, end, limit)
            probe_idx = np.zeros(len(pos), dtype=np.int64)
            probe_idx, pos = self._verified(index, codes, probe_idx, pos)
        return self._joined(one, target, predicate, probe_idx, pos), next_from

    def probe(
        self,
        batch: TupleBatch,
        target: int,
        predicate: Predicate | None,
        horizon: int | None = None,
        keyed: tuple | None = None,
    ) -> list[TupleBatch]:
        """Concatenated matches of ``batch`` with this SteM's tuples in the role ``target``,
        among the tuples stored below ``horizon`` (default: all); ``keyed``: the batch's
        probe keys if encoded already."""
        horizon = len(self.row_ids) if horizon is None else horizon
        if horizon == 0:  # nothing stored below the horizon: no key to encode
            return []
        probe_idx, pos = self._matches(batch, target, predicate, horizon, keyed)
        return self._joined(batch, target, predicate, probe_idx, pos)

    def _joined(
        self,
        batch: TupleBatch,
        target: int,
        predicate: Predicate | None,
        probe_idx: np.ndarray,
        pos: np.ndarray,
    ) -> list[TupleBatch]:
        """The joined tuples of candidate pairs (taken from the probe tuples' windows, so
        they pass the TimeStamp rule) that are inside the windows, by stored Done bits."""
        sig = batch.signature
        if len(pos) == 0:
            return []
        rows = {a: ids[probe_idx] for a, ids in batch.rows.items()}
        rows[target] = self.row_ids.at(pos)
        if self.windowed:  # only tuples all inside their windows (eddies.modules.window)
            inside = valid_mask(rows, self.clocks)
            if inside is not None and not inside.all():
                probe_idx, pos = probe_idx[inside], pos[inside]
                rows = {a: ids[inside] for a, ids in rows.items()}
                if len(pos) == 0:
                    return []
        result = TupleBatch(batch.signature, rows, batch.ts[probe_idx])
        done = sig.done | (predicate.bit if predicate is not None else 0)
        span = sig.span | (1 << target)
        looked = sig.looked & ~(1 << target)
        built, floating = not sig.floating, sig.floating
        if not self.single_alias:
            return [result.with_signature(Signature(span, done, built, 0, looked, floating))]
        # Stored tuples may have passed their own SMs before being built: carry those bits.
        first = self.stored_done.constant
        if first is not None:  # every stored tuple has these Done bits
            return [
                result.with_signature(Signature(span, done | first, built, 0, looked, floating))
            ]
        codes = self.stored_done.codes()[pos]  # interned Done bits (DoneBits)
        masks = self.stored_done.masks
        first = codes[0]
        if (codes == first).all():
            return [
                result.with_signature(
                    Signature(span, done | masks[first], built, 0, looked, floating)
                )
            ]
        return [
            result.take(codes == code).with_signature(
                Signature(span, done | masks[code], built, 0, looked, floating)
            )
            for code in np.unique(codes)
        ]
