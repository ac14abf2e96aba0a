"""The :class:`QueryGraph` of a query block: predicates, join edges, AMs, join steps and
the SteM tables (stems-2003 §2.2).

Classification of WHERE conjuncts:

* an equality between columns of two different aliases joins an *edge*; all such
  equalities between one pair of aliases form one multi-column edge (a SteM probe key);
* any other predicate over one or more aliases becomes an SM (a non-equi join predicate
  becomes an SM over composite tuples);
* an edge that closes a cycle is evaluated as an SM when a tuple spans both its sides.

Every AM of every table is used (stems-2003 §2.2 step 2), after checking that the query
can run at all given the bind-field constraints of index AMs (step 1, Nail's algorithm:
a table is reachable if it has a scan AM, or an index AM whose bind columns an equi-join
with a reachable table binds). Outer joins and [NOT] IN / [NOT] EXISTS subqueries become
JoinSteps (``engine/plan/outer_and_semi_joins.py``).
"""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from eddies.engine.catalog import CatalogTable
from eddies.engine.expr.compile import LazySql, compile_expr
from eddies.engine.frontend.parse import QueryBlock
from eddies.engine.plan import outer_and_semi_joins as join_steps
from eddies.engine.plan.column_scope import BaseScope
from eddies.engine.rewrite.or_factoring import implied_filters
from eddies.errors import EddiesError, QueryTypeError, UnsupportedQueryError, describe
from eddies.modules.key_encoding import common_kind, key_kind, wider_kind
from eddies.router.expressions import Call, ColumnRef, Expr, check_types
from eddies.router.query_graph import (
    AccessInfo,
    AccessKind,
    AliasInfo,
    Edge,
    Predicate,
    QueryGraph,
)

#: Most single-table and join predicates a query gets one SM each for; past it, one SM per
#: set of tables. Done bits have no width limit (Python ints in signatures, interned codes
#: where they are stored per tuple or per routing decision, issue 26); this bounds the
#: eddy's per-SM overhead instead: four 200-row tables under 500 ``x <> c`` conjuncts took
#: 224 ms with one SM each against 27 ms grouped, while at 100,000 rows each and 130
#: conjuncts both took 340 ms.
MAX_PREDICATES = 256


def build_query_graph(
    block: QueryBlock,
    scope: BaseScope,
    types: dict[tuple[int, str], pa.DataType],
    aliases: list[AliasInfo],
    sources: dict[str, CatalogTable],
    refs: list[join_steps.SubqueryRef],
    n_from: int,
) -> QueryGraph:
    """The graph of ``block``, whose USING / NATURAL joins are already resolved
    (:func:`eddies.engine.plan.using_joins.plan_joins`). ``aliases``: the FROM aliases (the
    first ``n_from``) then one per WHERE subquery of ``refs``; ``sources``: the tables by
    name; ``types``: every column's type by ``(alias, column)``. Sets ``block.conjuncts``
    to the inner-join region's. Raises UnsupportedQueryError (index
    AMs no join can bind, build=False misused), QueryTypeError or UnknownColumnError."""
    m, region, delayed, steps = join_steps.plan_steps(
        block,
        scope,
        types,
        aliases,
        refs,
        {a.index: sources[a.table].schema for a in aliases[n_from:]},
    )
    block.conjuncts = region + _implied_filters(region, scope)
    predicates = _plan_predicates(block, scope, types)
    steps = join_steps.add_step_predicates(predicates, delayed, steps, types)
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
    return graph


def _implied_filters(region: list[exp.Expression], scope: BaseScope) -> list[exp.Expression]:
    """The single-alias filters the region's ORs imply (engine/rewrite/or_factoring.py:
    ``(p = l AND p.b = 1 AND l.q < 5) OR (p = l AND p.b = 2)`` gives ``p.b = 1 OR p.b = 2``,
    an SM the eddy runs before the join), none that would take the query past
    MAX_PREDICATES (which would merge the user's own SMs)."""

    def alias_of(column: exp.Column) -> int | None:
        try:
            return scope.resolve(column).key[0]
        except EddiesError:  # the conjunct's own compilation reports it
            return None

    implied = implied_filters(region, alias_of)
    return implied if len(region) + len(implied) <= MAX_PREDICATES else []


def _plan_predicates(
    block: QueryBlock, scope: BaseScope, types: dict[tuple[int, str], pa.DataType]
) -> list[Predicate]:
    """One Predicate per conjunct (``sm1``, ``sm2``, ...), the equalities between each pair
    of aliases combined into one edge; past MAX_PREDICATES, one SM per set of tables.
    QueryTypeError for a condition that is not boolean."""
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
        # Too many SMs: one per set of tables instead of one per conjunct (the eddy then
        # orders fewer, bigger selections; a 5,000-term AND chain still runs).
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
    return predicates


def _access_methods(tables: dict[str, CatalogTable]) -> list[AccessInfo]:
    """Every scan and index AM of every table, numbered in order."""
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


def index_kinds(
    graph: QueryGraph, scope: BaseScope
) -> dict[str, dict[tuple[str, ...], tuple[str, ...]]]:
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
