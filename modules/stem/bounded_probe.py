"""Bounded SteM probes: one probe Work returns at most ``max_output_rows`` tuples.

A continuation, so intermediate results never pile up. A probe whose matches exceed the
bound (``Tuning.stem_max_output_rows``, read as the SteM is created) stops there and
hands the rest back in its answer (``Returned.rest``): the un-probed remainder of the
batch, with a :class:`~eddies.router.messages.ProbeCursor` — the *horizon* (the stored
positions the probe began with), the position reached inside the first tuple's matches
(a tuple whose own matches exceed the bound is sliced by stored position: one key's
positions ascend in the index, so a position is a stable cursor) and per-tuple bounds of
the matches (exact for cross products, key counts otherwise). The eddy holds the rest and
sends it back to this SteM once its backlog has drained
(:class:`~eddies.router.eddy.Eddy`). The parts of a probe together are exactly one probe
of the SteM as the probe began: each tuple is probed once, every match below the horizon
is found once, and what lies above it is what the TimeStamp rule excludes anyway (a newer
tuple finds the probe, stems-2003 §3.1), or, for a floating batch, what its
LastMatchTimeStamp leaves to the next probe (§3.5). The bounce-backs
(:mod:`~eddies.modules.stem.bounce_back`) are decided for the whole batch when the probe
begins, so Done bits, ProbeCompletion and TimeStamps are those of a single probe; and the
Work's ``tuples_in`` are shared out among the parts as tuples finish, so the policies'
counts are unchanged.
"""

from __future__ import annotations

import numpy as np

from eddies.modules.base import run_vectorized
from eddies.modules.stem.bounce_back import SteMBounceBacks
from eddies.modules.stem.matching import SteMMatches
from eddies.router.messages import ProbeCursor, Returned, Work
from eddies.router.query_graph import Predicate
from eddies.router.tuple_batch import TupleBatch


class SteMProbes(SteMMatches, SteMBounceBacks):
    """A SteM's probe destinations, one bounded part of a probe per Work."""

    async def probe_work(self, work: Work) -> list[TupleBatch] | Returned:
        """One bounded part of a probe: at most ``max_output_rows`` matches (see the
        module docstring); the rest, if any, goes back to the eddy as a continuation."""
        target = self.probe_targets[work.destination]
        predicate = None if work.edge is None else self.graph.predicates[work.edge]
        batch = work.batch
        cursor = work.resume
        limit = self.max_output_rows
        bounced: list[TupleBatch] = []
        counts: np.ndarray | None
        empty = cursor is None and not len(self.row_ids) and self.has_scan
        if empty and not self.windowed and not batch.signature.floating:
            return []  # nothing stored: no match, no prior probers to bounce back
        if cursor is None:
            horizon, from_pos = len(self.row_ids), 0
            counts, keyed, bounced = self._begin(batch, target, predicate, horizon, limit)
        else:
            horizon, from_pos, counts = cursor.horizon, cursor.from_pos, cursor.counts
            keyed = None
        matches, taken, next_from = await self._part(
            batch, target, predicate, horizon, from_pos, counts, keyed, limit
        )
        outputs = matches + bounced
        resumed = 0 if cursor is None else cursor.limit
        if taken == len(batch) and not resumed:
            return outputs
        rest = None
        if taken < len(batch):
            assert counts is not None
            remaining = batch if not taken else batch.take(slice(taken, None))
            rest = Work(
                work.destination,
                remaining,
                work.edge,
                ProbeCursor(horizon, next_from or 0, counts[taken:], limit),
            )
        return Returned(work.destination, outputs, taken, 0.0, rest=rest, resumed=resumed)

    def _begin(
        self,
        batch: TupleBatch,
        target: int,
        predicate: Predicate | None,
        horizon: int,
        limit: int,
    ) -> tuple[np.ndarray | None, tuple | None, list[TupleBatch]]:
        """As a probe begins: its per-tuple match bounds (None: at most one match a tuple,
        so one part), its probe keys if encoded, and its bounce-backs."""
        if 0 < len(batch) <= limit and self._unique_index(target, predicate, horizon):
            counts, keyed = None, None  # at most one match a tuple: one part
        else:
            counts, keyed = self.candidate_counts(batch, target, predicate, horizon)
        # Bounce-backs are decided for the whole batch as the probe begins, with the
        # SteM it sees (a floating batch's LastMatchTimeStamp is the newest tuple below
        # the horizon): so a probe in parts bounces exactly what one probe would.
        bounced: list[TupleBatch] = []
        if batch.signature.floating:
            if not self.complete:
                bounced.append(self.probe_again(batch, target, horizon))
        elif predicate is not None and not self.has_scan:
            prior = self.prior_probers(batch, target, predicate)
            if prior is not None:
                bounced.append(prior)
        return counts, keyed, bounced

    async def _part(
        self,
        batch: TupleBatch,
        target: int,
        predicate: Predicate | None,
        horizon: int,
        from_pos: int,
        counts: np.ndarray | None,
        keyed: tuple | None,
        limit: int,
    ) -> tuple[list[TupleBatch], int, int | None]:
        """(matches, tuples finished, position to go on from in the first tuple's matches
        or None) of this part: the leading tuples whose matches fit in the bound, all at
        once; else the first tuple alone, its matches sliced by stored position."""
        if counts is None:
            taken = len(batch)
        else:
            taken = 0 if from_pos else int(np.searchsorted(np.cumsum(counts), limit, side="right"))
        if taken:
            if taken == len(batch):  # the common case: the keys are encoded already
                part = batch
            else:
                part, keyed = batch.take(slice(0, taken)), None
            matches = await run_vectorized(
                self.probe, part, target, predicate, horizon, keyed, rows=len(part)
            )
            return matches, taken, None
        first = batch.take(slice(0, 1))
        matches, next_from = self.probe_slice(first, target, predicate, horizon, from_pos, limit)
        return matches, 1 if next_from is None else 0, next_from

    def _unique_index(self, target: int, predicate: Predicate | None, horizon: int) -> bool:
        """Whether a keyed probe of ``target`` matches each tuple at most once: its index
        (caught up) is one direct-address run, so the key is unique here (a primary key).
        Such a probe needs no match counts to bound its output, and one gather finds it."""
        if predicate is None or predicate.edge is None or not horizon:
            return False
        index = self.caught_up(self.indexes[predicate.edge.side(target)])
        runs = index.index.runs
        return len(runs) == 1 and runs[0].direct
