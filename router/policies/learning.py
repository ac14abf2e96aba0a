"""Policies that learn from observed costs and selectivities: ``rank`` and ``bandit``.

Both route with the estimates of :mod:`eddies.router.estimates` (per signature and
destination, decayed with a half-life in tuples) and share the batching of
:class:`LearningPolicy`, which never commits a batch blindly:

* **Pilots.** When a signature is new (a choice that may be expensive — an SM, an index
  AM lookup — has no estimate here nor anywhere), and when an estimate at it drifts, the
  next batch of that signature is split: a pilot of :func:`pilot_size` tuples (n/256,
  from ``MIN_PILOT_TUPLES`` to ``PILOT_TUPLES``) goes to each such choice, and the rest
  is held (:data:`~eddies.router.policies.base.HOLD`) until the pilots have answered — or
  until an observed choice outranks every pilot still out whatever it will show (a pilot
  of k tuples out for t seconds is a censored observation: rank ≥ −k/t), so a slow async
  UDF's pilot holds nothing back once a cheap selective predicate has answered.
* **Split only what is worth splitting.** A decision whose estimated work (tuples × the
  chosen choice's seconds per tuple) is below ``SMALL_WORK_SECONDS``, or whose choice is
  free (below ``SPLIT_COST_SECONDS`` a tuple), sends the whole batch: each extra Work
  costs a module visit (≈0.1-0.2 ms), more than a wrong order of free operators loses
  (the PostgreSQL eddy paper's overhead argument, §4).
* **Batch sizes grow with confidence and shrink on drift.** Above that, each routing
  decision at a signature sends at most ``PILOT_TUPLES · GROWTH**level`` tuples and the
  rest is held until the next answer; ``level`` grows with every answer at the signature
  and restarts at 0 on drift. A decision also never commits more than
  ``HORIZON_SECONDS`` of estimated work, so an expensive predicate is re-decided every
  few milliseconds (the PostgreSQL eddy's reoptimization frequency,
  eddies-in-postgresql §2.2, chosen by cost instead of fixed). With ``batch_size=1``
  nothing is held: each tuple is its own decision, the per-tuple eddy of eddies-2000.

``rank`` (eddies-in-postgresql §3; Krishnamurthy, Boral & Zaniolo, VLDB 1986): each
choice ``a`` at a signature has rank ``(s_a − 1) / c_a`` (selectivity, seconds per
tuple); the lowest rank goes first. For selections (s ≤ 1) that is ordering by
``c / (1 − s)`` — the classic rank ordering of expensive predicates; for SteM probes,
whose s is a fan-out, it is the KBZ rank of join ordering: a join that shrinks the
intermediate result cheaply goes first, one that grows it goes last, and among growing
ones the cheapest per extra result tuple first.

``hybrid`` (the default): ``rank`` with its pilots where a choice may be expensive, the
lottery of eddies-2000 §4.3 among free choices, and free *selections* (UDF-free SMs, SteM
filters: they never grow a batch) first wherever one is eligible, with the whole batch
and no pilot. Before a probe: a probe whose fan-out the tuples would have been filtered
from costs more than the ~µs a tuple of a filter that keeps them (STAIRs §5.4's R⋈S⋈T: S
through both SteM filters first makes 3,000 probe tuples where a blind draw between the
probes made 50,000-175,000; ``bench/adaptive.py`` (c)). Before a build: a tuple a
selection drops is never stored (the lottery's selection push-down). Before an SM that
calls a UDF or an index AM lookup: this order loses at most their ~µs a tuple on tuples
the expensive choice would have dropped, the other order the expensive choice's cost on
every tuple they drop (expensive predicates last: Hellerstein & Stonebraker, SIGMOD
1993). Among the selections, the lowest rank ``(s − 1) / c`` goes first, and before one
has answered the lowest selectivity (a SteM filter's prior, 1/3 for an SM):
:meth:`HybridPolicy.first_selection`. Without a selection, a decision among free choices
is the lottery's draw, and one with an expensive choice is ``rank``'s, which pilots the
unknown choice on a few tuples before committing the batch. Among free choices a wrong
order costs less than the module visits rank's estimates need to settle (its first
whole-batch estimates of SteM probes depend on how full the SteMs were then), and the
lottery's tickets keep learning from every answer; before an expensive choice a blind
draw can cost the whole batch (a 2,000-row batch sent to a 10 ms async UDF before a 5%
predicate: ``bench/adaptive_async.py``).

``bandit``: Discounted UCB (D-UCB; Garivier & Moulines, "On Upper-Confidence Bound
Policies for Switching Bandit Problems", ALT 2011) over the choices at each signature. A
pull is ``PULL_TUPLES`` tuples routed to a choice; its reward in (0, 1] is
``min(1, exp(1 − p / p_min))`` where ``p = c_a + s_a · Σ_{b≠a} c_b`` is the per-tuple cost of the
path "a first, then the others" from the observed cost and selectivity of ``a`` and the
estimates of the others, and ``p_min`` the cheapest such path. Rewards and pull counts are
discounted by the same half-life as the estimates (γ = 0.5^(1/half_life) per tuple), and
the index is ``X̄_a + 2·sqrt(ξ·log n / N_a)`` with ξ = 0.6, as in the paper. For ϒ_T
abrupt changes of the reward distributions within T pulls, D-UCB with γ = 1 − ¼·sqrt(ϒ_T/T)
has expected regret O(sqrt(T·ϒ_T)·log T) (their Theorem 1; sliding-window UCB gets
O(sqrt(T·ϒ_T·log T)), and no policy beats Ω(sqrt(T)) there). The bound is on the
surrogate reward per signature, not on query time; the discount is what forgets: a choice
left alone for a few half-lives has small N_a and a large bonus, so it is tried again.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from eddies.router.estimates import Estimate
from eddies.router.policies.base import HOLD, Choice, HasRoom, Observation, RoutingPolicy
from eddies.router.policies.lottery import LotteryPolicy
from eddies.router.routing_table import DestinationKind, RouteEntry
from eddies.router.tuple_batch import Signature

#: The policies defined here (names in eddies.router.run_choices.POLICIES).
LEARNING_POLICIES = ("rank", "bandit", "hybrid")
#: Most tuples of one pilot batch (per choice); see :func:`pilot_size`.
PILOT_TUPLES = 256
#: Fewest tuples of one pilot batch.
MIN_PILOT_TUPLES = 8
#: Estimated seconds of work below which a decision sends the whole batch, unsplit.
SMALL_WORK_SECONDS = 0.002
#: Seconds per tuple below which a choice is free (an Arrow selection or a SteM probe:
#: 0.05-1 µs; a small pilot's per-Work overhead inflates its estimate to a few µs): its
#: decisions send whole batches. Expensive predicates (UDFs, 20 µs and more) split.
SPLIT_COST_SECONDS = 5e-6
#: Tuples one bandit pull counts for (the unit of N_a in the D-UCB index).
PULL_TUPLES = 32
#: Decayed tuples an estimate needs to count as known at a signature.
MIN_WEIGHT = 64
#: Estimated seconds of work one routing decision may commit.
HORIZON_SECONDS = 0.05
#: Growth factor of the decision size per answer at a signature.
GROWTH = 4
#: Selectivity assumed of a free selection that has never answered and has no prior
#: (System R's default for a range predicate, Selinger et al., SIGMOD 1979).
UNKNOWN_SELECTIVITY = 1 / 3
#: D-UCB exploration constant ξ (Garivier & Moulines 2011 take ξ > 1/2).
XI = 0.6


def pilot_size(n: int) -> int:
    """Tuples of one pilot out of a batch of ``n``: 1/256 of it, within
    [``MIN_PILOT_TUPLES``, ``PILOT_TUPLES``]. Small pilots answer fast even at an expensive
    choice (a 2,000-tuple batch pilots 8 tuples: 8 calls of an async UDF, one wave)."""
    return min(PILOT_TUPLES, max(MIN_PILOT_TUPLES, n // 256))


@dataclass
class _SignatureState:
    blocking: bool = True  # hold the rest until the pilots answer (start, drift)
    level: int = 8  # decision size PILOT_TUPLES · GROWTH**(level+1); from 8 on: whole batches
    # choices with a pilot unanswered -> (perf_counter() when sent, tuples sent)
    piloting: dict[int, tuple[float, int]] = field(default_factory=dict)
    stale: set[int] = field(default_factory=set)  # choices to observe again (after drift)


class LearningPolicy(RoutingPolicy):
    """Pilots and confidence-grown batch sizes (module docstring); subclasses :meth:`pick`."""

    name = "learning"

    def __init__(self, destinations, rng) -> None:
        super().__init__(destinations, rng)
        self._state: dict[Signature, _SignatureState] = {}
        self._free = {
            d.id
            for d in destinations
            if d.kind
            in (
                DestinationKind.PROBE,
                DestinationKind.BUILD,
                DestinationKind.FILTER,
                DestinationKind.JOIN,
            )
        }

    def _estimate(self, sig: Signature | None, dest: int) -> Estimate | None:
        est = self.estimates.get(sig, dest) if sig is not None else None
        if est is None or est.tuples < MIN_WEIGHT:
            # A choice unseen at this signature: what it did elsewhere is better than nothing.
            est = self.estimates.by_destination.get(dest) if est is None else est
        return est

    def pick(self, sig: Signature | None, arms: tuple[int, ...]) -> int:
        raise NotImplementedError  # pragma: no cover

    def rank(self, sig: Signature | None, dest: int) -> float:
        """Rank ``(s − 1) / c`` of ``dest`` at ``sig`` (0.0 when unknown)."""
        est = self._estimate(sig, dest)
        if est is None or est.tuples <= 0:
            return 0.0  # unknown: as a free operator that keeps every tuple
        return (est.selectivity - 1.0) / max(est.cost, 1e-9)

    def _outranks_pilots(
        self, sig: Signature, arms: tuple[int, ...], state: _SignatureState
    ) -> int | None:
        """The observed choice that goes before every choice whose pilot is still out,
        whatever its pilot shows; None if there is none yet.

        A pilot of k tuples out for t seconds is a censored observation: its choice costs
        at least t/k per tuple, so its rank (s − 1)/c is at least −k/t even if it drops
        every tuple. An observed choice with a lower rank goes first in any case, and the
        rest of the batch need not wait (a slow async UDF's pilot holds nothing back once
        a cheap selective predicate has answered)."""
        known = [a for a in arms if a not in state.piloting]
        if not known or not state.piloting:
            return None
        best = min(known, key=lambda a: self.rank(sig, a))
        best_rank = self.rank(sig, best)
        now = time.perf_counter()
        for sent_at, tuples in state.piloting.values():
            elapsed = now - sent_at
            if elapsed <= 0 or best_rank >= -tuples / elapsed:
                return None
        return best

    def choose(
        self, entry: RouteEntry, n: int, has_room: HasRoom, signature: Signature | None = None
    ) -> Choice:
        arms = entry.destinations
        if signature is None:  # no signature to learn at: rank by what each did anywhere
            return self.pick(None, arms)
        state = self._state.get(signature)
        if state is None:
            state = self._state[signature] = _SignatureState()
        need = [a for a in arms if a not in state.piloting and self._unknown(signature, a, state)]
        if not need and not state.piloting:
            state.blocking = False
        if n == 1:  # the per-tuple eddy: every tuple is a decision, none waits
            if need:
                state.piloting[need[0]] = (time.perf_counter(), 1)
                return need[0]
            return self.pick(signature, arms)
        pending = self.in_flight_at.get(signature, 0) > 0
        if state.blocking and (state.piloting or (need and pending)) and self.works_in_flight:
            # No blind commitment: wait for the pilots (or what is in flight) - unless a
            # choice already observed goes first whatever the pilots will show.
            best = None if need else self._outranks_pilots(signature, arms, state)
            if best is None or self._committed_ahead(signature, best):
                return None
            chunk = self._chunk(signature, best, n, state)
            if chunk >= n:
                return best
            choice = np.full(n, HOLD, dtype=np.int64)
            choice[:chunk] = best
            return choice
        pilot = pilot_size(n)
        if need and n < 2 * pilot * len(need):
            # Too small to split usefully: the whole batch explores one unknown choice.
            state.piloting[need[0]] = (time.perf_counter(), n)
            return need[0]
        if need and state.blocking:
            choice = np.full(n, HOLD, dtype=np.int64)
            now = time.perf_counter()
            for i, a in enumerate(need):
                choice[i * pilot : (i + 1) * pilot] = a
                state.piloting[a] = (now, pilot)
            state.level = 0  # after the pilots, decisions grow from small again
            return choice
        best = self.pick(signature, tuple(a for a in arms if a not in need) or arms)
        if not need and self._committed_ahead(signature, best):
            return None
        chunk = self._chunk(signature, best, n, state)
        if not need and chunk >= n:
            return best  # the common case: the whole batch, one decision
        choice = np.full(n, HOLD, dtype=np.int64)
        start = 0
        for a in need:  # a choice stale here: a pilot again, without holding the rest
            choice[start : start + pilot] = a
            state.piloting[a] = (time.perf_counter(), pilot)
            start += pilot
        choice[start : start + chunk] = best
        return choice

    def _committed_ahead(self, sig: Signature, best: int) -> bool:
        """Whether ``best`` already has ``HORIZON_SECONDS`` of estimated work queued beyond
        what its module serves at once (an SM calling UDFs; others are never held here).

        Work routed ahead of the answers it depends on is work a change cannot redirect:
        with the default queues an expensive SM held five decisions, and two UDFs whose
        selectivities swapped kept the old order for ~22k tuples (``bench/adaptive.py``
        (b)). Waiting for an answer instead keeps at most about one decision queued, so
        the next decision sees the change (eddies-2000 §4: routing follows the feedback)."""
        slots = self.destinations[best].slots
        queued = self.tuples_in_flight_to.get(best, 0)
        if slots is None or not queued:
            return False
        est = self._estimate(sig, best)
        cost = est.cost if est is not None else 0.0
        return queued * cost / slots >= HORIZON_SECONDS

    def _chunk(self, sig: Signature, best: int, n: int, state: _SignatureState) -> int:
        """Tuples one decision sends to ``best``: all ``n`` when their estimated work is
        below ``SMALL_WORK_SECONDS`` or ``best`` costs less than ``SPLIT_COST_SECONDS`` a
        tuple (splitting costs a module visit, ≈0.1-0.2 ms, more than a wrong order of
        free operators loses); otherwise growing with confidence
        (``level``) and never more than ``HORIZON_SECONDS`` of estimated work."""
        est = self._estimate(sig, best)
        cost = est.cost if est is not None else 0.0
        if cost < SPLIT_COST_SECONDS or cost * n <= SMALL_WORK_SECONDS:
            return n
        chunk = max(int(SMALL_WORK_SECONDS / cost), PILOT_TUPLES)
        if state.level < 8:  # growing back after pilots (start, drift)
            chunk = max(chunk, PILOT_TUPLES * GROWTH ** (state.level + 1))
        else:
            chunk = n
        return min(chunk, max(PILOT_TUPLES, int(HORIZON_SECONDS / cost)))

    def _unknown(self, sig: Signature, dest: int, state: _SignatureState) -> bool:
        """A choice to pilot: stale by drift, or one that may be expensive (an SM, which
        may call a UDF; an index AM lookup, which waits on a source) with no estimate
        here nor anywhere. A SteM probe is an in-memory hash probe, cheap whatever its
        fan-out: it is learned from the batches it gets, not piloted (a pilot's extra
        Works cost more than one batch in a worse order of free operators)."""
        if dest in state.stale:
            return True
        if dest in self._free:
            return False
        if self.estimates.weight(sig, dest) >= MIN_WEIGHT:
            return False
        total = self.estimates.by_destination.get(dest)
        return total is None or total.observations == 0

    def on_observed(self, seen: Observation) -> None:
        state = self._state.get(seen.signature)
        if state is None:
            return
        state.piloting.pop(seen.destination, None)
        state.stale.discard(seen.destination)
        if seen.drift:
            state.level = 0
            state.blocking = True
            # Pilot every other choice again: what changed here may have changed there.
            state.stale.update(a for a in self.estimates.by_signature.get(seen.signature, {}))
            state.stale.discard(seen.destination)
        else:
            state.level += 1


class RankPolicy(LearningPolicy):
    """Lowest rank ``(s − 1) / c`` first (rank ordering; see the module docstring)."""

    name = "rank"

    def pick(self, sig: Signature | None, arms: tuple[int, ...]) -> int:
        return min(arms, key=lambda a: self.rank(sig, a))


class BanditPolicy(LearningPolicy):
    """Discounted UCB over the choices at each signature (see the module docstring)."""

    name = "bandit"

    def __init__(self, destinations, rng) -> None:
        super().__init__(destinations, rng)
        # (signature, destination) -> [decayed Σ reward·pulls, clock of last update]
        self._rewards: dict[tuple[Signature, int], list[float]] = {}

    def _reward_sum(self, sig: Signature, dest: int) -> float:
        entry = self._rewards.get((sig, dest))
        if entry is None:
            return 0.0
        clock = self.estimates.clock.get(sig, 0.0)
        entry[0] *= 0.5 ** ((clock - entry[1]) / self.estimates.half_life)
        entry[1] = clock
        return entry[0]

    def pick(self, sig: Signature | None, arms: tuple[int, ...]) -> int:
        if sig is None:
            return arms[0]
        pulls = [self.estimates.weight(sig, a) / PULL_TUPLES for a in arms]
        for a, n in zip(arms, pulls, strict=True):
            if n <= 0:
                return a
        total = sum(pulls)
        best, best_index = arms[0], -math.inf
        for a, n in zip(arms, pulls, strict=True):
            index = self._reward_sum(sig, a) / n + 2 * math.sqrt(XI * math.log(max(total, 1.0)) / n)
            if index > best_index:
                best, best_index = a, index
        return best

    def on_observed(self, seen: Observation) -> None:
        super().on_observed(seen)
        signature, destination, tuples_in = seen.signature, seen.destination, seen.tuples_in
        tuples_out, seconds = seen.tuples_out, seen.seconds
        if seen.drift:  # the estimate restarted: so do its rewards
            self._rewards.pop((signature, destination), None)
        arms = self.estimates.by_signature.get(signature, {})
        if len(arms) < 2 or tuples_in <= 0:
            return
        costs = {a: max(self.estimates.get(signature, a).cost, 1e-9) for a in arms}
        total = sum(costs.values())

        def path(a: int, c: float, s: float) -> float:
            return c + s * (total - costs[a])

        cheapest = min(
            path(a, costs[a], self.estimates.get(signature, a).selectivity) for a in arms
        )
        observed = path(destination, max(seconds / tuples_in, 1e-9), tuples_out / tuples_in)
        reward = min(1.0, math.exp(1.0 - observed / max(cheapest, 1e-12)))
        self._reward_sum(signature, destination)
        entry = self._rewards.setdefault(
            (signature, destination), [0.0, self.estimates.clock.get(signature, 0.0)]
        )
        entry[0] += reward * tuples_in / PULL_TUPLES


class HybridPolicy(RankPolicy, LotteryPolicy):
    """``lottery`` among free choices, ``rank`` with pilots where one may be expensive.

    Free (:attr:`free`): SteM builds, probes and filters, the output, and SMs whose
    predicate calls no UDF (``Destination.cheap``). Where free selections
    (:attr:`free_selections`: UDF-free SMs, SteM filters) are eligible they go first, the
    one :meth:`first_selection` picks. Otherwise a decision among free choices only is
    :meth:`LotteryPolicy.draw` (tickets booked by :meth:`LotteryPolicy.book` from every
    answer, whichever half routed it), and one where an SM calling a UDF or an index AM
    lookup is eligible is :meth:`LearningPolicy.choose`, ranking by ``(s − 1) / c`` after
    pilots. See the module docstring for why (eddies-2000 §4.3; eddies-in-postgresql
    §3)."""

    name = "hybrid"

    def __init__(self, destinations, rng) -> None:
        super().__init__(destinations, rng)
        free_kinds = (
            DestinationKind.PROBE,
            DestinationKind.BUILD,
            DestinationKind.FILTER,
            DestinationKind.OUTPUT,
        )
        self.free = frozenset(
            d.id
            for d in destinations
            if d.kind in free_kinds or (d.kind is DestinationKind.SM and d.cheap)
        )
        # SteM filter -> the selectivity its SteM expects, until it has answered.
        self._selection_priors: dict[int, float] = {}
        # Free choices that never grow a batch: UDF-free SMs and SteM filters.
        self.free_selections = frozenset(
            d.id
            for d in destinations
            if d.kind is DestinationKind.FILTER or (d.kind is DestinationKind.SM and d.cheap)
        )

    def choose(
        self, entry: RouteEntry, n: int, has_room: HasRoom, signature: Signature | None = None
    ) -> Choice:
        dests = entry.destinations
        # Free selections go first, with the whole batch and no pilot: this order loses at
        # most their ~µs a tuple, the other the work a probe or an expensive choice does on
        # every tuple they drop (see the module docstring); before its build too (a tuple
        # a selection drops is never stored).
        selections = [a for a in dests if a in self.free_selections]
        if selections:
            return self.first_selection(selections, has_room, signature)
        if all(a in self.free for a in dests):
            return self.draw(list(dests), has_room, signature)
        return LearningPolicy.choose(self, entry, n, has_room, signature)

    def first_selection(
        self, selections: list[int], has_room: HasRoom, signature: Signature | None
    ) -> Choice:
        """The free selection (UDF-free SM or SteM filter, ids ``selections``) that takes
        the whole batch next: the lowest rank ``(s − 1) / c`` (the
        estimate at ``signature``, or over all signatures while that one has too little
        weight; rank ordering of selections, Hellerstein & Stonebraker 1993). While one
        has never answered, the lowest selectivity instead (costs are not known yet, and
        free selections' differ less than their selectivities): observed, or a SteM
        filter's prior (routing_table.FilterOffer), or ``UNKNOWN_SELECTIVITY``; a tie is
        drawn by lottery.

        Not the lottery alone: its tickets (in − out) make shares proportional, and a
        batch is drawn whole, so a date comparison that keeps 62% of TPC-H's lineitem got
        every batch in some runs and a filter that keeps 0.4% the rest (SF0.1: sm3 sent
        0-600,000 of 600,572 tuples across 40 seeds, 9.5-16 ms). The rank keeps
        adapting: estimates decay with the tuples observed at the signature, and a drift
        restarts them; a swap of selectivities is seen by the first selection directly
        and by the others through the survivors they get (``bench/adaptive.py`` (c))."""
        if len(selections) == 1:
            return selections[0]
        by_destination = self.estimates.by_destination
        unseen = {
            a for a in selections if (e := by_destination.get(a)) is None or e.observations == 0
        }
        if not unseen:
            return min(selections, key=lambda a: self.rank(signature, a))

        def selectivity(a: int) -> float:
            if a in unseen:
                return self._selection_priors.get(a, UNKNOWN_SELECTIVITY)
            est = self._estimate(signature, a)
            return UNKNOWN_SELECTIVITY if est is None or est.tuples <= 0 else est.selectivity

        guesses = {a: selectivity(a) for a in selections}
        least = min(guesses.values())
        tied = [a for a in selections if guesses[a] == least]
        return tied[0] if len(tied) == 1 else self.draw(tied, has_room, signature)

    def on_filter_ready(self, destination: int, prior_selectivity: float) -> None:
        self._selection_priors[destination] = prior_selectivity
