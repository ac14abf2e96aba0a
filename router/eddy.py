"""The eddy: one trio task that routes every TupleBatch among the modules (eddies-2000 §3).

Messages arrive in one inbox: batches returned by modules (SMs and SteMs bounce tuples
back), batches from scan AMs, and end-of-source notices. Returned batches go to a priority
buffer that is always served before new source tuples (eddies-2000 §4: "tuples that have
been handled by some operator get priority"), which keeps the dataflow short and memory
bounded; source tuples are admitted through one semaphore per scan, so a slow eddy slows
the scans, and among ready source batches the eddy takes leaf tables first (see
:class:`Source`).

The eddy never blocks on a send: it offers a batch only to a module whose bounded input
queue has room (``send_nowait``), otherwise the batch waits in the eddy and is routed again
when a module answers. So a module can never be blocked by the eddy while the eddy waits
on it, and back-pressure (what the naive policy learns from) reaches the eddy.

The query ends when every source is exhausted and no batch is in flight, queued or
waiting (stems-2003 §2.1.1); the eddy then closes the modules' queues.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import structlog
import trio

from eddies.modules.base import Returned, Work
from eddies.router.constraints import ConstraintChecker
from eddies.router.policies import RoutingPolicy
from eddies.router.routing_table import RoutingTable
from eddies.router.stats import RunStats
from eddies.router.tuple_batch import TupleBatch

log = structlog.get_logger("eddies.router")


@dataclass(slots=True)
class SourceBatch:
    """New singleton tuples from the scan AM with index ``source`` (see :class:`Source`)."""

    source: int
    batch: TupleBatch


@dataclass(slots=True)
class SourceDone:
    """A scan AM has delivered all its tuples."""

    source: int


@dataclass
class Source:
    """A scan AM as the eddy sees it: its admission semaphore and its rank.

    ``rank``: among source batches that are ready, the eddy routes those of the lowest rank
    first. The planner ranks tables with fewer join edges, then fewer rows, first, so a hub
    table's tuples arrive after its neighbours' SteMs are built and probe them, rather than
    every neighbour tuple probing the hub's SteM — the build-side choice of a hash join
    (stems-2003 §3.1, simulating non-pipelined joins). It is a preference among ready
    batches, never a wait: a slow source does not hold back the others.
    """

    name: str
    admission: trio.Semaphore
    rank: tuple = ()


class Eddy:
    """Routes batches; see the module docstring. ``queues[d]`` is destination d's channel."""

    def __init__(
        self,
        routing_table: RoutingTable,
        policy: RoutingPolicy,
        queues: list[trio.MemorySendChannel],
        sources: list[Source],
        stats: RunStats,
        checker: ConstraintChecker | None = None,
    ) -> None:
        self.routing_table = routing_table
        self.policy = policy
        self.queues = queues
        self.sources = sources
        self.sources_open = len(sources)
        # Fresh batches per source, visited in rank order.
        self._by_rank = sorted(range(len(sources)), key=lambda i: sources[i].rank)
        self._fresh_of: list[deque[TupleBatch]] = [deque() for _ in sources]
        self._fresh_count = 0
        self.stats = stats
        self.checker = checker
        self._names = [d.name for d in routing_table.destinations]
        self._module_stats = [stats.modules[n] for n in self._names]
        self._priority: deque[TupleBatch] = deque()
        # (batch, destination): a destination the policy chose whose queue was full, or
        # None when no eligible queue had room and the batch must be routed afresh.
        self._waiting: deque[tuple[TupleBatch, int | None]] = deque()
        self._retry = False
        self._in_flight = 0
        self._started = time.perf_counter()

    def has_room(self, destination: int) -> bool:
        stats = self.queues[destination].statistics()
        return stats.current_buffer_used < stats.max_buffer_size

    async def run(self, inbox: trio.MemoryReceiveChannel) -> None:
        """Route until the query is finished, then close every module queue."""
        self._started = time.perf_counter()
        try:
            while True:
                self._drain(inbox)
                if self._retry and self._waiting:
                    self._retry = False
                    waiting, self._waiting = self._waiting, deque()
                    for batch, destination in waiting:
                        if destination is None:
                            self._route(batch)
                        else:
                            self._send(destination, batch, self._entry(batch))
                if self._priority:
                    self._route(self._priority.popleft())
                elif self._fresh_count and not self._waiting:
                    self._route(self._next_fresh())
                elif self._finished():
                    break
                else:
                    self._accept(await inbox.receive())
                    continue
                await trio.lowlevel.checkpoint()  # let the modules and scans run
        finally:
            for queue in {id(q): q for q in self.queues}.values():
                queue.close()
            self.stats.elapsed_seconds = time.perf_counter() - self._started

    def _finished(self) -> bool:
        return (
            self.sources_open == 0
            and self._in_flight == 0
            and not (self._priority or self._fresh_count or self._waiting)
        )

    def _next_fresh(self) -> TupleBatch:
        """The oldest ready batch of the lowest-ranked source; frees a slot of that source."""
        for i in self._by_rank:
            if self._fresh_of[i]:
                self._fresh_count -= 1
                self.sources[i].admission.release()
                return self._fresh_of[i].popleft()
        raise AssertionError("no fresh batch")  # pragma: no cover - guarded by the caller

    def _drain(self, inbox: trio.MemoryReceiveChannel) -> None:
        while True:
            try:
                message = inbox.receive_nowait()
            except trio.WouldBlock:
                return
            self._accept(message)

    def _accept(self, message: Returned | SourceBatch | SourceDone) -> None:
        if isinstance(message, Returned):
            if message.final:
                self._in_flight -= 1
                self._retry = True
            returned = sum(len(b) for b in message.outputs)
            stats = self._module_stats[message.destination]
            stats.tuples_out += returned
            stats.busy_seconds += message.busy_seconds
            self.policy.on_returned(message.destination, message.tuples_in, returned)
            if self.checker is not None:
                self.checker.check_returned(message.destination, message.tuples_in, message.outputs)
            self._priority.extend(b for b in message.outputs if len(b))
        elif isinstance(message, SourceBatch):
            self._fresh_of[message.source].append(message.batch)
            self._fresh_count += 1
        else:
            self.sources_open -= 1
            log.debug(
                "source exhausted", source=self.sources[message.source].name, open=self.sources_open
            )

    def _entry(self, batch: TupleBatch):
        return self.routing_table.entry(batch.signature)

    def _route(self, batch: TupleBatch) -> None:
        entry = self._entry(batch)
        if len(entry.destinations) == 1:
            choice = entry.destinations[0]
        else:
            choice = self.policy.choose(entry, len(batch), self.has_room)
        if choice is None:
            self._waiting.append((batch, None))
        elif isinstance(choice, np.ndarray):
            for destination, part in batch.split_by(choice).items():
                self._send(destination, part, entry)
        else:
            self._send(choice, batch, entry)

    def _send(self, destination: int, batch: TupleBatch, entry) -> None:
        if not self.has_room(destination):
            self._waiting.append((batch, destination))  # keep the decision: no re-split
            return
        if self.checker is not None:
            self.checker.check_route(batch, destination)
        edge = entry.edges[entry.destinations.index(destination)]
        self.queues[destination].send_nowait(Work(destination, batch, edge))
        self._in_flight += 1
        n = len(batch)
        self.policy.on_routed(destination, n)
        stats = self._module_stats[destination]
        stats.tuples_in += n
        stats.batches_in += 1
        sig = batch.signature
        self.stats.record_route(
            time.perf_counter() - self._started, sig.span, sig.done, destination, n, sig.built
        )
