"""Plan what runs above the eddy: projection, aggregation, HAVING, DISTINCT, ORDER BY and
LIMIT, as in the PostgreSQL implementation (eddies-in-postgresql §2).

:func:`plan_finalize` turns the block's select list, GROUP BY, HAVING and ORDER BY into a
:class:`FinalizeSpec` that :mod:`eddies.engine.above.finalize` runs over the eddy's
output. Without aggregation the expressions read base columns (``(alias, column)``
keys); with it, every group key becomes a column ``__g<i>`` and every distinct aggregate
a column ``__a<j>``, and the select list, HAVING and ORDER BY are compiled over those
(:class:`AggregateScope`). A ``window(...)`` call (hopping windows) is allowed only as a
whole GROUP BY key and the same expression above it.
"""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from eddies.engine.expr.compile import compile_expr
from eddies.engine.expr.functions.event_time import is_hop_window
from eddies.engine.frontend.parse import QueryBlock
from eddies.engine.plan.aggregate_calls import aggregate_call, aggregate_type, is_aggregate
from eddies.engine.plan.column_scope import AggregateScope, BaseScope, qualify
from eddies.engine.plan.plan_types import FinalizeSpec
from eddies.engine.plan.select_items import ordinal, resolve_alias, select_items
from eddies.errors import UnsupportedQueryError, describe
from eddies.router.expressions import FunctionSpec, check_types

Items = list[tuple[str, exp.Expression]]
OrderNodes = list[tuple[exp.Expression, bool, bool]]  # expression, desc, nulls_first
Types = dict[tuple[int, str], pa.DataType]


def plan_finalize(
    block: QueryBlock, scope: BaseScope, types: Types, functions: dict[str, FunctionSpec]
) -> FinalizeSpec:
    """The :class:`FinalizeSpec` of ``block``: select list, ORDER BY, DISTINCT, LIMIT and
    OFFSET, and with GROUP BY, HAVING or an aggregate anywhere above the eddy, the group
    keys and aggregates. ``types``: the base columns' Arrow types by ``(alias, column)``;
    ``functions``: the query's registered functions. Raises UnknownColumnError,
    QueryTypeError or UnsupportedQueryError."""
    items = [(name, qualify(node, scope)) for name, node in select_items(block, scope)]
    order_nodes = _order_nodes(block, items, scope)
    aggregated = _is_aggregate_query(block, items, order_nodes)
    spec = FinalizeSpec(
        names=[name for name, _ in items],
        select=[],
        distinct=block.distinct,
        limit=block.limit,
        offset=block.offset,
    )
    for node in block.conjuncts + block.subqueries + [c for j in block.joins for c in j.on]:
        _refuse_windows(node, "in WHERE or ON (window() is a GROUP BY key)")
    if not aggregated:
        return _plan_projection(spec, items, order_nodes, scope, types)
    return _plan_aggregation(spec, block, items, order_nodes, scope, types, functions)


def _order_nodes(block: QueryBlock, items: Items, scope: BaseScope) -> OrderNodes:
    """ORDER BY terms as qualified expressions: a position or a select item's alias
    stands for that item."""
    order_nodes: OrderNodes = []
    for ordered in block.order:
        node = ordered.this
        position = ordinal(node, len(items), "ORDER BY")
        node = (
            items[position][1]
            if position is not None
            else qualify(resolve_alias(node, items, scope, prefer_alias=True), scope)
        )
        desc = bool(ordered.args.get("desc"))
        nulls_first = ordered.args.get("nulls_first")
        nulls_first = bool(nulls_first) if nulls_first is not None else False
        order_nodes.append((node, desc, nulls_first))
    return order_nodes


def _is_aggregate_query(block: QueryBlock, items: Items, order_nodes: OrderNodes) -> bool:
    """GROUP BY, HAVING, or an aggregate in the select list or ORDER BY."""
    return (
        bool(block.group)
        or block.having is not None
        or any(
            node.find(exp.AggFunc) for node in [n for _, n in items] + [o[0] for o in order_nodes]
        )
    )


def _plan_projection(
    spec: FinalizeSpec, items: Items, order_nodes: OrderNodes, scope: BaseScope, types: Types
) -> FinalizeSpec:
    """No aggregation: the select list and ORDER BY over base columns."""
    for _, node in items:
        _refuse_windows(node, "without GROUP BY (window() is a GROUP BY key)")
    spec.select = [compile_expr(n, scope) for _, n in items]
    out_types = [check_types(e, types, n) for e, (_, n) in zip(spec.select, items, strict=True)]
    spec.order = [(compile_expr(n, scope), d, nf) for n, d, nf in order_nodes]
    for (e, _, _), (n, _, _) in zip(spec.order, order_nodes, strict=True):
        check_types(e, types, n)
    spec.schema = _schema(spec.names, out_types)
    return spec


def _plan_aggregation(
    spec: FinalizeSpec,
    block: QueryBlock,
    items: Items,
    order_nodes: OrderNodes,
    scope: BaseScope,
    types: Types,
    functions: dict[str, FunctionSpec],
) -> FinalizeSpec:
    """Group keys and aggregates, then the select list, HAVING and ORDER BY over them."""
    groups = _group_keys(block, items, scope)
    spec.group = [compile_expr(g, scope) for g in groups]
    post_types = _group_key_types(spec.group, groups, types)
    above = [n for _, n in items] + [n for n, _, _ in order_nodes]
    _check_window_keys(above + ([block.having] if block.having is not None else []), groups)
    replace = _AggregateColumns(groups, spec, scope, types, post_types)
    post_scope = AggregateScope(functions)
    spec.select = [compile_expr(n.transform(replace), post_scope) for _, n in items]
    having_node = qualify(block.having, scope) if block.having is not None else None
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
    spec.schema = _schema(spec.names, out_types)
    return spec


def _group_keys(block: QueryBlock, items: Items, scope: BaseScope) -> list[exp.Expression]:
    """GROUP BY terms as qualified expressions (a position or a select item's alias, when
    no column has that name, stands for that item); at most one ``window()`` key, and
    only as a whole key."""
    groups: list[exp.Expression] = []
    for node in block.group:
        position = ordinal(node, len(items), "GROUP BY")
        groups.append(
            items[position][1]
            if position is not None
            else qualify(resolve_alias(node, items, scope, prefer_alias=False), scope)
        )
    hops = [g for g in groups if is_hop_window(g)]
    if len(hops) > 1:
        raise UnsupportedQueryError(
            f"GROUP BY has {len(hops)} window() keys; one is supported (each row is counted "
            "once in each of its windows)"
        )
    for g in groups:
        _refuse_windows(g, "inside a GROUP BY expression (window() must be a whole key)", g)
    return groups


def _group_key_types(
    compiled: list, groups: list[exp.Expression], types: Types
) -> dict[str, pa.DataType]:
    """``__g<i>`` -> the type of group key i (a window() key: one window start)."""
    post_types: dict[str, pa.DataType] = {}
    for i, (g, node) in enumerate(zip(compiled, groups, strict=True)):
        post_types[f"__g{i}"] = check_types(g, types, node)
        if is_hop_window(node):  # a list of window starts per row, exploded: one start
            post_types[f"__g{i}"] = post_types[f"__g{i}"].value_type
    return post_types


def _check_window_keys(nodes: list[exp.Expression], groups: list[exp.Expression]) -> None:
    """Above the aggregation, a window() call must be the GROUP BY key itself, outside
    any aggregate."""
    hops = [g for g in groups if is_hop_window(g)]
    for node in nodes:
        for call in node.find_all(exp.Anonymous):
            if is_hop_window(call) and (
                not any(call == g for g in hops) or call.find_ancestor(exp.AggFunc)
            ):
                raise UnsupportedQueryError(
                    f"{describe(call)}: window() is allowed only as a GROUP BY key (and the "
                    "same expression in the select list, HAVING or ORDER BY)"
                )


class _AggregateColumns:
    """An ``exp.transform`` callback: a group key becomes ``__g<i>``, an aggregate
    ``__a<j>`` (one per distinct SQL text, added to ``spec.aggregates`` and typed in
    ``post_types`` the first time it is met)."""

    def __init__(
        self,
        groups: list[exp.Expression],
        spec: FinalizeSpec,
        scope: BaseScope,
        types: Types,
        post_types: dict[str, pa.DataType],
    ) -> None:
        self.groups = groups
        self.spec = spec
        self.scope = scope
        self.types = types
        self.post_types = post_types
        self.aggregate_sql: dict[str, int] = {}

    def __call__(self, node: exp.Expression) -> exp.Expression:
        for i, g in enumerate(self.groups):
            if node == g:
                return exp.column(f"__g{i}")
        if is_aggregate(node):
            key = node.sql(dialect="duckdb")
            if key not in self.aggregate_sql:
                self.aggregate_sql[key] = len(self.spec.aggregates)
                call = aggregate_call(node, self.scope)
                self.spec.aggregates.append(call)
                name = f"__a{self.aggregate_sql[key]}"
                call.result_type = aggregate_type(call, self.types, node)
                self.post_types[name] = call.result_type
            return exp.column(f"__a{self.aggregate_sql[key]}")
        return node


def _schema(names: list[str], out_types: list[pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(n, t) for n, t in zip(names, out_types, strict=True)])


def _refuse_windows(
    node: exp.Expression, where: str, allowed: exp.Expression | None = None
) -> None:
    """UnsupportedQueryError for a ``window(...)`` call in ``node`` (other than
    ``allowed`` itself)."""
    for call in node.find_all(exp.Anonymous):
        if is_hop_window(call) and call is not allowed:
            raise UnsupportedQueryError(f"{describe(call)}: window() {where}")
