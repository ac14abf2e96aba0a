"""A SteM's probe bounce-backs: prior probers (stems-2003 §3.3-3.4) and floating tuples
probing again (the relaxed BuildFirst, §3.5).

**SteM BounceBack** (Table 2): a probe tuple is bounced back only when the table has no
scan AM, the probe's join binds one of its index AMs, and no EOT with the probe's bind
values is held yet: the SteM may not have all matches, and the tuple goes on as a *prior
prober* to an index AM. **Relaxed BuildFirst**: a floating tuple (it has a component that
is never built) is bounced back while the SteM is not complete, its LastMatchTimeStamp
set to the newest stored TimeStamp, to probe again once more tuples are built. Both are
decided for a whole batch when its probe begins (:mod:`~eddies.modules.stem.bounded_probe`).
"""

from __future__ import annotations

import numpy as np

from eddies.modules.key_set import bind_columns
from eddies.modules.stem.core import SteMCore
from eddies.router.query_graph import Predicate
from eddies.router.tuple_batch import Signature, TupleBatch


class SteMBounceBacks(SteMCore):
    """Which probe tuples a SteM bounces back, and the prior probers it holds."""

    def held_as_prior_probers(self, alias: int, target: int) -> list[TupleBatch]:
        """Every tuple held, in the role ``alias``, as prior probers of ``target``, one
        batch per stored Done-bit set: they look their matches up again after the target
        table's scans failed (see ``Eddy._fall_back_to_lookups``)."""
        if not len(self):
            return []
        rows = self.row_ids.view().copy()
        ts = self.build_ts.view() * self.n_aliases + alias
        if not self.single_alias:  # stored Done bits are only kept for one-alias tables
            return [
                TupleBatch(Signature(1 << alias, 0, True, prior=1 << target), {alias: rows}, ts)
            ]
        codes = self.stored_done.codes()  # interned Done bits (DoneBits)
        masks = self.stored_done.masks
        return [
            TupleBatch(
                Signature(1 << alias, masks[c], True, prior=1 << target),
                {alias: rows[codes == c]},
                ts[codes == c],
            )
            for c in np.unique(codes)
        ]

    def probe_again(self, batch: TupleBatch, target: int, horizon: int) -> TupleBatch:
        """Bounce a floating batch back, remembering the newest tuple it has seen here
        (the newest below the probe's horizon)."""
        newest = int(self.build_ts.view()[horizon - 1]) if horizon else 0
        sig = batch.signature
        again = TupleBatch(
            Signature(sig.span, sig.done, False, 1 << target, 0, True),
            batch.rows,
            batch.ts,
            lmts=np.full(len(batch), newest, dtype=np.int64),
        )
        return again

    def prior_probers(
        self, batch: TupleBatch, target: int, predicate: Predicate
    ) -> TupleBatch | None:
        """The probe tuples to bounce back: the table has no scan AM, the probe's edge
        binds an index AM, the bind values are usable and no EOT for them is held."""
        edge = predicate.edge
        assert edge is not None
        probe_alias = edge.other(target)
        target_cols = edge.side(target)
        probe_cols = edge.side(probe_alias)
        schema = self.store.schema
        missing: np.ndarray | None = None
        for am in self.graph.bindable(edge, target):
            cols = tuple(probe_cols[target_cols.index(c)] for c in am.on)
            types = [schema.field(c).type for c in am.on]
            values, usable = bind_columns(
                self.stores[probe_alias], cols, types, batch.rows[probe_alias]
            )
            uncovered = usable & ~self.eots[am.on].contains(values)
            missing = uncovered if missing is None else missing & uncovered
        if missing is None or not missing.any():
            return None
        sig = batch.signature
        bounced = batch.take(missing) if not missing.all() else batch
        return bounced.with_signature(
            Signature(sig.span, sig.done, True, prior=1 << target, looked=sig.looked)
        )
