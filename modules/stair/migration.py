"""STAIR state migration: the greedy policy at points of stasis, and promotion/demotion of
the cohorts it moves (stairs-2004 §3.1.1, §3.2, §4.2).

Knobs (``eddies.settings.Tuning``, read as the migrator is created): ``stair_check_every``
(admitted tuples between checks), ``stair_greedy_routing`` (route by the greedy plan),
``stair_initial_plan_seed`` (the plan before the first check); as it decides:
``stair_look_again`` (and the guard's costs, :mod:`~eddies.modules.stair.migration_guard`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import structlog

from eddies.modules.stair.cohort import Cohort
from eddies.modules.stair.greedy_plan import GreedyPlan, JoinTopology, initial_fanouts
from eddies.modules.stair.join import StairJoin
from eddies.modules.stair.migration_guard import MigrationGuard
from eddies.modules.stair.row_id_sets import among
from eddies.router.query_graph import QueryGraph
from eddies.router.stats import RunStats
from eddies.router.tuple_batch import concat_batches
from eddies.settings import current

log = structlog.get_logger("eddies.modules")


class StairMigrator(MigrationGuard):
    """State migration between STAIRs by promotion and demotion (stairs-2004 §3.1.1,
    §3.2, §4.2), moving only the tuples of the cohorts whose routing decision changed.

    The eddy routes tuples to the joins by its policy, as with EddyJoins (or, with
    ``Tuning.stair_greedy_routing``, by the current plan: :meth:`choice`, asked by the
    routing table, ``on_plan_change`` telling it to forget its entries). Every
    ``Tuning.stair_check_every`` admitted source tuples, at a point of stasis (nothing in
    flight or buffered: App. A), the greedy policy computes a :class:`GreedyPlan` from
    the router's estimates. A *cohort* — the base tuples of one relation X whose first
    join was e while the plan now sends X to e' (cumulative selectivity
    ``Tuning.stair_migration_margin`` lower) — is migrated, as Figure 6 does for S^R, as far as its
    tuples are worth moving (:meth:`worth_moving`, per tuple):

    1. **demotion**: every stored tuple containing a cohort tuple is removed (the
       intermediate tuples the cohort made through e, wherever they went on; the
       singletons themselves come out of e's STAIR);
    2. **promotion**: the cohort is routed again, as if it arrived now, into e' (insert
       into X's STAIR of e', probe the dual) and its intermediate results on through the
       joins the plan picks, except that joins which would complete a result skip it:
       every result containing a cohort tuple was produced already.

    Batches move whole (numpy masks and Arrow-style take, no per-row loop).
    Correctness: removing every stored tuple containing the cohort leaves the state of
    the same routing history without the cohort (no other stored tuple depends on it);
    routing it again is an EddyJoins history in which the cohort arrived last. From such
    a state every result not produced yet comes exactly once, whatever the eddy routes or
    migrates next (symmetric hash joins meet each pair of tuples once; App. A, Lemmas
    A.3-A.4), and the results the cohort completes now were all produced before (A.4 at
    the previous point of stasis). Invariant B of §3.1.2 alone would not guarantee it
    (docs/concepts.md, "STAIRs"), which is why every tuple holding a moved base tuple
    goes. Points of stasis are needed for that argument (a tuple in flight holding a
    cohort tuple would be stored after its demotion), as in the paper's App. A.

    ``totals``: rows per alias when known (in-memory tables), for the input to come.
    ``migrates=False``: EddyJoins under greedy routing — the same plans at the same
    checks, no state migration (the paper's baseline, stairs-2004 §4.1, §5).
    """

    def __init__(
        self,
        joins: dict[int, StairJoin],
        graph: QueryGraph,
        stats: RunStats,
        random: np.random.Generator | None = None,
        totals: dict[int, int | None] | None = None,
        migrates: bool = True,
    ) -> None:
        super().__init__(joins, graph, stats, totals or {})
        knobs = current()
        self.migrates = migrates
        if random is None and knobs.stair_random_plans_seed is not None and migrates:
            random = np.random.default_rng(knobs.stair_random_plans_seed)
        self.random = random
        self._checked_at = 0
        self._interval = knobs.stair_check_every
        self._first_check = knobs.stair_first_check
        self._random_p = knobs.stair_random_migration_p
        self.routes = knobs.stair_greedy_routing and random is None
        self.topology = JoinTopology(joins)
        self.plan = GreedyPlan(
            joins, initial_fanouts(joins, knobs.stair_initial_plan_seed), topology=self.topology
        )
        self.on_plan_change: Callable[[], None] | None = None
        self._moves: set[tuple[int, int, int]] = set()  # (alias, from, to) done
        self._looked: dict[tuple[int, int, int], int] = {}  # cohort -> admitted then

    def at_stasis(self, admitted: int) -> None:
        """The eddy is at a point of stasis with ``admitted`` source tuples admitted."""
        if not self.joins:
            return
        if self.random is not None:
            if self.random.random() < self._random_p:
                plan = GreedyPlan(self.joins, {}, self.random, self.topology)
                cohorts = self.cohorts(None)
                if cohorts:
                    self.migrate(cohorts[int(self.random.integers(len(cohorts)))], plan)
            return
        # every stair_check_every tuples, or every 1/32 of those admitted so far: a long run
        # checks O(log n) times more, not n / 1000 times (each check builds a plan)
        interval = max(self._interval, admitted // 32)
        if admitted - self._checked_at < interval or (
            admitted < self._first_check and self._checked_at
        ):
            return
        self._checked_at = admitted
        observed = self._observed_fanouts()
        plan = GreedyPlan(
            self.joins, self._fanouts(observed), topology=self.topology, observed=observed
        )
        if self.routes:
            # routing entries ask choice() per span: only a changed choice needs them anew
            changed = not plan.agrees_with(self.plan)
            self.plan = plan
            if changed and self.on_plan_change is not None:
                self.on_plan_change()
        if not self.migrates:
            return
        for cohort in self.cohorts(plan, admitted):
            if (cohort.alias, cohort.target, cohort.source) in self._moves:
                self._interval *= 2  # moving back: a sign of thrashing, back off
            self._moves.add((cohort.alias, cohort.source, cohort.target))
            self.migrate(cohort, plan)

    def choice(self, span: int) -> int | None:
        """The join a tuple of ``span`` goes to under greedy routing (None: all aliases)."""
        return None if span == self.graph.all_aliases else self.plan.choice(span)

    def cohorts(self, plan: GreedyPlan | None, admitted: int = 0) -> list[Cohort]:
        """The cohorts to migrate now. Greedy: for each relation X and join e holding
        singletons of X while the plan sends X to e' with a cumulative selectivity
        ``Tuning.stair_migration_margin`` lower, the tuples of that cohort worth moving
        (:meth:`worth_moving`); each cohort looked at again only once the admitted tuples
        grew ``Tuning.stair_look_again`` times (stages, not a check every
        ``stair_check_every``). With no plan (``self.random``): a random part of each
        cohort, to a random other join."""
        look_again, margin = current().stair_look_again, current().stair_migration_margin
        out = []
        # Only an alias with more than one join has a routing decision to undo; the
        # cheap tests (same join, looked at lately, not better enough) come first.
        for alias, options in self.topology.choosing:
            span = 1 << alias
            for d in options:
                if plan is None:
                    others = [o for o in options if o != d]
                    target = others[int(self.random.integers(len(others)))]
                else:
                    target = plan.choice(span)
                    if target == d:
                        continue
                    key = (alias, d, target)
                    if admitted < look_again * self._looked.get(key, 0) or plan.cumulative(
                        span, target
                    ) >= (1 - margin) * plan.cumulative(span, d):
                        continue
                    self._looked[key] = admitted
                waiting = self.joins[d].stairs[alias].count(span)
                if not waiting or (
                    plan is not None and not self.may_pay(alias, d, target, waiting, admitted, plan)
                ):
                    continue
                batches = self.joins[d].stairs[alias].batches(span)
                ids = np.sort(np.concatenate([b.rows[alias] for b in batches]), kind="stable")
                cohort = Cohort(alias, d, target, ids)
                if plan is None:
                    cohort.ids = ids[self.random.random(len(ids)) < 0.7]
                else:
                    cohort.ids = self.worth_moving(cohort, admitted, plan)
                if len(cohort.ids):
                    out.append(cohort)
        return out

    def _observed_fanouts(self) -> dict[tuple[int, int], float]:
        """Per (join, side): decayed tuples out ÷ tuples in over every signature that
        reached the join from that side (eddies.router.estimates). The guard spreads
        these over the partner rows to come (:meth:`_spread`): a fan-out per tuple that
        reached the join, times base rows, is what the guard was built on; the state
        model of :meth:`_fanouts`, times base rows, would count every partner row as if it
        passed the selections before the join (TPC-H §5.2: 4.8 per customer, of whom 1 in
        260 passes; bench/stairs.py Fig. 7(ii) then kept a cohort of 30 k orders)."""
        estimates = self.stats.estimates
        if estimates is None:
            return {}
        sums: dict[tuple[int, int], list[float]] = {}
        for sig, arms in estimates.by_signature.items():
            for d, j in self.joins.items():
                if d in arms:
                    est = estimates.get(sig, d)
                    acc = sums.setdefault((d, j.side_of(sig.span)), [0.0, 0.0])
                    acc[0] += est.out
                    acc[1] += est.tuples
        return {k: o / n for k, (o, n) in sums.items() if n > 0}

    def _fanouts(
        self, observed: dict[tuple[int, int], float] | None = None
    ) -> dict[tuple[int, int], float]:
        """Per (join, side), for the plan's choices: the fan-out a tuple from that side
        meets now — the join's selectivity (:meth:`StairJoin.selectivity`) times the
        dual STAIR's stored tuples; for a join no probe has met stored tuples at yet,
        the ``observed`` one (:meth:`_observed_fanouts`). The state model matters when a
        join's state grows while the eddy sends a relation elsewhere: the observed
        fan-out of the abandoned join would stay what it was when it was left (no tuple
        refreshes it), and the plan would turn back to it (TPC-H §5.2: orders back to
        orders ⋈ lineitem for 16 k tuples, the routing thrash of §4.2)."""
        out = dict(self._observed_fanouts() if observed is None else observed)
        for d, j in self.joins.items():
            sigma = j.selectivity()
            if sigma is None:
                continue
            for side in (j.edge.left, j.edge.right):
                out[(d, side)] = sigma * len(j.stairs[j.edge.other(side)])
        return out

    def migrate(self, cohort: Cohort, plan: GreedyPlan) -> None:
        """Move ``cohort`` to its target join: demote, then promote (see the class);
        ``plan`` routes its intermediate results."""
        alias, span = cohort.alias, 1 << cohort.alias
        singletons = [
            b.take(np.flatnonzero(among(b.rows[alias], cohort.ids)))
            for b in self.joins[cohort.source].stairs[alias].batches(span)
        ]
        relocated = sum(len(b) for b in singletons)
        removed = sum(
            s.remove(alias, cohort.ids) for j in self.joins.values() for s in j.stairs.values()
        )
        demoted = removed - relocated
        everything = self.graph.all_aliases
        queue = deque((cohort.target, b) for b in singletons)
        promoted = 0
        while queue:
            d, batch = queue.popleft()
            # the other batches of its signature bound for the same join go along: one
            # insert and probe (the order of a symmetric hash join's inputs is free)
            same = [b for e, b in queue if e == d and b.signature == batch.signature]
            if same:
                queue = deque((e, b) for e, b in queue if e != d or b.signature != batch.signature)
                batch = concat_batches([batch, *same])
            promoted += len(batch) if batch.signature.span != span else 0
            union = batch.signature.span
            for made in self.joins[d].route(
                batch, skip=lambda s, u=union: s.span | u == everything
            ):
                queue.append((plan.choice(made.signature.span), made))
        self.stats.stair_migrations += 1
        self.stats.stair_demotions += demoted
        self.stats.stair_promotions += promoted
        self.stats.stair_migrated_tuples += relocated + demoted + promoted
        log.debug(
            "STAIR cohort migrated",
            alias=alias,
            source=self.joins[cohort.source].name,
            target=self.joins[cohort.target].name,
            relocated=relocated,
            demoted=demoted,
            promoted=promoted,
        )
