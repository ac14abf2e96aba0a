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

import pyarrow as pa
import pyarrow.compute as pc

from eddies.engine.planner import FinalizeSpec
from eddies.router.expressions import evaluate_async, mask_of


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
        spec = self.spec
        n = batch.num_rows
        if n == 0 or self.satisfied:
            return []
        env = self._env(batch)
        if spec.group is not None:
            exprs = spec.group + [a.arg for a in spec.aggregates]
            names = [f"__g{i}" for i in range(len(spec.group))]
            names += [f"__a{j}" for j in range(len(spec.aggregates))]
            pre = await self._project(exprs, env, n, names)
            columns = [_group_value(c) for c in pre.columns[: len(spec.group)]]
            columns += [
                _aggregate_input(c, a.function)
                for c, a in zip(pre.columns[len(spec.group) :], spec.aggregates, strict=True)
            ]
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

    async def finish(self) -> list[pa.RecordBatch]:
        spec = self.spec
        if spec.streaming:
            return []
        if spec.group is not None:
            table = await self._aggregate()
        else:
            table = self._collected_table(len(spec.select) + len(spec.order))
        if spec.distinct:
            table = _distinct(table)
        if spec.order:
            first_key = len(spec.select)
            table = _sort(
                table,
                [
                    (f"c{first_key + i}", desc, nulls_first)
                    for i, (_, desc, nulls_first) in enumerate(spec.order)
                ],
            )
        table = table.select([f"c{i}" for i in range(len(spec.select))])
        end = None if spec.limit is None else spec.offset + spec.limit
        table = table.slice(spec.offset, None if end is None else max(0, end - spec.offset))
        columns = [
            c.combine_chunks() if c.type == f.type else c.combine_chunks().cast(f.type)
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
        if n_groups and not self._collected:  # no rows, no groups
            agg = pa.table({name: pa.array([], pa.null()) for name in pre.column_names})
        elif n_groups:
            nan_max = [
                j
                for j, a in enumerate(spec.aggregates)
                if a.function == "max" and pa.types.is_floating(pre.column(f"__a{j}").type)
            ]
            for j in nan_max:  # DuckDB: NaN is the greatest value, so max sees it
                pre = pre.append_column(f"__nan{j}", pc.is_nan(pre.column(f"__a{j}")))
            grouped = pre.group_by([f"__g{i}" for i in range(n_groups)], use_threads=False)
            agg = grouped.aggregate(
                [(f"__a{j}", a.function) for j, a in enumerate(spec.aggregates)]
                + [(f"__nan{j}", "any") for j in nan_max]
            )
            output_names = {
                f"__a{j}_{a.function}": f"__a{j}" for j, a in enumerate(spec.aggregates)
            }
            agg = agg.rename_columns([output_names.get(c, c) for c in agg.column_names])
            for j in nan_max:
                has_nan = pc.fill_null(agg.column(f"__nan{j}_any"), False)
                col = agg.column(f"__a{j}")
                fixed = pc.if_else(has_nan, pa.scalar(float("nan"), col.type), col)
                agg = agg.set_column(agg.column_names.index(f"__a{j}"), f"__a{j}", fixed)
                agg = agg.drop_columns([f"__nan{j}_any"])
        else:
            agg = pa.table(
                {
                    f"__a{j}": [_scalar_aggregate(pre.column(f"__a{j}"), a.function)]
                    for j, a in enumerate(spec.aggregates)
                }
            )
        env = {name: agg.column(name).combine_chunks() for name in agg.column_names}
        n = agg.num_rows
        if spec.having is not None:
            keep = mask_of(await evaluate_async(spec.having, env, n))
            env = {k: v.filter(keep) for k, v in env.items()}
            n = int(keep.sum())
        exprs = spec.select + [o[0] for o in spec.order]
        columns = [await evaluate_async(e, env, n) for e in exprs]
        return pa.table({f"c{i}": c for i, c in enumerate(columns)})

    def _empty_pre_aggregate(self) -> pa.Table:
        # Types do not matter for zero rows except to pick kernels: null arrays suffice.
        spec = self.spec
        cols = {f"__g{i}": pa.array([], pa.null()) for i in range(len(spec.group or []))}
        cols |= {f"__a{j}": pa.array([], pa.int64()) for j in range(len(spec.aggregates))}
        return pa.table(cols)


def _scalar_aggregate(values: pa.ChunkedArray, function: str) -> Any:
    if function == "count":
        return pc.count(values).as_py()
    if function == "count_distinct":
        return pc.count_distinct(values).as_py()
    if values.type == pa.null():
        return None
    if function == "sum":
        return pc.sum(values).as_py()
    if function == "mean":
        return pc.mean(values).as_py()
    if function == "min":
        return pc.min(values).as_py()
    if pa.types.is_floating(values.type) and pc.any(pc.is_nan(values)).as_py():
        return float("nan")  # DuckDB: NaN is the greatest value
    return pc.max(values).as_py()


def _group_value(values: pa.Array) -> pa.Array:
    """A value as grouping sees it: -0.0 is 0.0 (in SQL they are one group)."""
    if pa.types.is_floating(values.type):
        return pc.add(values, pa.scalar(0.0, values.type))  # IEEE: -0.0 + 0.0 = +0.0
    return values


def _aggregate_input(values: pa.Array, function: str) -> pa.Array:
    """Types as DuckDB aggregates them: AVG(decimal) is a double, SUM(decimal) widens to 38
    digits, COUNT(DISTINCT) folds -0.0 onto 0.0."""
    if pa.types.is_decimal(values.type):
        if function == "mean":
            return values.cast(pa.float64())
        if function == "sum":
            return values.cast(pa.decimal128(38, values.type.scale))
    if function == "count_distinct":
        return _group_value(values)
    return values


def _distinct(table: pa.Table) -> pa.Table:
    if table.num_rows == 0:
        return table
    table = pa.table(
        {
            name: _group_value(col.combine_chunks())
            for name, col in zip(table.column_names, table.columns, strict=True)
        }
    )
    return table.group_by(table.column_names, use_threads=False).aggregate([])


def _sort(table: pa.Table, keys: list[tuple[str, bool, bool]]) -> pa.Table:
    """Sort with per-key direction and NULL placement (DuckDB's default: NULLS LAST)."""
    if table.num_rows <= 1:
        return table
    sort_keys: list[tuple[str, str]] = []
    columns = dict(zip(table.column_names, table.columns, strict=True))
    for i, (name, desc, nulls_first) in enumerate(keys):
        nulls = f"__null{i}"
        columns[nulls] = pc.is_null(columns[name], nan_is_null=False)
        sort_keys.append((nulls, "descending" if nulls_first else "ascending"))
        if pa.types.is_floating(columns[name].type):  # DuckDB: NaN above every number
            columns[f"__nan{i}"] = pc.fill_null(pc.is_nan(columns[name]), False)
            sort_keys.append((f"__nan{i}", "descending" if desc else "ascending"))
        sort_keys.append((name, "descending" if desc else "ascending"))
    order = pc.sort_indices(pa.table(columns), sort_keys=sort_keys)
    return table.take(order)
