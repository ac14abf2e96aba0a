"""Commit points: where a continuous query's result stream is cut into micro-batches.

An eddy over streams never ends, so "the result" is a sequence of increments. A producer
that pushed a micro-batch into a :class:`~eddies.sources.stream.StreamTable` asks for a
commit point (:meth:`CommitPoints.request`); it is granted at the next *quiescent* moment
of the dataflow — the eddy has nothing in flight, queued or parked (``Eddy.idle``), every
stream's scan AM waits for its next batch, and every static table's scans have finished —
so every tuple pushed so far has been routed to completion and every result it produced
has been sent to the result channel. A :class:`Commit` marker then goes down the result
channel behind those results; the consumer (``QueryResults``) hands the results received
since the previous marker to ``on_commit`` and releases the producer. Results between two
commit points are exactly those caused by the tuples pushed between them (stream-static
joins: by that micro-batch).

Windowed SteMs drop their expired tuples for good at the idle moments of the eddy, when
no row id is in flight (stems-2003 §2.3: no probe can still see them); a stream that is
pushed without pause still lets the eddy idle between batches.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

import trio

from eddies.modules.stem import SteM
from eddies.router.eddy import Eddy
from eddies.sources.stream import StreamTable


@dataclass
class Commit:
    """A marker in the result channel: results before it were caused by tuples pushed
    before the commit points ``tags`` were requested. ``done`` is set by the consumer."""

    tags: list[Hashable]
    done: trio.Event = field(default_factory=trio.Event)
    results: list = field(default_factory=list)  # filled by the consumer: result batches
    # What ``CommitPoints.on_grant`` saw at the quiescent moment (a streaming aggregate's
    # largest event time per stream: the watermark advances to it at this commit).
    at_grant: object = None
    # What ``CommitPoints.on_snapshot`` took at the grant (the SteMs' durable state), and
    # the checkpoint record the consumer made of it and of what lies above the eddy.
    state: object = None
    checkpoint: object = None
    owner: bool = True  # the first request of a grant: it got the results


class CommitPoints:
    """Grants commit points at quiescent moments of one running query (see module doc).

    Built before the eddy and the scan AMs, which get its hooks at construction:
    ``streams_may_start`` (the streams' scan AMs' ``start_after``), ``eviction_barrier``
    (their ``before_append``, when there are windowed SteMs: :attr:`before_append`) and
    ``changed`` (the eddy's ``on_idle``); the eddy itself is handed to :meth:`run`.

    streams: the StreamTables the query reads; static_tables: tables read by scans that
    end (they must be read in full before a commit point); windowed: the SteMs of windowed
    streams, which evict whenever the eddy is idle (no row id is in flight, nor held by a
    scan AM: ``Eddy.idle``).
    """

    def __init__(
        self,
        streams: list[StreamTable],
        static_tables: set[str],
        windowed: list[SteM] | None = None,
        stream_stems: dict[str, SteM] | None = None,
        lookup_stems: dict[str, SteM] | None = None,
    ) -> None:
        self.eddy: Eddy | None = None  # set when run() starts
        self.streams = streams
        self.static_tables = static_tables
        self.windowed = windowed or []
        self.stream_stems = stream_stems or {}  # stream table -> its SteM (checkpoints)
        self.lookup_stems = lookup_stems or {}  # table read by an index AM alone -> SteM
        self.checker: object = None  # the eddy's ConstraintChecker (debug=True), if any
        self._evicted = trio.Event()
        self._requests: list[Commit] = []
        self._wake = trio.Event()
        self._wake.set()  # look once at the start: a query may have no static table
        self.granted = 0
        # Called at each grant, while the dataflow is quiescent; its value rides on the
        # marker (Commit.at_grant). Set before the query's tasks start.
        self.on_grant: Callable[[], object] | None = None
        # Durable state (eddies.engine.streaming.durable): ``on_snapshot`` is called at each grant,
        # its value rides on the marker (Commit.state); ``restore`` is called once, at the
        # quiescent moment after the static tables are read and before the streams start.
        self.on_snapshot: Callable[[], object] | None = None
        # Called with (store, kept old row ids) after a SteM evicted and renumbered: the
        # debug output module's record of produced row ids follows the renumbering.
        self.on_evict: Callable[[object, object], None] | None = None
        self.restore: Callable[[], None] | None = None
        # Set once every static table's scans have finished: the streams' scan AMs wait
        # for it, so static tables are older than every stream tuple (windows rely on it).
        self.streams_may_start = trio.Event()
        for stream in streams:  # the catalog's streams report to the query reading them
            stream.on_wait = self.changed

    @property
    def before_append(self) -> Callable[[], Awaitable[None]] | None:
        """The hook for the streams' scan AMs: the eviction barrier if any SteM evicts."""
        return self.eviction_barrier if self.windowed else None

    def changed(self) -> None:
        """Something may have become quiescent (called by the eddy and the streams).

        Eviction runs here, synchronously: while the eddy is idle, no row id is in flight
        anywhere (``Eddy.idle`` counts the batches scan AMs have not handed over yet).
        """
        if self.eddy is None:  # the eddy has not started: run() will look
            self._wake.set()
            return
        if self.windowed and self.eddy.idle():
            for stem in self.windowed:
                kept = stem.evict()
                if kept is not None and self.on_evict is not None:
                    self.on_evict(stem.store, kept)
            self._evicted.set()
        self._wake.set()

    async def eviction_barrier(self) -> None:
        """Called by a stream's scan AM before it appends a batch: while a windowed SteM
        is due to evict, wait until it has (the eddy drains, idles, and evicts). A stream
        pushed without pause would otherwise never let the eddy idle, and memory would
        grow; this drains the dataflow once per window's worth of rows, amortized."""
        while any(stem.evict_due() for stem in self.windowed):
            if self._evicted.is_set():
                self._evicted = trio.Event()
            self.changed()  # the eddy may be idle already
            if any(stem.evict_due() for stem in self.windowed):
                await self._evicted.wait()

    def quiescent(self) -> bool:
        return (
            self.eddy is not None
            and self.eddy.idle()
            and all(s.waiting or s.drained for s in self.streams)
            and self.eddy.scans_closed(self.static_tables)
        )

    async def request(self, tag: Hashable) -> list:
        """Wait for the next commit point; the result batches since the previous one.

        Must be called in the query's trio run (producers use ``trio.from_thread``)."""
        return (await self.request_commit(tag)).results

    async def request_commit(self, tag: Hashable) -> Commit:
        """As :meth:`request`, but the granted :class:`Commit` itself (its ``results``,
        ``checkpoint`` record and whether this request ``owner``s them)."""
        commit = Commit([tag])
        self._requests.append(commit)
        self._wake.set()
        await commit.done.wait()
        return commit

    async def run(self, eddy: Eddy, results: trio.MemorySendChannel) -> None:
        """The long-lived task: sends a :class:`Commit` marker down ``results`` at each
        quiescent moment someone waits for; at the end of the query, a last one. ``eddy``:
        the query's eddy, built with :meth:`changed` as its ``on_idle``."""
        self.eddy = eddy
        async with results:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                if eddy.ended:
                    break
                if not self.streams_may_start.is_set():
                    if not eddy.scans_closed(self.static_tables):
                        continue
                    if self.restore is not None:  # every static tuple built and routed
                        if not eddy.idle():
                            continue
                        restore, self.restore = self.restore, None
                        restore()
                    self.streams_may_start.set()
                if self._requests and self.quiescent():
                    await self._grant(results)
            if self._requests:  # the query ended: every result is out
                await self._grant(results)

    async def _grant(self, results: trio.MemorySendChannel) -> None:
        waiting, self._requests = self._requests, []
        marker = Commit([tag for c in waiting for tag in c.tags])
        if self.on_grant is not None:
            marker.at_grant = self.on_grant()
        if self.on_snapshot is not None:
            marker.state = self.on_snapshot()
        self.granted += 1
        await results.send(marker)
        await marker.done.wait()
        for c in waiting:
            c.results = marker.results if c is waiting[0] else []
            c.owner = c is waiting[0]
            c.checkpoint = marker.checkpoint
            c.done.set()
