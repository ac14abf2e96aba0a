"""Choosing among modules that can do the same step: AMs, mirrors, index or hash join.

stems-2003 §3.2 and §4.3: a table's competing AMs all build into its SteM, so which one a
tuple is sent to changes only speed, never the result. The eddy learns it from what it
observes (§4.1 routes by benefit over cost, the value of the results a module yields per
unit of time): for each candidate module it keeps time-decayed sums of tuples in, results
out and seconds spent, and sends a batch to the one with the most results per second —
with a small share of batches drawn at random among idle candidates to keep the others'
estimates fresh (the paper's eddy "keeps sending a small fraction of the tuples ... to
explore").

* A SteM probe yields the matches it finds; an index AM yields the matches its lookups
  return. While a scan is still filling the SteM, the index AM yields more (an index join);
  once the SteM holds most of the table, probing it is far cheaper (a hash join). Routing
  by results per second moves from one to the other as the costs change (Fig. 8).
* Time is measured as throughput — tuples answered per wall second while the module had
  work — and a choice looks at the time to finish the module's backlog plus the new
  batch, so work spreads over mirrors in proportion to their speed and a slow mirror gets
  a batch only when the fast one's backlog would take longer. A mirror that stops
  answering loses throughput as its silence grows, so the eddy moves away without waiting
  for a timeout; a mirror that failed is no longer a candidate at all.
* Back-pressure: when the best module's input queue is full the batch waits for it (its
  backlog already counts in its score, so a slower module with room is taken only when it
  would finish sooner); exploring draws pick among modules with room.
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
#: How many more matches per tuple an index AM must find than the SteM to be preferred.
HYBRID_MARGIN = 1.25
#: Results per tuple credited to every candidate, so that when none yields anything
#: (a very selective lookup) the cheaper one still wins.
YIELD_FLOOR = 1e-9


class _Estimate:
    """Time-decayed observations of one module: tuples answered, results, busy seconds."""

    __slots__ = ("active", "last", "last_answer", "last_event", "out", "outstanding", "tuples")

    def __init__(self) -> None:
        self.tuples = 0.0  # tuples answered
        self.out = 0.0  # results yielded
        self.active = 0.0  # wall seconds with work outstanding
        self.last: float | None = None  # when the sums were last decayed
        self.outstanding = 0  # tuples sent and not answered yet
        self.last_event = 0.0  # when ``outstanding`` last changed
        self.last_answer = 0.0  # when it last answered (or got work while idle)

    def decay(self, now: float) -> None:
        factor = 1.0 if self.last is None else 0.5 ** ((now - self.last) / HALF_LIFE)
        self.tuples *= factor
        self.out *= factor
        self.active *= factor
        self.last = now

    def advance(self, now: float) -> None:
        """Count the time since the last event as active if work was outstanding."""
        self.decay(now)
        if self.outstanding:
            self.active += now - self.last_event
        self.last_event = now


class AccessChooser:
    """Picks one of several destinations for a batch; see the module docstring.

    ``on_routed``/``on_returned`` feed it the eddy's observations; ``clock`` is seconds.
    """

    def __init__(
        self,
        rng: np.random.Generator,
        clock: Callable[[], float] = time.perf_counter,
        capacity: dict[int, int] | None = None,
    ) -> None:
        self.rng = rng
        self.clock = clock
        # Modules of bounded capacity (index AMs: tuples per Work); others (SteMs) unbounded.
        self.capacity = capacity or {}
        self._estimates: dict[int, _Estimate] = {}

    def hits(self, destination: int) -> float:
        """Results per tuple so far (1.0, optimistic, before it has answered)."""
        est = self._estimates.get(destination)
        if est is None or est.tuples <= 0:
            return 1.0
        return est.out / est.tuples

    def _estimate(self, destination: int) -> _Estimate:
        found = self._estimates.get(destination)
        if found is None:
            found = self._estimates[destination] = _Estimate()
        return found

    def results_per_second(self, destination: int, n: int, now: float) -> float:
        """Expected results per second if ``n`` more tuples go to ``destination``: its
        results per tuple times ``n``, over the time to finish its backlog and them
        (inf for a module not tried yet)."""
        est = self._estimates.get(destination)
        if est is None or (est.tuples <= 0 and not est.outstanding):
            return math.inf  # never tried: try it
        est.advance(now)
        if est.tuples > 0:
            throughput = est.tuples / max(est.active, 1e-9)
            if est.outstanding:
                # A module that stops answering loses its estimate as it stays silent.
                silent = now - est.last_answer
                throughput = min(throughput, est.outstanding / max(silent, 1e-9))
            hits = est.out / est.tuples
        else:  # on trial: no more work until it has answered once
            return 0.0
        finish = (est.outstanding + n) / max(throughput, 1e-12)
        return (hits + YIELD_FLOOR) * n / finish

    def choose(
        self, candidates: Sequence[int], n: int, has_room: Callable[[int], bool]
    ) -> int | None:
        ready = [d for d in candidates if has_room(d)]
        if not ready:
            return None
        if len(candidates) == 1:
            return ready[0]
        if self.rng.random() < EXPLORE:
            # Only idle modules are explored: a slow one never piles up exploring work.
            idle = [d for d in ready if not self._estimate(d).outstanding]
            if idle:
                return idle[int(self.rng.integers(len(idle)))]
        now = self.clock()
        stems = [d for d in candidates if d not in self.capacity]
        if stems and len(stems) < len(candidates):
            return self._hash_or_index(candidates, stems, n, now, ready)
        # Scored with their backlogs, full modules included: when the best one is full,
        # waiting for it beats sending to one that would finish later.
        scores = [self.results_per_second(d, n, now) for d in candidates]
        best = candidates[int(np.argmax(scores))]
        return best if best in ready else None

    def _hash_or_index(self, candidates, stems, n: int, now: float, ready) -> int | None:
        """SteM probe (hash join) or index AM (index join), stems-2003 §4.3.

        A SteM probe is almost free, but while the table's scan is still filling the SteM
        it finds only part of the matches (the rest arrive later, with the scan); a lookup
        finds them all, at the index's pace. So an index AM with lookup slots to spare
        takes the batch while it finds clearly more matches per tuple than the SteM;
        otherwise the SteM does (a lookup backlog would only delay what the scan brings).
        """
        stem = max(stems, key=self.hits)
        spare = [
            d
            for d in candidates
            if d in self.capacity
            and d in ready
            and self._estimate(d).outstanding < self.capacity[d]
            and self.hits(d) > HYBRID_MARGIN * self.hits(stem)
            and self._estimate(stem).tuples > 0  # the SteM has been tried
        ]
        if spare:
            return max(spare, key=lambda d: self.results_per_second(d, n, now))
        return stem if stem in ready else None

    def on_routed(self, destination: int, tuples: int) -> None:
        now = self.clock()
        est = self._estimate(destination)
        est.advance(now)
        if est.outstanding == 0:
            est.last_answer = now  # silence is counted from when work arrived
        est.outstanding += tuples

    def on_returned(self, destination: int, tuples_in: int, results: int, seconds: float) -> None:
        """A module answered: ``tuples_in`` tuples done (0 for a partial answer) and
        ``results`` tuples yielded. (``seconds``, its busy time, is not needed: throughput
        is measured on the wall clock while work is outstanding.)"""
        now = self.clock()
        est = self._estimate(destination)
        est.advance(now)
        est.out += results
        if tuples_in:
            est.tuples += tuples_in
            est.outstanding = max(0, est.outstanding - tuples_in)
            est.last_answer = now
