"""The migration guard: whether moving a cohort pays, per tuple (stairs-2004 §4.2).

A migration costs now — it relocates and promotes the cohort, scans every stored tuple
holding its relation to demote, and may add module visits later — and saves the
intermediate tuples the cohort would have made where it is. The guard weighs the two with
the router's fan-outs and the input still to come, against thrashing and late
migrations. Its costs are knobs of ``eddies.settings.Tuning``, read as it decides:
``stair_migration_cost`` (a migration, in intermediate tuples' worth of work) and
``stair_visit_cost`` (one module visit it adds).
"""

from __future__ import annotations

import numpy as np

from eddies.modules.stair.cohort import Cohort
from eddies.modules.stair.greedy_plan import GreedyPlan
from eddies.modules.stair.join import StairJoin
from eddies.modules.stair.row_id_sets import occurrences
from eddies.router.query_graph import QueryGraph
from eddies.router.stats import RunStats
from eddies.router.tuple_batch import Signature, TupleBatch
from eddies.settings import current


class MigrationGuard:
    """What :class:`~eddies.modules.stair.migration.StairMigrator` weighs before it moves
    a cohort: ``joins`` (destination id -> StairJoin), the query ``graph``, the run's
    ``stats`` (module visits so far) and ``totals`` (rows per alias when known)."""

    def __init__(
        self,
        joins: dict[int, StairJoin],
        graph: QueryGraph,
        stats: RunStats,
        totals: dict[int, int | None],
    ) -> None:
        self.joins = joins
        self.graph = graph
        self.stats = stats
        self.totals = totals

    def _horizon(self, admitted: int) -> tuple[float, float | None]:
        """(ahead, left): the input still to come over the input admitted (1 when the
        totals are unknown), and the fraction of the input still to come (None: unknown)."""
        totals = list(self.totals.values())
        known = bool(totals) and all(t is not None for t in totals) and admitted > 0
        if not known:
            return 1.0, None
        total = sum(totals)
        return max(total - admitted, 0) / admitted, max(1.0 - admitted / total, 0.0)

    def _spread(self, plan: GreedyPlan, d: int, alias: int, left: float | None) -> float:
        """f × n / s at join ``d`` for ``alias``'s side (see :meth:`worth_moving`)."""
        join = self.joins[d]
        far = join.edge.other(alias)
        stored = len(join.stairs[alias])
        total = self.totals.get(far)
        to_come = total * left if left is not None and total else len(join.stairs[far])
        return plan.observed.get((d, far), 0.0) * to_come / max(stored, 1)

    def _holding(self, alias: int) -> tuple[int, int]:
        """(stored tuples holding ``alias`` that are not its singletons, all stored tuples
        holding it): what the guard's scans and a demotion look at."""
        made = scanned = 0
        for j in self.joins.values():
            for s in j.stairs.values():
                for sig, g in s.groups.items():
                    if sig.span >> alias & 1:
                        scanned += len(g)
                        made += len(g) if sig.span != 1 << alias else 0
        return made, scanned

    def _threshold(self, scanned: int, visits: float) -> float:
        """What a migration's savings must exceed: the scan of the ``scanned`` stored
        tuples holding its relation, the migration itself and the ``visits`` more module
        visits it causes (§4.2), at the costs in force (``Tuning.stair_migration_cost``,
        ``stair_visit_cost``)."""
        knobs = current()
        return (
            knobs.stair_scan_cost * scanned
            + knobs.stair_migration_cost
            + knobs.stair_visit_cost * visits
        )

    def new_signatures(self, alias: int, target: int, plan: GreedyPlan) -> list[tuple[int, int]]:
        """The (join, side) STAIRs in which promoting ``alias``'s tuples through join
        ``target`` would store a span none of them holds now: the cohort's singletons at
        ``target``, then each intermediate span along the plan's choices until the one
        a join completes (not stored)."""
        out, span, d = [], 1 << alias, target
        everything = self.graph.all_aliases
        while span != everything:
            join = self.joins[d]
            side = join.side_of(span)
            if not join.stairs[side].count(span):
                out.append((d, side))
            span |= 1 << join.edge.other(side)
            if span == everything:
                break
            d = plan.choice(span)
        return out

    def visits_caused(self, alias: int, target: int, plan: GreedyPlan, ahead: float) -> float:
        """The module visits a migration of ``alias``'s tuples to ``target`` adds: each
        STAIR holding a span more (:meth:`new_signatures`) answers each later probe with
        a batch more (routed on: a visit), and a join is probed from one side by about
        half of the batches routed to it; later = ``ahead`` × those routed so far."""
        return sum(
            self.stats.modules[self.joins[d].name].batches_in * ahead / 2
            for d, _ in self.new_signatures(alias, target, plan)
        )

    def may_pay(
        self, alias: int, d: int, target: int, waiting: int, admitted: int, plan: GreedyPlan
    ) -> bool:
        """A bound, from counts alone, on what moving the ``waiting`` singletons of
        ``alias`` out of join ``d`` to ``target`` can save: each tuple x saves at most
        ``max(d_x × ahead, spread_d) - spread_target - 1 ≤ d_x × ahead + max(spread_d -
        spread_target - 1, 0)`` (see :meth:`worth_moving`), and the d_x sum to at most
        the stored tuples holding ``alias`` beyond its singletons. False:
        :meth:`worth_moving` would move nothing, so its per-tuple scans are skipped (most
        checks: the guard refuses most cohorts)."""
        ahead, left = self._horizon(admitted)
        made, scanned = self._holding(alias)
        beyond = self._spread(plan, d, alias, left) - self._spread(plan, target, alias, left) - 1
        bound = ahead * made + waiting * max(beyond, 0.0)
        return bound >= self._threshold(scanned, self.visits_caused(alias, target, plan, ahead))

    def worth_moving(self, cohort: Cohort, admitted: int, plan: GreedyPlan) -> np.ndarray:
        """The guard against thrashing and late migrations (§4.2), per tuple. A tuple x
        of the cohort made ``d_x`` stored intermediate tuples through its join so far
        (one vectorized pass over the stored tuples holding the cohort's relation) and
        would make ``p_x`` through the target now (probing its dual with the cohort).
        Left where it is, x is expected to meet ``max(d_x × ahead, f × n / s)`` more
        partners: its past repeated over the input still to come (``ahead`` = rows known
        minus admitted, over admitted; 1 when unknown), or the partners' side's current
        fan-out ``f`` (router estimates) over the ``n`` partner rows still to come, spread
        over the ``s`` tuples stored beside x (when the partners' selectivity changed,
        the past says little). Likewise at the target, with ``p_x``. Moving x pays when
        it saves more than it costs now: ``1 + p_x`` (the relocation and the promotions;
        demotions drop tuples).

        The tuples it does not pay for one by one stay behind as a *remnant* in the old
        join's STAIR, and every later probe there that meets one of them answers with a
        small batch more, routed on through the joins (a module visit, ``stair_visit_cost``).
        When those visits — at most the remnant's expected partners, at most one per
        probe batch still to come — outweigh what moving the remnant too would cost, the
        whole cohort moves (TPC-H §5.2: 169 orders of 89 k left behind made 164 visits of
        ~3 tuples each to customer ⋈ orders). Returns the sorted ids of the tuples to
        move."""
        ids, alias = cohort.ids, cohort.alias
        made = self._made(ids, alias)
        ahead, left = self._horizon(admitted)
        stay = np.maximum(made * ahead, self._spread(plan, cohort.source, alias, left))
        hopeful = stay > 1
        if not hopeful.any():
            return ids[:0]
        sig = Signature(1 << alias, 0, True)
        batch = TupleBatch(sig, {alias: ids}, np.zeros(len(ids), dtype=np.int64))
        join = self.joins[cohort.target]
        everything = self.graph.all_aliases
        dual = join.stairs[join.edge.other(alias)]
        keys, codes, valid = join.keys_of(batch, alias, grow=False)
        promised = dual.match_counts(keys, codes, valid, lambda s: s.span | sig.span == everything)
        go = np.maximum(promised * ahead, self._spread(plan, cohort.target, alias, left))
        gain = stay - go - (1 + promised)
        moving = hopeful & (gain > 0)
        # A migration also scans every stored tuple holding the relation (to demote):
        # what it saves must outweigh that scan too, or small cohorts cost more than
        # they save.
        visits = self.visits_caused(alias, cohort.target, plan, ahead)
        if gain[moving].sum() < self._threshold(self._holding(alias)[1], visits):
            return ids[:0]
        kept = ~moving
        if kept.any():
            probes_to_come = self.stats.modules[self.joins[cohort.source].name].batches_in
            kept_visits = min(float(stay[kept].sum()), probes_to_come * ahead / 2)
            if gain[kept].sum() + current().stair_visit_cost * kept_visits > 0:
                return ids
        return ids[moving]

    def _made(self, ids: np.ndarray, alias: int) -> np.ndarray:
        """Per id of ``ids`` (sorted), the stored non-singleton tuples holding it."""
        made = np.zeros(len(ids), dtype=np.int64)
        for j in self.joins.values():
            for s in j.stairs.values():
                for sig, g in s.groups.items():
                    if sig.span >> alias & 1 and sig.span != 1 << alias and len(g):
                        made += occurrences(g.rows[alias].view(), ids)
        return made
