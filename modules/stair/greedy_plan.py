"""The greedy plan of stairs-2004 §4.1: where a tuple of each span goes next, by the joins'
cumulative selectivities; and the join tree's topology it walks.

The migration policy (:mod:`~eddies.modules.stair.migration`) computes a plan at each
check from the router's estimates; under greedy routing the eddy also routes by it.
"""

from __future__ import annotations

import numpy as np

from eddies.modules.stair.join import StairJoin


class GreedyPlan:
    """Where a tuple of each span goes next: the join of lowest *cumulative selectivity*
    (stairs-2004 §4.1: for each join the tuple could be routed to, the selectivity of
    joining it with everything the join connects it to — for an R tuple and R ⋈ S in
    R ⋈ S ⋈ T, with S ⋈ T — and the lowest wins).

    ``fanout[(join, alias)]``: the observed fan-out of the join for tuples that reach it
    from ``alias``'s side (router estimates, tuples out ÷ tuples in; 1.0 when unseen). The
    cumulative selectivity of join e for span C is the product of the fan-outs of e and of
    every join beyond it, away from C. ``choice(span)``: the join destination id; ties go
    to the lower id. ``random``: a generator that draws the choices instead (tests: state
    migration under arbitrary plans).
    """

    def __init__(
        self,
        joins: dict[int, StairJoin],
        fanout: dict[tuple[int, int], float],
        random: np.random.Generator | None = None,
        topology: JoinTopology | None = None,
        observed: dict[tuple[int, int], float] | None = None,
    ) -> None:
        self.joins = joins
        self.fanout = fanout
        # what the migration guard spreads over the rows to come (StairMigrator._spread)
        self.observed = fanout if observed is None else observed
        self.random = random
        self.topology = topology or JoinTopology(joins)
        self._choices: dict[int, int] = {}
        self._cumulative: dict[tuple[int, int], float] = {}

    def choice(self, span: int) -> int:
        """The join destination id a tuple of ``span`` goes to next (memoized per span)."""
        found = self._choices.get(span)
        if found is None:
            found = self._choices[span] = self._choose(span)
        return found

    def agrees_with(self, other: GreedyPlan) -> bool:
        """Whether this plan chooses as ``other`` did for every span ``other`` was asked
        about (those ask this plan now, so the next comparison covers them too)."""
        return all(self.choice(span) == d for span, d in other._choices.items())

    def boundary(self, span: int) -> list[int]:
        """Joins with exactly one side in ``span``."""
        return [d for d, (a, b) in self.topology.ends.items() if (span >> a & 1) != (span >> b & 1)]

    def _choose(self, span: int) -> int:
        options = self.boundary(span)
        if self.random is not None:
            return options[int(self.random.integers(len(options)))]
        return min(options, key=lambda d: (self.cumulative(span, d), d))

    def cumulative(self, span: int, d: int) -> float:
        """The product of fan-outs from ``span`` through join ``d`` and every join beyond."""
        found = self._cumulative.get((span, d))
        if found is None:
            found = self._cumulative[(span, d)] = self._cumulate(span, d)
        return found

    def _cumulate(self, span: int, d: int) -> float:
        ends, at = self.topology.ends, self.topology.at
        left, right = ends[d]
        total = 1.0
        frontier = [(d, left if span >> left & 1 else right)]
        seen = {d}
        while frontier:
            join, near = frontier.pop()
            total *= self.fanout.get((join, near), 1.0)
            a, b = ends[join]
            far = b if near == a else a
            for other in at[far]:
                if other not in seen:
                    seen.add(other)
                    frontier.append((other, far))
        return total


class JoinTopology:
    """The spanning tree's joins, computed once per query for the checks: ``ends[d]``
    the two aliases of join ``d``; ``at[alias]`` the joins touching ``alias``;
    ``choosing``: ``(alias, its joins)`` for the aliases with more than one join (only
    those have a routing decision, hence cohorts that may move)."""

    def __init__(self, joins: dict[int, StairJoin]) -> None:
        self.ends = {d: (j.edge.left, j.edge.right) for d, j in joins.items()}
        self.at: dict[int, list[int]] = {}
        for d, (a, b) in self.ends.items():
            self.at.setdefault(a, []).append(d)
            self.at.setdefault(b, []).append(d)
        self.choosing = [(a, ds) for a, ds in sorted(self.at.items()) if len(ds) > 1]


def initial_fanouts(joins: dict[int, StairJoin], seed: int | None) -> dict[tuple[int, int], float]:
    """Fan-outs per (join, side) for the plan before the first check: {} (all 1) without
    ``seed``, else drawn log-uniform in 0.01-100 (a random plan, the same for every
    technique given the seed: it depends on the joins only)."""
    if seed is None:
        return {}
    rng = np.random.default_rng(seed)
    return {
        (d, side): float(10 ** rng.uniform(-2, 2))
        for d in sorted(joins)
        for side in (joins[d].edge.left, joins[d].edge.right)
    }
