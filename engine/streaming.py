"""Run a query in a thread of its own, so other threads can feed its streams.

A :class:`~eddies.sources.stream.StreamTable` is fed by ``push`` calls from the caller's
thread (a Spark ``foreachBatch`` callback, say) while the eddy runs under trio elsewhere:
:class:`BackgroundQuery` is that elsewhere — one ``trio.run`` in a daemon thread for the
life of the query. Result batches go to ``on_batch`` as they leave the eddy (called in
the query's thread; keep it short) or are collected; :meth:`BackgroundQuery.result` waits
for the end and re-raises the query's error, if any.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import trio

from eddies.engine.api import open_query
from eddies.engine.catalog import Catalog
from eddies.engine.errors import EddiesError
from eddies.router.stats import RunStats


class BackgroundQuery:
    """``sql`` over ``catalog`` under trio in a daemon thread, started at construction.

    on_batch: called with each result RecordBatch as it is produced (None: collect them
    for :meth:`result`); options: as for :func:`eddies.engine.run_query`.
    """

    def __init__(
        self,
        sql: str,
        catalog: Catalog,
        *,
        on_batch: Callable[[pa.RecordBatch], Any] | None = None,
        **options: Any,
    ) -> None:
        self.sql = sql
        self.stats: RunStats | None = None
        self._on_batch = on_batch
        self._batches: list[pa.RecordBatch] = []
        self._schema: pa.Schema | None = None
        self._error: BaseException | None = None
        self._options = options
        self._catalog = catalog
        self._thread = threading.Thread(target=self._run, name="eddies-query", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc

    async def _main(self) -> None:
        async with open_query(self.sql, self._catalog, **self._options) as results:
            self._schema = results.schema
            self.stats = results.stats
            async for batch in results:
                if self._on_batch is not None:
                    self._on_batch(batch)
                else:
                    self._batches.append(batch)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def result(self, timeout: float | None = None) -> pa.Table:
        """Wait for the query to end; the collected result (empty with ``on_batch``).

        Raises the query's EddiesError, or EddiesError if it is still running after
        ``timeout`` seconds.
        """
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise EddiesError(f"the query is still running after {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._schema is not None
        return pa.Table.from_batches(self._batches, schema=self._schema)
