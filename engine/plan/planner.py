"""Turn a parsed query into what the eddy runs: AMs, SMs, SteMs, destinations, and what runs
above the eddy (projection, aggregation, ordering).

stems-2003 §2.2: "the use of an eddy and SteMs obviates the need for query optimization":
planning creates a scan AM per table, an SM per predicate and a SteM per base table, and
leaves every ordering decision to the eddy. Classification of WHERE conjuncts:

* an equality between columns of two different aliases joins an *edge*; all such
  equalities between one pair of aliases form one multi-column edge (a SteM probe key);
* any other predicate over one or more aliases becomes an SM (a non-equi join predicate
  becomes an SM over composite tuples);
* an edge that closes a cycle is evaluated as an SM when a tuple spans both its sides.

Every AM of every table is used (stems-2003 §2.2 step 2), after checking that the query
can run at all given the bind-field constraints of index AMs (step 1, Nail's algorithm:
a table is reachable if it has a scan AM, or an index AM whose bind columns an equi-join
with a reachable table binds).

Outer joins and [NOT] IN / [NOT] EXISTS subqueries become JoinSteps
(``engine/plan/outer_and_semi_joins.py``): joins against a complete SteM after the inner-join
region the
eddy orders freely; the steps that commute are taken in the order the eddy's policy picks.

Aggregation, HAVING, DISTINCT, ORDER BY and LIMIT run above the eddy, as in the PostgreSQL
implementation (eddies-in-postgresql §2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.engine.catalog import Catalog, CatalogTable
from eddies.engine.expr.compile import LazySql, compile_expr
from eddies.engine.expr.functions.event_time import is_hop_window
from eddies.engine.frontend.parse import QueryBlock, TableRef, parse_query
from eddies.engine.plan import outer_and_semi_joins as join_steps
from eddies.engine.plan.pushdown import needed_columns, scan_filter
from eddies.errors import (
    DataSourceError,
    QueryTypeError,
    UnknownColumnError,
    UnknownTableError,
    UnsupportedQueryError,
    describe,
)
from eddies.modules.key_encoding import common_kind, key_kind, wider_kind
from eddies.modules.selection import works_at_once
from eddies.router.expressions import Call, ColumnRef, Expr, FunctionSpec, check_types
from eddies.router.query_graph import (
    AccessInfo,
    AccessKind,
    AliasInfo,
    Edge,
    Predicate,
    QueryGraph,
)
from eddies.router.routing_table import Destination, DestinationKind
from eddies.router.udf_calls import UdfStats
from eddies.sources.arrow_source import make_source

#: Probe tuples per Work sent to an index AM: a few lookups' worth per lookup slot, so the
#: AM always has work queued, yet a big batch is spread over Works that the access chooser
#: places one by one (a slow mirror never holds a whole scan batch hostage).
LOOKUP_WORK_PER_LOOKUP = 4
LOOKUP_WORK_MIN = 64

#: Most predicates a query may have: Done bits are kept in one 63-bit mask.
MAX_PREDICATES = 62

AGGREGATES = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "mean", exp.Min: "min", exp.Max: "max"}
#: Aggregates run by a pyarrow hash kernel with options: node type -> (kernel, options).
#: DuckDB's sample statistics are NULL for one value (ddof=1 gives that); bool_and/bool_or
#: and any_value skip NULLs and are NULL for a group of NULLs (min_count=1).
OPTION_AGGREGATES: dict[type, tuple[str, Any]] = {
    exp.Stddev: ("stddev", pc.VarianceOptions(ddof=1)),
    exp.StddevSamp: ("stddev", pc.VarianceOptions(ddof=1)),
    exp.StddevPop: ("stddev", pc.VarianceOptions(ddof=0)),
    exp.Variance: ("variance", pc.VarianceOptions(ddof=1)),
    exp.VariancePop: ("variance", pc.VarianceOptions(ddof=0)),
    exp.LogicalAnd: ("all", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    exp.LogicalOr: ("any", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    exp.AnyValue: ("first", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
}


class BaseScope:
    """Resolves column references against the FROM aliases to ``(alias, column)`` keys."""

    def __init__(
        self, aliases: list[AliasInfo], schemas: list[pa.Schema], functions: dict[str, FunctionSpec]
    ) -> None:
        self.aliases = aliases
        self.schemas = schemas
        self.functions = functions
        self._by_alias = {a.name: a for a in aliases}
        self._columns = [{f.name.lower(): f.name for f in s} for s in schemas]
        # JOIN ... USING / NATURAL JOIN: the right side's copy of a join column -> the
        # column it was merged into. Unqualified, the two are one column (DuckDB), and
        # ``SELECT *`` shows it once; ``alias.column`` still names either copy.
        self.merged: dict[tuple[int, str], tuple[int, str]] = {}

    def canonical(self, key: tuple[int, str]) -> tuple[int, str]:
        """The column a (possibly merged) column key stands for."""
        while key in self.merged:
            key = self.merged[key]
        return key

    def types(self) -> dict[tuple[int, str], pa.DataType]:
        return {(a.index, f.name): f.type for a in self.aliases for f in self.schemas[a.index]}

    def resolve(self, column: exp.Column) -> ColumnRef:
        name = column.name.lower()
        qualifier = column.table.lower() if column.table else ""
        if qualifier:
            alias = self._by_alias.get(qualifier)
            if alias is None:
                raise UnknownColumnError(
                    f"unknown table or alias {qualifier!r} in {describe(column)}; "
                    f"the query has {sorted(self._by_alias)}"
                )
            actual = self._columns[alias.index].get(name)
            if actual is None:
                raise UnknownColumnError(
                    f"table {alias.table!r} (as {alias.name!r}) has no column {name!r}: "
                    f"{describe(column)}"
                )
            return ColumnRef((alias.index, actual), f"{alias.name}.{actual}")
        found = list(
            dict.fromkeys(
                self.canonical((a.index, self._columns[a.index][name]))
                for a in self.aliases
                if name in self._columns[a.index]
            )
        )
        if not found:
            raise UnknownColumnError(f"unknown column {describe(column)}")
        if len(found) > 1:
            raise UnknownColumnError(
                f"column reference {describe(column)} is ambiguous: it is in "
                f"{', '.join(self.aliases[k[0]].name for k in found)}"
            )
        key = found[0]
        return ColumnRef(key, f"{self.aliases[key[0]].name}.{key[1]}")

    def star(self, qualifier: str | None) -> list[exp.Column]:
        aliases = self.aliases
        if qualifier:
            alias = self._by_alias.get(qualifier.lower())
            if alias is None:
                raise UnknownColumnError(f"unknown table or alias {qualifier!r} in {qualifier}.*")
            aliases = [alias]
        return [
            exp.column(f.name, table=a.name, quoted=True)
            for a in aliases
            for f in self.schemas[a.index]
            if qualifier or (a.index, f.name) not in self.merged
        ]


class AggregateScope:
    """Above an aggregation only group keys (``__g<i>``) and aggregates (``__a<j>``) exist."""

    def __init__(self, functions: dict[str, FunctionSpec]) -> None:
        self.functions = functions

    def resolve(self, column: exp.Column) -> ColumnRef:
        if column.name.startswith("__g") or column.name.startswith("__a"):
            return ColumnRef(column.name, column.name)
        raise UnknownColumnError(
            f"column {describe(column)} must appear in GROUP BY or be used in an aggregate"
        )


@dataclass
class AggregateCall:
    """One aggregate: ``function`` is a pyarrow hash-aggregate name; arg None = COUNT(*)."""

    function: str
    arg: Expr
    sql: str
    options: Any = None  # pyarrow FunctionOptions for the kernel, if any
    extra: list[Expr] = field(default_factory=list)  # further arguments (arg_min's key)
    post: Any = None  # for the "list" kernel: how finalize.py finishes each group's list


@dataclass
class FinalizeSpec:
    """What runs above the eddy; see :mod:`eddies.engine.above.finalize`."""

    names: list[str]
    select: list[Expr]
    order: list[tuple[Expr, bool, bool]] = field(default_factory=list)  # expr, desc, nulls_first
    distinct: bool = False
    limit: int | None = None
    offset: int = 0
    group: list[Expr] | None = None  # None: no aggregation
    aggregates: list[AggregateCall] = field(default_factory=list)
    having: Expr | None = None
    schema: pa.Schema | None = None

    @property
    def streaming(self) -> bool:
        """True when result batches can leave as soon as the eddy produces them."""
        return self.group is None and not self.order and not self.distinct


@dataclass
class Plan:
    """Everything needed to run one query."""

    sql: str
    graph: QueryGraph
    destinations: list[Destination]
    tables: dict[str, CatalogTable]
    index_kinds: dict[str, dict[tuple[str, ...], tuple[str, ...]]]
    output_columns: list[tuple[int, str]]
    finalize: FinalizeSpec
    # Per function the query calls: calls, cache hits, seconds waited (filled while it runs).
    udf_stats: dict[str, UdfStats] = field(default_factory=dict)
    # Per file-backed table (a pyarrow dataset read by one scan AM): the columns its scan
    # reads and the filter pushed into it (eddies.engine.plan.pushdown); absent: all, none.
    scan_columns: dict[str, list[str]] = field(default_factory=dict)
    scan_filters: dict[str, pc.Expression] = field(default_factory=dict)
    # "stems" (SteMs), or "eddyjoins" (STAIRs: eddies.engine.plan.join_state.with_join_state).
    join_state: str = "stems"


def plan_query(sql: str, catalog: Catalog) -> Plan:
    """Parse, resolve, type-check and plan ``sql``. Raises a subclass of EddiesError."""
    block = parse_query(sql, functions=[name.lower() for name in catalog.functions])
    aliases: list[AliasInfo] = []
    sources: dict[str, CatalogTable] = {}
    for ref in block.tables:
        if ref.path is not None and (ref.format is not None or not catalog.has_table(ref.name)):
            if any(a.name == ref.alias for a in aliases):
                raise UnsupportedQueryError(
                    f"alias {ref.alias!r} is used twice in FROM ({describe(ref.node)})"
                )
            aliases.append(AliasInfo(len(aliases), ref.alias, ref.path))
            if ref.path not in sources:  # the same path twice: a self-join, one table
                sources[ref.path] = _file_table(ref)
            continue
        if not catalog.has_table(ref.name):
            raise UnknownTableError(
                f"unknown table {describe(ref.node)}; the catalog has {sorted(catalog.tables)}"
            )
        if any(a.name == ref.alias for a in aliases):
            raise UnsupportedQueryError(
                f"alias {ref.alias!r} is used twice in FROM ({describe(ref.node)})"
            )
        aliases.append(AliasInfo(len(aliases), ref.alias, ref.name))
        sources[ref.name] = catalog.table(ref.name)
    # This query's own copies: its calls of each function share one limit, cache and stats.
    udf_stats: dict[str, UdfStats] = {}
    functions = {name: f.for_query(udf_stats) for name, f in catalog.functions.items()}
    scope = BaseScope(list(aliases), [sources[a.table].schema for a in aliases], functions)
    n_from = len(aliases)
    refs = join_steps.subquery_refs(block)
    join_steps.subquery_aliases(refs, aliases, catalog, sources)
    types = BaseScope(aliases, [sources[a.table].schema for a in aliases], functions).types()
    _plan_joins(block, scope)

    m, region, delayed, steps = join_steps.plan_steps(
        block,
        scope,
        types,
        aliases,
        refs,
        {a.index: sources[a.table].schema for a in aliases[n_from:]},
    )
    block.conjuncts = region
    predicates = _plan_predicates(block, scope, types)
    steps = join_steps.add_step_predicates(predicates, delayed, steps, types)
    if len(predicates) > MAX_PREDICATES:
        raise UnsupportedQueryError(
            f"the query has {len(predicates)} predicates and join steps; at most "
            f"{MAX_PREDICATES} are supported (Done bits are a 63-bit mask)"
        )
    steps = join_steps.lookup_steps(steps, predicates, aliases, sources)
    join_steps.check_tables(steps, aliases, sources)
    graph = QueryGraph(aliases, predicates, access=_access_methods(sources))
    if steps:
        graph.steps = steps
        graph.region = (1 << m) - 1
    _check_bindings(graph, block)
    if len(aliases) > 1:
        graph.unbuilt = _unbuilt_tables(graph, sources)
        graph.stem_tables = [
            t for t in dict.fromkeys(a.table for a in aliases) if t not in graph.unbuilt
        ]
    elif graph.strict_build_first(aliases[0].table):  # competing AMs: dedup in the SteM
        graph.stem_tables = [aliases[0].table]
    index_kinds = _index_kinds(graph, scope)
    finalize = _plan_finalize(block, scope, types, functions)
    # Base columns the finalizer reads; post-aggregate keys are strings, not (alias, column).
    everything = finalize.select + [o[0] for o in finalize.order] + (finalize.group or [])
    everything += [a.arg for a in finalize.aggregates]
    everything += [e for a in finalize.aggregates for e in a.extra]
    output_columns = sorted(
        {k for e in everything for k in e.column_keys() if isinstance(k, tuple)}
    )
    plan = Plan(
        sql,
        graph,
        _destinations(graph),
        sources,
        index_kinds,
        output_columns,
        finalize,
        udf_stats,
    )
    _prune_scans(plan, block, scope)
    return plan


def _file_table(ref: TableRef) -> CatalogTable:
    """The table a file reference in FROM reads (``FROM 'x.parquet'``, ``read_csv(...)``)."""
    assert ref.path is not None
    where = describe(ref.node)
    try:
        source = make_source(ref.path, ref.path)
    except DataSourceError as exc:
        raise DataSourceError(f"{exc} (in FROM: {where})") from None
    if ref.format is not None and source.dataset is not None:
        formats = {type(f.format).__name__ for f in source.dataset.get_fragments()}
        wanted = "ParquetFileFormat" if ref.format == "parquet" else "CsvFileFormat"
        if formats != {wanted}:
            raise DataSourceError(
                f"read_{ref.format}({ref.path!r}) names files that are not "
                f"{ref.format.upper()}: {where}"
            )
    source.access_name = ref.path
    return CatalogTable(ref.path, source.schema, scans=[source])


def _prune_scans(plan: Plan, block: QueryBlock, scope: BaseScope) -> None:
    """Fill ``plan.scan_columns`` and ``plan.scan_filters`` for tables read by a single
    dataset scan AM (with several AMs, duplicates are recognized by all columns, and a
    filtered scan could not stand in for the table)."""
    keys = set(plan.output_columns)
    exprs = [p.expr for p in plan.graph.predicates]
    for step in plan.graph.steps:  # a join step's keys and conditions read columns too
        exprs += [e for key in step.keys for e in key[:2]]
        exprs += [step.residual, step.notin, step.stored_filter]
    for expr in exprs:
        if expr is not None:
            keys |= {k for k in expr.column_keys() if isinstance(k, tuple)}
    for name, entry in plan.tables.items():
        if len(entry.scans) != 1 or entry.indexes or not entry.scans[0].prunable:
            continue
        source = entry.scans[0]
        aliases = [a.index for a in plan.graph.aliases if a.table == name]
        wanted = needed_columns(keys, aliases)
        plan.scan_columns[name] = [c for c in source.schema.names if c in wanted]
        if len(aliases) == 1:  # a self-join's one scan feeds every alias: no filter
            types = {f.name: f.type for f in source.dataset.schema}
            pushed = scan_filter(block.conjuncts, aliases[0], scope, types)
            if pushed is not None:
                plan.scan_filters[name] = pushed


def _plan_joins(block: QueryBlock, scope: BaseScope) -> None:
    """Resolve JOIN ... USING and NATURAL JOIN into equalities (added to
    ``block.conjuncts``) and merged columns (``scope.merged``), as DuckDB does; check that
    each ON clause names only tables joined so far. Raises UnknownColumnError. From the
    first outer join on, the equalities go to the join's ON terms instead."""
    first_outer = next((s.index for s in block.joins if s.side), len(block.tables))
    for spec in block.joins:
        right = spec.index
        if spec.kind == "on":
            for node in spec.on:
                for column in node.find_all(exp.Column):
                    if isinstance(column.this, exp.Star):
                        continue
                    alias = scope.resolve(column).key[0]
                    if alias > right:
                        raise UnknownColumnError(
                            f"the ON clause of the join with {scope.aliases[right].name!r} "
                            f"refers to {scope.aliases[alias].name!r}, which is joined later: "
                            f"{describe(column)}"
                        )
            continue
        if spec.kind not in ("using", "natural"):
            continue
        left = range(spec.group, right)
        right_cols = scope._columns[right]
        if spec.kind == "using":
            names = list(dict.fromkeys(ident.name.lower() for ident in spec.using))
            places = {ident.name.lower(): ident for ident in spec.using}
        else:
            visible = {
                name
                for a in left
                for name, actual in scope._columns[a].items()
                if (a, actual) not in scope.merged
            }
            names = [name for name in right_cols if name in visible]
            places = {}
            if not names:
                raise UnknownColumnError(
                    f"NATURAL JOIN {describe(spec.node.this)}: no column name is common to "
                    "both sides (DuckDB refuses it too)"
                )
        for name in names:
            where = describe(places.get(name, spec.node.this))
            if name not in right_cols:
                raise UnknownColumnError(
                    f"USING column {name!r} is not a column of "
                    f"{scope.aliases[right].name!r} (the right side): {where}"
                )
            found = list(
                dict.fromkeys(
                    scope.canonical((a, scope._columns[a][name]))
                    for a in left
                    if name in scope._columns[a]
                )
            )
            if not found:
                raise UnknownColumnError(
                    f"USING column {name!r} is not a column of the left side of the join: {where}"
                )
            if len(found) > 1:
                raise UnknownColumnError(
                    f"USING column {name!r} is ambiguous on the left side of the join (in "
                    f"{', '.join(scope.aliases[k[0]].name for k in found)}): {where}"
                )
            target = found[0]
            key = (right, right_cols[name])
            scope.merged[key] = target
            equality = exp.EQ(
                this=exp.column(target[1], table=scope.aliases[target[0]].name, quoted=True),
                expression=exp.column(key[1], table=scope.aliases[right].name, quoted=True),
            )
            ident = places.get(name)
            if ident is not None:  # errors about the equality point at the USING column
                for column in equality.find_all(exp.Identifier):
                    column.meta.update(ident.meta)
            if (
                spec.index >= first_outer
            ):  # a JoinStep's condition (engine/plan/outer_and_semi_joins.py)
                spec.on.append(equality)
            else:
                block.conjuncts.append(equality)


def _plan_predicates(
    block: QueryBlock, scope: BaseScope, types: dict[tuple[int, str], pa.DataType]
) -> list[Predicate]:
    singles: list[tuple[exp.Expression, Expr]] = []
    edges: dict[tuple[int, int], list[tuple[exp.Expression, ColumnRef, ColumnRef]]] = {}
    for node in block.conjuncts:
        expr = compile_expr(node, scope)
        result = check_types(expr, types, node)
        if result != pa.bool_() and result != pa.null():
            raise QueryTypeError(f"WHERE/ON condition {describe(node)} is {result}, not boolean")
        if (
            isinstance(node, exp.EQ)
            and isinstance(expr, Call)
            and isinstance(expr.args[0], ColumnRef)
            and isinstance(expr.args[1], ColumnRef)
        ):
            left, right = expr.args
            if left.key[0] != right.key[0]:
                if left.key[0] > right.key[0]:
                    left, right = right, left
                common_kind(types[left.key], types[right.key], node)
                edges.setdefault((left.key[0], right.key[0]), []).append((node, left, right))
                continue
        singles.append((node, expr))
    if len(singles) + len(edges) > MAX_PREDICATES:
        # Too many Done bits: one SM per set of tables instead of one per conjunct (the
        # eddy then orders fewer, bigger selections; a 5,000-term AND chain still runs).
        groups: dict[int, list[exp.Expression]] = {}
        for node, expr in singles:
            groups.setdefault(sum({1 << k[0] for k in expr.column_keys()}), []).append(node)
        singles = [
            (nodes[0], compile_expr(nodes[0], scope))
            if len(nodes) == 1
            else (combined, compile_expr(combined, scope))
            for nodes in groups.values()
            for combined in [exp.and_(*nodes, copy=False)]
        ]
    predicates: list[Predicate] = []
    for node, expr in singles:
        mask = sum({1 << k[0] for k in expr.column_keys()})
        predicates.append(
            Predicate(len(predicates), f"sm{len(predicates) + 1}", LazySql(node), expr, mask)
        )
    for (a, b), parts in edges.items():
        nodes = [p[0] for p in parts]
        combined = nodes[0] if len(nodes) == 1 else exp.and_(*nodes)
        expr = compile_expr(combined, scope)
        kinds = tuple(common_kind(types[lk.key], types[rk.key], n) for n, lk, rk in parts)
        edge = Edge(
            a, tuple(p[1].key[1] for p in parts), b, tuple(p[2].key[1] for p in parts), kinds
        )
        predicates.append(
            Predicate(
                len(predicates),
                f"sm{len(predicates) + 1}",
                LazySql(combined),
                expr,
                (1 << a) | (1 << b),
                edge,
            )
        )
    if len(predicates) > MAX_PREDICATES:
        raise UnsupportedQueryError(
            f"the query has {len(predicates)} join and selection predicates (one per pair "
            f"or set of tables); at most {MAX_PREDICATES} are supported (Done bits are a "
            "63-bit mask)"
        )
    return predicates


def _access_methods(tables: dict[str, CatalogTable]) -> list[AccessInfo]:
    access: list[AccessInfo] = []
    for name, table in tables.items():
        for scan in table.scans:
            access.append(AccessInfo(len(access), scan.access_name or name, name, AccessKind.SCAN))
        for index in table.indexes:
            access.append(
                AccessInfo(
                    len(access), index.name, name, AccessKind.INDEX, index.on, index.max_concurrency
                )
            )
    return access


def _unbuilt_tables(graph: QueryGraph, tables: dict[str, CatalogTable]) -> set[str]:
    """Tables whose tuples are never built (``add_table(..., build=False)``), checked
    against the conditions under which stems-2003 §3.5 allows it; UnsupportedQueryError
    names what is wrong."""
    unbuilt = {name for name, entry in tables.items() if not entry.built}
    if not unbuilt:
        return unbuilt
    if len(unbuilt) > 1:
        raise UnsupportedQueryError(
            f"tables {sorted(unbuilt)} are all registered with build=False; at most one "
            "table of a query may skip its SteM (two unbuilt tables could never meet)"
        )
    (name,) = unbuilt
    if len(graph.aliases_of(name)) > 1:
        raise UnsupportedQueryError(
            f"table {name!r} is registered with build=False and used twice in FROM; a "
            "self-join needs its SteM"
        )
    if tables[name].access_count != 1:
        raise UnsupportedQueryError(
            f"table {name!r}: build=False needs its one scan access method to be its only "
            "access method (stems-2003 §3.5)"
        )
    windowed = [t.name for t in tables.values() if t.window is not None]
    if windowed:
        raise UnsupportedQueryError(
            f"table {name!r} is registered with build=False, which needs every other SteM "
            f"to become complete; the windowed stream {windowed[0]!r} forgets tuples"
        )
    others = [t for t in tables.values() if t.name != name and t.access_count != 1]
    others += [t for t in tables.values() if t.name != name and t.indexes]
    if others:
        raise UnsupportedQueryError(
            f"table {name!r} is registered with build=False, so every other table of the "
            f"query must be read by exactly one scan (its SteM must become complete); "
            f"{others[0].name!r} is not"
        )
    return unbuilt


def _check_bindings(graph: QueryGraph, block: QueryBlock) -> None:
    """Fail clearly if some alias can never get rows (stems-2003 §2.2 step 1, as in Nail).

    An alias is reachable when its table has a scan AM, or an index AM whose bind columns
    an equi-join edge binds from a reachable alias; repeat until nothing changes.
    """
    reachable = {a.index for a in graph.aliases if graph.has_scan(a.table)}
    changed = True
    while changed:
        changed = False
        for p in graph.predicates:
            e = p.edge
            if e is None:
                continue
            for target in (e.left, e.right):
                if (
                    target not in reachable
                    and e.other(target) in reachable
                    and graph.bindable(e, target)
                ):
                    reachable.add(target)
                    changed = True
    for alias in graph.aliases:
        if alias.index in reachable:
            continue
        needs = " or ".join(
            f"[{', '.join(a.on)}] ({a.name})" for a in graph.indexes_of(alias.table)
        )
        bound = sorted(
            {
                c
                for p in graph.predicates
                if p.edge is not None and alias.index in (p.edge.left, p.edge.right)
                for c in p.edge.side(alias.index)
            }
        )
        where = f"binds it only on {bound}" if bound else "binds none of its columns by a join"
        raise UnsupportedQueryError(
            f"table {alias.table!r} (as {alias.name!r}) has no scan access method, and its "
            f"index access methods need bindings for {needs}; the query {where} "
            "(through an equality with a table it can reach)"
        )


def _index_kinds(graph: QueryGraph, scope: BaseScope) -> dict[str, dict]:
    """Per table, the column lists its SteM indexes and how each column is coded.

    One index serves every edge on the same columns, so its coding is the widest any of
    them needs (an int column joined with a float column elsewhere is coded as float).
    """
    kinds: dict[str, dict[tuple[str, ...], list[str]]] = {t: {} for t in graph.stem_tables}
    for p in graph.predicates:
        if p.edge is None or p.step:  # a JoinStep's edge binds lookups; it hashes itself
            continue
        for alias in (p.edge.left, p.edge.right):
            table = graph.aliases[alias].table
            if table not in kinds:  # never built: no SteM, no index
                continue
            cols = p.edge.side(alias)
            current = kinds[table].setdefault(
                cols, [key_kind(scope.schemas[alias].field(c).type) for c in cols]
            )
            for i, k in enumerate(p.edge.kinds):
                current[i] = wider_kind(k, current[i])
    return {t: {c: tuple(k) for c, k in per.items()} for t, per in kinds.items()}


def _destinations(graph: QueryGraph) -> list[Destination]:
    """Builds, then SMs, then probes, then lookups, then output: also the default static
    order."""
    dests: list[Destination] = []
    for table in graph.stem_tables:
        dests.append(
            Destination(
                len(dests), f"build:{table}", DestinationKind.BUILD, f"stem:{table}", table=table
            )
        )
    for p in graph.predicates:
        if not p.step:
            dests.append(
                Destination(
                    len(dests),
                    p.name,
                    DestinationKind.SM,
                    p.name,
                    predicate=p.index,
                    cheap=not p.expr.udf_calls(),
                    slots=works_at_once(p) if p.expr.udf_calls() else None,
                )
            )
    for step in graph.steps:
        a = graph.aliases[step.alias]
        dests.append(
            Destination(
                len(dests),
                f"step:{a.name}",
                DestinationKind.STEP,
                f"step:{a.name}",
                table=a.table,
                target_alias=a.index,
                predicate=step.predicate,
            )
        )
    region = graph.region_mask
    if graph.stem_tables:
        for a in graph.aliases:
            if a.table not in graph.stem_tables or not region >> a.index & 1:
                continue
            dests.append(
                Destination(
                    len(dests),
                    f"probe:{a.name}",
                    DestinationKind.PROBE,
                    f"stem:{a.table}",
                    table=a.table,
                    target_alias=a.index,
                )
            )
        looked_up = {s.alias for s in graph.steps if s.lookup}
        for a in graph.aliases:
            if not region >> a.index & 1 and a.index not in looked_up:
                continue
            for am in graph.indexes_of(a.table):
                dests.append(
                    Destination(
                        len(dests),
                        f"lookup:{am.name}@{a.name}",
                        DestinationKind.LOOKUP,
                        f"am:{am.name}",
                        table=a.table,
                        target_alias=a.index,
                        access=am.id,
                        max_batch=max(LOOKUP_WORK_MIN, LOOKUP_WORK_PER_LOOKUP * am.max_concurrency),
                    )
                )
    dests += _filters(graph, len(dests))
    dests.append(Destination(len(dests), "output", DestinationKind.OUTPUT, "output"))
    return dests


def _filters(graph: QueryGraph, first_id: int) -> list[Destination]:
    """SteM filters (see eddies.router.routing_table): one per equi-join edge and side
    whose table has one alias, one AM (a scan) and a SteM; none when a table is never
    built (relaxed BuildFirst: the floating tuples make every result). Their Done bits
    follow the predicates' bits. None either in a query with join steps (outer joins,
    subqueries): a filter drops the tuples an outer or anti-join must keep."""
    if graph.unbuilt or graph.steps:
        return []
    filters: list[Destination] = []
    for p in graph.predicates:
        if p.edge is None:
            continue
        for target in (p.edge.left, p.edge.right):
            table = graph.aliases[target].table
            if (
                table not in graph.stem_tables
                or len(graph.aliases_of(table)) != 1
                or graph.deduplicates(table)
                or not graph.has_scan(table)
            ):
                continue
            filters.append(
                Destination(
                    first_id + len(filters),
                    f"filter:{graph.aliases[target].name}@{p.name}",
                    DestinationKind.FILTER,
                    f"stem:{table}",
                    table=table,
                    target_alias=target,
                    predicate=p.index,
                    bit=1 << (len(graph.predicates) + len(filters)),
                )
            )
    return filters


# ---------------------------------------------------------------------------------------
# Above the eddy: projection, aggregation, HAVING, DISTINCT, ORDER BY, LIMIT.


def _qualify(node: exp.Expression, scope: BaseScope) -> exp.Expression:
    """Rewrite every column as ``alias.column`` so equal expressions compare equal."""

    def fix(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
            ref = scope.resolve(n)
            alias = scope.aliases[ref.key[0]].name
            column = exp.column(ref.key[1], table=alias, quoted=True)
            if n.this._meta:  # keep the source position for error messages
                column.this.meta.update(n.this.meta)
            return column
        return n

    return node.transform(fix)


def _output_name(item: exp.Expression) -> str:
    if isinstance(item, exp.Alias):
        return item.alias
    if isinstance(item, exp.Column):
        return item.name
    return item.sql(dialect="duckdb")


def _select_items(block: QueryBlock, scope: BaseScope) -> list[tuple[str, exp.Expression]]:
    items: list[tuple[str, exp.Expression]] = []
    for item in block.select:
        if isinstance(item, exp.Star):
            items += _star_items(item, None, scope)
        elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
            items += _star_items(item.this, item.table, scope)
        else:
            inner = item.this if isinstance(item, exp.Alias) else item
            if inner.find(exp.Star) and not isinstance(inner, exp.Count):
                for star in inner.find_all(exp.Star):
                    if not isinstance(star.parent, exp.Count):
                        raise UnsupportedQueryError(
                            f"'*' is only allowed as a select item or in COUNT(*): {describe(star)}"
                        )
            items.append((_output_name(item), inner))
    if not items:
        raise UnsupportedQueryError(
            f"the select list is empty after EXCLUDE: {describe(block.select[0])}"
        )
    return items


def _star_items(
    star: exp.Star, qualifier: str | None, scope: BaseScope
) -> list[tuple[str, exp.Expression]]:
    """``*`` / ``t.*`` with DuckDB's EXCLUDE and REPLACE: an unqualified name matches every
    column of that name the star covers, ``t.c`` only t's; REPLACE puts the expression at
    the first matching column and drops the others; a name that matches nothing, or is
    listed twice, is an error (as in DuckDB)."""
    columns = scope.star(qualifier)
    if star._meta:  # errors about a column of * point at the *
        for column in columns:
            column.this.meta.update(star.meta)
    excluded: set[int] = set()
    seen: set[tuple[str, str]] = set()
    for entry in star.args.get("except_") or []:
        if not isinstance(entry, exp.Column) or isinstance(entry.this, exp.Star):
            raise UnsupportedQueryError(f"EXCLUDE takes column names: {describe(entry)}")
        key = ((entry.table or "").lower(), entry.name.lower())
        if key in seen:
            raise UnknownColumnError(f"{describe(entry)} is listed twice in EXCLUDE")
        seen.add(key)
        hits = [i for i, c in enumerate(columns) if _star_match(c, key)]
        if not hits:
            raise UnknownColumnError(
                f"EXCLUDE column {describe(entry)} is not among the columns of "
                f"{(qualifier + '.*') if qualifier else '*'}"
            )
        excluded.update(hits)
    replaced: dict[int, tuple[str, exp.Expression]] = {}
    dropped: set[int] = set()
    for entry in star.args.get("replace") or []:
        if not isinstance(entry, exp.Alias):
            raise UnsupportedQueryError(f"REPLACE takes 'expression AS column': {describe(entry)}")
        key = ("", entry.alias.lower())
        if key in seen:
            raise UnknownColumnError(
                f"column {entry.alias!r} is listed twice in EXCLUDE / REPLACE: {describe(entry)}"
            )
        seen.add(key)
        hits = [i for i, c in enumerate(columns) if _star_match(c, key) and i not in excluded]
        if not hits:
            raise UnknownColumnError(
                f"REPLACE column {entry.alias!r} is not among the columns of "
                f"{(qualifier + '.*') if qualifier else '*'}: {describe(entry)}"
            )
        replaced[hits[0]] = (entry.alias, entry.this)
        dropped.update(hits[1:])
    items: list[tuple[str, exp.Expression]] = []
    for i, column in enumerate(columns):
        if i in excluded or i in dropped:
            continue
        items.append(replaced.get(i, (column.name, column)))
    return items


def _star_match(column: exp.Column, key: tuple[str, str]) -> bool:
    qualifier, name = key
    return column.name.lower() == name and (not qualifier or column.table.lower() == qualifier)


def _ordinal(node: exp.Expression, count: int, what: str) -> int | None:
    if isinstance(node, exp.Literal) and not node.is_string:
        position = int(node.this) if node.this.isdigit() else 0
        if not 1 <= position <= count:
            raise UnsupportedQueryError(f"{what} position {describe(node)} is out of range")
        return position - 1
    return None


def _resolve_alias(
    node: exp.Expression,
    items: list[tuple[str, exp.Expression]],
    scope: BaseScope,
    prefer_alias: bool,
) -> exp.Expression:
    """An unqualified name that names a select item (and, for GROUP BY, no column).

    A name that several select items with different expressions carry is ambiguous and
    refused (DuckDB's choice among them is not documented and not consistent).
    """
    if isinstance(node, exp.Column) and not node.table:
        matches = [e for name, e in items if name.lower() == node.name.lower()]
        if matches:
            try:
                scope.resolve(node)
                is_column = True
            except UnknownColumnError as exc:
                if not prefer_alias and "ambiguous" in str(exc):
                    raise  # GROUP BY binds columns first: DuckDB refuses it too
                is_column = False
            if prefer_alias or not is_column:
                distinct = {_qualify(m, scope) for m in matches}
                if len(distinct) > 1:
                    raise UnknownColumnError(
                        f"{describe(node)} is ambiguous: {len(matches)} select items are "
                        f"named {node.name!r}"
                    )
                return matches[0]
    return node


def _plan_finalize(
    block: QueryBlock,
    scope: BaseScope,
    types: dict[tuple[int, str], pa.DataType],
    functions: dict[str, FunctionSpec],
) -> FinalizeSpec:
    items = [(name, _qualify(node, scope)) for name, node in _select_items(block, scope)]
    names = [name for name, _ in items]
    order_nodes: list[tuple[exp.Expression, bool, bool]] = []
    for ordered in block.order:
        node = ordered.this
        position = _ordinal(node, len(items), "ORDER BY")
        node = (
            items[position][1]
            if position is not None
            else _qualify(_resolve_alias(node, items, scope, prefer_alias=True), scope)
        )
        desc = bool(ordered.args.get("desc"))
        nulls_first = ordered.args.get("nulls_first")
        nulls_first = bool(nulls_first) if nulls_first is not None else False
        order_nodes.append((node, desc, nulls_first))

    is_aggregate = (
        bool(block.group)
        or block.having is not None
        or any(
            node.find(exp.AggFunc) for node in [n for _, n in items] + [o[0] for o in order_nodes]
        )
    )
    spec = FinalizeSpec(
        names=names, select=[], distinct=block.distinct, limit=block.limit, offset=block.offset
    )
    for node in block.conjuncts + block.subqueries + [c for j in block.joins for c in j.on]:
        _refuse_windows(node, "in WHERE or ON (window() is a GROUP BY key)")
    if not is_aggregate:
        for _, node in items:
            _refuse_windows(node, "without GROUP BY (window() is a GROUP BY key)")
        spec.select = [compile_expr(n, scope) for _, n in items]
        out_types = [check_types(e, types, n) for e, (_, n) in zip(spec.select, items, strict=True)]
        spec.order = [(compile_expr(n, scope), d, nf) for n, d, nf in order_nodes]
        for (e, _, _), (n, _, _) in zip(spec.order, order_nodes, strict=True):
            check_types(e, types, n)
        spec.schema = pa.schema([pa.field(n, t) for n, t in zip(names, out_types, strict=True)])
        return spec

    groups: list[exp.Expression] = []
    for node in block.group:
        position = _ordinal(node, len(items), "GROUP BY")
        groups.append(
            items[position][1]
            if position is not None
            else _qualify(_resolve_alias(node, items, scope, prefer_alias=False), scope)
        )
    hops = [g for g in groups if is_hop_window(g)]
    if len(hops) > 1:
        raise UnsupportedQueryError(
            f"GROUP BY has {len(hops)} window() keys; one is supported (each row is counted "
            "once in each of its windows)"
        )
    for g in groups:
        _refuse_windows(g, "inside a GROUP BY expression (window() must be a whole key)", g)
    spec.group = [compile_expr(g, scope) for g in groups]
    post_types: dict[str, pa.DataType] = {}
    for i, (g, node) in enumerate(zip(spec.group, groups, strict=True)):
        post_types[f"__g{i}"] = check_types(g, types, node)
        if is_hop_window(node):  # a list of window starts per row, exploded: one start
            post_types[f"__g{i}"] = post_types[f"__g{i}"].value_type
    above = [n for _, n in items] + [n for n, _, _ in order_nodes]
    for node in above + ([block.having] if block.having is not None else []):
        for call in node.find_all(exp.Anonymous):
            if is_hop_window(call) and (
                not any(call == g for g in hops) or call.find_ancestor(exp.AggFunc)
            ):
                raise UnsupportedQueryError(
                    f"{describe(call)}: window() is allowed only as a GROUP BY key (and the "
                    "same expression in the select list, HAVING or ORDER BY)"
                )

    aggregate_sql: dict[str, int] = {}

    def replace(node: exp.Expression) -> exp.Expression:
        for i, g in enumerate(groups):
            if node == g:
                return exp.column(f"__g{i}")
        if _is_aggregate(node):
            key = node.sql(dialect="duckdb")
            if key not in aggregate_sql:
                aggregate_sql[key] = len(spec.aggregates)
                call = _aggregate_call(node, scope)
                spec.aggregates.append(call)
                post_types[f"__a{aggregate_sql[key]}"] = _aggregate_type(call, types, node)
            return exp.column(f"__a{aggregate_sql[key]}")
        return node

    post_scope = AggregateScope(functions)
    spec.select = [compile_expr(n.transform(replace), post_scope) for _, n in items]
    having_node = _qualify(block.having, scope) if block.having is not None else None
    if having_node is not None:
        spec.having = compile_expr(having_node.transform(replace), post_scope)
    spec.order = [
        (compile_expr(n.transform(replace), post_scope), d, nf) for n, d, nf in order_nodes
    ]
    out_types = [
        check_types(e, post_types, n) for e, (_, n) in zip(spec.select, items, strict=True)
    ]
    if spec.having is not None:
        check_types(spec.having, post_types, having_node)
    for e, _, _ in spec.order:
        check_types(e, post_types, "ORDER BY")
    spec.schema = pa.schema([pa.field(n, t) for n, t in zip(names, out_types, strict=True)])
    return spec


def _refuse_windows(
    node: exp.Expression, where: str, allowed: exp.Expression | None = None
) -> None:
    """UnsupportedQueryError for a ``window(...)`` call in ``node`` (other than
    ``allowed`` itself)."""
    for call in node.find_all(exp.Anonymous):
        if is_hop_window(call) and call is not allowed:
            raise UnsupportedQueryError(f"{describe(call)}: window() {where}")


def _is_aggregate(node: exp.Expression) -> bool:
    """An aggregate call: an AggFunc, or the outermost of ``agg FILTER (WHERE ...)`` and
    the IGNORE NULLS that sqlglot wraps ``any_value`` in."""
    wrappers = exp.Filter | exp.IgnoreNulls
    if isinstance(node.parent, wrappers) and node.arg_key == "this":
        return False
    while isinstance(node, wrappers):
        node = node.this
    return isinstance(node, exp.AggFunc)


def _aggregate_call(node: exp.Expression, scope: BaseScope) -> AggregateCall:
    sql = node.sql(dialect="duckdb")
    filters = []
    while isinstance(node, exp.Filter | exp.IgnoreNulls):  # any_value ignores NULLs anyway
        if isinstance(node, exp.Filter):
            filters.append(node.expression.this)
        node = node.this
    if filters:
        # agg(x) FILTER (WHERE c) is agg(CASE WHEN c THEN x END): every aggregate here
        # skips NULLs, and COUNT(*) counts the rows where c holds.
        inner = node.copy()
        cond = exp.and_(*[f.copy() for f in filters]) if len(filters) > 1 else filters[0]
        if isinstance(inner.this, exp.Star):
            arg: exp.Expression = exp.Literal.number(1)
        elif isinstance(inner.this, exp.Distinct):
            arg = inner.this.expressions[0] if len(inner.this.expressions) == 1 else None
            if arg is None:
                raise UnsupportedQueryError(f"{describe(node)}: DISTINCT takes one argument")
        else:
            arg = inner.this
        guarded = exp.Case(ifs=[exp.If(this=cond.copy(), true=arg.copy())])
        if isinstance(inner.this, exp.Distinct):
            guarded = exp.Distinct(expressions=[guarded])
        if isinstance(inner.this, exp.Order):  # string_agg(s ORDER BY k) FILTER (...)
            order = inner.this.copy()
            order.set("this", exp.Case(ifs=[exp.If(this=cond.copy(), true=order.this.copy())]))
            guarded = order
        inner.set("this", guarded)
        call = _aggregate_call(inner, scope)
        call.sql = sql
        return call
    if isinstance(node, exp.Median | exp.PercentileCont | exp.ArgMin | exp.ArgMax):
        return _list_aggregate(node, scope, sql)
    if isinstance(node, exp.GroupConcat):
        return _string_agg(node, scope, sql)
    if type(node) in OPTION_AGGREGATES:
        function, options = OPTION_AGGREGATES[type(node)]
        arg = node.this
        if arg is None or isinstance(arg, exp.Star | exp.Distinct) or node.expressions:
            raise UnsupportedQueryError(f"aggregate {describe(node)} takes exactly one argument")
        if arg.find(exp.AggFunc):
            raise UnsupportedQueryError(f"nested aggregate in {describe(node)} is not supported")
        return AggregateCall(function, compile_expr(arg, scope), sql, options)
    function = AGGREGATES.get(type(node))
    if function is None:
        raise UnsupportedQueryError(f"aggregate {describe(node)} is not supported")
    arg = node.this
    distinct_post = None
    if isinstance(arg, exp.Distinct):
        if function not in ("count", "sum", "mean", "min", "max") or len(arg.expressions) != 1:
            raise UnsupportedQueryError(
                f"{describe(node)}: DISTINCT is supported in COUNT, SUM, AVG, MIN and MAX "
                "of one argument"
            )
        arg = arg.expressions[0]
        if function == "count":
            function = "count_distinct"
        elif function in ("sum", "mean"):  # over each group's distinct values (finalize)
            distinct_post = ("distinct", function)
    if isinstance(arg, exp.Star):
        if function != "count":
            raise UnsupportedQueryError(f"{describe(node)}: '*' is only allowed in COUNT(*)")
        return AggregateCall("count", compile_expr(exp.Literal.number(1), scope), sql)
    if arg is None or node.expressions:
        raise UnsupportedQueryError(f"aggregate {describe(node)} takes exactly one argument")
    if arg.find(exp.AggFunc):
        raise UnsupportedQueryError(f"nested aggregate in {describe(node)} is not supported")
    if distinct_post is not None:
        return AggregateCall("list", compile_expr(arg, scope), sql, post=distinct_post)
    return AggregateCall(function, compile_expr(arg, scope), sql)


def _one_value(node: exp.Expression) -> None:
    """Refuse DISTINCT, '*' and nested aggregates in an aggregate's arguments."""
    for arg in node.iter_expressions():
        if isinstance(arg, exp.Star | exp.Distinct):
            raise UnsupportedQueryError(f"{describe(node)}: DISTINCT or '*' is not supported")
        if arg.find(exp.AggFunc):
            raise UnsupportedQueryError(f"nested aggregate in {describe(node)} is not supported")


def _list_aggregate(node: exp.Expression, scope: BaseScope, sql: str) -> AggregateCall:
    """median, quantile_cont (exact, sorted per group) and arg_min/arg_max: the values are
    collected per group with pyarrow's ``list`` kernel and finished vectorized."""
    _one_value(node)
    arg = compile_expr(node.this, scope)
    if isinstance(node, exp.Median):
        return AggregateCall("list", arg, sql, post=("quantile", 0.5))
    if isinstance(node, exp.PercentileCont):
        q = node.expression
        value = None
        if isinstance(q, exp.Literal) and not q.is_string:
            value = float(q.this)
        if value is None or not 0 <= value <= 1:
            raise UnsupportedQueryError(
                f"{describe(node)}: the quantile must be a number literal in [0, 1]"
            )
        return AggregateCall("list", arg, sql, post=("quantile", value))
    key = compile_expr(node.expression, scope)
    return AggregateCall("list", arg, sql, extra=[key], post=("arg", isinstance(node, exp.ArgMax)))


def _string_agg(node: exp.GroupConcat, scope: BaseScope, sql: str) -> AggregateCall:
    """string_agg(s[, sep] [ORDER BY ...]): separator a string literal (default ',')."""
    sep_node = node.args.get("separator")
    if sep_node is None:
        sep = ","
    elif isinstance(sep_node, exp.Literal) and sep_node.is_string:
        sep = sep_node.this
    else:
        raise UnsupportedQueryError(f"{describe(node)}: the separator must be a string literal")
    value, order = node.this, []
    if isinstance(value, exp.Order):
        order = value.expressions
        value = value.this
    _one_value(exp.Tuple(expressions=[value.copy(), *[o.this.copy() for o in order]]))
    keys = [compile_expr(o.this, scope) for o in order]
    directions = [
        (
            bool(o.args.get("desc")),
            bool(o.args.get("nulls_first")) if o.args.get("nulls_first") is not None else False,
        )
        for o in order
    ]
    arg = compile_expr(exp.Cast(this=value.copy(), to=exp.DataType.build("VARCHAR")), scope)
    return AggregateCall("list", arg, sql, extra=keys, post=("string_agg", sep, directions))


def _aggregate_type(call: AggregateCall, types: dict, node: exp.Expression) -> pa.DataType:
    arg_type = check_types(call.arg, types, node)
    if call.function in ("count", "count_distinct"):
        return pa.int64()
    if call.post is not None and call.post[0] == "string_agg":
        return pa.string()
    if call.post is not None and call.post[0] == "arg":
        return arg_type
    if call.post is not None and call.post[0] == "distinct":  # SUM/AVG(DISTINCT x)
        plain = AggregateCall(call.post[1], call.arg, call.sql)
        return _aggregate_type(plain, types, node)
    if call.function in ("stddev", "variance") or call.post is not None:
        if not (
            pa.types.is_integer(arg_type)
            or pa.types.is_floating(arg_type)
            or pa.types.is_decimal(arg_type)
            or arg_type == pa.null()
        ):
            raise QueryTypeError(f"{describe(node)} needs a number, not {arg_type}")
        return pa.float64()
    if call.function in ("all", "any"):
        if not (pa.types.is_boolean(arg_type) or arg_type == pa.null()):
            raise QueryTypeError(f"{describe(node)} needs a BOOLEAN, not {arg_type}")
        return pa.bool_()
    if call.function == "mean":
        if not (
            pa.types.is_integer(arg_type)
            or pa.types.is_floating(arg_type)
            or pa.types.is_decimal(arg_type)
        ):
            raise QueryTypeError(f"AVG needs a number: {describe(node)} is over {arg_type}")
        return pa.float64()
    if call.function == "sum":
        if pa.types.is_integer(arg_type):
            return pa.int64()
        if pa.types.is_floating(arg_type):
            return pa.float64()
        if pa.types.is_decimal(arg_type):
            return pa.decimal128(38, arg_type.scale)
        raise QueryTypeError(f"SUM needs a number: {describe(node)} is over {arg_type}")
    return arg_type
