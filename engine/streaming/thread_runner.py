"""Run a query in a thread of its own, so other threads can feed its streams.

A :class:`~eddies.sources.stream.StreamTable` is fed by ``push`` calls from the caller's
thread (a Spark ``foreachBatch`` callback, say) while the eddy runs under trio elsewhere:
:class:`BackgroundQuery` is that elsewhere — one ``trio.run`` in a daemon thread for the
life of the query. Results go, as they leave the eddy, to ``on_batch`` (called in the
query's thread; keep it short), or in increments to a sink (:mod:`eddies.engine.streaming.sinks`):
after pushing a micro-batch, the producer calls :meth:`BackgroundQuery.commit`, which
waits until every pushed tuple has been processed (a commit point, see
:mod:`eddies.engine.streaming.commit_points`) and writes the results since the previous commit to
the sink, in the producer's thread. Without either, results are collected for
:meth:`BackgroundQuery.result`, which waits for the end and re-raises the query's error.
With ``checkpoint=`` (a RunOptions folder), each commit then checkpoints the query's
state, after the sink write (see :mod:`eddies.engine.streaming.durable`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

import pyarrow as pa
import sqlglot
import sqlglot.errors
import trio

from eddies.engine.api import QueryResults, open_query
from eddies.engine.catalog import Catalog
from eddies.engine.options import RunOptions, check_timeout
from eddies.engine.runtime.precise_clock import run_clock
from eddies.engine.streaming.sinks import FINAL, Sink
from eddies.errors import EddiesError
from eddies.router.stats import RunStats
from eddies.sources.stream import StreamTable

#: Seconds :meth:`BackgroundQuery.commit` waits for the query to start.
START_TIMEOUT = 300.0


def _fail_streams(sql: str, catalog: Catalog, error: BaseException) -> None:
    """Every stream ``sql`` would read raises ``error`` on its next (or a waiting) push."""
    for stream in _streams_of(sql, catalog):
        stream.query_failed(error)


def _streams_of(sql: str, catalog: Catalog) -> list[StreamTable]:
    """The stream tables ``sql`` names; if it cannot even be parsed, every stream of the
    catalog that no query reads (one of them may be waiting for this query)."""
    streams = {name: stream for name in catalog.tables if (stream := catalog.table(name).stream)}
    try:
        named = {
            t.name.lower()
            for statement in sqlglot.parse(sql, dialect="duckdb")
            if statement is not None
            for t in statement.find_all(sqlglot.exp.Table)
        }
    except sqlglot.errors.SqlglotError:
        return [s for s in streams.values() if not s.claimed]
    return [s for name, s in streams.items() if name in named]


class BackgroundQuery:
    """``sql`` over ``catalog`` under trio in a daemon thread, started at construction.

    on_batch: called with each result RecordBatch as it is produced; sink: receives the
    results in increments, one per :meth:`commit` (and a last one tagged ``"final"``);
    neither: results are collected for :meth:`result`. options (or keywords): the
    :class:`~eddies.engine.options.RunOptions`. Raises EddiesError when given both, or for
    a bad option, in the caller's thread before the query's thread starts.
    """

    def __init__(
        self,
        sql: str,
        catalog: Catalog,
        *,
        on_batch: Callable[[pa.RecordBatch], Any] | None = None,
        sink: Sink | None = None,
        options: RunOptions | None = None,
        **kwargs: Any,
    ) -> None:
        try:  # bad arguments fail here, now, and fail the streams the query would read
            if on_batch is not None and sink is not None:
                raise EddiesError("give BackgroundQuery on_batch or sink, not both")
            options = RunOptions.from_kwargs(options, **kwargs)
        except EddiesError as exc:
            _fail_streams(sql, catalog, exc)
            raise
        self.sql = sql
        self.sink = sink
        self.stats: RunStats | None = None
        self._on_batch = on_batch
        self._batches: list[pa.RecordBatch] = []
        self._schema: pa.Schema | None = None
        self._error: BaseException | None = None
        self._options = options
        self._catalog = catalog
        self._results: QueryResults | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._started = threading.Event()
        self._finished = False
        self._thread = threading.Thread(target=self._run, name="eddies-query", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            trio.run(self._main, clock=run_clock())
        except BaseException as exc:  # handed to the caller by result()
            # Its producers must not wait for a query that failed, even one that never
            # started reading its streams (a planning error, a bad option). Before the
            # error is published: whoever sees it then sees the streams failed too.
            _fail_streams(self.sql, self._catalog, exc)
            self._error = exc
        finally:
            self._started.set()  # a query that failed to start must not leave commit() waiting

    async def _main(self) -> None:
        async with open_query(self.sql, self._catalog, options=self._options) as results:
            self._schema = results.schema
            self.stats = results.stats
            # With a sink, the batches since the last commit wait in the results.
            results.keep_increments = self.sink is not None
            self._results = results
            self._token = trio.lowlevel.current_trio_token()
            self._started.set()
            async for batch in results:
                if self._on_batch is not None:
                    self._on_batch(batch)
                elif self.sink is None:
                    self._batches.append(batch)
        # A composite query (engine/execution/composite.py) knows its schema and last eddy's stats
        # only once it has run.
        self._schema = results.schema
        self.stats = results.stats

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def error(self) -> BaseException | None:
        """The error the query ended with (None while it runs or if it succeeded)."""
        return self._error

    @property
    def schema(self) -> pa.Schema | None:
        """The result's schema once the query has started (None before)."""
        return self._schema

    def commit(self, tag: Hashable, timeout: float | None = None) -> int:
        """Wait for a commit point; write the results since the previous one to the sink.

        Call from a producer thread after pushing (e.g. with the micro-batch's tag). Returns
        the number of result rows in this increment. Raises EddiesError when the query has
        ended (its error, if it failed) or did not start within ``timeout`` seconds.
        """
        timeout = check_timeout("timeout", timeout)
        if not self._started.wait(START_TIMEOUT if timeout is None else timeout):
            raise EddiesError("the query did not start in time")
        results, token = self._results, self._token
        if results is not None and not results.over_streams:
            raise EddiesError("commit points exist only for queries over stream tables")
        if results is None or token is None:
            raise self._error or EddiesError("the query has ended")
        try:
            commit = trio.from_thread.run(results.commit_point, tag, trio_token=token)
        except (trio.RunFinishedError, trio.Cancelled):  # the query ended meanwhile
            self._thread.join(5)
            raise self._error or EddiesError("the query has ended") from None
        table = self._table(commit.results)
        if self.sink is not None:
            self.sink.write(table, tag)
        if results.durable is not None:  # after the sink: a crash between replays the batch
            results.durable.settle(commit)
        return table.num_rows

    def result(self, timeout: float | None = None) -> pa.Table:
        """Wait for the query to end; the collected result (empty with ``on_batch`` or a
        sink; a sink gets its last increment, tagged ``"final"``, and is closed).

        Raises the query's EddiesError, or EddiesError if it is still running after
        ``timeout`` seconds.
        """
        self._thread.join(check_timeout("timeout", timeout))
        if self._thread.is_alive():
            raise EddiesError(f"the query is still running after {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._schema is not None and self._results is not None
        if self.sink is not None and not self._finished:
            self._finished = True
            self.sink.write(self._table(self._results.take_increment()), FINAL)
            self.sink.close()
        return self._table(self._batches)

    def _table(self, batches: list[pa.RecordBatch]) -> pa.Table:
        assert self._schema is not None
        return pa.Table.from_batches(batches, schema=self._schema)
