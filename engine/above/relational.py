"""The relational steps both aggregators above the eddy run, with DuckDB's semantics.

The batch :class:`~eddies.engine.above.finalize.Finalizer` and the streaming
:class:`~eddies.engine.streaming.incremental.StreamingAggregate` (eddies-in-postgresql §2:
ordinary operators above the eddy's select-project-join block) prepare and finish groups
the same way, over Arrow columns:

- before aggregation: a hopping ``window(...)`` key exploded into one row per window
  (:func:`explode_windows`), key values as grouping sees them (:func:`group_value`),
  aggregate inputs in the types DuckDB aggregates them in (:func:`aggregate_input`), and
  integer sums that could wrap around made exact (:func:`widen_risky_sums`,
  :func:`narrow_sums`);
- after it: HAVING and the select list over the groups (:func:`select_groups`), then
  DISTINCT and ORDER BY (:func:`distinct_and_ordered`).

Result tables name their columns ``c0, c1, ...``: the select items, then the ORDER BY keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from eddies.errors import ExpressionError
from eddies.router.expressions import Call, evaluate_async, mask_of
from eddies.sources.decimal_float import as_double

if TYPE_CHECKING:
    from eddies.engine.plan.planner import FinalizeSpec


# ------------------------------------------------------------------- before aggregation
def explode_windows(pre: pa.RecordBatch, group: list[Any]) -> pa.RecordBatch:
    """``pre`` (group keys first) with a row per window of each row when a key is
    ``window(...)`` (:class:`~eddies.engine.expr.functions.event_time.HopWindow`: a list
    of window starts per row): the list flattened, the other columns repeated (a row with
    no window is gone)."""
    from eddies.engine.expr.functions.event_time import HopWindow

    hops = [i for i, g in enumerate(group) if isinstance(g, Call) and isinstance(g.fn, HopWindow)]
    if not hops:
        return pre
    lists = pre.column(hops[0])
    parents = pc.list_parent_indices(lists)
    columns = [
        pc.list_flatten(c) if i in hops else c.take(parents) for i, c in enumerate(pre.columns)
    ]
    return pa.RecordBatch.from_arrays(columns, names=pre.schema.names)


def group_value(values: pa.Array) -> pa.Array:
    """A value as grouping sees it: -0.0 is 0.0 (in SQL they are one group)."""
    if pa.types.is_floating(values.type):
        return pc.add(values, pa.scalar(0.0, values.type))  # IEEE: -0.0 + 0.0 = +0.0
    return values


def aggregate_input(values: pa.Array, function: str | None) -> pa.Array:
    """Types as DuckDB aggregates them: AVG(decimal) is a double, SUM(decimal) widens to 38
    digits, COUNT(DISTINCT) folds -0.0 onto 0.0."""
    if function in ("stddev", "variance") and not pa.types.is_floating(values.type):
        return as_double(values)  # DuckDB computes them in DOUBLE
    if pa.types.is_decimal(values.type):
        if function == "mean":
            return as_double(values)
        if function == "sum":
            return values.cast(pa.decimal128(38, values.type.scale))
    if function == "count_distinct":
        return group_value(values)
    return values


def pre_aggregate(
    pre: pa.RecordBatch, n_groups: int, functions: list[str | None]
) -> list[pa.Array]:
    """The columns of ``pre`` (``n_groups`` keys, then one input per entry of
    ``functions``: the pyarrow kernel name, None for a further argument) ready to
    aggregate: the keys through :func:`group_value`, the inputs :func:`aggregate_input`."""
    columns = [group_value(c) for c in pre.columns[:n_groups]]
    columns += [
        aggregate_input(c, function)
        for c, function in zip(pre.columns[n_groups:], functions, strict=True)
    ]
    return columns


#: A BIGINT sum may wrap around (Arrow's sum kernels do not check) once the largest
#: magnitude times the count of values reaches this.
BIGINT_LIMIT = 2**63


def widen_risky_sums(table: pa.Table, sums: dict[str, str]) -> tuple[pa.Table, list[str]]:
    """``table`` with each integer column of ``sums`` (column -> the aggregate's SQL) that
    could overflow BIGINT when summed cast to DECIMAL(38, 0), where Arrow sums exactly;
    and the names of those columns. Arrow's integer sums wrap around silently, so
    ``SUM`` of three 2**62 was negative; the bound (largest magnitude x count) is one
    vectorized pass, and the exact path runs only when it is reached."""
    widened = []
    for name in sums:
        column = table.column(name)
        if not pa.types.is_integer(column.type) or column.null_count == len(column):
            continue
        bounds = pc.min_max(column)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if max(abs(low), abs(high)) * len(column) >= BIGINT_LIMIT:
            table = table.set_column(
                table.column_names.index(name), name, column.cast(pa.decimal128(38, 0))
            )
            widened.append(name)
    return table, widened


def narrow_sums(table: pa.Table, sums: dict[str, str]) -> pa.Table:
    """The exact sums of :func:`widen_risky_sums` back as BIGINT (the type SUM has in the
    plan); ExpressionError naming the aggregate if one is out of BIGINT range (DuckDB
    gives a HUGEINT there)."""
    for name, sql in sums.items():
        if name not in table.column_names:
            continue
        try:
            narrowed = table.column(name).cast(pa.int64())
        except pa.ArrowInvalid:
            raise ExpressionError(
                f"{sql} is out of BIGINT range; CAST its argument to DECIMAL(38, 0) or "
                "DOUBLE to sum it"
            ) from None
        table = table.set_column(table.column_names.index(name), name, narrowed)
    return table


# -------------------------------------------------------------------- after aggregation
async def select_groups(spec: FinalizeSpec, env: dict[str, Any], n: int) -> tuple[list[Any], int]:
    """The select items, then the ORDER BY keys, of the ``n`` groups ``env`` holds (group
    keys ``__g<i>``, aggregate values ``__a<j>``) that pass ``spec.having``; and how many
    groups passed. A value may be a scalar (an item over constants only). Raises the
    expressions' EddiesError."""
    if spec.having is not None:
        keep = mask_of(await evaluate_async(spec.having, env, n))
        env = {k: v.filter(keep) for k, v in env.items()}
        n = int(keep.sum())
    exprs = spec.select + [o[0] for o in spec.order]
    return [await evaluate_async(e, env, n) for e in exprs], n


def distinct_and_ordered(table: pa.Table, spec: FinalizeSpec) -> pa.Table:
    """``table`` (``c0..``: the select items, then the ORDER BY keys) with DISTINCT and
    ORDER BY applied as ``spec`` says, reduced to the select items' columns."""
    if spec.distinct:
        table = distinct(table)
    if spec.order:
        first_key = len(spec.select)
        table = sort(
            table,
            [
                (f"c{first_key + i}", desc, nulls_first)
                for i, (_, desc, nulls_first) in enumerate(spec.order)
            ],
        )
    return table.select([f"c{i}" for i in range(len(spec.select))])


def distinct(table: pa.Table) -> pa.Table:
    """The distinct rows of ``table`` (-0.0 and 0.0 one value, as :func:`group_value`)."""
    if table.num_rows == 0:
        return table
    table = pa.table(
        {
            name: group_value(col.combine_chunks())
            for name, col in zip(table.column_names, table.columns, strict=True)
        }
    )
    return table.group_by(table.column_names, use_threads=False).aggregate([])


def sort(table: pa.Table, keys: list[tuple[str, bool, bool]]) -> pa.Table:
    """Sort with per-key direction and NULL placement (DuckDB's default: NULLS LAST).
    ``keys``: (column name, descending, nulls first); NaN sorts above every number."""
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
