"""Scale-out: independent eddies inside Spark executors, one per partition of the data.

The idea is data parallelism around an unchanged eddy: cut the large ("partitioned")
tables into pieces such that every result row can be produced from the rows of exactly
one piece, give every piece the small ("broadcast") tables in full, run one independent
eddy per piece — each adapts its own routing to its own data — and take the union of
their outputs. Spark supplies the pieces and the executors (``mapInArrow`` for one
partitioned table, ``groupBy(...).applyInArrow`` for several). Hash partitioning on the
join key is the classic Exchange / Flux way of parallelizing a join (Graefe 1990; Shah et
al. 2003); it is *not* from the eddy papers, whose eddies run on one node.

When the union of per-piece results is the single-node result (see
:func:`analyze_partitioning`; ``docs/scale_out.md`` explains the rules):

* **one** partitioned alias in the query: any split works, since every result row holds
  exactly one row of that alias (strategy ``"split"``);
* **several** partitioned aliases (several large tables, or one large table used twice):
  equality join predicates must tie one column of each of them into one equivalence class
  (transitively, also through broadcast tables: ``a.x = d.k AND d.k = b.y``). All members
  of a class are equal and non-NULL in every result row, so hashing each alias on its
  column of the class sends all rows that can meet to one bucket (strategy ``"hash"``).
  Two aliases of one table that hash on *different* columns get their own copy of the
  table, each partitioned its own way (the query each eddy runs names the copies).

Projection and selection run in the executors. Aggregation, HAVING, DISTINCT, ORDER BY,
LIMIT and OFFSET do not commute with the union, so for those queries the executors run
only the eddy (the join with its selections) and the driver finishes the rows with the
engine's own :class:`~eddies.engine.above.finalize.Finalizer`. A query that cannot be
partitioned runs as one eddy on the driver over the collected DataFrames, with a warning
that names why (strategy ``"driver"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa
import structlog
import trio
from sqlglot import exp

from eddies.engine.above.finalize import Finalizer
from eddies.engine.api import execute
from eddies.engine.catalog import Catalog
from eddies.engine.execution.run import seed_scheduler
from eddies.engine.options import RunOptions
from eddies.engine.plan.plan_types import Plan
from eddies.engine.plan.planner import plan_query
from eddies.engine.runtime.precise_clock import run_clock
from eddies.engine.spark.arrow_schema import (
    cast_columns,
    plain_arrow_schemas,
    positional_schema,
    spark_schema,
)
from eddies.engine.spark.map_in_arrow import eddy_batches, map_in_arrow
from eddies.engine.spark.shuffle import BUCKET, hashed_union, input_rows, projected
from eddies.engine.spark.task_catalog import (
    PlanningCatalog,
    ShippedTables,
    planning_catalog,
    ship_tables,
)
from eddies.errors import DataSourceError, EddiesError
from eddies.router.query_graph import AliasInfo
from eddies.sources.arrow_source import conform, plain_schema

log = structlog.get_logger("eddies.engine.spark.partitioned")

#: An equivalence class of ``(alias index, column)`` under the query's equi-joins.
ColumnClass = set[tuple[int, str]]


# ---------------------------------------------------------------------------------------
# Analysis (no Spark needed)


@dataclass(frozen=True)
class ShippedInput:
    """One partitioned relation as the per-partition eddies see it.

    name: the table name in :attr:`PartitionPlan.sql` (the partitioned table's own name,
    or ``<table>__p<i>`` when a self-join needs the table partitioned two ways); table:
    the partitioned table (a key of ``partitioned``); aliases: the query aliases reading
    it; columns: the hash columns (empty for an arbitrary split); hash_types: the Spark SQL
    type each column is cast to before hashing ("" = as it is), so that values the join
    finds equal (an int64 and a float64 1) hash alike; project: the columns the query
    reads, the only ones shipped.
    """

    name: str
    table: str
    aliases: tuple[str, ...]
    columns: tuple[str, ...] = ()
    hash_types: tuple[str, ...] = ()
    project: tuple[str, ...] = ()


@dataclass(frozen=True)
class PartitionPlan:
    """How a query runs over partitioned tables; made by :func:`analyze_partitioning`.

    strategy: ``"split"`` (one partitioned alias, any split), ``"hash"`` (several, hashed
    on one equivalence class of join columns) or ``"driver"`` (not partitionable: one eddy
    on the driver); partitionable: strategy is not ``"driver"``; reason: why, in words;
    inputs: the partitioned relations to ship; broadcast: catalog tables every eddy gets in
    full; finish: what the driver must still do after the executors (e.g.
    ``("GROUP BY/aggregates", "ORDER BY")``), empty when the executors' union is the
    answer; sql: the query each eddy runs (self-join copies renamed).
    """

    strategy: str
    reason: str
    inputs: tuple[ShippedInput, ...] = ()
    broadcast: tuple[str, ...] = ()
    finish: tuple[str, ...] = ()
    sql: str = ""

    @property
    def partitionable(self) -> bool:
        return self.strategy != "driver"

    @property
    def keys(self) -> dict[str, tuple[str, ...]]:
        """Hash columns per partitioned alias (empty tuples for a split)."""
        return {a: i.columns for i in self.inputs for a in i.aliases}

    def input_schemas(self, schemas: Mapping[str, pa.Schema]) -> list[tuple[str, pa.Schema]]:
        """Per shipped input, its name and the schema of its shipped columns
        (``schemas``: partitioned table -> its whole Arrow schema, as the eddies see it)."""
        return [
            (i.name, pa.schema([schemas[i.table].field(c) for c in i.project])) for i in self.inputs
        ]


def _schemas(
    catalog: Catalog, partitioned: Mapping[str, pa.Schema] | Iterable[str]
) -> dict[str, pa.Schema]:
    if isinstance(partitioned, Mapping):
        out = {}
        for name, schema in partitioned.items():
            if not isinstance(schema, pa.Schema):
                raise DataSourceError(f"partitioned table {name!r}: expected a pyarrow Schema")
            out[name.lower()] = plain_schema(schema)
        return out
    out = {}
    for name in partitioned:
        if not catalog.has_table(name):
            raise DataSourceError(
                f"partitioned table {name!r} is not in the catalog; pass its schema "
                "({name: schema}) instead of its name"
            )
        out[name.lower()] = catalog.table(name).schema
    return out


def _finish_steps(plan: Plan) -> tuple[str, ...]:
    """The steps above the eddy that do not commute with the union of the pieces."""
    spec = plan.finalize
    needed = (
        ("GROUP BY/aggregates", spec.group is not None),
        ("DISTINCT", spec.distinct),
        ("ORDER BY", bool(spec.order)),
        ("LIMIT/OFFSET", spec.limit is not None or bool(spec.offset)),
    )
    return tuple(step for step, wanted in needed if wanted)


def _hash_type(types: list[pa.DataType]) -> str | None:
    """A Spark type under which values the join finds equal are equal; None: no cast
    needed; raises ValueError when there is none."""
    if all(t == types[0] for t in types) and not any(
        pa.types.is_integer(t) or pa.types.is_floating(t) for t in types
    ):
        if pa.types.is_string(types[0]) or pa.types.is_large_string(types[0]):
            return "string"
        return ""
    if all(pa.types.is_integer(t) for t in types):
        return "bigint"
    if all(
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) for t in types
    ):
        return "double"  # equal numbers stay equal; -0.0/0.0 and NaNs hash alike in Spark
    if all(pa.types.is_string(t) or pa.types.is_large_string(t) for t in types):
        return "string"
    if all(pa.types.is_binary(t) or pa.types.is_large_binary(t) for t in types):
        return "binary"
    raise ValueError(", ".join(str(t) for t in types))


def _classes(plan: Plan) -> list[ColumnClass]:
    """Equivalence classes of ``(alias index, column)`` under the query's equi-joins."""
    parent: dict[tuple[int, str], tuple[int, str]] = {}

    def find(x: tuple[int, str]) -> tuple[int, str]:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for p in plan.graph.predicates:
        e = p.edge
        if e is None:
            continue
        for lc, rc in zip(e.left_columns, e.right_columns, strict=True):
            parent[find((e.left, lc))] = find((e.right, rc))
    groups: dict[tuple[int, str], ColumnClass] = {}
    for node in list(parent):
        groups.setdefault(find(node), set()).add(node)
    return sorted(groups.values(), key=lambda c: sorted(c))


def _used_columns(plan: Plan) -> dict[int, set[str]]:
    used: dict[int, set[str]] = {a.index: set() for a in plan.graph.aliases}
    keys = set(plan.output_columns)
    for p in plan.graph.predicates:
        keys |= {k for k in p.expr.column_keys() if isinstance(k, tuple)}
    for alias, column in keys:
        used[alias].add(column)
    return used


def _projection(
    schemas: Mapping[str, pa.Schema], used: Mapping[int, set[str]], table: str, members: list[int]
) -> tuple[str, ...]:
    """The columns of ``table`` that its aliases ``members`` read, in table order."""
    wanted = set().union(*(used[m] for m in members))
    cols = tuple(n for n in schemas[table].names if n in wanted)
    return cols or tuple(schemas[table].names[:1])  # keep the row count


def _rename_tables(sql: str, renames: Mapping[str, str]) -> str:
    """``sql`` with the FROM entries of the aliases in ``renames`` reading another table."""
    import sqlglot

    root = sqlglot.parse_one(sql, dialect="duckdb")
    for node in root.find_all(exp.Table):
        alias = node.alias_or_name.lower()
        if alias in renames:
            node.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
            node.set("this", exp.to_identifier(renames[alias], quoted=True))
    return root.sql(dialect="duckdb")


def analyze_partitioning(
    sql: str, catalog: Catalog, partitioned: Mapping[str, pa.Schema] | Iterable[str]
) -> PartitionPlan:
    """Decide whether ``sql`` can run as independent eddies over partitions, and how.

    catalog: the broadcast tables (and functions); partitioned: the large tables, as
    ``{name: pyarrow Schema}`` or as names of catalog tables (their catalog schema is
    used; a partitioned name in ``catalog`` stands for the large table, not the catalog's
    rows). Pure: reads schemas only, needs no Spark. Returns a :class:`PartitionPlan`;
    raises the planner's EddiesError subclasses for a query that cannot run at all.

    Rules (see the module docstring): one partitioned alias → ``"split"``; several → they
    must share an equivalence class of equi-join columns → ``"hash"`` on all such classes;
    otherwise ``"driver"``. Aggregation, DISTINCT, ORDER BY and LIMIT/OFFSET are listed
    in ``finish`` (done on the driver after the partitioned join).
    """
    schemas = _schemas(catalog, partitioned)
    plan = plan_query(sql, planning_catalog(catalog, schemas))
    return analyze_plan_partitioning(sql, plan, catalog, schemas)


def analyze_plan_partitioning(
    sql: str, plan: Plan, catalog: Catalog, schemas: Mapping[str, pa.Schema]
) -> PartitionPlan:
    """:func:`analyze_partitioning` for ``plan``, the plan of ``sql`` made with the
    partitioned tables standing in (:func:`~eddies.engine.spark.task_catalog.planning_catalog`).

    schemas: partitioned table (lowercased) -> its Arrow schema; catalog: the broadcast
    tables (its names are not reused for a self-join's copies). Pure, no Spark; the
    executors placement (:mod:`eddies.engine.spark.executors`) partitions streams with it.
    """
    aliases = plan.graph.aliases
    big = [a for a in aliases if a.table in schemas]
    broadcast = tuple(sorted({a.table for a in aliases if a.table not in schemas}))
    common: dict[str, Any] = dict(broadcast=broadcast, finish=_finish_steps(plan), sql=sql)
    project = partial(_projection, schemas, _used_columns(plan))
    if not big:
        return PartitionPlan("driver", "the query reads no partitioned table", **common)
    if len(big) == 1:
        (a,) = big
        one = ShippedInput(a.table, a.table, (a.name,), project=project(a.table, [a.index]))
        return PartitionPlan(
            "split",
            f"one partitioned alias ({a.name}): every result row holds exactly one of its "
            "rows, so any split of it works",
            (one,),
            **common,
        )

    names = ", ".join(a.name for a in big)
    classes = _classes(plan)
    spanning, skipped = _spanning_classes(plan, classes, big, schemas)
    if not spanning:
        why = _no_spanning_class(plan, classes, big, skipped, names)
        return PartitionPlan("driver", why, **common)
    inputs, renames = _shipped_inputs(
        plan,
        big,
        _hash_columns(big, spanning),
        tuple(t for _, t in spanning),
        project,
        taken=set(catalog.tables) | set(schemas),
    )
    classes_text = "; ".join(_describe(c, plan) for c, _ in spanning)
    reason = f"partitioned aliases {names} are tied by equi-joins: hash on {classes_text}"
    if renames:
        reason += (
            f"; aliases {', '.join(sorted(renames))} of one table hash on different columns, "
            "so each reads its own copy of the table"
        )
        common["sql"] = _rename_tables(sql, renames)
    return PartitionPlan("hash", reason, tuple(inputs), **common)


def _spanning_classes(
    plan: Plan, classes: list[ColumnClass], big: list[AliasInfo], schemas: Mapping[str, pa.Schema]
) -> tuple[list[tuple[ColumnClass, str]], list[str]]:
    """The classes with a column of every partitioned alias, each with the Spark type its
    columns hash in (:func:`_hash_type`); and, described, those whose types hash apart."""
    aliases = plan.graph.aliases
    spanning: list[tuple[ColumnClass, str]] = []
    skipped: list[str] = []
    for cls in classes:
        if not all(any(m[0] == a.index for m in cls) for a in big):
            continue
        types = [
            schemas[aliases[i].table].field(c).type for i, c in cls if aliases[i].table in schemas
        ]
        try:
            spanning.append((cls, _hash_type(types)))
        except ValueError as exc:
            skipped.append(f"{_describe(cls, plan)} (types {exc} hash differently)")
    return spanning, skipped


def _no_spanning_class(
    plan: Plan, classes: list[ColumnClass], big: list[AliasInfo], skipped: list[str], names: str
) -> str:
    """Why no class ties every partitioned alias (``names``) together, in words."""
    indexes = {a.index for a in big}
    touching = [_describe(c, plan) for c in classes if any(m[0] in indexes for m in c)]
    return (
        f"no equi-join column class ties every partitioned alias ({names}) together"
        + (f"; classes: {'; '.join(touching)}" if touching else "; they share no equi-join")
        + (f"; unusable: {'; '.join(skipped)}" if skipped else "")
    )


def _hash_columns(
    big: list[AliasInfo], spanning: list[tuple[ColumnClass, str]]
) -> dict[int, tuple[str, ...]]:
    """Per partitioned alias, its column of each spanning class; aliases of one table
    agree where they can (then they read one copy of it)."""
    chosen: dict[int, tuple[str, ...]] = {}
    for a in big:
        cols = []
        for cls, _ in spanning:
            own = {c for i, c in cls if i == a.index}
            shared = set(own)
            for b in big:
                if b.table == a.table:
                    shared &= {c for i, c in cls if i == b.index}
            cols.append(min(shared or own))
        chosen[a.index] = tuple(cols)
    return chosen


def _shipped_inputs(
    plan: Plan,
    big: list[AliasInfo],
    chosen: Mapping[int, tuple[str, ...]],
    hash_types: tuple[str, ...],
    project: Callable[[str, list[int]], tuple[str, ...]],
    taken: set[str],
) -> tuple[list[ShippedInput], dict[str, str]]:
    """One :class:`ShippedInput` per table and hash columns; and the aliases renamed to
    read a copy ``<table>__p<k>`` (a name not in ``taken``) where the aliases of one
    table hash on different columns."""
    aliases = plan.graph.aliases
    groups: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for a in big:
        groups.setdefault((a.table, chosen[a.index]), []).append(a.index)
    per_table: dict[str, int] = {}
    for table, _ in groups:
        per_table[table] = per_table.get(table, 0) + 1
    taken = set(taken)
    inputs: list[ShippedInput] = []
    renames: dict[str, str] = {}
    count: dict[str, int] = {}
    for (table, cols), members in groups.items():
        name = table
        if per_table[table] > 1:
            k = count[table] = count.get(table, -1) + 1
            name = f"{table}__p{k}"
            while name in taken:
                k += 1
                name = f"{table}__p{k}"
            taken.add(name)
            renames |= {aliases[m].name: name for m in members}
        inputs.append(
            ShippedInput(
                name,
                table,
                tuple(aliases[m].name for m in members),
                cols,
                hash_types,
                tuple(dict.fromkeys(project(table, members) + cols)),
            )
        )
    return inputs, renames


def _describe(cls: ColumnClass, plan: Plan) -> str:
    return " = ".join(f"{plan.graph.aliases[i].name}.{c}" for i, c in sorted(cls))


# ---------------------------------------------------------------------------------------
# What runs in an executor (everything here must pickle)


@dataclass
class _Payload:
    """All an executor needs: shipped with the function (Spark broadcasts big closures)."""

    sql: str
    tables: ShippedTables  # the broadcast tables and the UDFs
    inputs: list[tuple[str, pa.Schema]]  # shipped name, schema as the eddies see it
    core: bool  # True: only the eddy (the driver finishes); False: the whole query
    output_columns: list[tuple[int, str]]
    out_schema: pa.Schema  # what Spark expects back
    options: RunOptions = field(default_factory=RunOptions)


def _core_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if not len(schema) or schema.names[0] == "_eddies_row":  # no columns: keep the count
        return pa.RecordBatch.from_arrays([pa.nulls(batch.num_rows, pa.bool_())], schema=schema)
    return cast_columns(batch, schema)


def _run_bucket(payload: _Payload, slices: Mapping[str, pa.Table]) -> Iterator[pa.RecordBatch]:
    """One independent eddy over one partition; yields batches in ``payload.out_schema``."""
    if any(slices[name].num_rows == 0 for name, _ in payload.inputs):
        return  # every result row needs a row of each partitioned alias
    pieces = {
        name: conform(slices[name], schema, f"partition of table {name!r}")
        for name, schema in payload.inputs
    }
    cat = payload.tables.catalog(pieces)
    if not payload.core:
        table = execute(payload.sql, cat, options=payload.options)
        for batch in table.to_batches():
            yield cast_columns(batch, payload.out_schema)
        return
    plan = plan_query(payload.sql, cat)
    if plan.output_columns != payload.output_columns:  # pragma: no cover - a planner change
        raise EddiesError("the per-partition plan reads other columns than the driver's")
    options = payload.options
    if options.seed is not None:
        seed_scheduler(options.seed)
    for batch in trio.run(eddy_batches, plan, options, clock=run_clock()):
        if batch.num_rows:
            yield _core_batch(batch, payload.out_schema)


def _map_fn(payload: _Payload):
    """The ``mapInArrow`` function: one eddy per Spark partition of the one input."""
    ((name, _),) = payload.inputs

    def run(rows: pa.Table) -> Iterator[pa.RecordBatch]:
        return _run_bucket(payload, {name: rows})

    return map_in_arrow(run)


def _group_fn(payload: _Payload):
    """The ``applyInArrow`` function: one eddy per hash bucket, inputs split back apart."""

    def run(table: pa.Table) -> pa.Table:
        slices = {name: input_rows(table, i) for i, (name, _) in enumerate(payload.inputs)}
        batches = list(_run_bucket(payload, slices))
        if not batches:
            return payload.out_schema.empty_table()
        return pa.Table.from_batches(batches, schema=payload.out_schema)

    return run


# ---------------------------------------------------------------------------------------
# The Spark side (driver)


@dataclass
class _Prepared:
    plan: Plan
    partition: PartitionPlan
    schemas: dict[str, pa.Schema]


def _prepare(sql: str, catalog: Catalog, partitioned: Mapping[str, Any]) -> _Prepared:
    schemas = plain_arrow_schemas(partitioned)
    plan = plan_query(sql, planning_catalog(catalog, schemas))
    return _Prepared(plan, analyze_plan_partitioning(sql, plan, catalog, schemas), schemas)


def _on_driver(
    prepared: _Prepared,
    catalog: Catalog,
    partitioned: Mapping[str, Any],
    options: RunOptions,
) -> pa.Table:
    log.warning(
        "query runs as one eddy on the driver",
        reason=prepared.partition.reason,
        tables=sorted(prepared.schemas),
    )
    used = {a.table for a in prepared.plan.graph.aliases}
    local = Catalog()
    for name, df in partitioned.items():
        if name.lower() in used:
            local.add_table(name, conform(df.toArrow(), prepared.schemas[name.lower()], name))
    local_tables = PlanningCatalog.over(catalog, local)
    return execute(prepared.partition.sql, local_tables, options=options)  # type: ignore[arg-type]


def _column_types(plan: Plan) -> dict[tuple[int, str], pa.DataType]:
    """``(alias index, column)`` -> its Arrow type, for every alias of ``plan``."""
    return {
        (a.index, f.name): f.type for a in plan.graph.aliases for f in plan.tables[a.table].schema
    }


def _executors_output(plan: Plan, core: bool) -> tuple[pa.Schema, list[str]]:
    """The Arrow schema the executors return (positional names) and the column names
    their DataFrame gets: the eddy's output columns for ``core``, else the result's."""
    if not core:
        schema = plan.finalize.schema
        return positional_schema(schema), schema.names
    types = _column_types(plan)
    arrow_out = pa.schema(
        [pa.field(f"_c{i}", types[k]) for i, k in enumerate(plan.output_columns)]
        or [pa.field("_eddies_row", pa.bool_())]
    )
    return arrow_out, arrow_out.names


def _executor_frame(
    spark: Any,
    prepared: _Prepared,
    catalog: Catalog,
    partitioned: Mapping[str, Any],
    partitions: int | None,
    options: RunOptions,
) -> tuple[Any, list[str]]:
    """The lazy Spark DataFrame of the executors' output and its column names."""
    part = prepared.partition
    plan = prepared.plan
    frames = {name.lower(): df for name, df in partitioned.items()}
    core = bool(part.finish)
    arrow_out, names = _executors_output(plan, core)
    struct, expected = spark_schema(spark, arrow_out)
    payload = _Payload(
        part.sql,
        ship_tables(catalog, part.broadcast),
        part.input_schemas(prepared.schemas),
        core,
        list(plan.output_columns),
        expected,
        options,
    )
    if part.strategy == "split":
        (one,) = part.inputs
        df = projected(frames[one.table], one)
        if partitions:
            df = df.repartition(partitions)
        return df.mapInArrow(_map_fn(payload), struct), names

    buckets = partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))
    # A NULL key never joins: such rows cannot be in the result, so they stay home.
    shuffled = hashed_union(frames, part.inputs, buckets, drop_null_keys=True)
    return shuffled.groupBy(BUCKET).applyInArrow(_group_fn(payload), struct), names


def _finish(plan: Plan, core: pa.Table) -> pa.Table:
    """Aggregation, DISTINCT, ORDER BY, LIMIT over the executors' join rows (driver)."""
    types = _column_types(plan)

    async def run() -> pa.Table:
        finalizer = Finalizer(plan.finalize, plan.output_columns)
        out: list[pa.RecordBatch] = []
        for batch in core.to_batches():
            if plan.output_columns:
                batch = pa.RecordBatch.from_arrays(
                    [
                        c.cast(types[k])
                        for c, k in zip(batch.columns, plan.output_columns, strict=True)
                    ],
                    names=[f"{plan.graph.aliases[a].name}.{c}" for a, c in plan.output_columns],
                )
            out += await finalizer.push(batch)
            if finalizer.satisfied:
                break
        out += await finalizer.finish()
        schema = plan.finalize.schema
        return pa.Table.from_batches(out, schema=schema) if out else schema.empty_table()

    return trio.run(run, clock=run_clock())


def run_partitioned_arrow(
    spark: Any,
    sql: str,
    catalog: Catalog,
    partitioned: Mapping[str, Any],
    *,
    partitions: int | None = None,
    options: RunOptions | None = None,
    **query_options: Any,
) -> pa.Table:
    """Run ``sql`` as independent eddies over partitions in Spark; the result as Arrow.

    Same arguments and rules as :func:`run_partitioned`; returns a pyarrow Table in the
    query's result schema (equal, as a bag, to ``execute(sql, ...)`` on one node).
    """
    run_options = RunOptions.from_kwargs(options, **query_options)  # before any Spark job
    prepared = _prepare(sql, catalog, partitioned)
    if not prepared.partition.partitionable:
        return _on_driver(prepared, catalog, partitioned, run_options)
    log.info(
        "running partitioned",
        strategy=prepared.partition.strategy,
        reason=prepared.partition.reason,
        finish=list(prepared.partition.finish),
    )
    df, _ = _executor_frame(spark, prepared, catalog, partitioned, partitions, run_options)
    rows = df.toArrow()
    if prepared.partition.finish:
        return _finish(prepared.plan, rows)
    return cast_columns(rows, prepared.plan.finalize.schema)


def run_partitioned(
    spark: Any,
    sql: str,
    catalog: Catalog,
    partitioned: Mapping[str, Any],
    *,
    partitions: int | None = None,
    options: RunOptions | None = None,
    **query_options: Any,
) -> Any:
    """Run ``sql`` as independent eddies inside Spark executors; a Spark DataFrame.

    spark: a SparkSession (classic, not Spark Connect); catalog: the small tables, each
    broadcast in full to every eddy (in-memory or Parquet/CSV ``add_table`` tables; a
    table with index AMs, mirrors or a stream raises DataSourceError) and the UDFs (they
    must pickle); partitioned: ``{table name: Spark DataFrame}`` for the large tables (a
    name also in ``catalog`` means the DataFrame); partitions: pieces to cut the data into
    (default: the DataFrame's partitions for one partitioned alias, else
    ``spark.sql.shuffle.partitions`` hash buckets); options, or query_options as keywords
    (``policy``, ``batch_size``, ``seed``, ...): the
    :class:`~eddies.engine.options.RunOptions` of each eddy (EddiesError if bad).

    The plan comes from :func:`analyze_partitioning`. A query the executors can answer
    alone (select-project-join) gives a lazy DataFrame of their union. A query with
    aggregation, DISTINCT, ORDER BY or LIMIT runs its join in the executors and is
    finished on the driver; one that cannot be partitioned runs as one eddy on the driver
    (a warning names why); both return a DataFrame made from the finished Arrow result.
    Columns have the query's names and Spark's equivalents of its Arrow types. Executors
    need eddies installed in the Python Spark runs them with (``PYSPARK_PYTHON``).
    Raises the planner's EddiesError subclasses before any Spark job starts.
    """
    run_options = RunOptions.from_kwargs(options, **query_options)
    prepared = _prepare(sql, catalog, partitioned)
    if prepared.partition.partitionable and not prepared.partition.finish:
        log.info(
            "running partitioned",
            strategy=prepared.partition.strategy,
            reason=prepared.partition.reason,
        )
        df, names = _executor_frame(spark, prepared, catalog, partitioned, partitions, run_options)
        return df.toDF(*names)
    table = run_partitioned_arrow(
        spark, sql, catalog, partitioned, partitions=partitions, options=run_options
    )
    struct, _ = spark_schema(spark, table.schema)
    return spark.createDataFrame(table, schema=struct)
