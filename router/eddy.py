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

Intermediate results are bounded (the bounds are knobs of
:class:`eddies.settings.Tuning`). A SteM probe returns at most ``stem_max_output_rows``
tuples per Work and hands the rest of a larger probe back as a continuation
(``Returned.rest``, see :mod:`eddies.modules.stem`). The eddy holds continuations in a
deferred queue and sends one back to its SteM only while the tuples it buffers (priority
buffer and waiting) plus the output bounds of resumed probes in flight stay below
``eddy_max_buffered_tuples`` — or when nothing is in flight at all, so the query always
progresses. Continuations never wait on a module (the eddy still never blocks on a send),
so no module can deadlock waiting for another; they are tuples already handled, so they go
before new source tuples (eddies-2000 §4), and while any is held no source tuple is
admitted. Memory is then bounded by ``eddy_max_buffered_tuples`` plus what the modules'
bounded queues hold; a cross product whose WHERE keeps nothing never holds its pairs at
once.

Modules that never wait (SteMs, SMs without UDF calls) are visited *inline*: the eddy
calls them and accepts their answer at once, as the PostgreSQL eddy calls its operators
(eddies-in-postgresql §2.1), which saves a queue hop and two task switches each way
(bench/visits.py); their queues stay empty. Index AMs, SMs with UDFs and the output keep
their tasks and queues, so lookups and calls still overlap with routing.

The query ends when every source is exhausted and no batch is in flight, queued, waiting
or deferred (stems-2003 §2.1.1); the eddy then closes the modules' queues.

Access methods can fail (stems-2003 §3.2, competitive AMs): a failed index AM is taken out
of the routing table and its Works come back to be routed to the table's other AMs; a
failed scan is dropped if another scan of its table goes on, and when none does, the
table falls back to its index AMs where a join binds one. When a table has no AM left
that can serve what the query needs, the query fails with a DataSourceError naming the
table and every AM's error — never a silently short result. When one scan of a table
finishes, the eddy stops the table's other scans: all they would deliver is duplicates.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

import numpy as np
import structlog
import trio

from eddies.errors import DataSourceError
from eddies.router.eddy_wiring import DestinationRoles, EddyHooks, EddyWiring
from eddies.router.messages import AccessFailed, Returned, SourceBatch, SourceDone, Work
from eddies.router.policies.base import HOLD, RoutingPolicy
from eddies.router.stats import RunStats
from eddies.router.tuple_batch import Signature, TupleBatch, concat_batches
from eddies.settings import current

log = structlog.get_logger("eddies.router")
#: The stdlib logger behind ``log``: a debug call through structlog's lazy proxy costs a
#: logger lookup and a bind even when debug is off, so the eddy checks the level first.
_stdlib_log = logging.getLogger("eddies.router")

#: Probe tuples that may wait in the eddy for full index AMs while new source tuples are
#: still admitted (see ``Eddy._admission_blocked``); beyond it the sources are held back.
MAX_WAITING_FOR_LOOKUPS = 65536


class _ModuleEnded(Exception):
    """A module's input queue is closed: its task has ended (see :meth:`Eddy.run`)."""

    def __init__(self, module: str) -> None:
        super().__init__(module)
        self.module = module


class Eddy:
    """Routes batches among the modules of one query (eddies-2000 §3; see the module
    docstring): ``wiring`` its routing table, queues and sources, ``policy`` the routing
    policy (eddies-2000 §4), ``stats`` what it counts, ``hooks`` what it calls in the rest
    of the query. ``queues[d]`` is destination d's channel. The backlog bound is
    ``eddies.settings.Tuning.eddy_max_buffered_tuples``, read when the eddy is made."""

    def __init__(
        self,
        wiring: EddyWiring,
        policy: RoutingPolicy,
        stats: RunStats,
        hooks: EddyHooks | None = None,
    ) -> None:
        hooks = hooks or EddyHooks()
        self.routing_table = wiring.routing_table
        self.policy = policy
        self.queues = wiring.queues
        self.sources = wiring.sources
        self.stats = stats
        stats.estimates = policy.estimates
        self.checker = hooks.checker
        # Continuous queries: called whenever the eddy may have become idle, and when it
        # ends (see eddies.engine.streaming.commit_points); ``ended`` is then True.
        self.on_idle = hooks.on_idle
        self.ended = False
        # Called at points of stasis with the source tuples admitted so far (EddyHooks).
        self.stasis = hooks.stasis
        self._roles = DestinationRoles.of(wiring.routing_table)
        self._module_stats = [stats.modules[n] for n in self._roles.names]
        self._max_buffered = current().eddy_max_buffered_tuples
        self._debug = _stdlib_log.isEnabledFor(logging.DEBUG)
        self._started = time.perf_counter()
        self._inbox: trio.MemoryReceiveChannel | None = None
        # Fresh batches per source, visited in rank order.
        self.sources_open = len(wiring.sources)
        self._by_rank = sorted(range(len(wiring.sources)), key=lambda i: wiring.sources[i].rank)
        self._fresh_of: list[deque[TupleBatch]] = [deque() for _ in wiring.sources]
        self._fresh_count = 0
        self._admitted = 0  # source tuples admitted so far
        self._priority: deque[TupleBatch] = deque()
        # (batch, destination): a destination the policy chose whose queue was full, or
        # None when no eligible queue had room and the batch must be routed afresh.
        self._waiting: deque[tuple[TupleBatch, int | None]] = deque()
        self._retry = False
        self._buffered = 0  # tuples in _priority and _waiting
        # Continuations of SteM probes stopped at their output bound, and the output bounds
        # of those sent back and not answered yet (see the module docstring).
        self._deferred: deque[Work] = deque()
        self._promised = 0
        self._in_flight = 0
        # Returned batches under ``coalesce_below`` tuples (EddyWiring) are merged with the
        # others of their signature in the priority buffer, one module visit for all (a
        # STAIR holding several signatures returns one small batch each, and their paths
        # meet again). ``_small``: per signature, how many such batches the buffer holds.
        self._coalesce_below = wiring.coalesce_below
        self._small: dict[Signature, int] = {}
        self._failures: dict[str, list[str]] = {}  # table -> errors of its failed AMs
        self._scanned = wiring.scanned
        self._stems = wiring.stems  # table -> its SteM (to fall back from a failed scan)
        # Floating batches bounced by an incomplete SteM wait here, per table, until that
        # SteM builds more tuples or its scan ends (relaxed BuildFirst, stems-2003 §3.5).
        self._parked: dict[str, list[TupleBatch]] = {}
        self._unbuilt: dict[str, int] = {}  # per table: delivered tuples not built yet
        self._scan_done: set[str] = set()
        self._builds: dict[str, int] = {}  # per step table: builds finished so far
        self._flushes: deque[tuple[int, int]] = deque(self._roles.flushes)
        # Tuples with steps to take none of whose SteMs is complete yet: released when a
        # step table's SteM completes (see _route, _unpark).
        self._awaiting_steps: list[TupleBatch] = []
        # Destinations whose module never waits: the eddy calls them directly instead of a
        # queue hop each way (see _send). Their queues stay empty, so they always have room.
        self._inline: list[Callable[[Work], Returned] | None] = [
            wiring.inline.get(d.id) for d in wiring.routing_table.destinations
        ]
        # SteM filters not decided yet: destination -> whether to offer it (None: its SteM
        # is not complete yet; asked after builds, SM answers and scan ends).
        self._unready_filters = dict(hooks.filters)

    def _offer_filters(self) -> None:
        """Offer the SteM filters whose SteMs now hold every qualifying row, where they pay
        (the callable answers None while its SteM is incomplete, then a FilterOffer:
        whether to offer it to built tuples and to unbuilt singletons, and its prior
        selectivity, which the policy gets)."""
        decided = {d: ask() for d, ask in self._unready_filters.items()}
        for d, offer in decided.items():
            if offer is None:
                continue
            del self._unready_filters[d]
            self.routing_table.mark_filter_ready(d, offer.built, offer.unbuilt)
            if offer.prior_selectivity is not None:
                self.policy.on_filter_ready(d, offer.prior_selectivity)
            if self._debug:
                log.debug(
                    "SteM filter complete",
                    filter=self._roles.names[d],
                    built=offer.built,
                    unbuilt=offer.unbuilt,
                    prior_selectivity=offer.prior_selectivity,
                )

    def has_room(self, destination: int) -> bool:
        stats = self.queues[destination].statistics()
        return stats.current_buffer_used < stats.max_buffer_size

    async def run(self, inbox: trio.MemoryReceiveChannel) -> None:
        """Route until the query is finished, then close every module queue."""
        self._started = time.perf_counter()
        self._inbox = inbox
        try:
            while True:
                self._drain(inbox)
                if self._retry and self._waiting:
                    self._retry = False
                    waiting, self._waiting = self._waiting, deque()
                    self._buffered -= sum(len(b) for b, _ in waiting)
                    for batch, destination in waiting:
                        entry = self._entry(batch)
                        if destination is None or not entry.offers(destination):
                            self._route(batch)  # e.g. its chosen AM failed meanwhile
                        else:
                            self._send(destination, batch, entry)
                if self._deferred and self._may_resume():
                    self._resume()
                if self._priority:
                    self._route(self._pop_priority())
                elif self._fresh_count and not self._admission_blocked():
                    if self.stasis is not None and self._at_stasis():
                        self.stasis(self._admitted)
                    self._route(self._next_fresh())
                elif self._finished():
                    if self._flushes:
                        self._flush_next()
                        continue
                    break
                elif self._retry and self._waiting:
                    # An inline visit answered while this pass routed: what waits for an
                    # answer (held parts of a split batch) is routed again now. No message
                    # will arrive for it, so waiting on the inbox would deadlock.
                    pass
                else:
                    if self.on_idle is not None and self.idle():
                        self.on_idle()
                    self._accept(await inbox.receive())
                    continue
                await trio.lowlevel.checkpoint()  # let the modules and scans run
        except _ModuleEnded as ended:
            # A module's queue closes only when its task ends: cancelled (LIMIT stopped the
            # query, or the caller left) or failed, which cancels the query's nursery. A
            # message taken just before that cancel let the eddy route on synchronously; it
            # must end by the same cancel, not add a BrokenResourceError of its own.
            await trio.lowlevel.checkpoint()
            raise RuntimeError(
                f"module {ended.module!r} ended while the eddy still routed to it"
            ) from None
        finally:
            for queue in {id(q): q for q in self.queues}.values():
                queue.close()
            self.stats.elapsed_seconds = time.perf_counter() - self._started
            self.ended = True
            if self.on_idle is not None:
                self.on_idle()

    def _at_stasis(self) -> bool:
        """A point of stasis (stairs-2004 App. A): no Work in flight, nothing waiting,
        deferred or parked, and the priority buffer empty — every admitted tuple fully
        processed (fresh source batches may wait: they are not admitted yet)."""
        return (
            self._in_flight == 0
            and not (self._priority or self._waiting or self._deferred)
            and not any(self._parked.values())
            and not self._awaiting_steps
        )

    def idle(self) -> bool:
        """True when nothing is in flight, queued, parked or unread in the inbox: every
        tuple delivered so far has been fully processed (a quiescent point)."""
        return (
            self._in_flight == 0
            and not (self._priority or self._fresh_count or self._waiting or self._deferred)
            and not any(self._parked.values())
            and not self._awaiting_steps
            and (self._inbox is None or self._inbox.statistics().current_buffer_used == 0)
            and not any(s.undelivered for s in self.sources if not s.closed)
        )

    def scans_closed(self, tables: set[str]) -> bool:
        """True when every scan AM of these tables has finished (or was stopped)."""
        return all(s.closed for s in self.sources if s.table in tables)

    def _admission_blocked(self) -> bool:
        """Whether waiting batches hold back new source tuples.

        A batch that waits for a full SM or SteM does (back-pressure: the sources slow down
        to the pace of the dataflow, and the lottery's favourite is waited for). A batch
        that waits for an index AM does not, up to ``MAX_WAITING_FOR_LOOKUPS`` tuples:
        fresh tuples may find their matches in the SteMs meanwhile, and stalling them
        behind slow lookups is the head-of-line blocking SteMs exist to avoid (stems-2003
        §4.2). A held continuation does too: its tuples were handled already (eddies-2000
        §4), and new source tuples would only add probes to the backlog it waits out.
        """
        if self._deferred:
            return True
        waiting_for_lookups = 0
        for batch, destination in self._waiting:
            if destination is None or destination not in self._roles.lookups:
                return True
            waiting_for_lookups += len(batch)
        return waiting_for_lookups > MAX_WAITING_FOR_LOOKUPS

    def _finished(self) -> bool:
        return (
            self.sources_open == 0
            and self._in_flight == 0
            and not (self._priority or self._fresh_count or self._waiting or self._deferred)
            and not any(self._parked.values())
            and not self._awaiting_steps
        )

    def _next_fresh(self) -> TupleBatch:
        """The oldest ready batch of the lowest-ranked source; frees a slot of that source."""
        for i in self._by_rank:
            if self._fresh_of[i]:
                self._fresh_count -= 1
                self.sources[i].admission.release()
                batch = self._fresh_of[i].popleft()
                self._admitted += len(batch)
                return batch
        raise AssertionError("no fresh batch")  # pragma: no cover - guarded by the caller

    def _drain(self, inbox: trio.MemoryReceiveChannel) -> None:
        while True:
            try:
                message = inbox.receive_nowait()
            except trio.WouldBlock:
                return
            self._accept(message)

    def _accept(self, message: Returned | SourceBatch | SourceDone | AccessFailed) -> None:
        if isinstance(message, Returned) and message.work is not None and message.work.flush:
            self._in_flight -= 1
            self._retry = True
            for b in message.outputs:
                if len(b):
                    self._buffer(b)
            return
        if isinstance(message, Returned):
            if message.final:
                self._in_flight -= 1
                self._retry = True
                self._promised -= message.resumed
            if message.rest is not None:
                # The continuation's answers count towards the Work first routed.
                origin = message.work
                if origin is not None:
                    message.rest.origin = origin.origin or origin
                    message.rest.routed_at = origin.routed_at
                self._deferred.append(message.rest)
            returned = sum(len(b) for b in message.outputs)
            stats = self._module_stats[message.destination]
            stats.tuples_out += returned
            stats.busy_seconds += message.busy_seconds
            self.policy.on_returned(
                message.destination, message.tuples_in, returned, message.busy_seconds
            )
            self.policy.observe(message, time.perf_counter())
            if self.checker is not None:
                self.checker.check_returned(message.destination, message.tuples_in, message.outputs)
            # An empty batch may still carry EOT tuples, which must be built.
            built_table = self._roles.builds.get(message.destination)
            if message.final and built_table is not None and not self._looked_up(message):
                self._unbuilt[built_table] = self._unbuilt.get(built_table, 0) - message.tuples_in
            if message.final and built_table is not None:
                self._builds[built_table] = self._builds.get(built_table, 0) + 1
            step_table = self._roles.step_tables.get(message.destination)
            for b in message.outputs:
                if step_table is not None and b.signature.prior:
                    self._park_for_eots(step_table, b, message.work)
                elif b.signature.floating and b.signature.prior:
                    self._park(b)
                elif len(b) or b.eot is not None:
                    self._buffer(b)
            if message.final and built_table is not None:
                self._unpark(built_table)
            if (
                message.final
                and self._unready_filters
                and (built_table is not None or message.destination in self._roles.drops)
            ):
                self._offer_filters()  # a build or a drop may have completed a SteM
        elif isinstance(message, SourceBatch):
            source = self.sources[message.source]
            source.undelivered -= 1
            if source.closed:  # a sibling scan finished first: these rows are duplicates
                source.admission.release()
                return
            self._fresh_of[message.source].append(message.batch)
            self._fresh_count += 1
            self._unbuilt[source.table] = self._unbuilt.get(source.table, 0) + len(message.batch)
        elif isinstance(message, SourceDone):
            source = self.sources[message.source]
            self._close_source(message.source, keep_delivered=True)
            if self._debug:
                log.debug("source exhausted", source=source.name, open=self.sources_open)
            if source.table in self._scanned:
                self._scanned[source.table].set()
            self._scan_done.add(source.table)
            self._unpark(source.table)
            if self._unready_filters:
                self._offer_filters()
            for i, other in enumerate(self.sources):
                if other.table == source.table and not other.closed:
                    log.info("scan stopped: a competing scan finished", source=other.name)
                    self._close_source(i)
        else:
            self._access_failed(message)

    def _may_resume(self) -> bool:
        """Whether the oldest continuation may go back to its SteM now: its queue has room
        and the backlog is below ``eddy_max_buffered_tuples``, or nothing is in flight."""
        work = self._deferred[0]
        if not self.has_room(work.destination):
            return False
        return self._buffered + self._promised < self._max_buffered or self._in_flight == 0

    def _resume(self) -> None:
        """Send the oldest continuation back to its SteM (its tuples were counted and
        checked when first routed); reserve its output bound until it answers."""
        work = self._deferred.popleft()
        assert work.resume is not None
        visit = self._inline[work.destination]
        if visit is None:
            try:
                self.queues[work.destination].send_nowait(work)
            except trio.BrokenResourceError:
                raise _ModuleEnded(
                    self.routing_table.destinations[work.destination].module
                ) from None
        self._in_flight += 1
        self._promised += work.resume.limit
        if visit is not None:
            self._accept(visit(work))

    def _buffer(self, batch: TupleBatch, first: bool = False) -> None:
        """Queue a returned batch in the priority buffer (routed before new source
        tuples); ``first``: at its head."""
        if first:
            self._priority.appendleft(batch)
        else:
            self._priority.append(batch)
        if self._mergeable(batch):
            self._small[batch.signature] = self._small.get(batch.signature, 0) + 1
        self._count_buffered(len(batch))

    def _mergeable(self, batch: TupleBatch) -> bool:
        return (
            len(batch) < self._coalesce_below
            and batch.eot is None
            and batch.lmts is None
            and batch.origin == -1
        )

    def _pop_priority(self) -> TupleBatch:
        """The priority buffer's oldest batch, merged with the other small batches of its
        signature there when it is small (see ``coalesce_below``)."""
        batch = self._priority.popleft()
        self._buffered -= len(batch)
        if not self._mergeable(batch):
            return batch
        sig = batch.signature
        left = self._small[sig] - 1
        if not left:
            del self._small[sig]
            return batch
        parts, rest = [batch], deque()
        for b in self._priority:
            (parts if b.signature == sig and self._mergeable(b) else rest).append(b)
        del self._small[sig]
        self._priority = rest
        self._buffered -= sum(len(b) for b in parts[1:])
        self.stats.coalesced_batches += len(parts) - 1
        return concat_batches(parts)

    def _wait(self, batch: TupleBatch, destination: int | None) -> None:
        """Hold a batch until a queue has room (``destination`` None: route it afresh)."""
        self._waiting.append((batch, destination))
        self._count_buffered(len(batch))

    def _count_buffered(self, n: int) -> None:
        self._buffered += n
        if self._buffered > self.stats.peak_buffered_tuples:
            self.stats.peak_buffered_tuples = self._buffered

    def _looked_up(self, message: Returned) -> bool:
        """Whether a build's tuples came from an index AM: ``_unbuilt`` counts only what
        scans delivered, so lookups' builds must not pay it off."""
        work = message.work
        return work is not None and work.batch.origin in self._roles.index_access

    def _complete(self, table: str) -> bool:
        """The SteM of ``table`` holds every tuple it ever will: its scan has delivered
        every row and each delivered row has come back from its build (BuildFirst)."""
        return table in self._scan_done and self._unbuilt.get(table, 0) <= 0

    def _flush_next(self) -> None:
        """Nothing is in flight and every source is done, so no tuple can probe the next
        RIGHT / FULL JoinStep any more: ask it for its unmatched tuples, NULL-padded."""
        destination, needs = self._flushes.popleft()
        empty = TupleBatch(Signature(needs, 0, True), {}, np.zeros(0, dtype=np.int64))
        try:
            self.queues[destination].send_nowait(Work(destination, empty, flush=True))
        except trio.BrokenResourceError:
            raise _ModuleEnded(self.routing_table.destinations[destination].module) from None
        self._in_flight += 1

    def _park_for_eots(self, table: str, batch: TupleBatch, work: Work | None) -> None:
        """Hold tuples an EOT-gated JoinStep bounced (their lookups' EOTs were not in its
        SteM yet) until ``table``'s next build — unless one finished since they were sent,
        which may have brought the EOTs already."""
        if work is not None and self._builds.get(table, 0) > work.builds_seen:
            self._buffer(batch)
        else:
            self._parked.setdefault(table, []).append(batch)

    def _park(self, batch: TupleBatch) -> None:
        """Hold a floating batch bounced by an incomplete SteM until that SteM changes —
        unless it is complete by now (its answer raced the last build or the scan's end)."""
        alias = self.routing_table.graph.aliases[batch.signature.prior.bit_length() - 1]
        if alias.table in self._scan_done and self._unbuilt.get(alias.table, 0) <= 0:
            self._buffer(batch)
        else:
            self._parked.setdefault(alias.table, []).append(batch)

    def _unpark(self, table: str) -> None:
        """The SteM of ``table`` changed: its bounced floating batches may probe again."""
        parked = self._parked.pop(table, None)
        for batch in parked or ():
            self._buffer(batch)
        if self._awaiting_steps and table in self._roles.gate_tables and self._complete(table):
            # A step's SteM is complete: what waited for one of its steps may take it.
            waiting, self._awaiting_steps = self._awaiting_steps, []
            for batch in waiting:
                self._buffer(batch)

    def _close_source(self, index: int, keep_delivered: bool = False) -> None:
        """No more batches from this scan; its undelivered ones are dropped unless it
        finished itself (a stopped sibling's rows are all duplicates)."""
        source = self.sources[index]
        if source.closed:
            return
        source.closed = True
        source.cancel_scope.cancel()
        self.sources_open -= 1
        if keep_delivered:
            return
        dropped = self._fresh_of[index]
        self._fresh_count -= len(dropped)
        # Never built: no longer owed to the table's SteM (its completion, see _complete).
        self._unbuilt[source.table] = self._unbuilt.get(source.table, 0) - sum(
            len(b) for b in dropped
        )
        dropped.clear()
        self._unpark(source.table)  # the table's SteM may be complete now

    def _access_failed(self, message: AccessFailed) -> None:
        """Route around a failed AM, or fail the query if its table has none left."""
        info = self.routing_table.graph.access[message.access]
        self._failures.setdefault(info.table, []).append(message.error)
        log.warning("failing over", table=info.table, access=info.name, error=message.error)
        self.stats.failures.append(message.error)
        self.routing_table.mark_failed(message.access)
        self.policy.on_failed(message.access)
        if message.source is None:
            return
        self._close_source(message.source)
        if not any(
            s.table == info.table and not s.closed and s.access not in self.routing_table.failed
            for s in self.sources
        ) and not self._fall_back_to_lookups(info.table):
            self._fail_table(info.table)

    def _fall_back_to_lookups(self, table: str) -> bool:
        """Every scan of ``table`` failed: serve it by its index AMs, if it has any left.

        Tuples that probed the table's SteM were not bounced back while a scan was alive
        (it would deliver their matches later). So from now on the SteM bounces probes as
        an index-only table's does, and every tuple held in a SteM whose joins bind an index
        of the table is sent again, as a prior prober, to look its matches up: the lookups
        bring what the scan never delivered (rows it did deliver are dropped as duplicates
        when they are built again), and those rows then find the held tuples (TimeStamp).
        Returns False when no index AM is left, or no join binds one.
        """
        graph = self.routing_table.graph
        if not any(am.id not in self.routing_table.failed for am in graph.indexes_of(table)):
            return False
        if any(graph.aliases[s.alias].table == table for s in graph.steps):
            return False  # a JoinStep needs the whole table: lookups cannot complete it
        replays: list[TupleBatch] = []
        for target in graph.aliases_of(table):
            for p in graph.predicates:
                edge = p.edge
                if edge is None or target not in (edge.left, edge.right):
                    continue
                if not graph.bindable(edge, target):
                    continue
                holder = edge.other(target)
                stem = self._stems.get(graph.aliases[holder].table)
                if stem is None:
                    continue
                replays += stem.held_as_prior_probers(holder, target)
        bindable = any(
            p.edge is not None
            and target in (p.edge.left, p.edge.right)
            and graph.bindable(p.edge, target)
            for target in graph.aliases_of(table)
            for p in graph.predicates
        )
        if not bindable:
            return False
        log.warning("every scan failed: falling back to lookups", table=table)
        self.routing_table.mark_scanless(table)
        self._stems[table].has_scan = False
        for batch in replays:
            self._buffer(batch)
        return True

    def _fail_table(self, table: str) -> None:
        errors = "; ".join(self._failures.get(table, [])) or "no access method can serve it"
        raise DataSourceError(
            f"table {table!r}: every access method the query needs has failed ({errors})"
        )

    def _entry(self, batch: TupleBatch):
        return self.routing_table.entry(batch.signature)

    def _route(self, batch: TupleBatch) -> None:
        entry = self._entry(batch)
        if entry.stranded is not None:
            self._fail_table(entry.stranded)
        if entry.gates:
            entry = self._gated(entry, batch)
            if entry is None:
                self._awaiting_steps.append(batch)
                return
        if not entry.destinations:  # nothing left to do (see RoutingTable._floating)
            return
        has_room = self._room_of(entry)
        if len(entry.destinations) == 1:
            choice = entry.destinations[0]
        else:
            choice = self.policy.choose(entry, len(batch), has_room, batch.signature)
        if choice is None:
            self._wait(batch, None)
        elif isinstance(choice, np.ndarray):
            for destination, part in batch.split_by(choice).items():
                if destination == HOLD:  # routed afresh after the next answer (pilots)
                    self._wait(part, None)
                else:
                    self._send_step(destination, part, entry)
        else:
            self._send_step(choice, batch, entry)

    def _gated(self, entry, batch: TupleBatch):
        """The entry with only the JoinSteps a tuple may take now — those whose table's
        SteM is complete (a step probes a complete SteM, so "no match" is final) — or
        None when it must wait: no step's SteM is complete, or a policy that follows a
        fixed order (static) prefers a step that is not."""
        ready = [
            d for d in entry.destinations if d not in entry.gates or self._complete(entry.gates[d])
        ]
        if not ready:
            return None
        if len(ready) < len(entry.destinations):
            if self.policy.follows_order:
                first = self.policy.choose(entry, len(batch), self.has_room, batch.signature)
                if first not in ready:
                    return None
            return entry.only(ready)
        return entry

    def _room_of(self, entry):
        """has_room for the policy: a step with alternatives has room if any of them has."""
        if not entry.alternatives:
            return self.has_room
        groups = entry.alternatives

        def has_room(destination: int) -> bool:
            group = groups.get(destination)
            if group is None:
                return self.has_room(destination)
            return any(self.has_room(d) for d in group)

        return has_room

    def _send_step(self, step: int, batch: TupleBatch, entry) -> None:
        """Send to the module that does ``step``: the access chooser picks among
        alternatives (stems-2003 §3.2, §4.3); None means all are full, so wait."""
        group = entry.alternatives.get(step)
        if group is not None:
            destination = self.policy.choose_access(group, len(batch), self.has_room)
            if destination is None:
                self._wait(batch, None)
                return
            step = destination
        self._send(step, batch, entry)

    def _send(self, destination: int, batch: TupleBatch, entry) -> None:
        limit = self.routing_table.destinations[destination].max_batch
        if limit is not None and len(batch) > limit:
            # The rest is routed afresh, next: each Work is placed on its own.
            self._buffer(batch.take(slice(limit, None)), first=True)
            batch = batch.take(slice(0, limit))
        if not self.has_room(destination):
            self._wait(batch, destination)  # keep the decision: no re-split
            return
        if self.checker is not None:
            self.checker.check_route(batch, destination)
        now = time.perf_counter()
        work = Work(destination, batch, entry.edge_of(destination), routed_at=now)
        step_table = self._roles.step_tables.get(destination)
        if step_table is not None:
            work.builds_seen = self._builds.get(step_table, 0)
        visit = self._inline[destination]
        if visit is None:
            try:
                self.queues[destination].send_nowait(work)
            except trio.BrokenResourceError:
                raise _ModuleEnded(self.routing_table.destinations[destination].module) from None
        self._in_flight += 1
        n = len(batch)
        sig = batch.signature
        self.policy.on_routed(destination, n, sig)
        stats = self._module_stats[destination]
        stats.tuples_in += n
        stats.batches_in += 1
        self.stats.record_route(
            now - self._started,
            sig.span,
            sig.done,
            destination,
            n,
            sig.built,
            prior=sig.prior,
            looked=sig.looked,
            floating=sig.floating,
        )
        if visit is not None:
            self._accept(visit(work))
