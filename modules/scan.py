"""Scan access modules (AMs): deliver a table's tuples into the eddy as singletons.

stems-2003 §2.1.3: a scan AM answers the seed tuple with every tuple of its source. Here it
is a trio task that reads its source in batches, appends them to the table's store (row
ids are what travels), and hands singleton TupleBatches to the eddy. Admission is through
the eddy's semaphore, so a busy eddy slows its scans (back-pressure). ``delay`` and ``rate``
make a source start late or deliver slowly, as in the papers' experiments.

A table may have several scan AMs (mirrors, stems-2003 §3.2). They run at once; their
copies of a row are removed in the SteM. A scan that fails (its source raises, e.g. a web
mirror past its retries) tells the eddy with :class:`~eddies.modules.base.AccessFailed`
instead of ending the query, and the eddy decides: another scan of the table goes on, or
the query fails naming the source. When one scan of a table finishes, the eddy stops the
others (``cancel_scope``): everything they would still deliver is a duplicate.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pyarrow as pa
import trio

from eddies.errors import DataSourceError
from eddies.router.eddy_wiring import Source
from eddies.router.messages import AccessFailed, SourceBatch, SourceDone
from eddies.router.stats import ModuleStats
from eddies.router.tuple_batch import singleton_batch
from eddies.sources.arrow_source import TableSource, conform
from eddies.sources.table_store import TableStore


class ScanAM:
    """Scans one table for one alias (the first alias of the table; the SteM fans out)."""

    kind = "scan"

    def __init__(
        self,
        source: TableSource,
        alias: int,
        store: TableStore,
        batch_size: int,
        built: bool,
        stats: ModuleStats,
        access: int = -1,
        floating: bool = False,
        start_after: trio.Event | None = None,
        before_append: Callable[[], Awaitable[None]] | None = None,
        columns: list[str] | None = None,
        filter: Any = None,
        dynamic: Any = None,
    ) -> None:
        self.name = f"scan:{source.access_name or source.name}"
        self.access = access
        self.floating = floating  # relaxed BuildFirst: the tuples are never built
        self.source = source
        self.alias = alias
        self.store = store
        self.batch_size = source.batch_size or batch_size
        self.built = built
        self.stats = stats
        self.start_after = start_after  # a stream waits for the static tables
        # A windowed stream's scan waits here before appending (see CommitPoints).
        self.before_append = before_append
        # A file scan reads only ``columns`` and applies the pushed ``filter`` (planned by
        # eddies.engine.plan.pushdown); the selections still run in the eddy.
        self.columns = columns
        self.filter = filter
        # A DynamicFilter (eddies.sources.dataset_source) a complete SteM may set mid-scan
        # (eddies.modules.scan_filter): row groups not read yet are skipped by its keys.
        self.dynamic = dynamic

    async def run(self, to_eddy: trio.MemorySendChannel, source: Source, index: int) -> None:
        """Deliver every batch, each after taking a slot of ``source.admission``."""
        async with to_eddy:
            with source.cancel_scope:
                try:
                    await self._deliver(to_eddy, source, index)
                except Exception as exc:  # the source failed: the eddy decides what follows
                    if isinstance(exc, DataSourceError):
                        error = str(exc)
                    else:
                        error = f"reading table {self.source.name!r} failed: {exc!r}"
                    message = f"scan access method {self.name[5:]!r}: {error}"
                    await to_eddy.send(AccessFailed(self.access, message, source=index))
                    return
                await to_eddy.send(SourceDone(index))

    async def _deliver(self, to_eddy: trio.MemorySendChannel, source: Source, index: int):
        if self.start_after is not None:
            await self.start_after.wait()
        if self.source.delay:
            await trio.sleep(self.source.delay)
        started = trio.current_time()  # trio's clock: a MockClock drives tests
        sent = 0
        async for row_ids in self._row_batches():
            source.undelivered += 1  # appended, not yet accepted by the eddy
            await source.admission.acquire()
            await to_eddy.send(
                SourceBatch(
                    index,
                    singleton_batch(
                        self.alias, row_ids, self.built, self.access, floating=self.floating
                    ),
                )
            )
            sent += len(row_ids)
            self.stats.tuples_out += len(row_ids)
            self.stats.batches_in += 1
            if self.source.rate:
                await trio.sleep_until(started + sent / self.source.rate)
        self.stats.busy_seconds = trio.current_time() - started

    async def _row_batches(self):
        preloaded = self.store.preloaded_rows
        if preloaded is not None:
            for start in range(0, preloaded, self.batch_size):
                yield self.store.row_range(start, min(start + self.batch_size, preloaded))
            return
        if self.source.pages is not None:
            async for page in self.source.pages():
                for batch in _record_batches(page, self.source):
                    for start in range(0, batch.num_rows, self.batch_size):
                        if self.before_append is not None:
                            await self.before_append()
                        yield self.store.append(batch.slice(start, self.batch_size))
            return
        batches = self.source.open_batches(
            self.batch_size, self.columns, self.filter, counts=self.stats, dynamic=self.dynamic
        )
        while True:
            try:
                # abandoned on cancel: a stopped query does not wait for a slow read
                batch = await trio.to_thread.run_sync(next, batches, None, abandon_on_cancel=True)
            except (OSError, ValueError) as exc:
                raise DataSourceError(f"reading table {self.source.name!r} failed: {exc}") from exc
            if batch is None:
                return
            if batch.num_rows:
                yield self.store.append(batch)


def _record_batches(page, source: TableSource) -> list[pa.RecordBatch]:
    """A page from an async source as RecordBatches in the table's schema."""
    page = conform(page, source.schema, f"table {source.name!r}: a page")
    return [b for b in page.combine_chunks().to_batches() if b.num_rows]
