"""What every routing policy is: :class:`RoutingPolicy`, the interface the eddy calls.

A policy sees the routing-table entry for a batch's signature, the batch size, and whether
each destination's input queue has room; it answers with one destination id, a per-tuple
vector of destination ids (the batch is then split), or ``None`` to hold the batch until
some queue drains. Decisions are made per batch — the PostgreSQL eddy's batched routing
decisions — so ``batch_size=1`` is exactly the per-tuple eddy of the paper (eddies-2000
§4). The base class keeps what every policy learns from: the observed costs and
selectivities (:class:`~eddies.router.estimates.Estimates`), the Works in flight, and the
access chooser.

Index AMs (stems-2003): a prior prober bounced by the SteM of alias b goes on to an index AM
of b's table, so the real cost of probing b's SteM first is the lookup that follows. The
lottery books an index AM's answers on ``probe:b`` as well (the step the eddy chose), so
the faster and more selective index wins tickets, as the index joins of eddies-2000 §4.5
(Fig. 10) do. Which module does a step that several can do (a table's AMs, or its SteM and
its index AMs) is chosen by an :class:`~eddies.router.access_choice.AccessChooser` under
every policy; ``static`` uses its order there too when the order names those modules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from eddies.router.access_choice import AccessChooser
from eddies.router.estimates import Estimates
from eddies.router.messages import Returned
from eddies.router.routing_table import Destination, DestinationKind, RouteEntry
from eddies.router.tuple_batch import Signature


@dataclass(frozen=True, slots=True)
class Observation:
    """One Work's answers, summed (its partial answers and continuations included) and
    booked in the estimates: ``tuples_in`` tuples of ``signature`` sent to ``destination``
    gave ``tuples_out`` in ``seconds`` of the module's time; ``drift``: the estimate at
    ``signature`` restarted from this observation (see RoutingPolicy.observe)."""

    signature: Signature
    destination: int
    tuples_in: int
    tuples_out: int
    seconds: float
    drift: bool


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
        self.on_observed(Observation(sig, message.destination, n, returned, seconds, drift))

    def on_observed(self, seen: Observation) -> None:
        """An estimate at ``seen.signature`` was updated (``seen.drift``: it restarted);
        no-op here."""

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
