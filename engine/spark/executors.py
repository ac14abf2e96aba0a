"""``attach(..., placement="executors")``: the continuous eddy inside Spark executors.

With the default ``placement="driver"`` one eddy runs on the driver and Spark only feeds it
(:mod:`eddies.engine.spark.driver`). Here Spark runs the eddies: every micro-batch is cut into
pieces, one independent eddy runs per piece in a Python worker of an executor, and the
driver only writes the results to the sink. Which piece a row goes to is the partitioning
of :mod:`eddies.engine.spark.partitioned` (Exchange / Flux, not an eddy idea); each eddy adapts
its routing to its own piece. Three kinds of query are placed, decided by
:func:`analyze_placement` before any Spark query starts:

* ``"map"`` — one stream joined with static tables and lookup tables (index AMs, web
  sources): ``mapInArrow`` over the micro-batch, one eddy per Spark partition. Static
  tables are shipped with the function (broadcast); lookups go through a cache per
  Python worker process (:data:`~eddies.engine.spark.lookup_cache.LOOKUP_CACHE_ENTRIES`
  bind values per lookup table, oldest dropped first), kept across micro-batches, so a
  key is looked up once per worker process, not once per micro-batch. No state: Spark's
  replay of a micro-batch recomputes it (lookups answered from the cache where the
  worker still has them).
* ``"join"`` — a join of several stream aliases (select-project-join): each stream's rows
  are hashed on the equivalence class of join columns that ties all of them into
  :data:`~eddies.engine.spark.shuffle.BUCKET`, packed into Arrow IPC per bucket
  (``mapInArrow``), and ``groupBy(bucket).applyInPandasWithState`` keeps, per bucket, every
  row seen so far in Spark's state store (one Arrow IPC value per bucket). Per micro-batch
  the bucket's eddy runs over old and new rows with the extra predicate "at least one
  tuple is new" (``_eddies_new``), so it produces exactly the results the new rows cause;
  old rows enter the eddy only where their key is among the new rows' keys (a semi-join
  filter). Spark checkpoints and restores the state with the query; the cost is that each
  micro-batch decodes and re-encodes its buckets' state (no windows here: state grows with
  the streams).
* ``"aggregate"`` — GROUP BY (or a global aggregate) over one stream joined with static
  and lookup tables, ``output_mode="update"``, no watermark: each partition's eddy feeds
  its rows to a :class:`~eddies.engine.streaming.incremental.StreamingAggregate`, whose mergeable
  partial states are hashed on the group keys into buckets (two-phase aggregation), and
  ``applyInPandasWithState`` merges them into the bucket's groups in Spark's state store
  and emits the groups that changed (Spark's update mode).

Everything else is refused with an UnsupportedQueryError that says why: windows (their
expiry follows one global arrival order), watermarks and the ``append``/``complete``
modes, outer joins and [NOT] IN/EXISTS over streams, aggregates over a stream-stream join,
ORDER BY/DISTINCT/LIMIT without an aggregate, stream aliases no equi-join ties together,
tables read by an index AM and a scan. Results equal the driver placement's as bags (per
micro-batch increments may be cut differently: one Spark query reads every stream).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import structlog
import trio
from sqlglot import exp

from eddies.engine.api import execute
from eddies.engine.catalog import Catalog
from eddies.engine.options import RunOptions, check_timeout
from eddies.engine.plan.plan_types import FinalizeSpec, Plan
from eddies.engine.plan.planner import plan_query
from eddies.engine.runtime.precise_clock import run_clock
from eddies.engine.spark.arrow_schema import (
    arrow_schema,
    cast_columns,
    positional_schema,
    spark_schema,
)
from eddies.engine.spark.driver import start_foreach_batch
from eddies.engine.spark.map_in_arrow import eddy_batches, map_in_arrow
from eddies.engine.spark.partitioned import PartitionPlan, analyze_plan_partitioning
from eddies.engine.spark.shuffle import BUCKET, INPUT, hashed_union, input_rows, projected
from eddies.engine.spark.task_catalog import ShippedTables, planning_catalog, ship_tables
from eddies.engine.streaming.incremental import (
    AggregateStats,
    StreamingAggregate,
    StreamingPlan,
    plan_streaming,
)
from eddies.engine.streaming.sinks import FINAL, Sink
from eddies.errors import EddiesError, UnsupportedQueryError
from eddies.sources.arrow_source import conform, plain_schema

log = structlog.get_logger("eddies.spark.executors")

#: Spark's checkpoint folder (under ``checkpoint_location``) of the executors' query.
EXECUTORS_FOLDER = "_eddies_executors"
#: Column marking a stream row of the current micro-batch in a bucket's eddy.
NEW = "_eddies_new"


# ---------------------------------------------------------------------------------------
# The decision (driver, no Spark job)


@dataclass(frozen=True)
class ExecutorPlan:
    """How a query runs on executors; made by :func:`analyze_placement`.

    kind: ``"map"``, ``"join"`` or ``"aggregate"`` (see the module doc); reason: why, in
    words; partition: the :class:`~eddies.engine.spark.partitioned.PartitionPlan` of the stream
    aliases; sql: the query each eddy runs (for ``"join"``, with the new-row predicate);
    broadcast / lookups: the static and the index-only tables it reads; result_schema:
    the query's result schema; finalize / output_columns: the aggregate's spec (for
    ``"aggregate"``).
    """

    kind: str
    reason: str
    partition: PartitionPlan
    sql: str
    broadcast: tuple[str, ...]
    lookups: tuple[str, ...]
    result_schema: pa.Schema
    finalize: FinalizeSpec | None = None
    output_columns: tuple[tuple[int, str], ...] = ()


def _refuse(why: str) -> UnsupportedQueryError:
    return UnsupportedQueryError(f"placement='executors': {why}; use placement='driver'")


def analyze_placement(
    sql: str,
    catalog: Catalog,
    streams: Mapping[str, pa.Schema],
    options: RunOptions,
    *,
    windows: Mapping[str, Any] | None = None,
) -> ExecutorPlan:
    """Decide whether ``sql`` can run inside Spark executors, and how (pure, no Spark).

    streams: stream name -> Arrow schema (as Spark delivers it); catalog: the other
    tables (static tables are broadcast, index-only tables looked up with a per-worker
    cache) and UDFs. Raises the planner's EddiesError for a bad query and
    UnsupportedQueryError naming why a query cannot be placed on executors.
    """
    _check_settings(windows, options)
    schemas = {name.lower(): plain_schema(schema) for name, schema in streams.items()}
    planning = planning_catalog(catalog, schemas, streams=True)
    plan = plan_query(sql, planning)  # type: ignore[arg-type]
    streaming = plan_streaming(plan, options)
    if plan.graph.steps:
        raise _refuse("outer joins and [NOT] IN / [NOT] EXISTS over streams are not placed")
    static, lookups = _static_and_lookup_tables(catalog, plan, schemas)
    partition = analyze_plan_partitioning(sql, plan, catalog, schemas)
    spec = plan.finalize
    common = dict(
        partition=partition,
        broadcast=static,
        lookups=lookups,
        result_schema=spec.schema,
    )
    if spec.group is not None:
        _check_aggregate(plan, streaming, schemas)
        return ExecutorPlan(
            "aggregate",
            "aggregate over one stream: partial states per partition, merged per "
            "group-key bucket in Spark's state store",
            sql=partition.sql,
            finalize=spec,
            output_columns=tuple(plan.output_columns),
            **common,  # type: ignore[arg-type]
        )
    if not spec.streaming or spec.limit is not None or spec.offset:
        raise _refuse(
            "ORDER BY, DISTINCT, LIMIT and OFFSET need every row of the stream at once; "
            "executors see one micro-batch piece at a time"
        )
    if partition.strategy == "split":
        return ExecutorPlan(
            "map",
            "one stream alias: one eddy per partition of each micro-batch (mapInArrow)",
            sql=partition.sql,
            **common,  # type: ignore[arg-type]
        )
    if partition.strategy != "hash":
        raise _refuse(f"the stream aliases cannot be partitioned: {partition.reason}")
    return ExecutorPlan(
        "join",
        f"stream-stream join: {partition.reason}; per bucket, all rows so far in Spark's "
        "state store",
        sql=_new_rows_only(partition),
        **common,  # type: ignore[arg-type]
    )


def _check_settings(windows: Mapping[str, Any] | None, options: RunOptions) -> None:
    """Refuse the settings no bucket's eddy can honour alone (windows, watermarks) and
    a driver-side checkpoint."""
    if windows:
        raise _refuse(
            "windows are not placed on executors: a window's expiry follows one global "
            "arrival order of the stream, and executors see pieces of it"
        )
    if options.watermarks:
        raise _refuse(
            "watermarks are not placed on executors: the query's watermark is the minimum "
            "over every stream's largest event time, which no single bucket sees"
        )
    if options.checkpoint is not None:
        raise EddiesError(
            "placement='executors' keeps its state in Spark's state store under "
            "checkpoint_location; checkpoint= is for the driver placement"
        )


def _static_and_lookup_tables(
    catalog: Catalog, plan: Plan, schemas: Mapping[str, pa.Schema]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The non-stream tables the query reads: those broadcast (scans) and those looked
    up (index-only); refuses a table read by both an index AM and a scan."""
    used = {a.table for a in plan.graph.aliases}
    lookups, static = [], []
    for table in sorted(used - set(schemas)):
        entry = catalog.table(table)
        if entry.indexes and entry.scans:
            raise _refuse(
                f"table {table!r} is read by an index AM and a scan; only an index-only "
                "table (add_index, a web source with scan=False) is looked up on executors"
            )
        (lookups if entry.indexes else static).append(table)
    return tuple(static), tuple(lookups)


def _check_aggregate(
    plan: Plan, streaming: StreamingPlan | None, schemas: Mapping[str, pa.Schema]
) -> None:
    """Refuse an aggregate the executors cannot keep: another output mode than update,
    or one over a join of several stream aliases."""
    if streaming is None or streaming.mode != "update":
        mode = None if streaming is None else streaming.mode
        raise _refuse(
            f"an aggregate is placed with output_mode='update' only (got {mode!r}): "
            "Spark calls a bucket's state function only when rows for it arrive, so "
            "'complete' could not re-emit the other buckets' groups, and 'append' needs "
            "a watermark"
        )
    if sum(a.table in schemas for a in plan.graph.aliases) != 1:
        raise _refuse(
            "an aggregate over a join of several stream aliases is not placed (its "
            "join state and its groups would need two keyed state stores)"
        )


def _new_rows_only(partition: PartitionPlan) -> str:
    """The join's query with the extra predicate "at least one tuple is new" (NEW)."""
    aliases = [a for one in partition.inputs for a in one.aliases]
    root = _parse(partition.sql)
    newer = exp.or_(*[exp.column(NEW, table=a, quoted=True) for a in aliases])
    root = root.where(exp.paren(newer), copy=False)
    return root.sql(dialect="duckdb")


def _parse(sql: str) -> exp.Expression:
    import sqlglot

    root = sqlglot.parse_one(sql, dialect="duckdb")
    if not isinstance(root, exp.Select):
        raise _refuse("only a single SELECT (no set operation or WITH) is placed")
    return root


# ---------------------------------------------------------------------------------------
# What runs in an executor (everything here must pickle)


@dataclass
class _Task:
    """All an executor task needs, shipped with its function."""

    kind: str
    sql: str
    tables: ShippedTables  # broadcast and lookup tables, UDFs, the query id
    inputs: list[tuple[str, pa.Schema]]  # shipped name, projected schema
    result_schema: pa.Schema
    out_schema: pa.Schema  # what Spark expects back from the map path
    options: RunOptions
    buckets: int
    finalize: FinalizeSpec | None = None
    output_columns: list[tuple[int, str]] | None = None
    keys: list[tuple[str, str]] | None = None  # join: per input, first key column, hash type
    shared: list[bool] | None = None  # join: per input, read by several aliases
    key_columns: list[tuple[str, ...]] | None = None  # join: per input, every key column
    rows: Any = None  # Spark accumulators (None outside Spark): input rows taken,
    seconds: Any = None  # and seconds the eddies ran, summed over tasks


def _count(task: _Task, rows: int, seconds: float) -> None:
    """Add to the query's accumulators (sent back with the task's result)."""
    if task.rows is not None:
        task.rows.add(rows)
    if task.seconds is not None:
        task.seconds.add(seconds)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _unipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _concat(tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables, promote_options="permissive").combine_chunks()


def _map_fn(task: _Task) -> Callable:
    """mapInArrow: one eddy over one partition of a micro-batch of the one stream."""
    ((name, schema),) = task.inputs

    def run(table: pa.Table) -> Iterator[pa.RecordBatch]:
        started = time.perf_counter()
        result = execute(task.sql, task.tables.catalog({name: table}), options=task.options)
        _count(task, table.num_rows, time.perf_counter() - started)
        for batch in result.to_batches():
            yield cast_columns(batch, task.out_schema)

    return map_in_arrow(run, schema, f"stream {name!r}")


def _pack_fn(column: str, task: _Task | None = None) -> Callable:
    """mapInArrow: the partition's rows as one Arrow IPC value per bucket. With the join's
    ``task``: the input rows are counted, and rows with a NULL key (they never join) are
    dropped."""

    def run(table: pa.Table) -> Iterator[pa.RecordBatch]:
        if task is not None and task.key_columns is not None:
            _count(task, table.num_rows, 0.0)
            table = table.filter(pa.array(_joinable(table, task.key_columns)))
            if not table.num_rows:
                return
        table = table.sort_by(column)
        buckets = table.column(column).to_numpy()
        starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
        ends = np.r_[starts[1:], len(buckets)]
        body = table.drop_columns([column])
        yield pa.RecordBatch.from_pydict(
            {
                BUCKET: pa.array(buckets[starts], pa.int32()),
                "blob": pa.array(
                    [_ipc(body.slice(s, e - s)) for s, e in zip(starts, ends, strict=True)]
                ),
            }
        )

    return map_in_arrow(run)


#: Arrow types the join's hash types compare in (partitioned._hash_type's Spark names).
_KEY_TYPES = {"bigint": pa.int64(), "double": pa.float64(), "string": pa.string()}


def _input_rows(table: pa.Table, i: int, name: str, schema: pa.Schema) -> pa.Table:
    """Input ``i``'s rows of a packed bucket table (its struct column, where set)."""
    return conform(input_rows(table, i), schema, f"stream {name!r}")


def _joinable(table: pa.Table, key_columns: list[tuple[str, ...]]) -> np.ndarray:
    """Rows of a shuffled join table whose input's key columns are all set."""
    keep = np.zeros(table.num_rows, dtype=bool)
    for i, columns in enumerate(key_columns):
        rows = table.column(f"{INPUT}{i}").combine_chunks()
        ok = rows.is_valid()
        for c in columns:
            ok = pc.and_(ok, pc.struct_field(rows, c).is_valid())
        keep |= pc.fill_null(ok, False).to_numpy(zero_copy_only=False)
    return keep


def _join_state_fn(task: _Task) -> Callable:
    """applyInPandasWithState: a bucket's eddy over its new rows and the old rows that can
    meet them (see module doc).

    Every stream alias is in one equi-join class, so a result's stream tuples all carry
    one key; a result with a new tuple of input j has a key of j's new rows. So input i's
    old rows take part only where their key is among the new keys of the other inputs
    (and of i itself when two aliases read it): a semi-join filter, so a micro-batch
    costs what its keys touch, not the whole state."""

    def run(key: tuple, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        new = _concat([_unipc(b) for f in frames for b in f["blob"]])
        old = _unipc(state.get[0]) if state.exists else None
        fresh = [_input_rows(new, i, n, s) for i, (n, s) in enumerate(task.inputs)]
        new_keys = [_key_values(task, i, t) for i, t in enumerate(fresh)]
        slices = {}
        for i, (name, schema) in enumerate(task.inputs):
            parts = [fresh[i].append_column(NEW, pa.array(np.ones(len(fresh[i]), dtype=bool)))]
            if old is not None:
                meet = [k for j, k in enumerate(new_keys) if j != i or task.shared[i]]
                stale = _input_rows(old, i, name, schema)
                if meet and stale.num_rows:
                    wanted = pa.chunked_array(meet, meet[0].type).combine_chunks()
                    stale = stale.filter(pc.is_in(_key_values(task, i, stale), wanted))
                else:
                    stale = stale.slice(0, 0)
                parts.append(stale.append_column(NEW, pa.array(np.zeros(len(stale), dtype=bool))))
            slices[name] = _concat(parts)
        everything = new if old is None else _concat([old, new])
        state.update((_ipc(everything),))
        if not any(t.num_rows for t in fresh) or any(t.num_rows == 0 for t in slices.values()):
            return
        started = time.perf_counter()
        result = execute(task.sql, task.tables.catalog(slices), options=task.options)
        _count(task, 0, time.perf_counter() - started)
        if result.num_rows:
            yield pd.DataFrame({"blob": [_ipc(result)]})

    return run


def _key_values(task: _Task, i: int, rows: pa.Table) -> pa.Array:
    """Input ``i``'s first join-key column, in the type the inputs' keys compare in."""
    column, hash_type = task.keys[i]
    values = rows.column(column).combine_chunks()
    target = _KEY_TYPES.get(hash_type)
    return values if target is None or values.type == target else values.cast(target)


def _aggregate(task: _Task) -> StreamingAggregate:
    assert task.finalize is not None and task.output_columns is not None
    return StreamingAggregate(
        task.finalize,
        task.output_columns,
        StreamingPlan("update", [], {}),
        AggregateStats("update"),
    )


def _buckets_of(partial: pa.Table, keys: list[str], buckets: int) -> np.ndarray:
    """A bucket per group, the same for equal keys in every process (SipHash of the keys'
    text, ``pandas.util.hash_array``); a global aggregate is bucket 0."""
    h = np.zeros(partial.num_rows, dtype=np.uint64)
    for k in keys:
        text = pc.fill_null(pc.cast(partial.column(k), pa.string()), "\x00NULL")
        codes = pd.util.hash_array(text.to_numpy(zero_copy_only=False), categorize=False)
        h = h * np.uint64(1_000_003) ^ codes
    return (h % np.uint64(buckets)).astype(np.int32)


def _partials_fn(task: _Task) -> Callable:
    """mapInArrow: a partition's eddy, its rows aggregated into partial states, packed per
    group-key bucket."""
    ((name, schema),) = task.inputs

    def run(table: pa.Table) -> Iterator[pa.RecordBatch]:
        cat = task.tables.catalog({name: table})
        agg = _aggregate(task)

        async def main() -> pa.Table | None:
            plan = plan_query(task.sql, cat)
            for batch in await eddy_batches(plan, task.options):
                await agg.push(batch)
            return agg.partial_state()

        started = time.perf_counter()
        partial = trio.run(main, clock=run_clock())
        _count(task, table.num_rows, time.perf_counter() - started)
        if partial is None or partial.num_rows == 0:
            return
        keys = agg.key_columns
        column = _buckets_of(partial, keys, task.buckets)
        partial = partial.append_column(BUCKET, pa.array(column))
        yield from _pack_fn(BUCKET)([b for b in partial.to_batches()])

    return map_in_arrow(run, schema, f"stream {name!r}")


def _aggregate_state_fn(task: _Task) -> Callable:
    """applyInPandasWithState: merge a bucket's partial states into its groups; emit the
    groups that changed (update mode)."""

    def run(key: tuple, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        partials = [_unipc(b) for f in frames for b in f["blob"]]
        agg = _aggregate(task)
        tables = ([_unipc(state.get[0])] if state.exists else []) + partials
        started = time.perf_counter()
        agg.merge_partials(_concat(tables))
        out = trio.run(agg.increment, clock=run_clock())
        _count(task, 0, time.perf_counter() - started)
        state.update((_ipc(agg.snapshot()),))
        if out:
            yield pd.DataFrame({"blob": [_ipc(pa.Table.from_batches(out))]})

    return run


# ---------------------------------------------------------------------------------------
# The driver side


@dataclass(frozen=True)
class ExecutorsBatch:
    """What one micro-batch of the executors' Spark query did: input rows the executors
    took, result rows written, seconds of its ``foreachBatch`` (the executors' work, run
    when the callback collects it, plus the sink write), and eddy_seconds, the seconds the
    eddies ran summed over the tasks (Spark accumulators). A replay is recomputed, not
    ignored (``replayed`` is always False)."""

    stream: str
    batch_id: int
    rows_in: int
    rows_out: int
    seconds: float
    eddy_seconds: float = 0.0
    replayed: bool = False


class ExecutorsAttachment:
    """A query placed on Spark executors (made by ``attach(..., placement="executors")``).

    ``plan``: its :class:`ExecutorPlan`; ``streaming_queries``: ``{name: StreamingQuery}``
    (one Spark query, named by the joined stream names); ``micro_batches``: an
    :class:`ExecutorsBatch` per micro-batch. ``rows`` and ``seconds`` are the Spark
    accumulators the tasks add their input rows and eddy seconds to.
    """

    placement = "executors"
    durable = True  # Spark's state store and checkpoint hold the state
    stats = None  # the eddies' statistics stay in the executors

    def __init__(
        self,
        plan: ExecutorPlan,
        sink: Sink | None,
        on_micro_batch: Callable | None,
        rows: Any = None,
        seconds: Any = None,
    ):
        self.plan = plan
        self.rows = rows
        self.seconds = seconds
        self._counted = (0, 0.0)  # the accumulators at the previous callback
        self.sink = sink
        self.streaming_queries: dict[str, Any] = {}
        self.micro_batches: list[ExecutorsBatch] = []
        self._on_micro_batch = on_micro_batch
        self._collected: list[pa.Table] = []
        self._lock = threading.Lock()
        self._closed = False

    def callback(self, name: str) -> Callable[[Any, int], None]:
        """The ``foreachBatch`` function: the micro-batch's results to the sink."""
        plan = self.plan

        def write(batch_df: Any, batch_id: int) -> None:
            started = time.perf_counter()
            rows = batch_df.toArrow()
            if plan.kind == "map":
                table = cast_columns(rows, plan.result_schema)
            else:
                parts = [_unipc(b) for b in rows.column("blob").to_pylist()]
                table = _conform_result(parts, plan.result_schema)
            tag = (name, int(batch_id))
            with self._lock:
                if self.sink is not None:
                    self.sink.write(table, tag)
                elif table.num_rows:
                    self._collected.append(table)
                # The tasks of this micro-batch have finished: their counts are in.
                counted = (
                    0 if self.rows is None else int(self.rows.value),
                    0.0 if self.seconds is None else float(self.seconds.value),
                )
                rows_in, eddy_seconds = (a - b for a, b in zip(counted, self._counted, strict=True))
                self._counted = counted
                record = ExecutorsBatch(
                    name,
                    int(batch_id),
                    int(rows_in),
                    table.num_rows,
                    time.perf_counter() - started,
                    float(eddy_seconds),
                )
                self.micro_batches.append(record)
            log.info(
                "micro-batch done on executors",
                stream=name,
                batch_id=int(batch_id),
                rows_out=table.num_rows,
                seconds=round(record.seconds, 4),
            )
            if self._on_micro_batch is not None:
                self._on_micro_batch(record)

        return write

    def await_termination(self, timeout: float | None = None) -> pa.Table:
        """Wait for the Spark query to end (e.g. ``availableNow``); the collected result
        (empty with a sink, which gets an empty ``"final"`` increment and is closed).
        Raises EddiesError naming a failed query, or one still running after ``timeout``."""
        timeout = check_timeout("timeout", timeout)
        for name, streaming in self.streaming_queries.items():
            try:
                finished = streaming.awaitTermination(timeout)
            except Exception as exc:  # pyspark's StreamingQueryException
                self.stop_spark()
                raise EddiesError(
                    f"stream {name!r}: the Spark streaming query failed on executors: {exc}"
                ) from None
            if timeout is not None and not finished:
                raise EddiesError(f"stream {name!r}: Spark query still running after {timeout} s")
        return self._finish()

    def stop_spark(self) -> None:
        """Stop the Spark streaming query (no error if stopped)."""
        for streaming in self.streaming_queries.values():
            streaming.stop()

    def stop(self, timeout: float | None = None) -> pa.Table:
        """Stop the Spark query; as :meth:`await_termination`."""
        check_timeout("timeout", timeout)
        self.stop_spark()
        return self._finish()

    def _finish(self) -> pa.Table:
        for name, streaming in self.streaming_queries.items():
            failure = streaming.exception()
            if failure is not None:
                raise EddiesError(f"stream {name!r}: the Spark streaming query failed: {failure}")
        schema = self.plan.result_schema
        if self.sink is not None:
            if not self._closed:
                self._closed = True
                self.sink.write(schema.empty_table(), FINAL)
                self.sink.close()
            return schema.empty_table()
        return _conform_result(self._collected, schema)


def _conform_result(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    tables = [cast_columns(t, schema) for t in parts if t.num_rows]
    return pa.concat_tables(tables) if tables else schema.empty_table()


def make_task(
    plan: ExecutorPlan,
    catalog: Catalog,
    schemas: Mapping[str, pa.Schema],
    options: RunOptions,
    buckets: int,
    expected: pa.Schema | None = None,
) -> _Task:
    """What every executor task of ``plan`` gets (pickled with its function): the
    broadcast tables, the lookup tables, the UDFs, the shipped inputs' schemas.
    ``schemas``: stream name -> Arrow schema; ``buckets``: key buckets of the stateful
    kinds; ``expected``: the Arrow schema Spark wants back from the map kind (default: the
    result schema with positional names). Raises DataSourceError for a table that cannot
    be shipped."""
    plain = {n.lower(): plain_schema(s) for n, s in schemas.items()}
    part = plan.partition
    inputs = part.input_schemas(plain)
    if expected is None:
        expected = positional_schema(plan.result_schema)
    return _Task(
        plan.kind,
        plan.sql,
        ship_tables(catalog, plan.broadcast, plan.lookups, uuid.uuid4().hex),
        inputs,
        plan.result_schema,
        expected,
        options,
        buckets,
        plan.finalize,
        None if plan.finalize is None else list(plan.output_columns),
        [(i.columns[0], i.hash_types[0]) if i.columns else ("", "") for i in part.inputs],
        [len(i.aliases) > 1 for i in part.inputs],
        [tuple(i.columns) for i in part.inputs] if plan.kind == "join" else None,
    )


def attach_executors(
    sql: str,
    catalog: Catalog,
    streams: Mapping[str, Any],
    *,
    checkpoint_location: str | Path,
    trigger: dict[str, Any] | None,
    sink: Sink | None,
    windows: Mapping[str, Any] | None,
    query_name: str | None,
    on_micro_batch: Callable | None,
    options: RunOptions,
) -> ExecutorsAttachment:
    """``attach(..., placement="executors")`` (see :func:`eddies.engine.spark.attach` and
    the module doc). Raises UnsupportedQueryError for a query that cannot be placed, before
    any Spark query starts."""
    frames = {name.lower(): df for name, df in streams.items()}
    schemas = {name: arrow_schema(df) for name, df in frames.items()}
    plan = analyze_placement(sql, catalog, schemas, options, windows=windows)
    spark = next(iter(frames.values())).sparkSession
    part = plan.partition
    buckets = int(spark.conf.get("spark.sql.shuffle.partitions"))
    struct, expected = spark_schema(spark, positional_schema(plan.result_schema))
    task = make_task(plan, catalog, schemas, options, buckets, expected)
    task.rows = spark.sparkContext.accumulator(0)
    task.seconds = spark.sparkContext.accumulator(0.0)
    name = "-".join(i.table for i in part.inputs) if plan.kind == "join" else part.inputs[0].table
    out = _placed_frame(plan, task, frames, struct)
    attachment = ExecutorsAttachment(plan, sink, on_micro_batch, task.rows, task.seconds)
    attachment.streaming_queries[name] = start_foreach_batch(
        out,
        attachment.callback(name),
        checkpoint=Path(checkpoint_location) / EXECUTORS_FOLDER,
        trigger=trigger,
        query_name=f"{query_name or 'eddies'}-executors-{name}",
        output_mode="append",
    )
    log.info("attached to Spark executors", kind=plan.kind, reason=plan.reason, stream=name)
    return attachment


def _placed_frame(plan: ExecutorPlan, task: _Task, frames: Mapping[str, Any], struct: Any) -> Any:
    """The streaming DataFrame of the placed query's output per micro-batch: result rows
    (``"map"``, in ``struct``) or Arrow IPC blobs of result rows (the stateful kinds)."""
    part = plan.partition
    blobs = "blob binary"
    if plan.kind == "map":
        (one,) = part.inputs
        return projected(frames[one.table], one).mapInArrow(_map_fn(task), struct)
    if plan.kind == "aggregate":
        (one,) = part.inputs
        packed = projected(frames[one.table], one).mapInArrow(
            _partials_fn(task), f"{BUCKET} int, {blobs}"
        )
        state_fn = _aggregate_state_fn(task)
    else:
        # NULL keys: counted, then dropped by the pack
        shuffled = hashed_union(frames, part.inputs, task.buckets, drop_null_keys=False)
        packed = shuffled.mapInArrow(_pack_fn(BUCKET, task), f"{BUCKET} int, {blobs}")
        state_fn = _join_state_fn(task)
    return packed.groupBy(BUCKET).applyInPandasWithState(
        state_fn, blobs, blobs, "append", "NoTimeout"
    )
