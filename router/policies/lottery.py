"""Lottery scheduling: ``lottery`` and ``lottery-window`` (eddies-2000 §4.3, §4.5).

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

``hybrid`` (:mod:`eddies.router.policies.learning`) draws with this lottery among free
choices.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from eddies.errors import EddiesError
from eddies.router.policies.base import Choice, HasRoom, RoutingPolicy
from eddies.router.routing_table import DestinationKind, RouteEntry
from eddies.router.tuple_batch import Signature


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
