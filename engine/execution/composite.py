"""Composite queries: what runs before, beside and above the eddy.

One eddy runs one SELECT block (joins, selections, aggregation, DISTINCT, ORDER BY,
LIMIT). A query with WITH, derived tables, scalar subqueries, set operations, window
functions, QUALIFY, DISTINCT ON, GROUP BY ALL or ORDER BY ALL is split here into eddy
queries and the steps around them, on the sqlglot tree:

- ``WITH``: each CTE runs first as its own (possibly composite) query; its Arrow result
  becomes a table of the rest of the statement, shadowing a catalog table of that name,
  and every reference reads it (a CTE used several times runs once).
- ``FROM (SELECT ...) AS d``: a derived table is run the same way, as its own query whose
  result becomes a table of the outer block (whatever it holds: aggregates, LIMIT,
  DISTINCT, windows).
- correlated scalar subqueries ``(SELECT max(y) FROM u WHERE u.k = t.k)``: rewritten
  into a grouped derived table and a LEFT JOIN step (engine/rewrite/decorrelate.py).
- scalar subqueries ``(SELECT avg(x) FROM t)``: run first; their one value becomes a typed
  literal in the outer block, so the outer eddy still streams and its LIMIT still stops
  it early. More than one row (or column) fails with an EddiesError, as in DuckDB.
- ``GROUP BY ALL``: rewritten into the eddy's GROUP BY (the select items without
  aggregates).
- ``AS d (c1, c2)`` / ``WITH t (c1, c2) AS``: the result's first columns renamed
  (engine/rewrite/alias_lists.py).
- ``GROUP BY ROLLUP / CUBE / GROUPING SETS`` and ``grouping()``: the block's FROM and
  WHERE run in the eddy, computing the columns the rest reads; DuckDB runs the groupings
  and everything after them over its output (engine/plan/grouping_split.py).
- ``UNION ALL`` of eddy blocks whose columns have common types: streamed, branch after
  branch, each batch cast to the common types; LIMIT/OFFSET stop the running eddy early.
- other set operations (DuckDB semantics: ``UNION``/``INTERSECT``/``EXCEPT`` are set
  operations, ``INTERSECT ALL``/``EXCEPT ALL`` bag operations), window functions,
  ``QUALIFY``, ``DISTINCT ON`` and ``ORDER BY ALL`` run above the eddy, in DuckDB
  (engine/above/duckdb_runtime.py says why): the block's FROM ... HAVING part runs in the eddy with
  every
  expression those operators read computed there as an extra column (``__h0``, ...), and
  DuckDB evaluates the rest over the eddy's Arrow output.

Queries over stream tables are refused: every step above needs its input's end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import structlog
import trio
from sqlglot import exp

from eddies.engine import rewrite
from eddies.engine.above.duckdb_runtime import run_above
from eddies.engine.catalog import CatalogTable
from eddies.engine.expr.casts import cast_to
from eddies.engine.expr.functions.scalar_subquery import MORE_THAN_ONE_ROW
from eddies.engine.expr.types import common_type
from eddies.engine.frontend.allowlist import (
    composite_construct,
    is_filter_body,
    membership_subquery,
)
from eddies.engine.options import RunOptions
from eddies.engine.plan.grouping_split import needs_grouping_sets, split_grouping_block
from eddies.engine.plan.having_split import split_having
from eddies.engine.plan.planner import plan_query
from eddies.engine.plan.window_split import BASE, needs_above, split_window_block
from eddies.engine.rewrite.alias_lists import check_widths, renamed
from eddies.engine.rewrite.decorrelate import (
    Correlation,
    decorrelate,
    membership_counts,
    outer_columns,
    string_mismatch,
)
from eddies.engine.rewrite.membership_bodies import (
    VALUE_COLUMN,
    clauses,
    grouped_form,
    one_row_form,
    over_grouped,
    over_materialized,
)
from eddies.engine.rewrite.subquery_merge import merge
from eddies.errors import EddiesError, UnsupportedQueryError, describe
from eddies.router.stats import RunStats
from eddies.sources.arrow_source import make_source

#: Opens one eddy query: ``open_eddy(sql, catalog, options=...)`` (api.open_query's shape).
OpenEddy = Callable[..., AbstractAsyncContextManager[Any]]
#: Receives result batches.
Put = Callable[[pa.RecordBatch], Awaitable[None]]

_SET_OPS = (exp.Union, exp.Intersect, exp.Except)

log = structlog.get_logger("eddies.engine")


def is_composite(root: exp.Expression) -> bool:
    """Whether ``root`` needs this module (see the module docstring)."""
    return composite_construct(root) is not None


class _Tables:
    """The catalog with the statement's materialized CTEs and derived tables added (the
    duck-typed part the planner reads)."""

    def __init__(self, base: Any, added: dict[str, CatalogTable] | None = None) -> None:
        self._base = base
        self._added = dict(added or {})

    def child(self) -> _Tables:
        return _Tables(self._base, self._added)

    def add(self, name: str, table: pa.Table, what: str) -> None:
        seen: set[str] = set()
        for column in table.column_names:
            if column.lower() in seen:
                raise UnsupportedQueryError(
                    f"{what} has two columns named {column!r}; give them distinct aliases"
                )
            seen.add(column.lower())
        key = name.lower()
        self._added[key] = CatalogTable(key, table.schema, scans=[make_source(key, table)])

    def has_table(self, name: str) -> bool:
        return name.lower() in self._added or self._base.has_table(name)

    def table(self, name: str) -> CatalogTable:
        key = name.lower()
        return self._added[key] if key in self._added else self._base.table(key)

    @property
    def tables(self) -> list[str]:
        return sorted(set(self._base.tables) | set(self._added))

    @property
    def functions(self) -> dict:
        return self._base.functions


@dataclass
class _Context:
    tables: _Tables
    options: RunOptions
    open_eddy: OpenEddy
    runs: list[RunStats]
    counter: list[int] = field(default_factory=lambda: [0])

    def fresh(self, prefix: str) -> str:
        self.counter[0] += 1
        return f"__{prefix}_{self.counter[0]}"

    def child(self) -> _Context:
        return _Context(self.tables.child(), self.options, self.open_eddy, self.runs, self.counter)


# ------------------------------------------------------------------------------ results
class CompositeResults:
    """Async iterator over a composite query's result RecordBatches (QueryResults' shape).

    ``schema`` is known once the results end (or from the first batch); ``runs`` holds the
    RunStats of every eddy query the statement ran, ``stats`` the last one's.
    """

    def __init__(self, receive: trio.MemoryReceiveChannel, stop: trio.CancelScope) -> None:
        self.schema: pa.Schema | None = None
        self.runs: list[RunStats] = []
        self.exhausted = False
        self.completed = trio.Event()
        self.commit_points = None
        self.over_streams = False  # composite statements over streams are refused
        self.keep_increments = False
        self._receive = receive
        self._stop = stop

    @property
    def stats(self) -> RunStats | None:
        """The RunStats of the latest eddy query of the statement (None before the first)."""
        return self.runs[-1] if self.runs else None

    async def commit(self, tag: Hashable) -> list[pa.RecordBatch]:
        raise EddiesError("commit points exist only for queries over stream tables")

    def take_increment(self) -> list[pa.RecordBatch]:
        return []

    def __aiter__(self) -> AsyncIterator[pa.RecordBatch]:
        return self._batches()

    async def _batches(self) -> AsyncIterator[pa.RecordBatch]:
        try:
            async for batch in self._receive:
                if self.schema is None:
                    self.schema = batch.schema
                yield batch
        except BaseException:
            self._stop.cancel()
            self._receive.close()
            raise
        await self.completed.wait()
        self.exhausted = True


@asynccontextmanager
async def open_composite(
    root: exp.Expression, catalog: Any, options: RunOptions, open_eddy: OpenEddy
) -> AsyncIterator[CompositeResults]:
    """Run the composite statement ``root`` (checked by sql.parse_statement) under trio.

    Yields :class:`CompositeResults`; the eddy queries are opened with ``open_eddy``.
    Raises UnsupportedQueryError for a shape this module does not split, and whatever the
    eddy queries raise.
    """
    _refuse_streams(root, catalog)
    send, receive = trio.open_memory_channel(4)
    stop = trio.CancelScope()
    results = CompositeResults(receive, stop)
    ctx = _Context(_Tables(catalog), options, open_eddy, results.runs)

    async def produce() -> None:
        with stop:
            async with send:
                schema = await _emit(root, ctx, send.send)
            if results.schema is None:
                results.schema = schema
            results.completed.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce, name="eddies:composite")
        try:
            yield results
        finally:
            if not results.exhausted:
                stop.cancel()


def _refuse_streams(root: exp.Expression, catalog: Any) -> None:
    ctes = {c.alias_or_name.lower() for c in root.find_all(exp.CTE)}
    for table in root.find_all(exp.Table):
        name = table.name.lower()
        if name in ctes or not catalog.has_table(name):
            continue
        if catalog.table(name).stream is not None:
            node, what = composite_construct(root) or (root, "this query")
            raise UnsupportedQueryError(
                f"{what} over the stream table {name!r} is not supported (it needs the "
                f"stream's end): {describe(node)}"
            )


# ---------------------------------------------------------------------------- running
async def _collect(node: exp.Expression, ctx: _Context) -> pa.Table:
    """Run ``node`` (a statement part) to its end; its result as one Arrow table."""
    batches: list[pa.RecordBatch] = []

    async def put(batch: pa.RecordBatch) -> None:
        batches.append(batch)

    schema = await _emit(node, ctx, put)
    return pa.Table.from_batches(batches, schema=schema)


async def _emit(node: exp.Expression, ctx: _Context, put: Put) -> pa.Schema:
    """Run ``node``, handing its result batches to ``put``; returns the result schema."""
    while isinstance(node, exp.Subquery):  # (SELECT ...) as a whole statement or operand
        node = node.this
    node = rewrite.apply(node.copy(), rewrite.Stage.PART)  # VALUES lists: UNION ALLs
    node = _from_dual(node, ctx)  # SELECT without FROM
    check_widths(node)  # AS d (c1, c2): not more names than columns
    node = merge(node, ctx.tables)  # derived tables and CTEs sqlglot can merge
    with_ = node.args.get("with_")
    if with_ is not None:
        ctx = ctx.child()
        node.set("with_", None)
        ctes = list(with_.expressions)
        for i, cte in enumerate(ctes):
            name = cte.alias_or_name
            readers = [node] + [later.this for later in ctes[i + 1 :]]
            if not any(
                t.name.lower() == name.lower() for r in readers for t in r.find_all(exp.Table)
            ):
                continue  # never read: as in DuckDB, it does not run
            table = renamed(await _collect(cte.this, ctx), cte)  # WITH t (c1, c2) AS ...
            ctx.tables.add(name, table, f"the CTE {name!r}")
    if isinstance(node, _SET_OPS):
        return await _set_operation(node, ctx, put)
    if not isinstance(node, exp.Select):
        raise UnsupportedQueryError(f"only SELECT queries are supported, got {describe(node)}")
    await _derived_tables(node, ctx)
    await _membership_bodies(node, ctx)  # IN / EXISTS over a grouped, limited ... body
    membership_counts(node, ctx.tables)  # IN / EXISTS under OR ...: counting subqueries
    if _correlated_in(node, ("having",), ctx):  # filtered around the grouped block
        return await _emit(split_having(node, ctx.fresh("having")), ctx, put)
    if _correlated_in(node, ("order", "qualify"), ctx):
        # Sorted or filtered above the eddy: window_split hoists the subquery into the
        # eddy's SELECT list, where the inner block's decorrelate() joins it in.
        return await _window_block(node, ctx, put)
    correlations = decorrelate(node, ctx.tables, ctx.fresh)  # scalar subqueries: LEFT JOINs
    if correlations:
        await _derived_tables(node, ctx)
        _check_key_types(node, correlations, ctx)
    await _scalar_subqueries(node, ctx)
    _group_by_all(node)
    if needs_grouping_sets(node):  # ROLLUP / CUBE / GROUPING SETS, grouping()
        return await _grouping_block(node, ctx, put)
    if needs_above(node):
        return await _window_block(node, ctx, put)
    return await _eddy(node.sql(dialect="duckdb"), ctx, put)


async def _eddy(sql: str, ctx: _Context, put: Put, limit: int | None = None) -> pa.Schema:
    """One eddy query; with ``limit``, stop it once that many rows were handed on."""
    log.debug("composite: eddy query", sql=sql, limit=limit)
    try:
        async with ctx.open_eddy(sql, ctx.tables, options=ctx.options) as results:
            ctx.runs.append(results.stats)
            left = limit
            async for batch in results:
                if left is not None:
                    batch = batch.slice(0, left)
                    left -= batch.num_rows
                if batch.num_rows:
                    await put(batch)
                if left == 0:
                    break
    except EddiesError as exc:
        if " at line " not in str(exc) or type(exc).__init__ is not EddiesError.__init__:
            raise
        # The line and column are in the eddy query derived from the statement: show it.
        raise type(exc)(f"{exc} (in the eddy query derived from the statement: {sql})") from None
    return results.schema


def _correlated_in(select: exp.Select, clauses: tuple[str, ...], ctx: _Context) -> bool:
    """Whether a clause of ``select`` among ``clauses`` (arg keys) holds a subquery of its
    own that reads ``select``'s row."""
    for key in clauses:
        value = select.args.get(key)
        if value is None:
            continue
        for sub in value.find_all(exp.Subquery):
            if sub.parent_select is select and outer_columns(sub.this, ctx.tables):
                return True
    return False


def _refuse_correlated(sub: exp.Expression, what: str, ctx: _Context) -> None:
    """A subquery (``(query)``, or the query itself) reading a column of the outer query's
    row (decorrelate.outer_columns)."""
    query = sub.this if isinstance(sub, exp.Subquery) else sub
    for column in outer_columns(query, ctx.tables):
        raise UnsupportedQueryError(
            f"a correlated {what} (it reads {column.sql(dialect='duckdb')} of the outer "
            f"query) is not supported: {describe(column)}"
        )


def _check_key_types(select: exp.Select, correlations: list[Correlation], ctx: _Context) -> None:
    """Refuse a correlation key that compares a string with a non-string (see
    decorrelate.string_mismatch): the derived tables are run, so their key types are known,
    and the outer sides' types come from planning them over the block's own FROM."""
    added = {id(c.join) for c in correlations}
    probe = exp.Select(
        expressions=[
            exp.alias_(key.copy(), f"__o{i}_{j}")
            for i, c in enumerate(correlations)
            for j, key in enumerate(c.outer_keys)
        ]
    )
    if not probe.expressions:
        return
    probe.set("from_", select.args["from_"].copy())
    probe.set("joins", [j.copy() for j in select.args.get("joins") or [] if id(j) not in added])
    try:
        outer = plan_query(probe.sql(dialect="duckdb"), ctx.tables).finalize.schema
    except EddiesError:
        return  # the block itself fails the same way, naming its own text
    position = 0
    for c in correlations:
        keys = ctx.tables.table(c.join.this.name).schema
        for j, key in enumerate(c.outer_keys):
            inner_type, outer_type = keys.field(f"__k{j}").type, outer.field(position).type
            position += 1
            if string_mismatch(inner_type, outer_type):
                raise UnsupportedQueryError(
                    f"a correlated scalar subquery comparing {inner_type} with {outer_type} "
                    f"is not supported (cast one side explicitly): {describe(key)}"
                )


#: The one-row table a SELECT without FROM reads (SQL's "dual"), and its one column.
DUAL = "__eddies_dual"
_DUAL_TABLE = pa.table({"__eddies_one": pa.array([True])})


def _from_dual(node: exp.Expression, ctx: _Context) -> exp.Expression:
    """``node`` with every SELECT without FROM (``SELECT 1 + 1``, ``x IN (SELECT 1)``, a
    CTE of constants) reading :data:`DUAL`, one row: what SQL means by it. A ``*`` there
    is refused, as DuckDB refuses it."""
    bare = [s for s in node.find_all(exp.Select) if s.args.get("from_") is None]
    for select in bare:
        for item in select.expressions:
            if item.is_star:
                raise UnsupportedQueryError(f"'*' in a SELECT without FROM: {describe(select)}")
        select.set("from_", exp.From(this=exp.to_table(DUAL)))
    if bare and not ctx.tables.has_table(DUAL):
        ctx.tables.add(DUAL, _DUAL_TABLE, "the one-row table of a SELECT without FROM")
    return node


async def _derived_tables(select: exp.Select, ctx: _Context) -> None:
    """Replace each ``(SELECT ...) AS d`` in FROM/JOIN by a table holding its result."""
    from_ = select.args.get("from_")
    items = [from_] if from_ is not None else []
    items += select.args.get("joins") or []
    for item in items:
        sub = item.this
        if not isinstance(sub, exp.Subquery):
            continue
        _refuse_correlated(sub, "derived table", ctx)
        alias = sub.alias_or_name or ctx.fresh("subquery")
        name = ctx.fresh("derived")
        table = renamed(await _collect(sub.this, ctx), sub)  # AS d (c1, c2)
        ctx.tables.add(name, table, f"the derived table {alias!r}")
        sub.replace(
            exp.Table(
                this=exp.to_identifier(name), alias=exp.TableAlias(this=exp.to_identifier(alias))
            )
        )


async def _membership_bodies(select: exp.Select, ctx: _Context) -> None:
    """Rewrite the block's [NOT] IN / EXISTS whose subquery is not a filter over its FROM
    (engine/rewrite/membership_bodies.py): one-row bodies into scalar forms; other uncorrelated
    ones run here, EXISTS becoming TRUE/FALSE and IN a semi-join over their rows."""
    for node in list(select.find_all(exp.Exists, exp.In)):
        query = membership_subquery(node)
        if query is None or node.parent_select is not select or is_filter_body(query):
            continue
        replacement = one_row_form(node, query)
        if replacement is not None:
            node.replace(replacement)
            continue
        sub = node.this if isinstance(node, exp.Exists) else node.args["query"]
        outer = outer_columns(query, ctx.tables)
        if outer:  # correlated: only a grouped body correlated by equalities is rewritten
            form = grouped_form(node, query, {id(c) for c in outer})
            if form is None:
                _refuse_correlated(query, f"[NOT] IN / EXISTS subquery with {clauses(query)}", ctx)
            assert form is not None
            name = ctx.fresh("member")
            ctx.tables.add(name, await _collect(form.derived, ctx), f"the subquery {describe(sub)}")
            over_grouped(node, name, form)
            continue
        table = await _collect(query, ctx)
        if isinstance(node, exp.Exists):
            node.replace(exp.true() if table.num_rows else exp.false())
            continue
        if table.num_columns != 1:
            raise UnsupportedQueryError(
                f"IN (SELECT ...) needs exactly one column in the subquery, this one returns "
                f"{table.num_columns}: {describe(sub)}"
            )
        name = ctx.fresh("member")
        ctx.tables.add(name, table.rename_columns([VALUE_COLUMN]), f"the subquery {describe(sub)}")
        over_materialized(node, name)


async def _scalar_subqueries(select: exp.Select, ctx: _Context) -> None:
    """Run each uncorrelated scalar subquery of the block and put its value in its place."""
    for sub in list(select.find_all(exp.Subquery)):
        if sub.parent_select is not select or isinstance(sub.parent, exp.In):
            continue  # inside another subquery, or IN (SELECT ...): not a scalar subquery
        _refuse_correlated(sub, "subquery", ctx)
        table = await _collect(sub.this, ctx)
        if table.num_columns != 1:
            raise UnsupportedQueryError(
                f"a scalar subquery must return one column, this one returns "
                f"{table.num_columns}: {describe(sub)}"
            )
        if table.num_rows > 1:
            raise EddiesError(f"{MORE_THAN_ONE_ROW}: {describe(sub)}")
        column = table.column(0)
        value = column[0] if table.num_rows else pa.scalar(None, column.type)
        sub.replace(exp.paren(typed_literal(value, sub)))


def typed_literal(value: pa.Scalar, where: exp.Expression) -> exp.Expression:
    """SQL text for one Arrow value that parses back to the same value and type
    (``CAST('2.5' AS DOUBLE)``); UnsupportedQueryError for a type SQL cannot write."""
    if pa.types.is_dictionary(value.type):
        value = value.value if value.is_valid else pa.scalar(None, value.type.value_type)
    t = value.type
    if t == pa.null():
        return exp.Null()
    type_sql = _TYPE_SQL.get(t)
    if type_sql is None and pa.types.is_decimal(t):
        type_sql = f"DECIMAL({t.precision}, {t.scale})"
    if type_sql is None and pa.types.is_timestamp(t):
        if t.tz is not None and t.unit != "us":  # DuckDB's TIMESTAMPTZ is microseconds
            value, t = value.cast(pa.timestamp("us", t.tz), safe=False), pa.timestamp("us", t.tz)
        type_sql = "TIMESTAMPTZ" if t.tz is not None else _TIMESTAMP_SQL[t.unit]
    if type_sql is None:
        raise UnsupportedQueryError(
            f"a scalar subquery of type {t} is not supported: {describe(where)}"
        )
    to = exp.DataType.build(type_sql, dialect="duckdb")
    if not value.is_valid:
        return exp.cast(exp.Null(), to)
    if pa.types.is_boolean(t):
        return exp.Boolean(this=value.as_py())
    if pa.types.is_floating(t):
        text = repr(float(value.as_py()))  # shortest round-trip digits; nan, inf
    elif pa.types.is_timestamp(t) or pa.types.is_date(t):
        text = value.cast(pa.string()).as_py()  # ISO text, every digit; Z for UTC
    else:
        text = str(value.as_py())
    return exp.cast(exp.Literal.string(text), to)


_TIMESTAMP_SQL = {"s": "TIMESTAMP_S", "ms": "TIMESTAMP_MS", "us": "TIMESTAMP", "ns": "TIMESTAMP_NS"}
_TYPE_SQL = {
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.uint8(): "UTINYINT",
    pa.uint16(): "USMALLINT",
    pa.uint32(): "UINTEGER",
    pa.uint64(): "UBIGINT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
    pa.string(): "VARCHAR",
    pa.large_string(): "VARCHAR",
    pa.bool_(): "BOOLEAN",
    pa.date32(): "DATE",
}


def _is_aggregate_item(item: exp.Expression) -> bool:
    return any(
        isinstance(n, exp.AggFunc) and n.find_ancestor(exp.Window) is None
        for n in item.find_all(exp.AggFunc)
    )


def _group_by_all(select: exp.Select) -> None:
    """``GROUP BY ALL``: group by every select item without an aggregate (DuckDB)."""
    group = select.args.get("group")
    if group is None or not group.args.get("all"):
        return
    keys = []
    for item in select.expressions:
        if item.is_star:
            raise UnsupportedQueryError(f"GROUP BY ALL with * is not supported: {describe(item)}")
        inner = item.unalias()
        if _is_aggregate_item(inner) or inner.find(exp.Window) is not None:
            continue
        if inner.find(exp.Column) is None:
            continue  # a constant: DuckDB leaves it out (and GROUP BY 2 would be positional)
        keys.append(inner.copy())
    select.set("group", exp.Group(expressions=keys) if keys else None)


# ---------------------------------------------------------------------- set operations
def _set_leaves(node: exp.Expression) -> list[exp.Expression]:
    """The operands of a tree of set operations, left to right."""
    while isinstance(node, exp.Subquery) and not node.args.get("alias"):
        if not isinstance(node.this, _SET_OPS):
            break
        node = node.this
    if isinstance(node, _SET_OPS) and not node.args.get("with_"):
        return _set_leaves(node.this) + _set_leaves(node.expression)
    return [node]


def _union_all_only(node: exp.Expression) -> bool:
    while isinstance(node, exp.Subquery) and isinstance(node.this, _SET_OPS):
        node = node.this
    if not isinstance(node, _SET_OPS):
        return True
    if not isinstance(node, exp.Union) or node.args.get("distinct") or node.args.get("with_"):
        return False
    if node.args.get("order") is not None:
        return False
    return _union_all_only(node.this) and _union_all_only(node.expression)


async def _set_operation(node: exp.Expression, ctx: _Context, put: Put) -> pa.Schema:
    leaves = _set_leaves(node)
    if _union_all_only(node) and _inner_bounds_only(node):
        streamed = await _stream_union_all(node, leaves, ctx, put)
        if streamed is not None:
            return streamed
    inputs: dict[str, pa.Table] = {}
    replacements: dict[int, exp.Expression] = {}
    for leaf in leaves:
        name = ctx.fresh("operand")
        table = await _collect(leaf, ctx)
        inputs[name] = _dedupe_names(table)
        replacements[id(leaf)] = exp.select("*").from_(name)
    top = _replace_leaves(node, replacements)
    sql = top.sql(dialect="duckdb")
    log.debug("composite: set operation above the eddy", sql=sql)
    table = await trio.to_thread.run_sync(run_above, sql, inputs)
    for batch in table.to_batches():
        await put(batch)
    return table.schema


def _replace_leaves(
    node: exp.Expression, replacements: dict[int, exp.Expression]
) -> exp.Expression:
    """``node`` with each set operand replaced (by id) as ``replacements`` says."""
    if id(node) in replacements:
        return replacements[id(node)]
    if isinstance(node, exp.Subquery):
        return exp.Subquery(this=_replace_leaves(node.this, replacements))
    out = node.copy()
    out.set("this", _replace_leaves(node.this, replacements))
    out.set("expression", _replace_leaves(node.expression, replacements))
    return out


def _inner_bounds_only(node: exp.Expression) -> bool:
    """Only the top set operation may carry LIMIT/OFFSET for the streamed UNION ALL."""
    for sub in node.find_all(*_SET_OPS):
        if sub is not node and (sub.args.get("limit") or sub.args.get("offset")):
            return False
    return True


async def _stream_union_all(
    node: exp.Expression, leaves: list[exp.Expression], ctx: _Context, put: Put
) -> pa.Schema | None:
    """UNION ALL streamed branch after branch, or None when the branches are not plain
    eddy blocks with common column types (DuckDB then runs it)."""
    sqls = []
    schemas = []
    for leaf in leaves:
        inner = leaf.this if isinstance(leaf, exp.Subquery) else leaf
        if not isinstance(inner, exp.Select) or is_composite(inner):
            return None
        sql = inner.sql(dialect="duckdb")
        sqls.append(sql)
        schemas.append(plan_query(sql, ctx.tables).finalize.schema)
    widths = {len(s) for s in schemas}
    if len(widths) != 1:
        return None  # DuckDB names the mismatch
    types = []
    for i in range(len(schemas[0])):
        t = common_type([s.field(i).type for s in schemas])
        if t is None or t == pa.null():
            return None  # no common type, or only NULLs: DuckDB's rules decide
        types.append(t)
    schema = pa.schema([pa.field(schemas[0].field(i).name, t) for i, t in enumerate(types)])
    offset = _bound(node, "offset") or 0
    limit = _bound(node, "limit")

    async def cast_put(batch: pa.RecordBatch) -> None:
        nonlocal offset, limit
        skip = min(offset, batch.num_rows)
        batch, offset = batch.slice(skip), offset - skip
        if limit is not None:
            batch = batch.slice(0, limit)
            limit -= batch.num_rows
        if batch.num_rows:
            columns = [cast_to(c, t) for c, t in zip(batch.columns, types, strict=True)]
            await put(pa.RecordBatch.from_arrays(columns, schema=schema))

    for sql in sqls:
        if limit == 0:
            break
        # At most offset + limit rows of this branch matter: its eddy stops there.
        await _eddy(sql, ctx, cast_put, None if limit is None else offset + limit)
    return schema


def _bound(node: exp.Expression, key: str) -> int | None:
    clause = node.args.get(key)
    if clause is None:
        return None
    value = clause.args.get("expression") if isinstance(clause, exp.Limit | exp.Offset) else clause
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        return int(value.this)
    raise UnsupportedQueryError(
        f"{key.upper()} must be a non-negative integer literal: {describe(clause)}"
    )


def _dedupe_names(table: pa.Table) -> pa.Table:
    """Distinct column names for DuckDB (``a``, ``a_1`` as DuckDB names duplicates)."""
    seen: dict[str, int] = {}
    names = []
    for name in table.column_names:
        if name.lower() in seen:
            seen[name.lower()] += 1
            name = f"{name}_{seen[name.lower()]}"
        seen.setdefault(name.lower(), 0)
        names.append(name)
    return table.rename_columns(names)


# ------------------------------------------------------------ windows and other tops
async def _window_block(select: exp.Select, ctx: _Context, put: Put) -> pa.Schema:
    """Run the block's FROM ... HAVING in the eddy and its windows, QUALIFY, DISTINCT
    [ON], ORDER BY, LIMIT and OFFSET in DuckDB over the eddy's output (window_split.py)."""
    split = split_window_block(select, {name.lower() for name in ctx.tables.functions})
    if select.args.get("limit") is not None and _bound(select, "limit") == 0:
        split.inner.set("limit", exp.Limit(expression=exp.Literal.number(0)))  # evaluate none
    base, outer = split.above(await _collect(split.inner, ctx))
    sql = outer.sql(dialect="duckdb")
    log.debug("composite: operators above the eddy", sql=sql)
    result = await trio.to_thread.run_sync(run_above, sql, {BASE: base})
    for batch in result.to_batches():
        await put(batch)
    return result.schema


async def _grouping_block(select: exp.Select, ctx: _Context, put: Put) -> pa.Schema:
    """Run the block's FROM and WHERE in the eddy and its grouping sets, aggregates,
    HAVING, windows, ORDER BY and LIMIT in DuckDB over the eddy's output
    (engine/plan/grouping_split.py)."""
    functions = {name.lower() for name in ctx.tables.functions}
    split = split_grouping_block(select, functions, _input_names(select, ctx))
    if select.args.get("limit") is not None and _bound(select, "limit") == 0:
        split.inner.set("limit", exp.Limit(expression=exp.Literal.number(0)))  # evaluate none
    sql = split.outer.sql(dialect="duckdb")
    base = await _collect(split.inner, ctx)
    log.debug("composite: grouping sets above the eddy", sql=sql)
    result = await trio.to_thread.run_sync(run_above, sql, {BASE: base})
    for batch in result.to_batches():
        await put(batch)
    return result.schema


def _input_names(select: exp.Select, ctx: _Context) -> set[str] | None:
    """Lower-case names of the columns of ``select``'s FROM, or None when a FROM item is
    no table of the catalog (a file read, say)."""
    from_ = select.args.get("from_")
    items = ([from_.this] if from_ is not None else []) + [
        j.this for j in select.args.get("joins") or []
    ]
    names: set[str] = set()
    for item in items:
        if not isinstance(item, exp.Table) or not item.name or not ctx.tables.has_table(item.name):
            return None
        names |= {f.name.lower() for f in ctx.tables.table(item.name).schema}
    return names
