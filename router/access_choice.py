"""Choosing among modules that can do the same step: AMs, mirrors, index or hash join.

stems-2003 §3.2 and §4.3: a table's competing AMs all build into its SteM, so which one a
tuple is sent to changes only speed, never the result. The eddy learns it from what it
observes (§4.1 routes by benefit over cost, the value of the results a module yields per
unit of time): for each candidate module it keeps time-decayed sums of tuples in, results
out and seconds spent, and sends a batch to the one with the most results per second —
with a small share of batches drawn at random to keep the others' estimates fresh (the
paper's eddy "keeps sending a small fraction of the tuples ... to explore").

* A SteM probe yields the matches it finds; an index AM yields the matches its lookups
  return. While a scan is still filling the SteM, the index AM yields more (an index join);
  once the SteM holds most of the table, probing it is far cheaper (a hash join). Routing
  by results per second moves from one to the other as the costs change (Fig. 8).
* Between mirrors, yields are alike and the seconds decide. A mirror that stops answering
  has its cost raised by the age of its oldest unanswered Work, so the eddy moves away
  without waiting for a timeout; a mirror that failed is no longer a candidate at all.
* Modules whose input queue is full are skipped (back-pressure); with none free, the batch
  waits.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np

#: Share of decisions made at random among the candidates, to keep estimates current.
EXPLORE = 0.05
#: Seconds for an observation's weight to halve: how fast the estimates forget.
HALF_LIFE = 1.0
#: Results per tuple credited to every candidate, so that when none yields anything
#: (a very selective lookup) the cheaper one still wins.
YIELD_FLOOR = 1e-9


class _Estimate:
    """Time-decayed sums of tuples in, results out and seconds for one module."""

    __slots__ = ("busy", "last", "out", "outstanding", "since", "tuples")

    def __init__(self) -> None:
        self.tuples = 0.0
        self.out = 0.0
        self.busy = 0.0
        self.last: float | None = None
        self.outstanding = 0  # tuples sent and not answered yet
        self.since = 0.0  # when the oldest unanswered tuples were sent (or last answered)

    def decay(self, now: float) -> None:
        factor = 1.0 if self.last is None else 0.5 ** ((now - self.last) / HALF_LIFE)
        self.tuples *= factor
        self.out *= factor
        self.busy *= factor
        self.last = now


class AccessChooser:
    """Picks one of several destinations for a batch; see the module docstring.

    ``on_routed``/``on_returned`` feed it the eddy's observations; ``clock`` is seconds.
    """

    def __init__(
        self, rng: np.random.Generator, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.rng = rng
        self.clock = clock
        self._estimates: dict[int, _Estimate] = {}

    def _estimate(self, destination: int) -> _Estimate:
        found = self._estimates.get(destination)
        if found is None:
            found = self._estimates[destination] = _Estimate()
        return found

    def results_per_second(self, destination: int, now: float) -> float:
        """The estimate the choice is made on (inf for a module not tried yet)."""
        est = self._estimates.get(destination)
        if est is None or (est.tuples <= 0 and not est.outstanding):
            return math.inf  # never tried: try it
        est.decay(now)
        per_tuple = est.busy / est.tuples if est.tuples > 0 else 0.0
        if est.outstanding:
            # A stalled module's unanswered work counts against it while it waits.
            per_tuple = max(per_tuple, (now - est.since) / est.outstanding)
        hits = est.out / est.tuples if est.tuples > 0 else 1.0  # optimistic until it answers
        return (hits + YIELD_FLOOR) / max(per_tuple, 1e-9)

    def choose(
        self, candidates: Sequence[int], n: int, has_room: Callable[[int], bool]
    ) -> int | None:
        ready = [d for d in candidates if has_room(d)]
        if not ready:
            return None
        if len(ready) == 1:
            return ready[0]
        if self.rng.random() < EXPLORE:
            return ready[int(self.rng.integers(len(ready)))]
        now = self.clock()
        scores = [self.results_per_second(d, now) for d in ready]
        return ready[int(np.argmax(scores))]

    def on_routed(self, destination: int, tuples: int) -> None:
        est = self._estimate(destination)
        if est.outstanding == 0:
            est.since = self.clock()
        est.outstanding += tuples

    def on_returned(self, destination: int, tuples_in: int, results: int, seconds: float) -> None:
        """A module answered: ``tuples_in`` tuples done (0 for a partial answer),
        ``results`` tuples yielded, ``seconds`` from taking the Work to answering it."""
        now = self.clock()
        est = self._estimate(destination)
        est.decay(now)
        est.out += results
        if tuples_in:
            est.tuples += tuples_in
            est.busy += seconds
            est.outstanding = max(0, est.outstanding - tuples_in)
            est.since = now
