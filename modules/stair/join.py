"""The STAIR join of one equi-join edge: its two dual STAIRs, routed to as one module
(stairs-2004 §3.1).

Each equi-join of the query's spanning tree gets two STAIRs, one per side, *duals* of
each other; routing a tuple "to the join R ⋈ S" means inserting it into the STAIR of its
own side and probing the dual with it, at once (the Dual Routing Property of §3.1). Two
STAIRs used so are a pipelined symmetric hash join: this is the EddyJoins architecture of
eddies-2000, the eddy choosing the join order tuple by tuple. Key codes come from one
:class:`EdgeCoder` per join, shared by both duals so that equal values get equal codes
(multi-column keys are mixed and then verified column by column).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from eddies.modules.base import Module
from eddies.modules.key_encoding import KeyDictionary, encode_rows, uses_dictionary
from eddies.modules.stair.state import Stair
from eddies.router.estimates import DEFAULT_HALF_LIFE
from eddies.router.messages import Work
from eddies.router.query_graph import Predicate
from eddies.router.tuple_batch import Signature, TupleBatch
from eddies.sources.table_store import TableStore


class EdgeCoder:
    """Join values of one equi-join edge to int64 codes, for both of its STAIRs.

    ``kinds``: the edge's key_encoding kind per column pair. ``encode`` returns
    ``(mixed keys, per-column codes, validity mask or None)``; with ``grow=False`` a
    dictionary value never inserted gets code -1 and matches nothing.
    """

    def __init__(self, kinds: tuple[str, ...]) -> None:
        self.kinds = kinds
        self.dictionaries = [KeyDictionary() if uses_dictionary(k) else None for k in kinds]

    def encode(
        self, store: TableStore, columns: tuple[str, ...], row_ids: np.ndarray, grow: bool
    ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray | None]:
        """The codes of ``columns`` of ``store`` at ``row_ids`` (see the class)."""
        return encode_rows(store, columns, row_ids, self.kinds, self.dictionaries, grow)


class StairJoin(Module):
    """The two dual STAIRs of one equi-join edge ``predicate`` (stairs-2004 §3.1).

    A Work's batch spans exactly one side of the edge: it is inserted into that side's
    STAIR and probes the dual; the outputs are the joined tuples, grouped by the stored
    tuples' signatures, with the edge's Done bit set (span and Done bits ORed, as when
    two tuples join in eddies-2000 §3). Never waits, so the eddy visits it inline.
    """

    kind = "stair"

    def __init__(
        self,
        name: str,
        predicate: Predicate,
        stores: dict[int, TableStore],
        alias_names: list[str],
    ) -> None:
        edge = predicate.edge
        assert edge is not None
        self.name = name
        self.predicate = predicate
        self.edge = edge
        self.stores = stores
        self.coder = EdgeCoder(edge.kinds)
        self.stairs = {
            a: Stair(a, edge.side(a), f"{alias_names[a]}.({', '.join(edge.side(a))})")
            for a in (edge.left, edge.right)
        }
        # Decayed sums for the join selectivity (see :meth:`selectivity`): pairs made,
        # and pairs looked at (probe tuples × stored tuples probed).
        self._pairs = 0.0
        self._exposure = 0.0

    def selectivity(self) -> float | None:
        """The edge's join selectivity: matches per (probe tuple, stored tuple) pair,
        over the probes of both sides, decayed by probe tuples (half-life
        ``DEFAULT_HALF_LIFE``, as the router's estimates); None before any probe met a
        stored tuple. A tuple's fan-out here is this times the dual STAIR's size, which
        grows as the input arrives: an observed fan-out says what the state was, this
        what it is (:meth:`StairMigrator._fanouts`)."""
        return self._pairs / self._exposure if self._exposure > 0 else None

    def _observe(self, probes: int, stored: int, pairs: int) -> None:
        if probes:
            f = 0.5 ** (probes / DEFAULT_HALF_LIFE)
            self._pairs = self._pairs * f + pairs
            self._exposure = self._exposure * f + probes * stored

    @property
    def inline(self) -> bool:
        """Always: an insert and a probe never wait."""
        return True

    def release(self) -> None:
        """Free both STAIRs' stored tuples (see Module.release)."""
        for stair in self.stairs.values():
            stair.groups = {}

    def side_of(self, span: int) -> int:
        """The edge's alias that ``span`` contains (exactly one does)."""
        return self.edge.left if span >> self.edge.left & 1 else self.edge.right

    def keys_of(self, batch: TupleBatch, alias: int, grow: bool):
        """(mixed keys, per-column codes, validity or None) of ``batch`` on ``alias``'s
        side of the edge (``grow``: new dictionary values get codes)."""
        return self.coder.encode(self.stores[alias], self.edge.side(alias), batch.rows[alias], grow)

    async def process(self, work: Work) -> list[TupleBatch]:
        """Route the Work's batch into the join (:meth:`route`)."""
        return self.route(work.batch)

    def route(self, batch: TupleBatch, skip: Callable[[Signature], bool] | None = None):
        """Insert ``batch`` into its side's STAIR and probe the dual (Dual Routing
        Property); ``skip``: stored signatures of the dual not to join with."""
        if not len(batch):
            return []
        side = self.side_of(batch.signature.span)
        keys, codes, valid = self.keys_of(batch, side, grow=True)
        self.stairs[side].insert(batch, keys, codes, valid)
        dual = self.stairs[self.edge.other(side)]
        matches = dual.probe(keys, codes, valid, skip)
        stored = sum(len(g) for s, g in dual.groups.items() if skip is None or not skip(s))
        if stored:
            probes = len(keys) if valid is None else int(np.count_nonzero(valid))
            self._observe(probes, stored, sum(len(m[1]) for m in matches))
        return self.joined(batch, matches)

    def store(self, batch: TupleBatch) -> None:
        """Insert ``batch`` into its side's STAIR without probing (a migration relocating
        tuples: steps 1-2 of a promotion, stairs-2004 §3.1.1)."""
        if len(batch):
            side = self.side_of(batch.signature.span)
            self.stairs[side].insert(batch, *self.keys_of(batch, side, grow=True))

    def join_with(self, batch: TupleBatch, span: int) -> list[TupleBatch]:
        """Probe the dual STAIR with ``batch``, matching only stored tuples of ``span``,
        inserting nothing (a migration making super-tuples: step 3 of a promotion)."""
        if not len(batch):
            return []
        side = self.side_of(batch.signature.span)
        keys, codes, valid = self.keys_of(batch, side, grow=False)
        dual = self.stairs[self.edge.other(side)]
        return self.joined(batch, dual.probe(keys, codes, valid, lambda s: s.span != span))

    def joined(self, batch: TupleBatch, matches) -> list[TupleBatch]:
        """Concatenate probe tuples with their matches, one batch per stored signature."""
        sig = batch.signature
        out: list[TupleBatch] = []
        for stored, probe_idx, stored_rows in matches:
            rows = {a: ids[probe_idx] for a, ids in batch.rows.items()}
            rows.update(stored_rows)
            joined_sig = Signature(
                sig.span | stored.span, sig.done | stored.done | self.predicate.bit, True
            )
            out.append(TupleBatch(joined_sig, rows, batch.ts[probe_idx]))
        return out
