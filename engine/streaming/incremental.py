"""Incremental aggregates over streams: GROUP BY answers at every commit point.

Without an output mode, an aggregate over a stream table is finished when the streams end
(:class:`~eddies.engine.above.finalize.Finalizer`). With ``output_mode`` (Spark Structured
Streaming's output modes), :class:`StreamingAggregate` takes its place above the eddy:

- every result batch of the eddy is projected to its group keys and aggregate inputs
  (as the Finalizer does) and buffered; at each commit point (and whenever the buffer
  holds :data:`FLUSH_ROWS` rows) the buffer is aggregated with pyarrow's hash group_by
  into **partial states** (SUM, COUNT, MIN, MAX; AVG as SUM and COUNT; BOOL_AND/OR) and
  merged into the per-group state with one more group_by over ``state + partials``.
  Aggregates without a mergeable partial state (COUNT(DISTINCT), median, quantiles,
  string_agg, arg_min/arg_max, stddev/variance, any_value) are refused, not recomputed;
- at each commit point it emits, by mode: ``update`` the groups that changed since the
  previous commit, with their current values; ``complete`` every group; ``append`` each
  group once, when the watermark says it is final;
- **watermarks** (per stream: an event-time column and an allowed lateness, Spark's
  ``withWatermark``): the stream's watermark is the largest event time its scan AM has
  taken minus the lateness; the query's watermark is the smallest over its watermarked
  streams that have seen a row (Spark's default ``min`` policy), never decreasing, and it
  advances only at commit points (the value seen at the quiescent moment of the grant,
  :attr:`~eddies.engine.streaming.commit_points.Commit.at_grant`);
- a group key that is a watermarked event-time column, ``time_bucket(INTERVAL w,
  column)`` or Spark's ``window(column, size[, slide])`` of one (a hopping window: a row
  counts in each window that holds it), makes a group **final** once its end (the value;
  the bucket start + w; the window start + size) is at or before the watermark.
  ``append`` emits final groups and evicts them; ``update`` evicts them after emitting;
  so the state holds only the groups still open, and memory stays bounded. A NULL key
  never becomes final before the end of input;
- a row whose group is already final is **late** (Spark's rule in its stateful
  aggregation: the event-time *key* at or before the watermark of the previous commit,
  so a row behind the watermark whose window is still open counts): in ``update`` and
  ``append`` mode it is dropped before aggregation and counted in
  ``stats.streaming_aggregate.late_rows``. In ``complete`` mode, as in Spark, the
  watermark drops and evicts nothing; nor does it without an event-time group key;
- when the streams end, the input is complete: the last increment (``"final"``) holds, in
  ``append`` mode, every group not yet emitted (the end of input acts as a watermark at
  infinity, as in Flink; Spark would keep waiting for data).

Spark refuses what does not fit a mode, and so does :func:`plan_streaming`: ``append``
without a GROUP BY key on a watermarked event-time column, ``complete`` without an
aggregate, ORDER BY / LIMIT / DISTINCT outside ``complete`` mode.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddies.engine.above.finalize import Finalizer
from eddies.engine.above.relational import (
    distinct_and_ordered,
    explode_windows,
    narrow_sums,
    pre_aggregate,
    select_groups,
    widen_risky_sums,
)
from eddies.engine.expr.functions.event_time import HopWindow, TimeBucket, floor_us
from eddies.engine.options import RunOptions
from eddies.engine.plan.plan_types import FinalizeSpec, Plan
from eddies.errors import EddiesError, UnsupportedQueryError
from eddies.router.expressions import Call, ColumnRef
from eddies.sources.decimal_float import as_double

#: Pre-aggregate rows buffered before they are folded into the state (bounds the buffer).
FLUSH_ROWS = 65_536
#: The aggregates (pyarrow kernel names) with a mergeable partial state.
INCREMENTAL = ("count", "sum", "mean", "min", "max", "all", "any")
_BOOL_OPTIONS = pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)


@dataclass
class AggregateStats:
    """What a streaming aggregate holds and did (``stats.streaming_aggregate``).

    live_groups: groups in the state now; peak_live_groups: the most at once (after any
    merge); evicted_groups: groups dropped as final; late_rows: rows dropped as late;
    emitted_rows: result rows sent; commits: commit points served; watermark_us: the
    query's watermark in microseconds since 1970-01-01 (None before any row).
    """

    output_mode: str
    late_rows: int = 0
    live_groups: int = 0
    peak_live_groups: int = 0
    evicted_groups: int = 0
    emitted_rows: int = 0
    commits: int = 0
    watermark_us: int | None = None
    max_event_us: dict[str, int] = field(default_factory=dict)  # per watermarked stream

    def __str__(self) -> str:
        return (
            f"streaming aggregate ({self.output_mode}): {self.live_groups} live groups "
            f"(peak {self.peak_live_groups}), {self.evicted_groups} evicted, "
            f"{self.late_rows} late rows, {self.emitted_rows} rows emitted in "
            f"{self.commits} commits, watermark {self.watermark}"
        )

    @property
    def watermark(self) -> dt.datetime | None:
        """The watermark as a naive UTC datetime (None before any row)."""
        if self.watermark_us is None:
            return None
        return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=self.watermark_us)


@dataclass
class Watermark:
    """Stream ``table``'s watermark: ``column`` (its actual name), lateness in µs, and the
    keys ``(alias, column)`` under which the query's rows carry it."""

    table: str
    column: str
    lateness_us: int
    keys: list[tuple[int, str]]


@dataclass
class StreamingPlan:
    """How a query over streams leaves at commit points (made by :func:`plan_streaming`).

    mode: the output mode; watermarks: per watermarked stream; event_keys: group key
    index -> bucket width in µs (0: the event time itself) for keys that become final.
    """

    mode: str
    watermarks: list[Watermark]
    event_keys: dict[int, int]


def _us(values: Any) -> Any:
    """Timestamps as int64 microseconds since 1970-01-01 (UTC for TIMESTAMPTZ)."""
    return floor_us(values)


def plan_streaming(plan: Plan, options: RunOptions) -> StreamingPlan | None:
    """Check ``options.output_mode`` / ``watermarks`` against ``plan``; None without a mode.

    Raises EddiesError for a watermark on a table the query does not read as a stream, an
    unknown or non-TIMESTAMP column; UnsupportedQueryError for a mode that does not fit
    the query (as Spark refuses it) or an aggregate that cannot be merged incrementally.
    """
    mode = options.output_mode
    if mode is None:
        return None
    streams = {t for t, entry in plan.tables.items() if entry.stream is not None}
    if not streams:
        raise EddiesError(
            f"output_mode={mode!r} applies to queries over stream tables; this query reads none"
        )
    watermarks = _watermarks(plan, options.watermarks or {}, streams)
    spec = plan.finalize
    if spec.group is None:
        if mode == "complete":
            raise UnsupportedQueryError(
                "output_mode='complete' needs an aggregation (GROUP BY or an aggregate), "
                "as in Spark: a query without one would have to keep every row"
            )
        if not spec.streaming:
            raise UnsupportedQueryError(
                f"output_mode={mode!r}: ORDER BY or DISTINCT without an aggregation cannot "
                "run over a stream incrementally (without output_mode it runs when the "
                "streams end)"
            )
        if watermarks:
            raise UnsupportedQueryError(
                "watermarks apply to aggregations; this query has none (its rows leave "
                "as they are produced)"
            )
        return StreamingPlan(mode, watermarks, {})
    for a in spec.aggregates:
        if a.function not in INCREMENTAL or a.post is not None:
            raise UnsupportedQueryError(
                f"aggregate {a.sql} cannot be computed incrementally over a stream "
                f"(output_mode={mode!r}); incremental: COUNT, SUM, AVG, MIN, MAX, BOOL_AND, "
                "BOOL_OR. Without output_mode it is computed when the streams end"
            )
    if mode != "complete" and (spec.order or spec.limit is not None or spec.offset):
        raise UnsupportedQueryError(
            f"ORDER BY / LIMIT / OFFSET over a streaming aggregate need output_mode="
            f"'complete' (as in Spark), not {mode!r}"
        )
    if mode != "complete" and spec.distinct:
        raise UnsupportedQueryError(
            f"SELECT DISTINCT over a streaming aggregate needs output_mode='complete', not {mode!r}"
        )
    keys = {k: w for w in watermarks for k in w.keys}
    event_keys: dict[int, int] = {}
    for i, g in enumerate(spec.group):
        if isinstance(g, ColumnRef) and g.key in keys:
            event_keys[i] = 0
        elif (
            isinstance(g, Call)
            and isinstance(g.fn, TimeBucket | HopWindow)
            and isinstance(g.args[0], ColumnRef)
            and g.args[0].key in keys
        ):
            event_keys[i] = g.fn.width_us
    if mode == "append" and not event_keys:
        raise UnsupportedQueryError(
            "output_mode='append' over an aggregation needs a watermark and a GROUP BY key "
            "on the watermarked event-time column (the column, or time_bucket(INTERVAL ..., "
            "column)), as in Spark: otherwise no group is ever final. Use 'update' or "
            "'complete', or give watermarks={stream: (column, lateness)}"
        )
    return StreamingPlan(mode, watermarks, event_keys)


def _watermarks(plan: Plan, given: dict, streams: set[str]) -> list[Watermark]:
    out = []
    for table, (column, lateness) in given.items():
        if table not in streams:
            raise EddiesError(
                f"watermarks: {table!r} is not a stream table this query reads "
                f"(streams: {sorted(streams)})"
            )
        schema = plan.tables[table].schema
        actual = {f.name.lower(): f.name for f in schema}.get(column.lower())
        if actual is None:
            raise EddiesError(
                f"watermarks[{table!r}]: stream {table!r} has no column {column!r} "
                f"(columns: {schema.names})"
            )
        if not pa.types.is_timestamp(schema.field(actual).type):
            raise EddiesError(
                f"watermarks[{table!r}]: the event-time column {actual!r} must be a "
                f"TIMESTAMP, not {schema.field(actual).type}"
            )
        keys = [(a.index, actual) for a in plan.graph.aliases if a.table == table]
        out.append(Watermark(table, actual, lateness // dt.timedelta(microseconds=1), keys))
    return out


class EventTimes:
    """The largest event time each watermarked stream's scan AM has taken (µs).

    :meth:`hook` gives a stream's ``on_take`` (it runs in the query's trio thread, on
    every batch the scan AM takes); :meth:`snapshot` is the commit points' ``on_grant``.
    """

    def __init__(self, watermarks: list[Watermark]) -> None:
        self.columns = {w.table: w.column for w in watermarks}
        self.max_us: dict[str, int] = {}

    def hook(self, table: str) -> Callable[[pa.RecordBatch], None]:
        column = self.columns[table]

        def observe(batch: pa.RecordBatch) -> None:
            values = batch.column(batch.schema.get_field_index(column))
            top = pc.max(_us(values)).as_py()
            if top is not None and top > self.max_us.get(table, top - 1):
                self.max_us[table] = top

        return observe

    def snapshot(self) -> dict[str, int]:
        return dict(self.max_us)


class StreamingAggregate(Finalizer):
    """Above the eddy of a query over streams with an output mode (see module doc).

    ``push`` buffers a result batch (returns nothing), :meth:`commit` returns the
    increment for a commit point, ``finish`` the last one. Raises the query's
    EddiesError (a failing expression) from those calls.
    """

    def __init__(
        self,
        spec: FinalizeSpec,
        output_columns: list[tuple[int, str]],
        streaming: StreamingPlan,
        stats: AggregateStats,
    ) -> None:
        super().__init__(spec, output_columns)
        self.streaming = streaming
        self.mode = streaming.mode
        self.stats = stats
        self.lateness = {w.table: w.lateness_us for w in streaming.watermarks}
        # Late rows are dropped in update and append mode (Spark: not in complete mode).
        self.drops_late = self.mode != "complete" and bool(streaming.event_keys)
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self._state: pa.Table | None = None  # __g<i>, partial-state columns, __changed

    # ------------------------------------------------------------- checkpoints
    def snapshot(self) -> pa.Table | None:
        """The per-group partial states (``__g<i>`` keys, ``__s<j>`` / ``__c<j>`` /
        ``__n<j>`` states, ``__changed``), None before any row was folded in: what a
        checkpoint keeps (engine/streaming/durable.py). Arrow tables are immutable, so
        the state is shared, not copied."""
        return self._state

    def restore(self, state: pa.Table | None) -> None:
        """Start again from ``state``, a :meth:`snapshot` of an earlier run of the same
        query (before the query starts; the stats are restored by the caller)."""
        self._state = state

    # -------------------------------------------------- two-phase aggregation
    @property
    def key_columns(self) -> list[str]:
        """The state's group-key columns, ``__g0`` .. ``__g<k-1>``."""
        return self._keys()

    def partial_state(self) -> pa.Table | None:
        """Fold the buffered rows in and return the per-group partial states (as
        :meth:`snapshot`): what one partition's eddy ships to its groups' owner
        (engine/spark/executors.py), None if no row was folded in."""
        self._flush()
        return self._state

    def merge_partials(self, partials: pa.Table) -> None:
        """Make the state one row per group of ``partials`` (earlier state rows and
        partial states of the same groups, concatenated): the combine step of a
        two-phase aggregate."""
        self._state = self._merge(partials)

    async def increment(self) -> list[pa.RecordBatch]:
        """The rows the current state emits at a commit point (by the output mode),
        without advancing the watermark."""
        return await self._emit(end=False)

    # ------------------------------------------------------------------ input
    async def push(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        spec = self.spec
        n = batch.num_rows
        if n == 0:
            return []
        env = self._env(batch)
        exprs = spec.group + [a.arg for a in spec.aggregates]
        names = [f"__g{i}" for i in range(len(spec.group))]
        names += [f"__a{j}" for j in range(len(spec.aggregates))]
        pre = explode_windows(await self._project(exprs, env, n, names), spec.group)
        n = pre.num_rows
        columns = pre_aggregate(pre, len(spec.group), [a.function for a in spec.aggregates])
        self._buffer.append(pa.RecordBatch.from_arrays(columns, names=names))
        self._buffered += n
        if self._buffered >= FLUSH_ROWS:
            self._flush()
        return []

    def _flush(self) -> None:
        """Drop late rows, aggregate the buffer into partial states, merge into the state."""
        if not self._buffer:
            return
        pre = pa.Table.from_batches(self._buffer)
        self._buffer, self._buffered = [], 0
        if self.drops_late:  # rows of groups already final: Spark's late rows
            late = self._final_mask(pre, end=False)
            if late.any():
                self.stats.late_rows += int(late.sum())
                pre = pre.filter(pa.array(~late))
        if pre.num_rows == 0:
            return
        partial = self._aggregate_pre(pre)
        if self._state is not None:
            both = pa.concat_tables([self._state, partial], promote_options="permissive")
            partial = self._merge(both)
        self._state = partial
        self.stats.live_groups = partial.num_rows
        self.stats.peak_live_groups = max(self.stats.peak_live_groups, partial.num_rows)

    def _keys(self) -> list[str]:
        return [f"__g{i}" for i in range(len(self.spec.group))]

    def _aggregate_pre(self, pre: pa.Table) -> pa.Table:
        """Partial states of ``pre``'s rows per group (``__changed`` set)."""
        specs: list[tuple] = []
        renames: dict[str, str] = {}
        for j, a in enumerate(self.spec.aggregates):
            col = f"__a{j}"
            if a.function == "mean":
                specs += [(col, "sum"), (col, "count")]
                renames |= {f"{col}_sum": f"__s{j}", f"{col}_count": f"__c{j}"}
            elif a.function in ("all", "any"):
                specs.append((col, a.function, _BOOL_OPTIONS))
                renames[f"{col}_{a.function}"] = f"__s{j}"
            else:
                specs.append((col, a.function))
                renames[f"{col}_{a.function}"] = f"__s{j}"
            if a.function == "max" and pa.types.is_floating(pre.column(col).type):
                pre = pre.append_column(f"__nan{j}", pc.is_nan(pre.column(col)))
                specs.append((f"__nan{j}", "any"))
                renames[f"__nan{j}_any"] = f"__n{j}"
        pre, widened = widen_risky_sums(pre, self._sums("__a"))
        out = pre.group_by(self._keys(), use_threads=False).aggregate(specs)
        out = out.rename_columns([renames.get(c, c) for c in out.column_names])
        out = narrow_sums(out, {f"__s{c[3:]}": self._sums("__a")[c] for c in widened})
        return out.append_column("__changed", pa.array(np.ones(out.num_rows, dtype=bool)))

    def _sums(self, prefix: str) -> dict[str, str]:
        """Columns ``<prefix><j>`` summed for SUM and AVG -> the aggregate's SQL."""
        return {
            f"{prefix}{j}": a.sql
            for j, a in enumerate(self.spec.aggregates)
            if a.function in ("sum", "mean")
        }

    def _merge(self, both: pa.Table) -> pa.Table:
        """One row per group from state rows and partial rows of the same groups."""
        specs: list[tuple] = [("__changed", "any")]
        for j, a in enumerate(self.spec.aggregates):
            if a.function in ("count", "sum", "mean"):
                specs.append((f"__s{j}", "sum"))
            elif a.function in ("all", "any"):
                specs.append((f"__s{j}", a.function, _BOOL_OPTIONS))
            else:
                specs.append((f"__s{j}", a.function))
            if a.function == "mean":
                specs.append((f"__c{j}", "sum"))
            if f"__n{j}" in both.column_names:
                specs.append((f"__n{j}", "any"))
        both, widened = widen_risky_sums(both, self._sums("__s"))
        out = both.group_by(self._keys(), use_threads=False).aggregate(specs)
        renames = {f"{spec[0]}_{spec[1]}": spec[0] for spec in specs}
        out = out.rename_columns([renames.get(c, c) for c in out.column_names])
        return narrow_sums(out, {c: self._sums("__s")[c] for c in widened})

    # ------------------------------------------------------------------ output
    async def commit(self, at_grant: dict[str, int] | None) -> list[pa.RecordBatch]:
        """The increment for a commit point; then the watermark advances to what the
        streams' scan AMs had taken at the grant (``at_grant``: stream -> max event µs)."""
        self._flush()
        self.stats.commits += 1
        self._advance(at_grant or {})
        return await self._emit(end=False)

    async def finish(self) -> list[pa.RecordBatch]:
        self._flush()
        return await self._emit(end=True)

    def _advance(self, max_us: dict[str, int]) -> None:
        self.stats.max_event_us.update(max_us)
        marks = [t - self.lateness[s] for s, t in max_us.items() if s in self.lateness]
        if marks:
            wm = min(marks)
            if self.stats.watermark_us is None or wm > self.stats.watermark_us:
                self.stats.watermark_us = wm

    def _final_mask(self, state: pa.Table, end: bool) -> np.ndarray:
        """Rows of ``state`` (groups, or pre-aggregate rows) whose event-time key has
        ended at or before the watermark (all of them at the end of input; a NULL key
        never ends before)."""
        n = state.num_rows
        if end:
            return np.ones(n, dtype=bool)
        wm = self.stats.watermark_us
        final = np.zeros(n, dtype=bool)
        if wm is None or self.mode == "complete":
            return final
        for i, width in self.streaming.event_keys.items():
            ends = pc.add(_us(state.column(f"__g{i}")), width)
            final |= pc.fill_null(pc.less_equal(ends, wm), False).to_numpy(zero_copy_only=False)
        return final

    async def _emit(self, end: bool) -> list[pa.RecordBatch]:
        state = self._state
        if state is None:
            # A global aggregate over no rows is one row (COUNT(*) = 0): in every complete
            # increment, and once at the end of an update stream that never emitted.
            due = self.mode == "complete" or (
                end and self.mode == "update" and self.stats.emitted_rows == 0
            )
            if not self.spec.group and due:
                return await self._output(self._empty_state())
            return []
        final = self._final_mask(state, end)
        if self.mode == "complete":
            chosen = state
        elif self.mode == "update":
            chosen = state.filter(state.column("__changed"))
        else:
            chosen = state.filter(pa.array(final))
        out = await self._output(chosen) if chosen.num_rows else []
        keep = ~final if self.mode != "complete" else np.ones(state.num_rows, dtype=bool)
        if not keep.all():
            self.stats.evicted_groups += int((~keep).sum())
            state = state.filter(pa.array(keep))
        changed = pa.array(np.zeros(state.num_rows, dtype=bool))
        self._state = state.set_column(state.column_names.index("__changed"), "__changed", changed)
        self.stats.live_groups = state.num_rows
        return out

    def _empty_state(self) -> pa.Table:
        cols: dict[str, pa.Array] = {}
        for j, a in enumerate(self.spec.aggregates):
            if a.function == "count":
                cols[f"__s{j}"] = pa.array([0], pa.int64())
            elif a.function == "mean":
                cols[f"__s{j}"] = pa.array([None], pa.null())
                cols[f"__c{j}"] = pa.array([0], pa.int64())
            else:  # typed as over rows, so HAVING min(d) >= DATE '...' compares
                cols[f"__s{j}"] = pa.nulls(1, a.result_type or pa.null())
        return pa.table(cols) if cols else pa.table({"__changed": [True]})

    async def _output(self, state: pa.Table) -> list[pa.RecordBatch]:
        """Final values of ``state``'s groups, through HAVING and the select list."""
        spec = self.spec
        env: dict[str, Any] = {k: state.column(k).combine_chunks() for k in self._keys()}
        for j, a in enumerate(spec.aggregates):
            value = state.column(f"__s{j}").combine_chunks()
            if a.function == "mean":
                count = state.column(f"__c{j}").combine_chunks()
                total = as_double(value)
                mean = pc.divide(total, pc.cast(count, pa.float64()))
                value = pc.if_else(pc.equal(count, 0), pa.scalar(None, pa.float64()), mean)
            if f"__n{j}" in state.column_names:
                has_nan = pc.fill_null(state.column(f"__n{j}").combine_chunks(), False)
                value = pc.if_else(has_nan, pa.scalar(float("nan"), value.type), value)
            env[f"__a{j}"] = value
        columns, n = await select_groups(spec, env, state.num_rows)
        columns = [
            c if isinstance(c, pa.Array | pa.ChunkedArray) else pa.array([c.as_py()] * n, c.type)
            for c in columns
        ]
        table = distinct_and_ordered(pa.table({f"c{i}": c for i, c in enumerate(columns)}), spec)
        if spec.limit is not None or spec.offset:
            table = table.slice(spec.offset, spec.limit)
        if table.num_rows == 0:
            return []
        columns = [
            c.combine_chunks() if c.type == f.type else c.combine_chunks().cast(f.type)
            for c, f in zip(table.columns, self.schema, strict=True)
        ]
        self.stats.emitted_rows += table.num_rows
        return [pa.RecordBatch.from_arrays(columns, schema=self.schema)]
