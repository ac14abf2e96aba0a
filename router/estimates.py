"""Observed costs and selectivities per destination and per signature, with decay.

What the eddy learns from (eddies-2000 §4 lets a policy see tuples in, tuples out and time
busy; the PostgreSQL eddy's rank ordering needs cost and selectivity per operator,
eddies-in-postgresql §3). For every ``(signature, destination)`` pair, and for every
destination across signatures, an :class:`Estimate` keeps:

* **cost** — seconds per tuple: the module's wall time on the Work (``busy_seconds``,
  which includes the time it awaits lookups, async calls and worker threads, not only CPU)
  divided by the tuples it took;
* **latency** — seconds from routing a Work until its final answer (adds the time it
  queued before the module took it), per Work;
* **selectivity** — tuples out ÷ tuples in (partial answers of the same Work included); a
  SteM probe's may exceed 1 (fan-out);
* **confidence** — the decayed number of tuples observed (the weight of the estimate) and
  standard errors of selectivity (binomial, or Poisson for fan-out) and of cost.

Decay: all sums are multiplied by ``0.5 ** (Δ / half_life)``, where Δ counts *tuples
observed at the same signature* (over all its destinations) since the estimate's last
update. So the half-life is in tuples, not seconds: nothing depends on how fast the
machine is, and an estimate of a destination the eddy stopped choosing loses weight while
its siblings are observed — which is what makes a policy look at it again. A new
observation far outside the estimate (selectivity differs by more than ``DRIFT_Z``
standard errors and by a material amount, or per-tuple cost by more than
``DRIFT_COST_RATIO``×) is *drift*: the estimate restarts from that observation, and
:meth:`Estimates.observe` says so, so the policy can pilot again (see
:mod:`eddies.router.policies.learning`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Half-life of an estimate, in tuples observed at its signature.
DEFAULT_HALF_LIFE = 16384
#: Drift: a selectivity at least this many standard errors away ...
DRIFT_Z = 5.0
#: ... and at least this far (absolute, times max(1, selectivity)).
DRIFT_SELECTIVITY = 0.1
#: Drift: per-tuple cost changed by this factor, on observations of at least
#: ``DRIFT_MIN_SECONDS`` each (shorter ones are timer and scheduler noise).
DRIFT_COST_RATIO = 8.0
DRIFT_MIN_SECONDS = 0.02
#: Tuples an estimate needs before a drift test applies to it.
DRIFT_MIN_TUPLES = 32


@dataclass
class Estimate:
    """Decayed sums for one destination (at one signature, or over all).

    ``tuples``/``out``/``seconds``/``latency``/``works``/``cost_sq`` are decayed;
    ``observations`` and ``drifts`` count every answer and every drift seen.
    """

    tuples: float = 0.0
    out: float = 0.0
    seconds: float = 0.0
    latency: float = 0.0
    works: float = 0.0
    cost_sq: float = 0.0  # Σ n·(seconds/n)², for the spread of the per-tuple cost
    clock: float = 0.0
    observations: int = 0
    drifts: int = 0

    @property
    def selectivity(self) -> float:
        """Tuples out per tuple in (1.0 with nothing observed)."""
        return self.out / self.tuples if self.tuples > 0 else 1.0

    @property
    def cost(self) -> float:
        """Seconds per tuple (0.0 with nothing observed)."""
        return self.seconds / self.tuples if self.tuples > 0 else 0.0

    @property
    def latency_per_work(self) -> float:
        """Seconds from routing a Work to its final answer, averaged over Works."""
        return self.latency / self.works if self.works > 0 else 0.0

    @property
    def selectivity_stderr(self) -> float:
        """Standard error of :attr:`selectivity` (binomial below 1, Poisson above)."""
        if self.tuples <= 0:
            return math.inf
        s = self.selectivity
        var = s * (1 - s) if s <= 1 else s
        return math.sqrt(max(var, 1.0 / self.tuples) / self.tuples)

    @property
    def cost_stderr(self) -> float:
        """Standard error of :attr:`cost` over the Works observed (inf with fewer than 2)."""
        if self.works < 1.5 or self.tuples <= 0:
            return math.inf
        c = self.cost
        var = max(self.cost_sq / self.tuples - c * c, 0.0)
        return math.sqrt(var / self.works)

    def decay(self, clock: float, half_life: float) -> None:
        """Age the sums to ``clock`` (tuples observed at the signature so far)."""
        if clock > self.clock:
            f = 0.5 ** ((clock - self.clock) / half_life)
            self.tuples *= f
            self.out *= f
            self.seconds *= f
            self.latency *= f
            self.works *= f
            self.cost_sq *= f
            self.clock = clock

    def add(self, tuples: int, out: int, seconds: float, latency: float) -> None:
        self.tuples += tuples
        self.out += out
        self.seconds += seconds
        self.latency += latency
        self.works += 1
        if tuples:
            self.cost_sq += seconds * seconds / tuples
        self.observations += 1

    def drifted(self, tuples: int, out: int, seconds: float) -> bool:
        """Whether one new observation contradicts this estimate (see module docstring)."""
        if self.tuples < DRIFT_MIN_TUPLES or self.observations < 1 or tuples < 8:
            return False
        old, new = self.selectivity, out / tuples
        pooled = (self.out + out) / (self.tuples + tuples)
        var = max(pooled * (1 - pooled) if pooled <= 1 else pooled, 1e-3)
        se = math.sqrt(var / self.tuples + var / tuples)
        gap = abs(new - old)
        if gap > DRIFT_SELECTIVITY * max(1.0, old) and gap > DRIFT_Z * se:
            return True
        if seconds >= DRIFT_MIN_SECONDS and self.seconds >= DRIFT_MIN_SECONDS and self.cost > 0:
            ratio = (seconds / tuples) / self.cost
            return ratio > DRIFT_COST_RATIO or ratio < 1 / DRIFT_COST_RATIO
        return False


class Estimates:
    """Estimates per ``(signature, destination)`` and per destination; see module docstring.

    Signatures are opaque hashable keys here (the eddy passes
    :class:`~eddies.router.tuple_batch.Signature`). ``half_life`` is in tuples (> 0).
    """

    def __init__(self, half_life: float = DEFAULT_HALF_LIFE) -> None:
        if not half_life > 0:
            raise ValueError(f"half_life must be > 0 tuples, got {half_life!r}")
        self.half_life = half_life
        self.by_signature: dict[object, dict[int, Estimate]] = {}
        self.clock: dict[object, float] = {}  # tuples observed per signature
        self.by_destination: dict[int, Estimate] = {}
        self._destination_clock = 0.0
        self._partial: dict[int, list] = {}  # id(Work) -> [out, in, seconds] of partials

    def add_partial(
        self, work: object, tuples_out: int, tuples_in: int = 0, seconds: float = 0.0
    ) -> None:
        """A partial answer of ``work`` (or of one of its continuations) carried
        ``tuples_out`` tuples, finished ``tuples_in`` and took ``seconds`` (booked at its end)."""
        key = id(work)
        part = self._partial.get(key)
        if part is None:
            self._partial[key] = [tuples_out, tuples_in, seconds]
        else:
            part[0] += tuples_out
            part[1] += tuples_in
            part[2] += seconds

    def pop_partial(self, work: object) -> tuple[int, int, float]:
        """(tuples out, tuples in, seconds) of the partial answers of ``work`` (forgotten)."""
        part = self._partial.pop(id(work), None)
        return (0, 0, 0.0) if part is None else (part[0], part[1], part[2])

    def observe(
        self,
        signature: object,
        destination: int,
        tuples_in: int,
        tuples_out: int,
        seconds: float,
        latency: float = 0.0,
    ) -> bool:
        """Book one answer: ``tuples_in`` tuples of ``signature`` went to ``destination``
        and ``tuples_out`` came back, after ``seconds`` in the module and ``latency`` since
        routing. Returns True on drift (the estimate restarted from this observation)."""
        clock = self.clock.get(signature, 0.0)
        arms = self.by_signature.setdefault(signature, {})
        est = arms.get(destination)
        if est is None:
            est = arms[destination] = Estimate(clock=clock)
        est.decay(clock, self.half_life)
        drift = est.drifted(tuples_in, tuples_out, seconds)
        if drift:
            drifts = est.drifts + 1
            observations = est.observations
            est = arms[destination] = Estimate(
                clock=clock, drifts=drifts, observations=observations
            )
        est.add(tuples_in, tuples_out, seconds, latency)
        self.clock[signature] = clock + tuples_in
        total = self.by_destination.get(destination)
        if total is None:
            total = self.by_destination[destination] = Estimate()
        self._destination_clock += tuples_in
        # Over all signatures, the clock is every tuple observed anywhere.
        total.decay(self._destination_clock - tuples_in, self.half_life)
        total.add(tuples_in, tuples_out, seconds, latency)
        return drift

    def get(self, signature: object, destination: int) -> Estimate | None:
        """The estimate for ``destination`` at ``signature``, aged to now (None: unseen)."""
        est = self.by_signature.get(signature, {}).get(destination)
        if est is not None:
            est.decay(self.clock.get(signature, 0.0), self.half_life)
        return est

    def weight(self, signature: object, destination: int) -> float:
        """Decayed tuples observed for ``destination`` at ``signature`` (0.0 when unseen)."""
        est = self.get(signature, destination)
        return est.tuples if est is not None else 0.0
