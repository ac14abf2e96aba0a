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

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import structlog
import trio
from sqlglot import exp

from eddies.engine.above.finalize import Finalizer
from eddies.engine.api import _unwrap, execute
from eddies.engine.catalog import Catalog, CatalogTable
from eddies.engine.execution.run import run_plan, seed_scheduler
from eddies.engine.options import RunOptions
from eddies.engine.plan.plan_types import Plan
from eddies.engine.plan.planner import plan_query
from eddies.engine.runtime.precise_clock import run_clock
from eddies.engine.spark.driver import arrow_schema
from eddies.errors import DataSourceError, EddiesError
from eddies.router.expressions import FunctionSpec
from eddies.router.stats import RunStats
from eddies.sources.arrow_source import conform, plain_schema

log = structlog.get_logger("eddies.engine.spark.partitioned")

#: Column of the Spark shuffle that holds a row's bucket number.
BUCKET = "_eddies_bucket"
#: Prefix of the struct column holding one shipped input's rows in the shuffle.
INPUT = "_eddies_in"


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


class _PlanningCatalog:
    """``catalog`` with some tables replaced (the duck-typed part ``plan_query`` reads)."""

    def __init__(self, base: Catalog, replaced: Mapping[str, CatalogTable]) -> None:
        self._base = base
        self._replaced = dict(replaced)

    def has_table(self, name: str) -> bool:
        return name.lower() in self._replaced or self._base.has_table(name)

    def table(self, name: str) -> CatalogTable:
        key = name.lower()
        return self._replaced[key] if key in self._replaced else self._base.table(key)

    @property
    def tables(self) -> list[str]:
        return sorted(set(self._base.tables) | set(self._replaced))

    @property
    def functions(self) -> dict[str, FunctionSpec]:
        return self._base.functions


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


def _planning_catalog(catalog: Catalog, schemas: Mapping[str, pa.Schema]) -> _PlanningCatalog:
    empty = Catalog()
    for name, schema in schemas.items():
        empty.add_table(name, schema.empty_table())
    return _PlanningCatalog(catalog, {n: empty.table(n) for n in schemas})


def _finish_steps(plan: Plan) -> tuple[str, ...]:
    spec = plan.finalize
    steps = []
    if spec.group is not None:
        steps.append("GROUP BY/aggregates")
    if spec.distinct:
        steps.append("DISTINCT")
    if spec.order:
        steps.append("ORDER BY")
    if spec.limit is not None or spec.offset:
        steps.append("LIMIT/OFFSET")
    return tuple(steps)


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


def _classes(plan: Plan) -> list[set[tuple[int, str]]]:
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
    groups: dict[tuple[int, str], set[tuple[int, str]]] = {}
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
    plan = plan_query(sql, _planning_catalog(catalog, schemas))
    return _analyze(sql, plan, catalog, schemas)


def _analyze(
    sql: str, plan: Plan, catalog: Catalog, schemas: Mapping[str, pa.Schema]
) -> PartitionPlan:
    aliases = plan.graph.aliases
    big = [a for a in aliases if a.table in schemas]
    broadcast = tuple(sorted({a.table for a in aliases if a.table not in schemas}))
    finish = _finish_steps(plan)
    used = _used_columns(plan)

    def project(table: str, members: list[int]) -> tuple[str, ...]:
        wanted = set().union(*(used[m] for m in members))
        cols = tuple(n for n in schemas[table].names if n in wanted)
        return cols or tuple(schemas[table].names[:1])  # keep the row count

    common = dict(broadcast=broadcast, finish=finish, sql=sql)
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
    spanning: list[tuple[set[tuple[int, str]], str]] = []
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
    if not spanning:
        touching = [
            _describe(c, plan) for c in classes if any(m[0] in {a.index for a in big} for m in c)
        ]
        why = (
            f"no equi-join column class ties every partitioned alias ({names}) together"
            + (f"; classes: {'; '.join(touching)}" if touching else "; they share no equi-join")
            + (f"; unusable: {'; '.join(skipped)}" if skipped else "")
        )
        return PartitionPlan("driver", why, **common)

    # Per alias, its column of each spanning class; aliases of one table agree where they can.
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
    hash_types = tuple(t for _, t in spanning)
    groups: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for a in big:
        groups.setdefault((a.table, chosen[a.index]), []).append(a.index)
    per_table: dict[str, int] = {}
    for table, _ in groups:
        per_table[table] = per_table.get(table, 0) + 1
    taken = set(catalog.tables) | set(schemas)
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
    classes_text = "; ".join(_describe(c, plan) for c, _ in spanning)
    reason = f"partitioned aliases {names} are tied by equi-joins: hash on {classes_text}"
    if renames:
        reason += (
            f"; aliases {', '.join(sorted(renames))} of one table hash on different columns, "
            "so each reads its own copy of the table"
        )
        common["sql"] = _rename_tables(sql, renames)
    return PartitionPlan("hash", reason, tuple(inputs), **common)


def _describe(cls: set[tuple[int, str]], plan: Plan) -> str:
    return " = ".join(f"{plan.graph.aliases[i].name}.{c}" for i, c in sorted(cls))


# ---------------------------------------------------------------------------------------
# What runs in an executor (everything here must pickle)


@dataclass(frozen=True)
class _Broadcast:
    name: str
    table: pa.Table
    key: tuple[str, ...] | None
    build: bool
    batch_size: int | None
    rate: float | None
    delay: float
    access_name: str


@dataclass
class _Payload:
    """All an executor needs: shipped with the function (Spark broadcasts big closures)."""

    sql: str
    broadcast: list[_Broadcast]
    functions: list[FunctionSpec]
    inputs: list[tuple[str, pa.Schema]]  # shipped name, schema as the eddies see it
    core: bool  # True: only the eddy (the driver finishes); False: the whole query
    output_columns: list[tuple[int, str]]
    out_schema: pa.Schema  # what Spark expects back
    options: RunOptions = field(default_factory=RunOptions)


def add_broadcasts(cat: Catalog, broadcasts: Sequence[_Broadcast]) -> None:
    """Register the tables shipped whole to every task (broadcast), as the driver had
    them registered."""
    for b in broadcasts:
        cat.add_table(
            b.name,
            b.table,
            key=b.key,
            build=b.build,
            batch_size=b.batch_size,
            rate=b.rate,
            delay=b.delay,
            access_name=b.access_name,
        )


def _bucket_catalog(payload: _Payload, slices: Mapping[str, pa.Table]) -> Catalog:
    cat = Catalog()
    add_broadcasts(cat, payload.broadcast)
    for name, schema in payload.inputs:
        cat.add_table(name, conform(slices[name], schema, f"partition of table {name!r}"))
    for f in payload.functions:
        cat.add_function(f.name, f.fn, vectorized=f.vectorized, return_type=f.return_type)
    return cat


async def _eddy_rows(plan: Plan, options: RunOptions) -> list[pa.RecordBatch]:
    """The eddy's output batches (columns as in ``plan.output_columns``), unfinished."""
    stats = RunStats(plan.graph, plan.destinations)
    send, receive = trio.open_memory_channel(math.inf)
    batches: list[pa.RecordBatch] = []
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_plan, plan, options, send, stats)
            async with receive:
                batches = [b async for b in receive]
    except BaseExceptionGroup as group:
        raise _unwrap(group) from None
    return batches


def _core_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if not len(schema) or schema.names[0] == "_eddies_row":  # no columns: keep the count
        return pa.RecordBatch.from_arrays([pa.nulls(batch.num_rows, pa.bool_())], schema=schema)
    return pa.RecordBatch.from_arrays(
        [
            c if c.type == f.type else c.cast(f.type)
            for c, f in zip(batch.columns, schema, strict=True)
        ],
        schema=schema,
    )


def _run_bucket(payload: _Payload, slices: Mapping[str, pa.Table]) -> Iterator[pa.RecordBatch]:
    """One independent eddy over one partition; yields batches in ``payload.out_schema``."""
    if any(slices[name].num_rows == 0 for name, _ in payload.inputs):
        return  # every result row needs a row of each partitioned alias
    cat = _bucket_catalog(payload, slices)
    if not payload.core:
        table = execute(payload.sql, cat, options=payload.options)
        for batch in table.to_batches():
            yield pa.RecordBatch.from_arrays(
                [c.cast(f.type) for c, f in zip(batch.columns, payload.out_schema, strict=True)],
                schema=payload.out_schema,
            )
        return
    plan = plan_query(payload.sql, cat)
    if plan.output_columns != payload.output_columns:  # pragma: no cover - a planner change
        raise EddiesError("the per-partition plan reads other columns than the driver's")
    options = payload.options
    if options.seed is not None:
        seed_scheduler(options.seed)
    for batch in trio.run(_eddy_rows, plan, options, clock=run_clock()):
        if batch.num_rows:
            yield _core_batch(batch, payload.out_schema)


def _map_fn(payload: _Payload):
    """The ``mapInArrow`` function: one eddy per Spark partition of the one input."""
    ((name, _),) = payload.inputs

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = list(batches)
        if rows:
            yield from _run_bucket(payload, {name: pa.Table.from_batches(rows)})

    return run


def _group_fn(payload: _Payload):
    """The ``applyInArrow`` function: one eddy per hash bucket, inputs split back apart."""

    def run(table: pa.Table) -> pa.Table:
        slices = {}
        for i, (name, _) in enumerate(payload.inputs):
            column = table.column(f"{INPUT}{i}").combine_chunks()
            rows = column.filter(column.is_valid())
            slices[name] = pa.Table.from_arrays(rows.flatten(), names=[f.name for f in rows.type])
        batches = list(_run_bucket(payload, slices))
        if not batches:
            return payload.out_schema.empty_table()
        return pa.Table.from_batches(batches, schema=payload.out_schema)

    return run


# ---------------------------------------------------------------------------------------
# The Spark side (driver)


def _spark_schema(spark: Any, schema: pa.Schema) -> tuple[Any, pa.Schema]:
    """Spark's StructType for ``schema`` and the Arrow schema Spark expects back."""
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    struct = from_arrow_schema(schema)
    large = str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower()
    expected = to_arrow_schema(
        struct,
        timezone=spark.conf.get("spark.sql.session.timeZone"),
        prefers_large_types=large == "true",
    )
    return struct, expected


def _shippable(catalog: Catalog, names: Iterable[str]) -> list[_Broadcast]:
    out = []
    for name in names:
        if not catalog.has_table(name):  # FROM 'path' / read_parquet(...) in the SQL
            raise DataSourceError(
                f"{name!r} is read from files named in the query; a partitioned query "
                "broadcasts catalog tables only: register it with add_table(name, path)"
            )
        entry = catalog.table(name)
        why = None
        if entry.indexes:
            why = "it has index access methods (lookups are functions of this process)"
        elif len(entry.scans) != 1:
            why = "it has several scan access methods (mirrors)"
        elif entry.scans[0].table is None and entry.scans[0].path is None:
            why = "it is not in memory or in a file (a stream, a reader or a paged scan)"
        if why:
            raise DataSourceError(
                f"table {name!r} cannot be broadcast to Spark executors: {why}; register it "
                "with add_table(name, pyarrow_table) or pass it as a Spark DataFrame"
            )
        src = entry.scans[0]
        table = src.table
        if table is None:  # a Parquet/CSV file: read it here, ship the rows
            table = pa.Table.from_batches(list(src.open_batches(1 << 16)), schema=src.schema)
        out.append(
            _Broadcast(
                name,
                table,
                entry.key,
                src.build,
                src.batch_size,
                src.rate,
                src.delay,
                src.access_name or name,
            )
        )
    return out


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass
class _Prepared:
    plan: Plan
    partition: PartitionPlan
    schemas: dict[str, pa.Schema]


def _prepare(sql: str, catalog: Catalog, partitioned: Mapping[str, Any]) -> _Prepared:
    schemas = {name.lower(): plain_schema(arrow_schema(df)) for name, df in partitioned.items()}
    plan = plan_query(sql, _planning_catalog(catalog, schemas))
    return _Prepared(plan, _analyze(sql, plan, catalog, schemas), schemas)


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
    local_tables = _PlanningCatalog(catalog, {n: local.table(n) for n in local.tables})
    return execute(prepared.partition.sql, local_tables, options=options)  # type: ignore[arg-type]


def _executor_frame(
    spark: Any,
    prepared: _Prepared,
    catalog: Catalog,
    partitioned: Mapping[str, Any],
    partitions: int | None,
    options: RunOptions,
) -> tuple[Any, list[str]]:
    """The lazy Spark DataFrame of the executors' output and its column names."""
    from pyspark.sql import functions as F

    part = prepared.partition
    plan = prepared.plan
    frames = {name.lower(): df for name, df in partitioned.items()}
    core = bool(part.finish)
    if core:
        types = {
            (a.index, f.name): f.type
            for a in plan.graph.aliases
            for f in plan.tables[a.table].schema
        }
        arrow_out = pa.schema(
            [pa.field(f"_c{i}", types[k]) for i, k in enumerate(plan.output_columns)]
            or [pa.field("_eddies_row", pa.bool_())]
        )
        names = arrow_out.names
    else:
        schema = plan.finalize.schema
        arrow_out = pa.schema([pa.field(f"_c{i}", f.type) for i, f in enumerate(schema)])
        names = schema.names
    struct, expected = _spark_schema(spark, arrow_out)
    inputs = [
        (i.name, pa.schema([prepared.schemas[i.table].field(c) for c in i.project]))
        for i in part.inputs
    ]
    payload = _Payload(
        part.sql,
        _shippable(catalog, part.broadcast),
        list(catalog.functions.values()),
        inputs,
        core,
        list(plan.output_columns),
        expected,
        options,
    )
    if part.strategy == "split":
        (one,) = part.inputs
        df = frames[one.table].select(*[F.col(_quoted(c)) for c in one.project])
        if partitions:
            df = df.repartition(partitions)
        return df.mapInArrow(_map_fn(payload), struct), names

    buckets = partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))
    shuffled = None
    for i, one in enumerate(part.inputs):
        df = frames[one.table]
        keys = [
            F.col(_quoted(c)).cast(t) if t else F.col(_quoted(c))
            for c, t in zip(one.columns, one.hash_types, strict=True)
        ]
        # A NULL key never joins: such rows cannot be in the result, so they stay home.
        keep = None
        for c in one.columns:
            cond = F.col(_quoted(c)).isNotNull()
            keep = cond if keep is None else keep & cond
        piece = df.where(keep).select(
            F.pmod(F.hash(*keys), F.lit(buckets)).alias(BUCKET),
            F.struct(*[F.col(_quoted(c)) for c in one.project]).alias(f"{INPUT}{i}"),
        )
        shuffled = (
            piece if shuffled is None else shuffled.unionByName(piece, allowMissingColumns=True)
        )
    return shuffled.groupBy(BUCKET).applyInArrow(_group_fn(payload), struct), names


def _finish(plan: Plan, core: pa.Table) -> pa.Table:
    """Aggregation, DISTINCT, ORDER BY, LIMIT over the executors' join rows (driver)."""
    types = {
        (a.index, f.name): f.type for a in plan.graph.aliases for f in plan.tables[a.table].schema
    }

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
    schema = prepared.plan.finalize.schema
    return pa.Table.from_arrays(
        [c.cast(f.type) for c, f in zip(rows.columns, schema, strict=True)], schema=schema
    )


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
    struct, _ = _spark_schema(spark, table.schema)
    return spark.createDataFrame(table, schema=struct)
