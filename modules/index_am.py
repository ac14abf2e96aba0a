"""Asynchronous index access modules (AMs): lookups by bind values, many in flight.

stems-2003 §2.1.3: an index AM takes probe tuples, looks up their matches in the source,
returns them (not concatenated: the AM's output has the table's schema) and, once a
probe's matches are all out, an EOT tuple; it bounces back the probe tuple. Web sources
answer slowly, so many lookups run at once (Goldman & Widom's asynchronous iteration, as
the paper cites): here ``max_concurrency`` worker tasks take distinct bind values from a
queue, and a Work (a batch of probe tuples) is answered once every lookup it needs is done.

* A bind value is looked up once per query per AM: a later probe with the same values
  waits for (or finds finished) the first lookup, whose matches reach it through the SteM.
* Matches of finished lookups leave together with their EOT tuples (an
  :class:`~eddies.router.tuple_batch.Eot` on the batch) as one partial answer, *before*
  the final answer of any Work that waited for them, so the eddy never ends a query with
  matches still inside an AM.
* Prior probers (ProbeCompletion, §3.4) end here: their remaining matches arrive as new
  singletons that find them in their SteMs. Tuples that came straight to the AM (the index
  join of a hybrid, §4.3) are bounced back marked ``looked`` and go on to the SteM.
* Each lookup gets ``timeout`` seconds and ``retries`` retries with exponential backoff
  (:func:`eddies.router.calls.call_with_retries`, shared with per-row UDFs); a throttled
  source (429 and ``Retry-After``) is waited for, not counted as failing.
  When they are used up the AM fails: the eddy is told (:class:`AccessFailed`), every Work
  still here is handed back unchanged, and the eddy routes it to the table's other AMs
  (failover) — or fails the query naming the table, if none is left.
* Back-pressure: the AM takes a new Work only while fewer than ``lookahead`` lookups wait
  for a worker (``LOOKAHEAD_PER_LOOKUP`` per lookup slot, at least ``LOOKAHEAD_MIN``), so
  its input queue fills when the source is the bottleneck — late enough that the eddy,
  which admits no new source tuples while a batch waits for a full queue, is not held up
  behind a few slow lookups (head-of-line blocking, stems-2003 §4.2). A Work whose bind
  values are all asked for already adds no lookups.
* When a scan of the same table has delivered every row (``scanned``), lookups still
  waiting are skipped and their Works answered at once: the SteM will hold every match.
  So is a lookup whose bind values a competing AM has delivered meanwhile (its EOT is in
  the SteM's ``eots``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import structlog
import trio

from eddies.errors import DataSourceError
from eddies.modules.base import Module, close_channels
from eddies.modules.key_set import KeySet, bind_columns
from eddies.router.calls import CallFailed, call_with_retries, describe_exception
from eddies.router.messages import AccessFailed, Returned, Work
from eddies.router.query_graph import AccessInfo, QueryGraph
from eddies.router.stats import LookupStats
from eddies.router.tuple_batch import Eot, Signature, singleton_batch
from eddies.sources.arrow_source import RETRY_AFTER_CAP, Throttled, conform
from eddies.sources.index_access import IndexAccess
from eddies.sources.table_store import TableStore

log = structlog.get_logger("eddies.modules")

#: Lookups an index AM lets wait for a worker before it stops taking Works, per lookup slot
#: and at least: enough to keep every slot busy and absorb bursts of probes.
LOOKAHEAD_PER_LOOKUP = 8
LOOKAHEAD_MIN = 256
#: 429 answers one lookup may wait out before they count as failed attempts: a source
#: that throttles without end is as good as down.
MAX_THROTTLED = 32


@dataclass(eq=False)
class _Lookup:
    """One distinct bind-value tuple: looked up once, awaited by every Work that needs it."""

    key: tuple
    finished: trio.Event = field(default_factory=trio.Event)
    failed: bool = False
    seconds: float = 0.0


class IndexAM(Module):
    """The index AM of one :class:`~eddies.engine.catalog.IndexAccess`.

    Destinations: one lookup per alias of the table (``targets``: destination id -> alias).
    ``store`` is the table's row store (matches are appended there); ``first_alias`` is the
    alias new singletons carry (the SteM's build fans them out to every alias).
    """

    kind = "index"

    def __init__(
        self,
        spec: IndexAccess,
        access: AccessInfo,
        graph: QueryGraph,
        stores: dict[int, TableStore],
        store: TableStore,
        targets: dict[int, int],
        first_alias: int,
        scanned: trio.Event | None = None,
        eots: KeySet | None = None,
        stats: LookupStats | None = None,
    ) -> None:
        self.name = f"am:{spec.name}"
        self.spec = spec
        self.access = access
        self.graph = graph
        self.stores = stores
        self.store = store
        self.schema = store.schema
        self.targets = targets
        self.first_alias = first_alias
        self.on_types = [self.schema.field(c).type for c in spec.on]
        self.lookahead = max(LOOKAHEAD_MIN, LOOKAHEAD_PER_LOOKUP * spec.max_concurrency)
        self.lookups: dict[tuple, _Lookup] = {}
        self.stats = stats or LookupStats(spec.name)
        self.failed: str | None = None
        self._waiting_for_worker = 0
        self._room = trio.Event()
        self._finished: list[tuple[_Lookup, pa.Table]] = []
        self._answer_ready = trio.Event()
        self._answer_destination = min(targets)
        self.scanned = scanned
        self.eots = eots  # the SteM's EOTs for these bind columns (any AM's)

    # -- the module's tasks -----------------------------------------------------------

    async def serve(
        self, inbox: trio.MemoryReceiveChannel, to_eddy: trio.MemorySendChannel
    ) -> None:
        self._to_eddy = to_eddy
        queue_in, queue_out = trio.open_memory_channel[_Lookup](float("inf"))
        self._queue = queue_in
        ended = False
        try:
            async with contextlib.AsyncExitStack() as stack:
                lookup = await self._open(stack)
                async with trio.open_nursery() as nursery:
                    if lookup is not None:
                        for i in range(self.spec.max_concurrency):
                            nursery.start_soon(
                                self._worker, lookup, queue_out, name=f"{self.name}#{i}"
                            )
                        nursery.start_soon(self._flush_answers, name=f"{self.name}:answers")
                    if self.scanned is not None:
                        nursery.start_soon(self._skip_when_scanned, name=f"{self.name}:scanned")
                    async for work in inbox:
                        while self._waiting_for_worker >= self.lookahead:
                            self._room = trio.Event()
                            await self._room.wait()
                        self._accept(work, nursery)
                    # The eddy closes the queue only when nothing is in flight: we are done.
                    nursery.cancel_scope.cancel()
            ended = True
        finally:
            close_channels(inbox, to_eddy, ended)

    async def _open(self, stack: contextlib.AsyncExitStack) -> Callable | None:
        """The lookup function, opening the AM's session (e.g. an HTTP client) if any."""
        if self.spec.lookup is not None:
            return self.spec.lookup
        try:
            return await stack.enter_async_context(self.spec.session())
        except Exception as exc:  # a source that cannot even connect has failed
            await self._fail(f"opening the session failed: {describe_exception(exc)}")
            return None

    def _accept(self, work: Work, nursery: trio.Nursery) -> None:
        if self.failed is not None or (self.scanned is not None and self.scanned.is_set()):
            nursery.start_soon(self._answer, work, [], time.perf_counter())
            return
        needed: list[_Lookup] = []
        for key in self._bind_keys(work):
            lookup = self.lookups.get(key)
            if lookup is None:
                lookup = self.lookups[key] = _Lookup(key)
                self._waiting_for_worker += 1
                self._queue.send_nowait(lookup)
            needed.append(lookup)
        nursery.start_soon(self._answer, work, needed, time.perf_counter())

    def _bind_keys(self, work: Work) -> list[tuple]:
        """The distinct usable bind-value tuples of a Work's probe tuples."""
        target = self.targets[work.destination]
        edge = self.graph.predicates[work.edge].edge
        probe_alias = edge.other(target)
        target_cols, probe_cols = edge.side(target), edge.side(probe_alias)
        cols = tuple(probe_cols[target_cols.index(c)] for c in self.spec.on)
        values, usable = bind_columns(
            self.stores[probe_alias], cols, self.on_types, work.batch.rows[probe_alias]
        )
        if not usable.any():
            return []
        names = [f"k{i}" for i in range(len(values))]
        table = pa.table(dict(zip(names, values, strict=True)))
        if not usable.all():
            table = table.filter(pa.array(usable))
        distinct = table.group_by(names).aggregate([])
        return list(zip(*(distinct.column(n).to_pylist() for n in names), strict=True))

    async def _answer(self, work: Work, needed: list[_Lookup], started: float) -> None:
        """Answer a Work once its lookups are done: bounce back or drop its probe tuples."""
        for lookup in needed:
            await lookup.finished.wait()
        batch = work.batch
        sig = batch.signature
        if any(lookup.failed for lookup in needed) or (self.failed is not None and not needed):
            outputs = [batch]  # unchanged: the eddy routes it to another AM
        elif sig.prior:
            outputs = []  # ProbeCompletion: its matches will find it in its SteM
        else:
            target = self.targets[work.destination]
            looked = Signature(sig.span, sig.done, sig.built, 0, sig.looked | 1 << target)
            outputs = [batch.with_signature(looked)]
        busy = time.perf_counter() - started
        await self._to_eddy.send(Returned(work.destination, outputs, len(batch), busy, work=work))

    async def _skip_when_scanned(self) -> None:
        await self.scanned.wait()
        for lookup in self.lookups.values():
            if not lookup.finished.is_set():
                self.stats.skipped += 1
                lookup.finished.set()

    async def _worker(self, lookup_fn: Callable, queue: trio.MemoryReceiveChannel) -> None:
        async for lookup in queue:
            self._waiting_for_worker -= 1
            self._room.set()
            if self.failed is not None:
                lookup.failed = True
                lookup.finished.set()
                continue
            if lookup.finished.is_set():  # skipped: a scan delivered the whole table
                continue
            if self._delivered_elsewhere(lookup.key):
                self.stats.skipped += 1
                lookup.finished.set()
                continue
            started = trio.current_time()
            self.stats.lookups += 1
            rows, error = await self._look_up(lookup_fn, lookup.key)
            lookup.seconds = trio.current_time() - started
            self.stats.seconds += lookup.seconds
            if error is not None:
                lookup.failed = True
                await self._fail(error)
                lookup.finished.set()
                continue
            self._finished.append((lookup, rows))
            self._answer_ready.set()

    def _delivered_elsewhere(self, key: tuple) -> bool:
        """A competing AM's EOT for these bind values is in the SteM: nothing to fetch."""
        if self.eots is None or not len(self.eots):
            return False
        values = [pa.array([v], type=t) for v, t in zip(key, self.on_types, strict=True)]
        return bool(self.eots.contains(values)[0])

    async def _look_up(self, lookup_fn: Callable, key: tuple) -> tuple[pa.Table | None, str | None]:
        """One lookup with timeout and retries: (rows, None) or (None, error message).

        A :class:`~eddies.sources.arrow_source.Throttled` answer (a 429) is back-pressure,
        not a failure: the lookup waits its ``retry_after`` (at most ``RETRY_AFTER_CAP``;
        the backoff if the source named none) and asks again without using up an attempt,
        up to ``MAX_THROTTLED`` times; each wait counts as a retry in the stats.
        """
        bind = dict(zip(self.spec.on, key, strict=True))

        def on_retry(k: int, error: str) -> None:
            self.stats.retries += 1
            log.debug("lookup retry", am=self.spec.name, bind=bind, error=error)

        def wait_asked(exc: Exception) -> float | None:
            if not isinstance(exc, Throttled):
                return None
            return min(exc.retry_after, RETRY_AFTER_CAP) or self.spec.backoff

        def on_wait(seconds: float, error: str) -> None:
            self.stats.retries += 1
            log.debug("lookup throttled", am=self.spec.name, bind=bind, wait=seconds)

        try:
            raw = await call_with_retries(
                lambda: lookup_fn(bind),
                timeout=self.spec.timeout,
                retries=self.spec.retries,
                backoff=self.spec.backoff,
                on_retry=on_retry,
                wait_asked=wait_asked,
                on_wait=on_wait,
                max_waits=MAX_THROTTLED,
            )
        except CallFailed as failed:
            return None, f"lookup {bind} failed after {failed.attempts} attempts: {failed.error}"
        # An answer of the wrong shape is not retried: asking again gives the same.
        where = f"lookup of {self.spec.name!r} (table {self.spec.table!r})"
        try:
            return conform(raw, self.schema, where, rows_ok=True), None
        except DataSourceError as exc:
            return None, f"lookup {bind} gave a bad answer: {exc}"

    def _matching(self, done: list[tuple[_Lookup, pa.Table]], eot: Eot) -> pa.Table | None:
        """The answers' rows whose bind columns equal their lookup's key (the EOT vouches
        for exactly these; a sloppy source's extra rows would come back as duplicates)."""
        counts = np.array([rows.num_rows for _, rows in done], dtype=np.int64)
        if counts.sum() == 0:
            return None
        rows = pa.concat_tables([rows for _, rows in done if rows.num_rows]).combine_chunks()
        owner = pa.array(np.repeat(np.arange(len(done)), counts))
        mask = None
        for col, keys in zip(self.spec.on, eot.values, strict=True):
            same = pc.equal(rows.column(col), keys.take(owner))
            mask = same if mask is None else pc.and_(mask, same)
        mask = pc.fill_null(mask, False)
        return rows if pc.all(mask).as_py() else rows.filter(mask)

    async def _flush_answers(self) -> None:
        """Send finished lookups' matches and EOTs to the eddy, then wake their Works."""
        while True:
            await self._answer_ready.wait()
            self._answer_ready = trio.Event()
            done, self._finished = self._finished, []
            if not done:
                continue
            keys = [lookup.key for lookup, _ in done]
            eot = Eot(
                self.spec.on,
                tuple(pa.array([k[i] for k in keys], type=t) for i, t in enumerate(self.on_types)),
            )
            rows = self._matching(done, eot)
            self.stats.rows += 0 if rows is None else rows.num_rows
            row_ids = (
                self.store.append(rows.to_batches()[0])
                if rows is not None and rows.num_rows
                else np.zeros(0, dtype=np.int64)
            )
            batch = singleton_batch(self.first_alias, row_ids, False, self.access.id, eot)
            await self._to_eddy.send(
                Returned(self._answer_destination, [batch], 0, 0.0, final=False)
            )
            for lookup, _ in done:
                lookup.finished.set()

    async def _fail(self, error: str) -> None:
        """Give up on this AM: tell the eddy first, then release every waiting Work."""
        if self.failed is not None:
            return
        message = f"access method {self.spec.name!r} of table {self.spec.table!r}: {error}"
        self.failed = message
        log.warning("access method failed", am=self.spec.name, table=self.spec.table, error=error)
        await self._to_eddy.send(AccessFailed(self.access.id, message))
        for lookup in self.lookups.values():
            if not lookup.finished.is_set() and lookup not in (f[0] for f in self._finished):
                lookup.failed = True
                lookup.finished.set()
