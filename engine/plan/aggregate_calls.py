"""Aggregate calls: how an aggregate of the query becomes an :class:`AggregateCall` that
the finalizer runs with a pyarrow hash-aggregate kernel above the eddy
(eddies-in-postgresql §2), and the Arrow type of its result.

COUNT, SUM, AVG, MIN, MAX (and their DISTINCT forms), the sample and population
statistics, bool_and/bool_or, any_value, median, quantile_cont, arg_min/arg_max and
string_agg; ``agg(x) FILTER (WHERE c)`` is planned as ``agg(CASE WHEN c THEN x END)``.
What is not supported raises UnsupportedQueryError, a wrong argument type QueryTypeError.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.engine.expr.compile import compile_expr
from eddies.engine.plan.column_scope import BaseScope
from eddies.engine.plan.plan_types import AggregateCall
from eddies.errors import QueryTypeError, UnsupportedQueryError, describe
from eddies.router.expressions import check_types

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


def is_aggregate(node: exp.Expression) -> bool:
    """An aggregate call: an AggFunc, or the outermost of ``agg FILTER (WHERE ...)`` and
    the IGNORE NULLS that sqlglot wraps ``any_value`` in."""
    wrappers = exp.Filter | exp.IgnoreNulls
    if isinstance(node.parent, wrappers) and node.arg_key == "this":
        return False
    while isinstance(node, wrappers):
        node = node.this
    return isinstance(node, exp.AggFunc)


def aggregate_call(node: exp.Expression, scope: BaseScope) -> AggregateCall:
    """The call that computes the aggregate ``node`` (an :func:`is_aggregate` node, FILTER
    and IGNORE NULLS wrappers included), its arguments compiled in ``scope``. Raises
    UnsupportedQueryError for an aggregate, DISTINCT or argument list not supported."""
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
        call = aggregate_call(inner, scope)
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


def aggregate_type(call: AggregateCall, types: dict, node: exp.Expression) -> pa.DataType:
    """The Arrow type of ``call``'s result over columns of ``types`` (``(alias, column)``
    -> type), as DuckDB types it; QueryTypeError for an argument of the wrong type."""
    arg_type = check_types(call.arg, types, node)
    if call.function in ("count", "count_distinct"):
        return pa.int64()
    if call.post is not None and call.post[0] == "string_agg":
        return pa.string()
    if call.post is not None and call.post[0] == "arg":
        return arg_type
    if call.post is not None and call.post[0] == "distinct":  # SUM/AVG(DISTINCT x)
        plain = AggregateCall(call.post[1], call.arg, call.sql)
        return aggregate_type(plain, types, node)
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
