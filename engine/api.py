"""The public API: execute, run_query, open_query, explain.

``open_query`` is the primitive: an async context manager for trio that starts the eddy
and yields result RecordBatches as soon as they are produced. ``execute`` and
``run_query`` wrap it in ``trio.run`` for synchronous callers.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import structlog
import trio

from eddies.engine.above.finalize import Finalizer
from eddies.engine.catalog import Catalog
from eddies.engine.execution.composite import CompositeResults, is_composite, open_composite
from eddies.engine.execution.run import run_plan, seed_scheduler
from eddies.engine.frontend.parse import parse_statement
from eddies.engine.options import RunOptions
from eddies.engine.plan.join_state import with_join_state
from eddies.engine.plan.plan_cache import cached_plan
from eddies.engine.plan.plan_types import Plan
from eddies.engine.runtime.gc_freeze import freeze_import_time_objects
from eddies.engine.runtime.malloc_retain import retain_freed_memory
from eddies.engine.runtime.precise_clock import run_clock
from eddies.engine.streaming.commit_points import Commit, CommitPoints
from eddies.engine.streaming.durable import DurableState, check_durable
from eddies.engine.streaming.incremental import (
    AggregateStats,
    EventTimes,
    StreamingAggregate,
    StreamingPlan,
    plan_streaming,
)
from eddies.errors import EddiesError, UnsupportedQueryError
from eddies.router.stats import RunStats

log = structlog.get_logger("eddies.engine")
_stdlib_log = logging.getLogger("eddies.engine")  # its level, checked before info calls

#: Result batches buffered between the output module and the consumer.
RESULT_BUFFER = 4


@dataclass
class QueryRun:
    """A finished query: the result table and the run's statistics."""

    table: pa.Table
    stats: RunStats


class QueryResults:
    """Async iterator over result RecordBatches; ``stats`` is complete when it ends."""

    def __init__(
        self,
        plan: Plan,
        receive: trio.MemoryReceiveChannel,
        stats: RunStats,
        stop: trio.CancelScope,
        streaming: StreamingPlan | None = None,
        durable: DurableState | None = None,
    ) -> None:
        self.plan = plan
        self.durable = durable  # checkpoint=: the query's checkpoint folder
        self.schema = plan.finalize.schema
        self.stats = stats
        self._receive = receive
        self._finalizer = Finalizer(plan.finalize, plan.output_columns)
        # An aggregate over streams with an output mode answers at every commit point.
        self._incremental: StreamingAggregate | None = None
        if streaming is not None and plan.finalize.group is not None:
            stats.streaming_aggregate = AggregateStats(streaming.mode)
            self._incremental = StreamingAggregate(
                plan.finalize, plan.output_columns, streaming, stats.streaming_aggregate
            )
            self._finalizer = self._incremental
        self._stop = stop
        self.exhausted = False  # the eddy finished and every result was taken
        self.completed = trio.Event()  # set when the eddy ended normally
        # Queries over stream tables: commit points cut the results into increments. They
        # are attached when the query's task starts, after this object is handed out.
        self.over_streams = any(e.stream is not None for e in plan.tables.values())
        self.commit_points: CommitPoints | None = None
        self._points_attached = trio.Event()
        self.keep_increments = False  # True: commit() returns the batches since the last
        self._since_commit: list[pa.RecordBatch] = []

    def __aiter__(self) -> AsyncIterator[pa.RecordBatch]:
        return self._batches()

    async def commit(self, tag: Hashable) -> list[pa.RecordBatch]:
        """Wait for the next commit point (see :mod:`eddies.engine.streaming.commit_points`): every
        tuple pushed into the query's streams so far has been processed. Returns the result
        batches yielded since the previous commit point if ``keep_increments`` is set
        (else []). Another task must be iterating the results meanwhile. Raises EddiesError
        if the query reads no stream table.
        """
        commit = await self.commit_point(tag)
        if self.durable is not None:  # checkpointed once the caller has the results
            await trio.to_thread.run_sync(self.durable.settle, commit)
        return commit.results

    async def commit_point(self, tag: Hashable) -> Commit:
        """As :meth:`commit`, but the granted :class:`Commit` (with its checkpoint
        record, not written yet: see :meth:`DurableState.settle`)."""
        if not self.over_streams:
            raise EddiesError("commit points exist only for queries over stream tables")
        if self.commit_points is None:  # asked before the query's task started
            await self._points_attached.wait()
        assert self.commit_points is not None
        return await self.commit_points.request_commit(tag)

    def attach_commit_points(self, points: CommitPoints) -> None:
        """Called by the query's task before any of its modules start (engine/execution/run.py)."""
        self.commit_points = points
        self._points_attached.set()

    def take_increment(self) -> list[pa.RecordBatch]:
        """The result batches kept since the last commit point (``keep_increments``)."""
        taken, self._since_commit = self._since_commit, []
        return taken

    async def _batches(self) -> AsyncIterator[pa.RecordBatch]:
        finalizer = self._finalizer
        try:
            async for batch in self._receive:
                if isinstance(batch, Commit):  # behind every result it stands for
                    outs = []
                    if self._incremental is not None:  # this commit point's increment
                        outs = await self._incremental.commit(batch.at_grant)
                    for out in outs:
                        self.stats.rows_out += out.num_rows
                        if self.keep_increments:
                            self._since_commit.append(out)
                    batch.results, self._since_commit = self._since_commit, []
                    if self.durable is not None and batch.state is not None:
                        batch.checkpoint = self.durable.record(batch, self._incremental)
                    batch.done.set()
                    for out in outs:
                        yield out
                    continue
                for out in await finalizer.push(batch):
                    self.stats.rows_out += out.num_rows
                    if self.keep_increments:
                        self._since_commit.append(out)
                    yield out
                if finalizer.satisfied:  # LIMIT reached: stop the eddy early
                    log.debug("limit reached, stopping the eddy", rows=self.stats.rows_out)
                    self._stop.cancel()
                    self._receive.close()
                    return
        except BaseException:
            # Stop the query's tasks before closing the channel, without a checkpoint: the
            # output module may be waiting to send, and a closed channel would fail it with
            # BrokenResourceError beside this error (a failing UDF in the SELECT list).
            self._stop.cancel()
            self._receive.close()
            raise
        self._receive.close()
        # The result channel also closes when the query fails (an AM with no competitor
        # left): wait for the verdict, so a failure is never finished into a short result.
        await self.completed.wait()
        for out in await finalizer.finish():
            self.stats.rows_out += out.num_rows
            if self.keep_increments:
                self._since_commit.append(out)
            yield out
        self.exhausted = True


def unwrap_exception_group(group: BaseExceptionGroup) -> BaseException:
    """The single real error inside trio's exception groups (nested groups searched,
    ``trio.Cancelled`` left out), if there is exactly one; else ``group`` itself. Lets
    a query raise its own error, not the nursery's group around it."""
    leaves: list[BaseException] = []

    def collect(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for sub in exc.exceptions:
                collect(sub)
        elif not isinstance(exc, trio.Cancelled):
            leaves.append(exc)

    collect(group)
    return leaves[0] if len(leaves) == 1 else group


@functools.lru_cache(maxsize=256)
def _composite(sql: str, functions: frozenset[str]) -> bool:
    """Whether ``sql`` is a composite query (is_composite), remembered per text and
    function names: the check walks the whole tree (~0.5 ms for a 5-way join); a parse
    error is raised, not remembered."""
    return is_composite(parse_statement(sql, functions, copy=False))


@asynccontextmanager
async def open_query(
    sql: str,
    catalog: Catalog,
    *,
    options: RunOptions | None = None,
    **kwargs: Any,
) -> AsyncIterator[QueryResults | CompositeResults]:
    """Start ``sql`` under trio; yields a :class:`QueryResults` to iterate with ``async for``.

    Options as in :func:`run_query`. Batches leave as soon as the eddy produces them (after
    the whole input for queries with aggregation, ORDER BY or DISTINCT). Leaving the block
    early stops the query. A composite query (WITH, subqueries, set operations, window
    functions; see :mod:`eddies.engine.execution.composite`) yields a CompositeResults of the same
    shape whose ``stats`` are those of its latest eddy query. Raises a subclass of
    EddiesError for bad queries, options or data, before any task starts where it can.
    """
    options = RunOptions.from_kwargs(options, **kwargs)
    catalog = _check_catalog(catalog)
    functions = frozenset(name.lower() for name in catalog.functions)
    if _composite(_check_sql(sql), functions):  # WITH, subqueries, windows: composite.py
        root = parse_statement(sql, functions)  # a copy: composite.py transforms it
        if options.checkpoint is not None:
            raise UnsupportedQueryError(
                "checkpoint=: composite queries (WITH, subqueries, set operations, window "
                "functions) are not checkpointed"
            )
        try:
            async with open_composite(root, catalog, options, _open_eddy) as results:
                yield results
        except BaseExceptionGroup as group:
            raise unwrap_exception_group(group) from None
        return
    async with _open_eddy(sql, catalog, options=options) as results:
        yield results


@asynccontextmanager
async def _open_eddy(
    sql: str, catalog: Catalog, *, options: RunOptions
) -> AsyncIterator[QueryResults]:
    """One eddy query (a single SELECT block), as :func:`open_query` describes."""
    plan = with_join_state(cached_plan(sql, catalog), options.join_state)
    streaming = plan_streaming(plan, options)
    # Made before run_plan puts the query's knobs in force: its route-log bound is given.
    stats = RunStats(
        plan.graph,
        plan.destinations,
        functions=plan.udf_stats,
        max_route_records=options.knobs().route_log_max_records,
    )
    event_times = EventTimes(streaming.watermarks if streaming is not None else [])
    durable = None
    if options.checkpoint is not None:
        check_durable(plan, streaming)
        durable = DurableState(options.checkpoint, plan, options)
    if options.seed is not None:
        seed_scheduler(options.seed)
    send, receive = trio.open_memory_channel(RESULT_BUFFER)
    informing = _stdlib_log.isEnabledFor(logging.INFO)  # skip structlog's bind if not
    if informing:
        log.info(
            "query started",
            policy=options.policy,
            aliases=[a.name for a in plan.graph.aliases],
            predicates=len(plan.graph.predicates),
        )
    try:
        async with trio.open_nursery() as nursery:
            # Only the query's own tasks sit under ``stop``: a LIMIT that cancels it must
            # not cancel the caller's code running in the body of this context manager.
            stop = trio.CancelScope()
            results = QueryResults(plan, receive, stats, stop, streaming, durable)
            if durable is not None:  # the last commit's batch ids, aggregate, watermarks
                durable.resume(results._incremental, event_times)
            for table in event_times.columns:  # the watermarks' event times, as taken
                plan.tables[table].stream.on_take = event_times.hook(table)
            nursery.start_soon(
                _run_until_stopped,
                stop,
                plan,
                options,
                send,
                stats,
                results,
                event_times,
                name="eddies:query",
            )
            try:
                yield results
            finally:
                if not results.exhausted:  # left early (or LIMIT): stop the query's tasks
                    stop.cancel()
                for table in event_times.columns:
                    plan.tables[table].stream.on_take = None
    except BaseExceptionGroup as group:
        raise unwrap_exception_group(group) from None
    if informing:
        log.info("query finished", rows=stats.rows_out, seconds=round(stats.elapsed_seconds, 4))


async def _run_until_stopped(
    stop: trio.CancelScope,
    plan: Plan,
    options: RunOptions,
    send: trio.MemorySendChannel,
    stats: RunStats,
    results: QueryResults,
    event_times: EventTimes,
) -> None:
    def attach(points: CommitPoints) -> None:
        results.attach_commit_points(points)
        if results.durable is not None:
            results.durable.attach(points)
        if event_times.columns:  # the watermark advances to what was taken at the grant
            points.on_grant = event_times.snapshot

    with stop:
        await run_plan(plan, options, send, stats, attach)
        results.completed.set()


def _check_sql(sql: Any) -> str:
    if not isinstance(sql, str):
        raise EddiesError(f"the query must be SQL text (a str), got {type(sql).__name__}")
    return sql


def _check_catalog(catalog: Any) -> Catalog:
    # Duck-typed, as the planner reads it (the partitioned runner passes a view of one).
    if not all(hasattr(catalog, a) for a in ("has_table", "table", "functions")):
        raise EddiesError(
            f"the catalog must be an eddies Catalog, got {type(catalog).__name__} "
            "(add tables with Catalog().add_table(name, data))"
        )
    return catalog


async def _collect(sql: str, catalog: Catalog, options: RunOptions) -> QueryRun:
    async with open_query(sql, catalog, options=options) as results:
        batches = [b async for b in results]
    schema = results.schema
    table = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
    return QueryRun(table, results.stats)


def run_query(
    sql: str,
    catalog: Catalog,
    *,
    options: RunOptions | None = None,
    **kwargs: Any,
) -> QueryRun:
    """Run ``sql`` to completion; the result table and the run's :class:`RunStats`.

    The run options are keywords (``policy``, ``batch_size``, ``seed``, ``debug``,
    ``order``, ``window``, ``queue_capacity``; see :class:`RunOptions` for each), or
    ``options=RunOptions(...)`` (keywords given too replace its values). Raises a subclass
    of EddiesError for bad input, including an unknown option or a bad option value.
    """
    options = RunOptions.from_kwargs(options, **kwargs)
    if trio.lowlevel.in_trio_run():
        raise EddiesError(
            "run_query()/execute() start their own trio loop and cannot run inside one; "
            "inside trio use `async with open_query(sql, catalog) as results`"
        )
    return trio.run(_collect, sql, catalog, options, clock=run_clock())


def execute(
    sql: str,
    catalog: Catalog,
    *,
    options: RunOptions | None = None,
    **kwargs: Any,
) -> pa.Table:
    """Run ``sql`` over ``catalog`` and return the result as a pyarrow Table.

    Synchronous (runs its own trio loop); inside trio use :func:`open_query`. Options as in
    :func:`run_query`.
    """
    return run_query(sql, catalog, options=options, **kwargs).table


# Last: every module a query runs is loaded now, so the objects they made are frozen out of
# later full garbage collections (engine/runtime/gc_freeze.py; EDDIES_GC_FREEZE=0 turns it off).
freeze_import_time_objects()
# Freed NumPy memory stays mapped for the next batch and query (engine/runtime/malloc_retain.py;
# EDDIES_MALLOC_RETAIN=0 turns it off).
retain_freed_memory()
