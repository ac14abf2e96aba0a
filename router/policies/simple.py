"""The policies that do not learn: ``static``, ``random`` and ``naive`` (eddies-2000 §4).

* ``static`` — a fixed order of destination names; simulates a static plan in the same
  engine, as the papers do for their baselines.
* ``random`` — uniform per tuple, ignoring queues.
* ``naive`` — back-pressure only (§4.2): offer to a destination whose queue has room; a
  faster module drains its queue sooner and so receives more tuples.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from eddies.errors import EddiesError
from eddies.router.policies.base import Choice, HasRoom, RoutingPolicy
from eddies.router.routing_table import RouteEntry


class StaticPolicy(RoutingPolicy):
    """The first eligible destination in a fixed order (default: explain's order)."""

    name = "static"
    follows_order = True

    def __init__(self, destinations, rng, order: Sequence[str] | None = None) -> None:
        super().__init__(destinations, rng)
        names = [d.name for d in destinations]
        order = list(order) if order else names
        unknown = [o for o in order if o not in names]
        if unknown:
            raise EddiesError(
                f"static order names unknown destinations {unknown}; the query has {names}"
            )
        rank = {name: i for i, name in enumerate(order)}
        self._unranked = len(order)
        self._rank = [rank.get(d.name, len(order) + d.id) for d in destinations]

    def choose(self, entry: RouteEntry, n: int, has_room: HasRoom, signature=None) -> Choice:
        return min(entry.destinations, key=self._rank.__getitem__)

    def choose_access(self, candidates: Sequence[int], n: int, has_room: HasRoom) -> int | None:
        if any(self._rank[d] < self._unranked for d in candidates):
            return min(candidates, key=self._rank.__getitem__)
        return super().choose_access(candidates, n, has_room)


class RandomPolicy(RoutingPolicy):
    """Each tuple to a uniformly drawn eligible destination."""

    name = "random"

    def choose(self, entry: RouteEntry, n: int, has_room: HasRoom, signature=None) -> Choice:
        dests = entry.destinations
        if len(dests) == 1:
            return dests[0]
        if n == 1:
            return dests[int(self.rng.integers(len(dests)))]
        return np.asarray(dests)[self.rng.integers(len(dests), size=n)]


class NaivePolicy(RoutingPolicy):
    """Back-pressure: a uniformly drawn destination among those whose queue has room."""

    name = "naive"

    def choose(self, entry: RouteEntry, n: int, has_room: HasRoom, signature=None) -> Choice:
        ready = [d for d in entry.destinations if has_room(d)]
        if not ready:
            return None
        return ready[int(self.rng.integers(len(ready)))] if len(ready) > 1 else ready[0]
