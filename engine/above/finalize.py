"""Above the eddy: projection, aggregation, HAVING, DISTINCT, ORDER BY, LIMIT/OFFSET.

As in the PostgreSQL eddy (eddies-in-postgresql §2), the eddy produces the join's tuples and
ordinary operators take them from there. A :class:`Finalizer` receives the output module's
RecordBatches (columns named ``<alias>.<column>``, in ``Plan.output_columns`` order).
Without aggregation, ordering or DISTINCT it is streaming: each batch is projected and
leaves at once, and LIMIT tells the engine to stop the eddy early. Otherwise it collects
and produces the result at the end, with pyarrow's hash aggregation and sort kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddies.engine.above.relational import (
    distinct_and_ordered,
    explode_windows,
    group_value,
    narrow_sums,
    pre_aggregate,
    select_groups,
    widen_risky_sums,
)
from eddies.engine.plan.plan_types import FinalizeSpec
from eddies.errors import EddiesError, ExpressionError
from eddies.router.expressions import KERNEL_ERRORS, evaluate_async
from eddies.sources.decimal_float import as_double


class Finalizer:
    """Consumes eddy output batches; ``push`` returns what may leave now, ``finish`` the rest."""

    def __init__(self, spec: FinalizeSpec, output_columns: list[tuple[int, str]]) -> None:
        self.spec = spec
        self.keys = output_columns
        self.schema = spec.schema
        self._collected: list[pa.RecordBatch] = []
        self._to_skip = spec.offset
        self._remaining = spec.limit

    @property
    def satisfied(self) -> bool:
        """True once a streaming LIMIT has all its rows: the eddy can stop."""
        return self.spec.streaming and self._remaining is not None and self._remaining <= 0

    def _env(self, batch: pa.RecordBatch) -> dict[Any, pa.Array]:
        return {key: batch.column(i) for i, key in enumerate(self.keys)}

    async def _project(
        self, exprs, env, n: int, names: list[str], schema: pa.Schema | None = None
    ) -> pa.RecordBatch:
        columns = [await evaluate_async(e, env, n) for e in exprs]
        if schema is not None:
            columns = [
                c if c.type == f.type else c.cast(f.type)
                for c, f in zip(columns, schema, strict=True)
            ]
        return pa.RecordBatch.from_arrays(columns, names=names)

    async def push(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """What may leave after ``batch`` (streaming), else nothing (collected). Raises an
        ExpressionError where a kernel fails on the values (never pyarrow's own error)."""
        try:
            return await self._push(batch)
        except EddiesError:
            raise
        except KERNEL_ERRORS as exc:
            raise ExpressionError(f"computing the query's result failed: {_reason(exc)}") from exc

    async def finish(self) -> list[pa.RecordBatch]:
        """The rest of the result once the eddy is done; errors as :meth:`push`."""
        try:
            return await self._finish()
        except EddiesError:
            raise
        except KERNEL_ERRORS as exc:
            raise ExpressionError(f"computing the query's result failed: {_reason(exc)}") from exc

    async def _push(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        spec = self.spec
        n = batch.num_rows
        if n == 0 or self.satisfied or spec.limit == 0:
            return []  # LIMIT 0: nothing is evaluated (as in DuckDB: no error can arise)
        env = self._env(batch)
        if spec.group is not None:
            extras = [(j, e) for j, a in enumerate(spec.aggregates) for e in a.extra]
            exprs = spec.group + [a.arg for a in spec.aggregates] + [e for _, e in extras]
            names = [f"__g{i}" for i in range(len(spec.group))]
            names += [f"__a{j}" for j in range(len(spec.aggregates))]
            names += [f"__x{i}" for i in range(len(extras))]
            pre = explode_windows(await self._project(exprs, env, n, names), spec.group)
            functions = [a.function for a in spec.aggregates] + [None] * len(extras)
            columns = pre_aggregate(pre, len(spec.group), functions)
            self._collected.append(pa.RecordBatch.from_arrays(columns, names=names))
            return []
        if not spec.streaming:
            exprs = spec.select + [o[0] for o in spec.order]
            names = [f"c{i}" for i in range(len(exprs))]
            self._collected.append(await self._project(exprs, env, n, names))
            return []
        out = await self._project(spec.select, env, n, spec.names, self.schema)
        return [self._apply_limit(out)] if out.num_rows else []

    def _apply_limit(self, out: pa.RecordBatch) -> pa.RecordBatch:
        if self._to_skip:
            skip = min(self._to_skip, out.num_rows)
            out = out.slice(skip)
            self._to_skip -= skip
        if self._remaining is not None:
            out = out.slice(0, self._remaining)
            self._remaining -= out.num_rows
        return out

    async def _finish(self) -> list[pa.RecordBatch]:
        spec = self.spec
        if spec.streaming:
            return []
        if spec.group is not None:
            table = await self._aggregate()
        else:
            table = self._collected_table(len(spec.select) + len(spec.order))
        table = distinct_and_ordered(table, spec)
        end = None if spec.limit is None else spec.offset + spec.limit
        table = table.slice(spec.offset, None if end is None else max(0, end - spec.offset))
        columns = [
            _as_type(c.combine_chunks(), f.type)
            for c, f in zip(table.columns, self.schema, strict=True)
        ]
        return [pa.RecordBatch.from_arrays(columns, schema=self.schema)]

    def _collected_table(self, width: int) -> pa.Table:
        if self._collected:
            return pa.Table.from_batches(self._collected)
        return pa.table({f"c{i}": pa.array([], pa.null()) for i in range(width)})

    async def _aggregate(self) -> pa.Table:
        """Group, aggregate, filter by HAVING; columns c0.. = select, then order keys."""
        spec = self.spec
        assert spec.group is not None
        n_groups = len(spec.group)
        if self._collected:
            pre = pa.Table.from_batches(self._collected)
        else:  # no input rows: still one row for a global aggregate (COUNT(*) = 0)
            pre = self._empty_pre_aggregate()
        sums = {f"__a{j}": a.sql for j, a in enumerate(spec.aggregates) if a.function == "sum"}
        pre, widened = widen_risky_sums(pre, sums)
        if n_groups and not self._collected:  # no rows, no groups: no expression to type
            width = len(spec.select) + len(spec.order)
            types = [f.type for f in self.schema] + [pa.null()] * len(spec.order)
            return pa.table({f"c{i}": pa.array([], types[i]) for i in range(width)})
        if n_groups:
            agg = _grouped_aggregate(pre, n_groups, spec.aggregates)
        else:
            agg = _global_aggregate(pre, spec.aggregates)
        agg = narrow_sums(agg, {c: sums[c] for c in widened})
        if not self._collected:  # computed over placeholder columns: give them their types
            agg = _typed_empty_aggregates(agg, spec.aggregates)
        env = {name: agg.column(name).combine_chunks() for name in agg.column_names}
        columns, _ = await select_groups(spec, env, agg.num_rows)
        return pa.table({f"c{i}": c for i, c in enumerate(columns)})

    def _empty_pre_aggregate(self) -> pa.Table:
        # Types do not matter for zero rows except to pick kernels: null arrays suffice.
        spec = self.spec
        cols = {f"__g{i}": pa.array([], pa.null()) for i in range(len(spec.group or []))}
        cols |= {f"__a{j}": pa.array([], pa.int64()) for j in range(len(spec.aggregates))}
        cols |= {x: pa.array([], pa.int64()) for xs in _extra_names(spec.aggregates) for x in xs}
        return pa.table(cols)


_POPULATION = pc.VarianceOptions(ddof=0)


def _grouped_aggregate(pre: pa.Table, n_groups: int, aggregates: list) -> pa.Table:
    """One row per group of ``pre`` (keys ``__g<i>``, inputs ``__a<j>`` and ``__x<i>``):
    the keys and each aggregate's value as ``__a<j>``, with DuckDB's answers where Arrow's
    kernels differ (NaN the greatest value for max, 0 for the population statistic of
    one value) and the ``list``-collected aggregates finished (:func:`_list_post`)."""
    nan_max = [
        j
        for j, a in enumerate(aggregates)
        if a.function == "max" and pa.types.is_floating(pre.column(f"__a{j}").type)
    ]
    for j in nan_max:  # DuckDB: NaN is the greatest value, so max sees it
        pre = pre.append_column(f"__nan{j}", pc.is_nan(pre.column(f"__a{j}")))
    grouped = pre.group_by([f"__g{i}" for i in range(n_groups)], use_threads=False)
    single = [j for j, a in enumerate(aggregates) if _population(a)]
    kernels = [_kernel(a.function, pre.column(f"__a{j}").type) for j, a in enumerate(aggregates)]
    extra_names = _extra_names(aggregates)
    agg = grouped.aggregate(
        [(x, "list") for xs in extra_names for x in xs]
        + [(f"__a{j}", "count") for j in single]
        + [
            (f"__a{j}", kernels[j]) if a.options is None else (f"__a{j}", kernels[j], a.options)
            for j, a in enumerate(aggregates)
        ]
        + [(f"__nan{j}", "any") for j in nan_max]
    )
    for j in single:  # DuckDB: the population statistic of one value is 0
        i = agg.column_names.index(f"__a{j}_{kernels[j]}")
        one = pc.equal(agg.column(f"__a{j}_count"), 1)
        fixed = pc.if_else(one, pa.scalar(0.0, pa.float64()), agg.column(i))
        agg = agg.set_column(i, agg.column_names[i], fixed).drop_columns([f"__a{j}_count"])
    for j, a in enumerate(aggregates):
        if a.post is not None:  # collected as lists per group: finish them
            i = agg.column_names.index(f"__a{j}_list")
            lists = [agg.column(i)] + [agg.column(f"{x}_list") for x in extra_names[j]]
            agg = agg.set_column(i, f"__a{j}_list", _list_post(_zip_lists(lists), a.post))
    agg = agg.drop_columns([f"{x}_list" for xs in extra_names for x in xs])
    output_names = {f"__a{j}_{kernels[j]}": f"__a{j}" for j in range(len(kernels))}
    agg = agg.rename_columns([output_names.get(c, c) for c in agg.column_names])
    for j in nan_max:
        has_nan = pc.fill_null(agg.column(f"__nan{j}_any"), False)
        col = agg.column(f"__a{j}")
        fixed = pc.if_else(has_nan, pa.scalar(float("nan"), col.type), col)
        agg = agg.set_column(agg.column_names.index(f"__a{j}"), f"__a{j}", fixed)
        agg = agg.drop_columns([f"__nan{j}_any"])
    return agg


def _global_aggregate(pre: pa.Table, aggregates: list) -> pa.Table:
    """The one row of an aggregate without GROUP BY over ``pre``: ``__a<j>`` per
    aggregate (:func:`_scalar_aggregate`)."""
    extra_names = _extra_names(aggregates)
    return pa.table(
        {
            f"__a{j}": [
                _scalar_aggregate(
                    [pre.column(f"__a{j}")] + [pre.column(x) for x in extra_names[j]],
                    a.function,
                    a.options,
                    a.post,
                )
            ]
            for j, a in enumerate(aggregates)
        }
    )


def _typed_empty_aggregates(agg: pa.Table, aggregates: list) -> pa.Table:
    """The one row of aggregates over no rows, each ``__a<j>`` in the type the aggregate
    has over rows (``min(d)`` of a DATE is a NULL DATE, not the placeholder's INT64), so
    HAVING and expressions over it compare and compute as over rows."""
    for j, a in enumerate(aggregates):
        name = f"__a{j}"
        column = agg.column(name).combine_chunks()
        if a.result_type is not None and column.type != a.result_type:
            agg = agg.set_column(
                agg.column_names.index(name), name, _as_type(column, a.result_type)
            )
    return agg


def _as_type(column: pa.Array, target: pa.DataType) -> pa.Array:
    """``column`` in the plan's type; all NULL (an aggregate over no rows, computed over
    placeholder INT64 columns) it is NULLs of that type, whatever casts allow."""
    if column.type == target:
        return column
    if column.null_count == len(column):
        return pa.nulls(len(column), target)
    return column.cast(target)


def _reason(exc: BaseException) -> str:
    """The first line of a library error."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _population(a: Any) -> bool:
    """stddev_pop / var_pop (DuckDB gives 0 for one value, NaN included)."""
    return a.function in ("stddev", "variance") and a.options == _POPULATION


def _extra_names(aggregates: list) -> list[list[str]]:
    """Per aggregate, the pre-aggregate columns of its further arguments (``__x<i>``)."""
    out, i = [], 0
    for a in aggregates:
        out.append([f"__x{i + k}" for k in range(len(a.extra))])
        i += len(a.extra)
    return out


def _zip_lists(lists: list[Any]) -> Any:
    """Per-group lists of the same rows (one aggregation call), zipped into one list of
    structs {v, k0, k1, ...}; a single list is returned as it is."""
    lists = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in lists]
    if len(lists) == 1:
        return lists[0]
    first = lists[0]
    offsets = pc.subtract(first.offsets, first.offsets[0])
    flats = [pc.list_flatten(c) for c in lists]
    names = ["v", *[f"k{i}" for i in range(len(lists) - 1)]]
    return pa.ListArray.from_arrays(offsets, pa.StructArray.from_arrays(flats, names=names))


def _kernel(function: str, values: pa.DataType) -> str:
    """The pyarrow kernel for ``function`` over ``values``: Arrow's ``first`` (any_value)
    has no decimal kernel, and ``min`` is as good an "any value" (non-NULL, of the group)."""
    if function == "first" and pa.types.is_decimal(values):
        return "min"
    return function


def _scalar_aggregate(values: Any, function: str, options: Any = None, post: Any = None) -> Any:
    if post is not None:  # one group of every row
        columns = [c.combine_chunks() for c in values]
        if len(columns[0]) == 0 or columns[0].type == pa.null():
            return None
        offsets = pa.array([0, len(columns[0])], pa.int32())
        lists = [pa.ListArray.from_arrays(offsets, c) for c in columns]
        return _list_post(_zip_lists(lists), post)[0].as_py()
    values = values[0]
    if options is not None:  # stddev, variance, all, any, first: NULL over no values
        if values.type == pa.null() or len(values) == 0:
            return None
        if options == _POPULATION and pc.count(values).as_py() == 1:
            return 0.0  # DuckDB: the population statistic of one value is 0
        return getattr(pc, _kernel(function, values.type))(values, options=options).as_py()
    if function == "count":
        return pc.count(values).as_py()
    if function == "count_distinct":
        return pc.count_distinct(values).as_py()
    if values.type == pa.null():
        return None
    # Arrow scalars, not Python values: as_py() would cut timestamp[ns] to microseconds.
    if function == "sum":
        return pc.sum(values)
    if function == "mean":
        return pc.mean(values)
    if function == "min":
        return pc.min(values)
    if pa.types.is_floating(values.type) and pc.any(pc.is_nan(values)).as_py():
        return pa.scalar(float("nan"), values.type)  # DuckDB: NaN is the greatest value
    return pc.max(values)


def _sorted_groups(
    lists: Any, keys: list[tuple[Any, bool, bool]], keep: Any
) -> tuple[Any, np.ndarray, np.ndarray]:
    """The members of each group's list, sorted per group, vectorized.

    ``lists`` holds one list per group; ``keep(flat)`` says which members count; ``keys``
    are ``(flat -> key array, descending, nulls_first)``. Returns the kept members in
    (group, keys) order, each group's count and each group's first position.
    """
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    flat = pc.list_flatten(lists)
    parent = pc.list_parent_indices(lists)
    mask = keep(flat)
    flat, parent = flat.filter(mask), parent.filter(mask)
    columns: dict[str, Any] = {"parent": parent}
    sort_keys: list[tuple[str, str]] = [("parent", "ascending")]
    for i, (key_of, desc, nulls_first) in enumerate(keys):
        key = key_of(flat)
        columns[f"n{i}"] = pc.is_null(key, nan_is_null=False)
        sort_keys.append((f"n{i}", "descending" if nulls_first else "ascending"))
        if pa.types.is_floating(key.type):  # DuckDB: NaN above every number
            columns[f"nan{i}"] = pc.fill_null(pc.is_nan(key), False)
            sort_keys.append((f"nan{i}", "descending" if desc else "ascending"))
        columns[f"k{i}"] = key
        sort_keys.append((f"k{i}", "descending" if desc else "ascending"))
    order = pc.sort_indices(pa.table(columns), sort_keys=sort_keys)
    flat = flat.take(order)
    counts = np.bincount(parent.to_numpy(zero_copy_only=False), minlength=len(lists))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return flat, counts, starts


def _distinct_aggregate(lists: Any, function: str) -> pa.Array:
    """``SUM``/``AVG(DISTINCT x)`` per group from its collected values: the distinct non-NULL
    values (as grouping sees them: -0.0 is 0.0, NaN one value) summed or averaged, NULL for
    a group without any. Types as for the plain aggregate: an integer sum is exact (in 38
    digits) and must fit BIGINT, a DECIMAL sum has 38 digits, AVG is a DOUBLE."""
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    flat = group_value(pc.list_flatten(lists))
    pairs = pa.table({"p": pc.list_parent_indices(lists), "v": flat})
    pairs = pairs.filter(pc.is_valid(pairs.column("v")))
    unique = pairs.group_by(["p", "v"], use_threads=False).aggregate([])
    values = unique.column("v")
    if function == "mean":
        values, target = as_double(values), pa.float64()
    elif pa.types.is_integer(flat.type) or flat.type == pa.null():
        values, target = values.cast(pa.decimal128(38, 0)), pa.int64()
    elif pa.types.is_decimal(flat.type):
        values = values.cast(pa.decimal128(38, flat.type.scale))
        target = values.type
    else:
        target = pa.float64()
        values = values.cast(target)
    kernel = "mean" if function == "mean" else "sum"
    per_group = (
        pa.table({"p": unique.column("p"), "v": values})
        .group_by("p", use_threads=False)
        .aggregate([("v", kernel)])
    )
    results = per_group.column(f"v_{kernel}").cast(target)  # an integer sum past BIGINT raises
    where = np.full(len(lists), -1, dtype=np.int64)
    where[per_group.column("p").to_numpy(zero_copy_only=False)] = np.arange(per_group.num_rows)
    return results.take(pa.array(where, mask=where < 0))


def _list_post(lists: Any, post: tuple) -> pa.Array:
    """Finish an aggregate collected with pyarrow's ``list`` kernel, one value per group:
    ``("quantile", q)`` continuous quantile (median: q = 0.5), interpolated as DuckDB's
    quantile_cont; ``("arg", descending)`` arg_min/arg_max over rows where both values are
    set; ``("string_agg", sep, [(descending, nulls_first), ...])`` the non-NULL strings
    joined, in ORDER BY order if given. NULL for a group without values."""
    kind = post[0]
    n_groups = len(lists)
    if kind == "distinct":
        return _distinct_aggregate(lists, post[1])
    if kind == "quantile":
        flat, counts, starts = _sorted_groups(
            lists, [(lambda f: f, False, False)], lambda f: pc.is_valid(f)
        )
        dec = flat.type if pa.types.is_decimal(flat.type) else None
        values = pc.cast(flat, pa.float64()).to_numpy(zero_copy_only=False)
        has = counts > 0
        pos = post[1] * np.maximum(counts - 1, 0)
        lo, hi = np.floor(pos).astype(np.int64), np.ceil(pos).astype(np.int64)
        v_lo = values[np.where(has, starts + lo, 0)] if len(values) else np.zeros(n_groups)
        v_hi = values[np.where(has, starts + hi, 0)] if len(values) else np.zeros(n_groups)
        with np.errstate(invalid="ignore"):
            out = np.where(lo == hi, v_lo, v_lo + (v_hi - v_lo) * (pos - lo))
        if dec is not None:  # DuckDB: a DECIMAL, the interpolation truncated to its scale
            units = np.trunc(np.round(out * 10**dec.scale, 6)) / 10**dec.scale
            width = min(38, dec.precision + 2)
            truncated = pa.array(np.where(has, units, 0.0), pa.float64(), mask=~has)
            return pc.cast(truncated, pa.decimal128(width, dec.scale), safe=False)
        return pa.array(out, pa.float64(), mask=~has)
    if kind == "arg":

        def both_set(f: Any) -> Any:
            return pc.and_(pc.is_valid(f.field("v")), pc.is_valid(f.field("k0")))

        flat, counts, starts = _sorted_groups(
            lists, [(lambda f: f.field("k0"), post[1], False)], both_set
        )
        has = counts > 0
        return flat.field("v").take(pa.array(starts, pa.int64(), mask=~has))
    sep, order = post[1], post[2]
    struct = pa.types.is_struct(lists.type.value_type)
    keys = [
        (lambda f, i=i: f.field(f"k{i}"), desc, nulls_first)
        for i, (desc, nulls_first) in enumerate(order)
    ]
    flat, counts, starts = _sorted_groups(
        lists, keys, (lambda f: pc.is_valid(f.field("v"))) if struct else pc.is_valid
    )
    strings = flat.field("v") if struct else flat
    offsets = pa.array(np.concatenate([starts, [len(strings)]]).astype(np.int32))
    joined = pc.binary_join(pa.ListArray.from_arrays(offsets, strings), sep)
    return pc.if_else(pa.array(counts > 0), joined, pa.scalar(None, joined.type))
