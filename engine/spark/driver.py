"""Spark Structured Streaming feeding a running eddy: micro-batches through foreachBatch.

``foreachBatch`` hands each micro-batch to a Python callback on the Spark driver with its
``batch_id``. :func:`attach` starts one eddy query (one trio run in a thread of its own,
:class:`~eddies.engine.streaming.thread_runner.BackgroundQuery`) over any number of streaming
DataFrames, each registered as a stream table beside the catalog's static tables and web
sources. Each callback turns its micro-batch into Arrow (``DataFrame.toArrow``), pushes it
into the stream table — blocking until the eddy's scan AM has taken it, so the eddy's
back-pressure reaches Spark — then waits for a commit point (every pushed tuple processed)
and writes the results it caused to the sink, tagged ``(stream, batch_id)``. Only then does
Spark see the micro-batch as done and commit it to its checkpoint.

Exactly-once at the eddy. Spark runs a ``batch_id`` again after a failed attempt of the
callback, and, when a query restarts from its checkpoint location, the last batch whose
callback did not finish. Within one attachment the stream table remembers every batch id
it took and ignores a replay: no rows, no results, no sink write. Across a restart of the
process, Spark's checkpoint (one folder per stream under ``checkpoint_location``) says
where each stream resumes, and the eddy's own state — its stream SteMs, windows and a
streaming aggregate's groups, with the batch ids they hold — is checkpointed under
``<checkpoint_location>/_eddies_state`` at every commit point, after the sink write
(:mod:`eddies.engine.streaming.durable`): a restarted attachment resumes from the last completed
commit, ignores Spark's replay of a batch it committed, and a stream-stream join joins the
tuples from before the restart with those after it. Queries whose state cannot be
checkpointed (a table read by an index AM and a scan, outer joins; see ``durable_state``)
keep only the within-attachment guarantee.

The scale-out mode (independent eddies over Spark partitions) is
:mod:`eddies.engine.spark.partitioned`; both live in the engine layer because they drive whole
queries.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import structlog

from eddies.engine.catalog import Catalog
from eddies.engine.options import RunOptions, check_timeout
from eddies.engine.spark.arrow_schema import arrow_schema
from eddies.engine.streaming.sinks import Sink
from eddies.engine.streaming.thread_runner import BackgroundQuery
from eddies.errors import DataSourceError, EddiesError
from eddies.modules.window import Window
from eddies.sources.stream import StreamTable

if TYPE_CHECKING:
    from eddies.engine.plan.planner import Plan
    from eddies.engine.spark.executors import ExecutorsAttachment
    from eddies.engine.streaming.incremental import StreamingPlan

log = structlog.get_logger("eddies.spark")

#: Where ``attach`` runs the eddy: on the driver, or inside Spark executors.
PLACEMENTS = ("driver", "executors")

#: The folder under ``checkpoint_location`` where the eddy's state is checkpointed.
STATE_FOLDER = "_eddies_state"


@dataclass(frozen=True)
class MicroBatch:
    """What one micro-batch did: rows pushed, result rows committed for it, seconds from
    the callback's start to its commit point (``replayed``: an id seen before, ignored)."""

    stream: str
    batch_id: int
    rows_in: int
    rows_out: int
    seconds: float
    replayed: bool = False


class SparkAttachment:
    """An eddy query attached to Spark streaming queries (made by :func:`attach`).

    ``query``: the BackgroundQuery; ``streaming_queries``: the Spark StreamingQuery per
    stream table; ``micro_batches``: a :class:`MicroBatch` per callback, in order;
    ``stats``: the eddy's live RunStats (None until the query has started).
    """

    def __init__(
        self,
        query: BackgroundQuery,
        streams: dict[str, StreamTable],
        on_micro_batch: Callable[[MicroBatch], Any] | None,
    ) -> None:
        self.query = query
        self.streams = streams
        self.streaming_queries: dict[str, Any] = {}
        self.micro_batches: list[MicroBatch] = []
        self.durable = False  # the eddy's state is checkpointed (see attach's durable_state)
        self._on_micro_batch = on_micro_batch
        self._lock = threading.Lock()

    @property
    def stats(self):
        return self.query.stats

    def callback(self, name: str) -> Callable[[Any, int], None]:
        """The ``foreachBatch`` function of stream ``name``."""
        stream = self.streams[name]

        def push_and_commit(batch_df: Any, batch_id: int) -> None:
            started = time.perf_counter()
            tag = (name, int(batch_id))
            table = batch_df.toArrow()
            try:
                taken = stream.push(table, tag)
                rows_out = self.query.commit(tag) if taken else 0
            except EddiesError as exc:
                raise self._query_error() or exc from None
            record = MicroBatch(
                name,
                int(batch_id),
                table.num_rows,
                rows_out,
                time.perf_counter() - started,
                replayed=not taken,
            )
            with self._lock:
                self.micro_batches.append(record)
            log.info(
                "micro-batch committed" if taken else "micro-batch replayed, ignored",
                stream=name,
                batch_id=int(batch_id),
                rows_in=record.rows_in,
                rows_out=rows_out,
                seconds=round(record.seconds, 4),
            )
            if self._on_micro_batch is not None:
                self._on_micro_batch(record)

        return push_and_commit

    def _query_error(self) -> BaseException | None:
        """The eddy's own error, once it has ended with one: it explains a failed push."""
        return None if self.query.running else self.query.error

    def await_termination(self, timeout: float | None = None) -> pa.Table:
        """Wait for every Spark streaming query to end (e.g. ``availableNow``), close the
        streams and wait for the eddy; returns the collected result (empty with a sink,
        which gets its last increment and is closed). Raises the eddy's error, or an
        EddiesError naming the stream whose Spark query failed, or after ``timeout``
        seconds per wait."""
        timeout = check_timeout("timeout", timeout)
        for name, streaming in self.streaming_queries.items():
            try:
                finished = streaming.awaitTermination(timeout)
            except Exception as exc:  # pyspark's StreamingQueryException: a failed callback
                self.stop_spark()
                for stream in self.streams.values():
                    stream.close()
                raise self._query_error() or EddiesError(
                    f"stream {name!r}: the Spark streaming query failed: {exc}"
                ) from None
            if timeout is not None and not finished:
                raise EddiesError(f"stream {name!r}: Spark query still running after {timeout} s")
        return self._finish(timeout)

    def stop_spark(self) -> None:
        """Stop every Spark streaming query of this attachment (no error if stopped)."""
        for streaming in self.streaming_queries.values():
            streaming.stop()

    def stop(self, timeout: float | None = None) -> pa.Table:
        """Stop the Spark streaming queries, close the streams, wait for the eddy; as
        :meth:`await_termination`."""
        timeout = check_timeout("timeout", timeout)
        self.stop_spark()
        return self._finish(timeout)

    def _finish(self, timeout: float | None) -> pa.Table:
        for stream in self.streams.values():
            stream.close()
        error = self._query_error()
        if error is not None:
            raise error
        for name, streaming in self.streaming_queries.items():
            failure = streaming.exception()
            if failure is not None:
                raise EddiesError(f"stream {name!r}: the Spark streaming query failed: {failure}")
        return self.query.result(timeout)


def attach(
    sql: str,
    catalog: Catalog,
    streams: Mapping[str, Any],
    *,
    checkpoint_location: str | Path,
    trigger: dict[str, Any] | None = None,
    sink: Sink | None = None,
    windows: Mapping[str, Window] | None = None,
    output_mode: str | None = None,
    watermarks: Mapping[str, tuple[str, Any]] | None = None,
    query_name: str | None = None,
    on_micro_batch: Callable[[MicroBatch], Any] | None = None,
    durable_state: bool | None = None,
    placement: str = "driver",
    options: RunOptions | None = None,
    **kwargs: Any,
) -> SparkAttachment | ExecutorsAttachment:
    """Run ``sql`` as one continuous eddy query fed by Spark streaming DataFrames.

    streams: table name -> streaming DataFrame; each becomes a stream table of
    ``catalog`` (its schema from Spark's; an existing stream table of that name is used
    as is), to be joined with the catalog's other tables, streams and web sources.
    checkpoint_location: a folder; stream ``name`` checkpoints in ``<folder>/<name>``.
    trigger: keyword arguments for ``DataStreamWriter.trigger`` (``{"availableNow":
    True}``, ``{"processingTime": "5 seconds"}``; None: Spark's default). sink: where
    result increments go (None: collected, returned by ``await_termination``). windows:
    table name -> RowWindow/EventTimeWindow for new stream tables. output_mode: Spark's
    ``"update"``, ``"complete"`` or ``"append"``: an aggregate's result leaves at every
    micro-batch (see :mod:`eddies.engine.streaming.incremental`; None: when the streams end).
    watermarks: stream name -> ``(event-time column, lateness)``, e.g. ``("ts", "10
    seconds")``, as Spark's ``withWatermark``. on_micro_batch: called
    with a :class:`MicroBatch` after each commit (progress displays). durable_state: True
    checkpoints the eddy's state in ``<checkpoint_location>/_eddies_state`` (see
    :mod:`eddies.engine.streaming.durable`) and refuses a query whose state cannot be; None (the
    default) checkpoints it when it can, and otherwise logs a warning and keeps the state
    in memory (``attachment.durable`` says which); False never checkpoints. placement:
    ``"driver"`` (one eddy on the driver, fed by ``foreachBatch``) or ``"executors"``
    (eddies inside Spark executors, state in Spark's state store; returns an
    :class:`~eddies.engine.spark.executors.ExecutorsAttachment`; see
    :mod:`eddies.engine.spark.executors` for which queries it places and what it refuses).
    options (or keywords: policy, batch_size, ...): the
    :class:`~eddies.engine.options.RunOptions`.

    Raises DataSourceError for a name that is a static table, EddiesError for a bad query
    or option, UnsupportedQueryError for an output mode that does not fit the query (all
    before any Spark query starts).
    """
    if output_mode is not None:
        kwargs["output_mode"] = output_mode
    if watermarks is not None:
        kwargs["watermarks"] = watermarks
    options = RunOptions.from_kwargs(options, **kwargs)
    if not streams:
        raise EddiesError("attach() needs at least one streaming DataFrame")
    if placement not in PLACEMENTS:
        raise EddiesError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    alike = dict(  # what both placements take as they are
        checkpoint_location=checkpoint_location,
        trigger=trigger,
        sink=sink,
        windows=windows,
        query_name=query_name,
        on_micro_batch=on_micro_batch,
    )
    if placement == "executors":
        from eddies.engine.spark.executors import attach_executors

        _check_executors_arguments(streams, durable_state)
        return attach_executors(sql, catalog, streams, options=options, **alike)
    return _attach_on_driver(sql, catalog, streams, durable_state, options, **alike)


def _attach_on_driver(
    sql: str,
    catalog: Catalog,
    streams: Mapping[str, Any],
    durable_state: bool | None,
    options: RunOptions,
    *,
    checkpoint_location: str | Path,
    trigger: dict[str, Any] | None,
    sink: Sink | None,
    windows: Mapping[str, Window] | None,
    query_name: str | None,
    on_micro_batch: Callable[[MicroBatch], Any] | None,
) -> SparkAttachment:
    """``attach(..., placement="driver")``: one eddy on the driver (a BackgroundQuery),
    fed by a ``foreachBatch`` Spark query per stream; arguments as :func:`attach`."""
    tables = _stream_tables(catalog, streams, windows)
    from eddies.engine.plan.planner import plan_query
    from eddies.engine.streaming.incremental import plan_streaming

    # A bad query, or an output mode that does not fit it, fails here, before Spark starts.
    plan = plan_query(sql, catalog)
    streaming = plan_streaming(plan, options)
    root = Path(checkpoint_location)
    options = _with_durable_state(plan, streaming, options, durable_state, root / STATE_FOLDER)
    query = BackgroundQuery(sql, catalog, sink=sink, options=options)
    attachment = SparkAttachment(query, tables, on_micro_batch)
    attachment.durable = options.checkpoint is not None
    for name, frame in streams.items():
        attachment.streaming_queries[name] = start_foreach_batch(
            frame,
            attachment.callback(name),
            checkpoint=root / name,
            trigger=trigger,
            query_name=f"{query_name or 'eddies'}-{name}",
        )
    log.info(
        "attached to Spark",
        streams=list(streams),
        checkpoint=str(root),
        durable_state=attachment.durable,
    )
    return attachment


def _check_executors_arguments(streams: Mapping[str, Any], durable_state: bool | None) -> None:
    """Refuse what ``placement="executors"`` cannot take: a static DataFrame, or
    ``durable_state=False`` (its state is always in Spark's checkpointed state store)."""
    for name, frame in streams.items():
        if not getattr(frame, "isStreaming", False):
            raise DataSourceError(f"stream {name!r}: not a streaming DataFrame (readStream)")
    if durable_state is False:
        raise EddiesError(
            "placement='executors' keeps its state in Spark's state store, always "
            "checkpointed under checkpoint_location; durable_state=False does not apply"
        )


def _stream_tables(
    catalog: Catalog, streams: Mapping[str, Any], windows: Mapping[str, Window] | None
) -> dict[str, StreamTable]:
    """The stream table of each streaming DataFrame: the catalog's own one of that name,
    or a new one (its schema from Spark's, its window from ``windows``). Raises
    EddiesError for windows of other tables or the state folder's name, DataSourceError
    for a static DataFrame or a name that is a static table."""
    windows = dict(windows or {})
    unknown = set(windows) - set(streams)
    if unknown:
        raise EddiesError(f"windows given for tables that are not streams here: {sorted(unknown)}")
    tables: dict[str, StreamTable] = {}
    for name, frame in streams.items():
        if name.lower() == STATE_FOLDER:
            raise EddiesError(
                f"{STATE_FOLDER!r} is the eddy's checkpoint folder, not a stream name"
            )
        if not getattr(frame, "isStreaming", False):
            raise DataSourceError(f"stream {name!r}: not a streaming DataFrame (readStream)")
        if catalog.has_table(name):
            existing = catalog.table(name).stream
            if existing is None:
                raise DataSourceError(f"table {name!r} exists and is not a stream table")
            tables[name] = existing
        else:
            tables[name] = catalog.add_stream(name, arrow_schema(frame), window=windows.get(name))
    return tables


def _with_durable_state(
    plan: Plan,
    streaming: StreamingPlan | None,
    options: RunOptions,
    durable_state: bool | None,
    folder: Path,
) -> RunOptions:
    """``options`` checkpointing the eddy's state in ``folder`` when ``durable_state``
    asks for it and the query's state can be checkpointed (see :func:`attach`); raises
    EddiesError for a bad ``durable_state`` or, with True, a state that cannot be."""
    if durable_state is not None and not isinstance(durable_state, bool):
        raise EddiesError(f"durable_state must be True, False or None, got {durable_state!r}")
    if options.checkpoint is not None or durable_state is False:
        return options
    from eddies.engine.streaming.durable import check_durable

    try:
        check_durable(plan, streaming)
    except EddiesError as exc:
        if durable_state:
            raise
        log.warning("eddy state not checkpointed (in memory only)", reason=str(exc))
        return options
    return dataclasses.replace(options, checkpoint=str(folder))


def start_foreach_batch(
    frame: Any,
    fn: Callable[[Any, int], None],
    *,
    checkpoint: str | Path,
    trigger: dict[str, Any] | None = None,
    query_name: str | None = None,
    output_mode: str | None = None,
) -> Any:
    """Start ``frame.writeStream.foreachBatch(fn)``: Spark calls ``fn(batch_df,
    batch_id)`` per micro-batch; returns the ``pyspark.sql.streaming.StreamingQuery``.

    checkpoint: Spark's checkpoint folder for this query (what lets Spark resume, and
    replay, by ``batch_id``); trigger: keyword arguments for
    ``DataStreamWriter.trigger`` (None: Spark's default); query_name / output_mode:
    Spark's, when given.
    """
    writer = frame.writeStream.foreachBatch(fn)
    if output_mode:
        writer = writer.outputMode(output_mode)
    writer = writer.option("checkpointLocation", str(checkpoint))
    if query_name:
        writer = writer.queryName(query_name)
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()


def feed_stream(
    streaming_df: Any,
    stream: StreamTable,
    *,
    checkpoint_location: str,
    trigger: dict[str, Any] | None = None,
    query_name: str | None = None,
) -> Any:
    """Start a Spark streaming query that pushes each micro-batch of ``streaming_df`` into
    ``stream`` (no commit points: results leave as the eddy produces them); returns the
    ``pyspark.sql.streaming.StreamingQuery``. Prefer :func:`attach`, which also commits
    each micro-batch's results to a sink.

    checkpoint_location: Spark's checkpoint folder for this query (it is what lets Spark
    resume, and replay, by ``batch_id``); trigger: keyword arguments for
    ``DataStreamWriter.trigger``. Close the stream (``stream.close()``) after the
    streaming query has terminated to let the eddy finish.
    """

    def push(batch_df: Any, batch_id: int) -> None:
        stream.push(batch_df.toArrow(), (stream.name, int(batch_id)))

    return start_foreach_batch(
        streaming_df,
        push,
        checkpoint=checkpoint_location,
        trigger=trigger,
        query_name=query_name,
    )
