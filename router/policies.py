"""Routing policies: which eligible destination gets a batch (eddies-2000 §4).

A policy sees the routing-table entry for a batch's signature, the batch size, and whether
each destination's input queue has room; it answers with one destination id, a per-tuple
vector of destination ids (the batch is then split), or ``None`` to hold the batch until
some queue drains. Decisions are made per batch — the PostgreSQL eddy's batched routing
decisions — so ``batch_size=1`` is exactly the per-tuple eddy of the paper.

* ``static`` — a fixed order of destination names; simulates a static plan in the same
  engine, as the papers do for their baselines.
* ``random`` — uniform per tuple, ignoring queues.
* ``naive`` — back-pressure only (§4.2): offer to a destination whose queue has room; a
  faster module drains its queue sooner and so receives more tuples.
* ``lottery`` (§4.3) — a destination gets a ticket for each tuple it takes and gives one
  back for each tuple it returns (both booked when it answers, so queued tuples do not
  count); among destinations with room, the draw is weighted by
  tickets, so selective modules (few returns) win. Tickets also grow with throughput, so
  cheap modules win too; and when the destination holding most tickets is full, the batch
  waits for it rather than going wherever a queue has room (otherwise, in a saturated
  dataflow, back-pressure alone would decide and selectivity would be ignored).
* ``lottery-window`` (§4.5) — tickets earned in the current window are held in escrow; at
  each window's end they become the banked tickets the lottery draws with, so the policy
  follows changes in cost and selectivity.

``rank``, ``bandit`` and ``hybrid`` — the default
(:data:`eddies.router.run_choices.DEFAULT_POLICY`): this lottery among free choices,
``rank`` with pilots where an SM calling a UDF or an index AM lookup is eligible — learn
from observed costs and selectivities: :mod:`eddies.router.learning`. The policies' names
are in :mod:`eddies.router.run_choices`.

Index AMs (stems-2003): a prior prober bounced by the SteM of alias b goes on to an index AM
of b's table, so the real cost of probing b's SteM first is the lookup that follows. The
lottery books an index AM's answers on ``probe:b`` as well (the step the eddy chose), so
the faster and more selective index wins tickets, as the index joins of eddies-2000 §4.5
(Fig. 10) do. Which module does a step that several can do (a table's AMs, or its SteM and
its index AMs) is chosen by an :class:`~eddies.router.access_choice.AccessChooser` under
every policy; ``static`` uses its order there too when the order names those modules.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from eddies.errors import EddiesError
from eddies.router.access_choice import AccessChooser
from eddies.router.estimates import Estimates
from eddies.router.messages import Returned
from eddies.router.routing_table import Destination, DestinationKind, RouteEntry
from eddies.router.run_choices import POLICIES
from eddies.router.tuple_batch import Signature

HasRoom = Callable[[int], bool]
Choice = int | np.ndarray | None
#: In a per-tuple choice vector: this tuple waits and is routed afresh after an answer.
HOLD = -1


class RoutingPolicy:
    """Base class; ``on_routed``/``on_returned`` let a policy learn from module counters."""

    name = "policy"
    #: Whether the policy keeps a fixed order of destinations: where a JoinStep it would
    #: choose waits for its SteM, the tuple waits too, rather than take another step first
    #: (static; see ``Eddy._gated``).
    follows_order = False

    def __init__(self, destinations: Sequence[Destination], rng: np.random.Generator) -> None:
        self.destinations = destinations
        self.rng = rng
        # Observed costs and selectivities (every policy keeps them: RunStats shows them).
        self.estimates = Estimates()
        self.works_in_flight = 0  # Works sent and not finally answered
        self.in_flight_at: dict[Signature, int] = {}  # ... per signature
        self.tuples_in_flight_to: dict[int, int] = {}  # their tuples, per destination
        capacity = {d.id: d.max_batch for d in destinations if d.max_batch is not None}
        self.access = AccessChooser(rng, capacity=capacity)
        probes = {
            d.target_alias: d.id
            for d in destinations
            if d.kind in (DestinationKind.PROBE, DestinationKind.STEP)
        }
        # An index AM's answers also count for the SteM probe that sent it prior probers
        # (or the JoinStep whose keys it looks up).
        self.credit_to = {
            d.id: probes[d.target_alias] for d in destinations if d.kind is DestinationKind.LOOKUP
        }
        # Only index AMs and the SteM probes of their tables are ever alternatives of one
        # another (see RouteEntry.alternatives): the chooser needs no other counts.
        lookup_tables = {d.table for d in destinations if d.kind is DestinationKind.LOOKUP}
        self._chosen_among = {
            d.id
            for d in destinations
            if d.kind is DestinationKind.LOOKUP
            or (d.kind is DestinationKind.PROBE and d.table in lookup_tables)
        }

    def choose(
        self, entry: RouteEntry, n: int, has_room: HasRoom, signature: Signature | None = None
    ) -> Choice:
        """Where the ``n`` tuples of a batch of ``signature`` go: one destination, a vector
        of n destination ids (the batch is split; ``HOLD`` entries wait and are routed
        afresh after the next answer), or None (the whole batch waits for that)."""
        raise NotImplementedError  # pragma: no cover

    def choose_access(self, candidates: Sequence[int], n: int, has_room: HasRoom) -> int | None:
        """Which of several modules that can do one step gets the batch (None: wait)."""
        return self.access.choose(candidates, n, has_room)

    def on_routed(self, destination: int, tuples: int, signature: Signature | None = None) -> None:
        """``tuples`` tuples (of ``signature``) were put in a destination's queue as one Work."""
        if destination in self._chosen_among:
            self.access.on_routed(destination, tuples)
        self.works_in_flight += 1
        self.tuples_in_flight_to[destination] = (
            self.tuples_in_flight_to.get(destination, 0) + tuples
        )
        if signature is not None:
            self.in_flight_at[signature] = self.in_flight_at.get(signature, 0) + 1

    def observe(self, message: Returned, now: float) -> None:
        """Book a module's answer in :attr:`estimates` (``now``: ``time.perf_counter()``).

        A Work's partial answers, and the answers of its continuations (a SteM probe
        stopped at its output bound, :attr:`Returned.rest`), are summed and booked as one
        observation when the last of them arrives; until then the Work is in flight."""
        work = message.work
        returned = sum(len(b) for b in message.outputs)
        origin = None if work is None else (work.origin or work)
        if not message.final or message.rest is not None:
            if origin is not None:
                self.estimates.add_partial(
                    origin, returned, message.tuples_in, message.busy_seconds
                )
            return
        self.works_in_flight -= 1
        if origin is None:
            return
        self.tuples_in_flight_to[message.destination] = max(
            0, self.tuples_in_flight_to.get(message.destination, 0) - len(origin.batch)
        )
        sig = origin.batch.signature
        left = self.in_flight_at.get(sig, 0) - 1
        if left > 0:
            self.in_flight_at[sig] = left
        else:
            self.in_flight_at.pop(sig, None)
        latency = now - origin.routed_at if origin.routed_at else 0.0
        out, n, seconds = self.estimates.pop_partial(origin)
        returned += out
        n += message.tuples_in
        seconds += message.busy_seconds
        drift = self.estimates.observe(sig, message.destination, n, returned, seconds, latency)
        self.on_observed(sig, message.destination, n, returned, seconds, drift)

    def on_observed(
        self,
        signature: Signature,
        destination: int,
        tuples_in: int,
        tuples_out: int,
        seconds: float,
        drift: bool,
    ) -> None:
        """An estimate at ``signature`` was updated (``drift``: it restarted); no-op here."""

    def on_returned(
        self, destination: int, tuples_in: int, tuples_out: int, busy_seconds: float = 0.0
    ) -> None:
        """A destination processed ``tuples_in`` tuples (0 for a partial answer) and sent
        ``tuples_out`` back, busy for ``busy_seconds``."""
        # What an index AM yields are the matches of its partial answers; its final answers
        # only hand probe tuples back.
        final_lookup = tuples_in and destination in self.credit_to
        results = 0 if final_lookup else tuples_out
        if destination in self._chosen_among:
            self.access.on_returned(destination, tuples_in, results, busy_seconds)
        self.book(destination, tuples_in, tuples_out)
        step = self.credit_to.get(destination)
        if step is not None:
            self.book(step, tuples_in, tuples_out)

    def book(self, destination: int, tuples_in: int, tuples_out: int) -> None:
        """Learn from one answer (lottery tickets); nothing by default."""

    def on_filter_ready(self, destination: int, prior_selectivity: float) -> None:
        """SteM filter ``destination`` is offered from now on, expected to keep
        ``prior_selectivity`` of the tuples (see routing_table.FilterOffer); ignored by
        default."""

    def on_failed(self, access: int) -> None:
        """AM ``access`` failed (the routing table no longer offers it)."""


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


class LotteryPolicy(RoutingPolicy):
    """Lottery scheduling with back-pressure; tickets as in eddies-2000 §4.3."""

    name = "lottery"

    def __init__(self, destinations, rng) -> None:
        super().__init__(destinations, rng)
        self.tickets = np.zeros(len(destinations), dtype=np.float64)
        # Selections an unbuilt singleton passes before its build: UDF-free SMs and SteM
        # filters (eddies.router.routing_table offers a filter there once its SteM is
        # complete).
        self._cheap_sms = {
            d.id
            for d in destinations
            if (d.kind is DestinationKind.SM and d.cheap) or d.kind is DestinationKind.FILTER
        }

    def weights(self, dests: list[int]) -> np.ndarray:
        return np.maximum(self.tickets[dests], 1.0)

    def choose(self, entry: RouteEntry, n: int, has_room: HasRoom, signature=None) -> Choice:
        return self.draw(list(entry.destinations), has_room, signature)

    def draw(self, dests: list[int], has_room: HasRoom, signature: Signature | None) -> Choice:
        """The lottery's choice among the destination ids ``dests`` (not empty): one id, or
        None to wait for the favourite's queue."""
        if signature is not None and not signature.built and len(dests) > 1:
            # Selection push-down: an unbuilt singleton passes its UDF-free SMs before its
            # build. Such a predicate costs ~µs a tuple, while a tuple built before it is
            # stored whether it qualifies or not and every tuple joined with it carries the
            # pending predicate; the first draw, made before any ticket is earned, would
            # otherwise decide it (TPC-H STAIRs query: 15,000 customers built, 171,567
            # joined tuples evaluated, instead of 52 built).
            cheap = [d for d in dests if d in self._cheap_sms]
            dests = cheap or dests
        ready = [d for d in dests if has_room(d)]
        if not ready:
            return None
        if len(ready) < len(dests):
            # Back-pressure alone would send the batch wherever a queue has room, and in a
            # saturated dataflow room, not tickets, would decide every draw. When the
            # destination holding most of the tickets is the one that is full, wait for it.
            w = self.weights(dests)
            favourite = int(np.argmax(w))
            if dests[favourite] not in ready and 2 * w[favourite] > w.sum():
                return dests[favourite]
        if len(ready) == 1:
            return ready[0]
        w = self.weights(ready)
        return ready[int(np.searchsorted(np.cumsum(w), self.rng.random() * w.sum(), "right"))]

    def book(self, destination: int, tuples_in: int, tuples_out: int) -> None:
        # Credit on taking, debit on returning; both booked when the module answers, so
        # tuples still queued do not count (else whoever got the first batch would lead).
        self.tickets[destination] += tuples_in - tuples_out


class WindowedLotteryPolicy(LotteryPolicy):
    """Lottery over banked tickets; escrow tickets become banked every ``window`` seconds."""

    name = "lottery-window"

    def __init__(
        self,
        destinations,
        rng,
        window: float = 0.25,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(destinations, rng)
        if not window > 0:
            raise EddiesError(f"lottery-window needs a window > 0 seconds, got {window}")
        self.window = window
        self._clock = clock
        self._window_end = clock() + window
        self.escrow = np.zeros(len(destinations), dtype=np.float64)

    def _roll(self) -> None:
        now = self._clock()
        if now >= self._window_end:
            # A window in which nothing answered says nothing new (e.g. every module still
            # finishes slow lookups after a change): keep the banked tickets then.
            if self.escrow.any():
                self.tickets = self.escrow
                self.escrow = np.zeros_like(self.escrow)
            self._window_end = now + self.window

    def choose(self, entry: RouteEntry, n: int, has_room: HasRoom, signature=None) -> Choice:
        self._roll()
        return super().choose(entry, n, has_room, signature)

    def book(self, destination: int, tuples_in: int, tuples_out: int) -> None:
        self.escrow[destination] += tuples_in - tuples_out


def make_policy(
    name: str,
    destinations: Sequence[Destination],
    *,
    seed: int | None = None,
    order: Sequence[str] | None = None,
    window: float | None = None,
) -> RoutingPolicy:
    """Build a policy by name (one of :data:`POLICIES`); EddiesError for a bad name/option."""
    check_policy_options(name, order, window)
    rng = np.random.default_rng(seed)
    if name == "static":
        return StaticPolicy(destinations, rng, order)
    if name == "random":
        return RandomPolicy(destinations, rng)
    if name == "naive":
        return NaivePolicy(destinations, rng)
    if name == "lottery":
        return LotteryPolicy(destinations, rng)
    if name == "lottery-window":
        return WindowedLotteryPolicy(destinations, rng, window if window is not None else 0.25)
    if name in ("rank", "bandit", "hybrid"):
        from eddies.router.learning import (  # imports this module
            BanditPolicy,
            HybridPolicy,
            RankPolicy,
        )

        cls = {"rank": RankPolicy, "bandit": BanditPolicy, "hybrid": HybridPolicy}[name]
        return cls(destinations, rng)
    raise AssertionError(name)  # pragma: no cover - check_policy_options knows POLICIES


def check_policy_options(name: str, order: Sequence[str] | None, window: float | None) -> None:
    """EddiesError unless ``name`` is one of :data:`POLICIES` and ``order``/``window`` are
    given only to the policy that uses them: checked by the engine's RunOptions at the API
    edge, and by :func:`make_policy` for its own callers."""
    if name not in POLICIES:
        raise EddiesError(f"unknown routing policy {name!r}; choose one of {', '.join(POLICIES)}")
    if order is not None and name != "static":
        raise EddiesError(f"'order' applies to policy='static' only, not {name!r}")
    if window is not None and name != "lottery-window":
        raise EddiesError(f"'window' applies to policy='lottery-window' only, not {name!r}")
