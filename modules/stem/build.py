"""A SteM's builds: store singletons, with their TimeStamps and EOTs, and bounce them back.

stems-2003 Table 2: a build tuple is bounced back once per alias of the table (so each
alias role can go on to probe), unless it duplicates a row the SteM holds (competing AMs,
§3.2, :mod:`~eddies.modules.stem.row_identity`). An index AM's matches arrive with the
EOT tuples of their lookups, built at once (§2.1.4). Where the relaxed BuildFirst allows
(:class:`~eddies.modules.stem.build_ledger.BuildLedger`, §3.5), a build is skipped: the
singletons take their TimeStamps and are bounced back unstored.
"""

from __future__ import annotations

import numpy as np

from eddies.modules.base import run_vectorized
from eddies.modules.stem.core import SteMCore
from eddies.modules.window import EventTimeWindow, event_times
from eddies.router.tuple_batch import Signature, TupleBatch


class SteMBuilds(SteMCore):
    """The build destination of a SteM (see the module docstring)."""

    async def build_work(self, batch: TupleBatch) -> list[TupleBatch]:
        """One build Work: duplicates dropped, TimeStamps taken, then stored (or skipped)
        and bounced back; its EOTs held once its matches are stored."""
        if self.identity is not None and len(batch):
            batch = batch.take(self._fresh(batch))
        # The clock advances here, on the trio thread, before any await (see BuildClock).
        raw_ts = self.clock.take(len(batch))
        if self.ledger is not None and len(batch) and self.ledger.may_skip(self):
            skipped = self.ledger.skipped
            skipped[self.table] = skipped.get(self.table, 0) + len(batch)
            return self._bounced(batch, raw_ts)
        built = await run_vectorized(self.build, batch, raw_ts, rows=len(batch))
        if batch.eot is not None and len(batch.eot):
            self.eots[batch.eot.columns].add(list(batch.eot.values))
            self.eot_log.setdefault(batch.eot.columns, []).append(batch.eot.values)
        return built

    def _fresh(self, batch: TupleBatch) -> np.ndarray:
        """Mask of the batch's rows the SteM does not hold yet (duplicate removal)."""
        assert self.identity is not None
        (row_ids,) = batch.rows.values()
        values = [self.store.gather(c, row_ids) for c in self.identity.columns]
        return self.identity.fresh(values, batch.origin, batch.origin in self.scan_origins)

    def build(self, batch: TupleBatch, raw_ts: np.ndarray) -> list[TupleBatch]:
        """Insert singletons; bounce each back once per alias, with its TimeStamp key."""
        (row_ids,) = batch.rows.values()
        start = len(self.row_ids)
        done = batch.signature.done if self.single_alias else 0
        for index in self.indexes.values():
            if index.builder is not None:
                index.builder.add(row_ids, start)
        self.row_ids.extend(row_ids)
        self.build_ts.extend(raw_ts)
        if self.stream_clock is not None:
            self._clock_built(row_ids, raw_ts)
        self.stored_done.extend_constant(len(row_ids), done)
        return self._bounced(batch, raw_ts)

    def _bounced(self, batch: TupleBatch, raw_ts: np.ndarray) -> list[TupleBatch]:
        """The build's bounce-back: the singletons once per alias, with TimeStamp keys."""
        (row_ids,) = batch.rows.values()
        done = batch.signature.done if self.single_alias else 0
        if self.single_alias:  # raw_ts is a range (BuildClock.take): its keys are one too
            (a,) = self.aliases
            n, first = len(raw_ts), int(raw_ts[0]) if len(raw_ts) else 0
            na = self.n_aliases
            ts = np.arange(first * na + a, (first + n) * na + a, na, dtype=np.int64)
            return [TupleBatch(Signature(1 << a, done, True), {a: row_ids}, ts)]
        return [
            TupleBatch(Signature(1 << a, done, True), {a: row_ids}, raw_ts * self.n_aliases + a)
            for a in self.aliases
        ]

    def _clock_built(self, row_ids: np.ndarray, raw_ts: np.ndarray) -> None:
        """Tell a stream table's clock of the tuples just stored (windows)."""
        clock = self.stream_clock
        assert clock is not None
        window = clock.window
        stored_ids, stored_ts = self.row_ids.view(), self.build_ts.view()
        if isinstance(window, EventTimeWindow):
            times, nulls, span = event_times(self.store.gather(window.column, row_ids), window)
            clock.built(row_ids, raw_ts, stored_ids, stored_ts, times, nulls, span)
        else:
            clock.built(row_ids, raw_ts, stored_ids, stored_ts)
        clock.stored(len(self.store))
