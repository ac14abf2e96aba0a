"""SQL operators with DuckDB's semantics, and their compilers: arithmetic (kernels in
:mod:`~eddies.engine.expr.arithmetic`), ``x ± INTERVAL`` and DATE arithmetic
(:mod:`~eddies.engine.expr.datetime_arith`), comparisons (NaN equals NaN and is above
every number), Kleene AND / OR / NOT, ``||``, ``IS [NOT] NULL``, ``BETWEEN``, ``IN``
(NULL where nothing matches and the list holds a NULL) and ``IS [NOT] DISTINCT FROM``.

Operands are unified first (:func:`~eddies.engine.expr.casts.unify`); an operation with a
NULL constant operand is folded to NULL (:class:`~eddies.engine.expr.guarded.NullFolded`),
as DuckDB's optimizer does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.engine.expr import datetime_arith as dta
from eddies.engine.expr.arithmetic import (
    LITERAL_FITTING,
    arithmetic,
    divide,
    integer_divide,
    integer_literal,
    literal_fitting,
    modulo,
)
from eddies.engine.expr.casts import cast_to, convert, unify, unify_null
from eddies.engine.expr.guarded import NullFolded, is_null_constant
from eddies.engine.expr.registry import Site, register
from eddies.engine.expr.types import number_literal, plain
from eddies.errors import UnsupportedQueryError, describe
from eddies.router.expressions import Expr, Literal


def _binary(kernel: Callable[[Any, Any], Any]) -> Callable:
    """``kernel`` with a NULL operand typed as the other one (Kleene AND / OR)."""

    def fn(a: Any, b: Any) -> Any:
        a, b = unify_null(a, b)
        return kernel(a, b)

    return fn


def _nan_aware(kernel_name: str) -> Callable[[Any, Any], Any]:
    """A comparison with DuckDB's NaN order: NaN equals NaN and is above every number.

    Arrow compares NaN as IEEE does (always false); the extra terms fix that and keep
    NULL propagating (every term is NULL or false where an operand is NULL).
    """
    kernel = getattr(pc, kernel_name)

    def fn(a: Any, b: Any) -> Any:
        a, b = unify([a, b])
        if a.type == pa.null() and b.type == pa.null():  # NULL = NULL is NULL
            a, b = cast_to(a, pa.bool_()), cast_to(b, pa.bool_())
        ieee = kernel(a, b)
        if not (pa.types.is_floating(a.type) or pa.types.is_floating(b.type)):
            return ieee
        a_nan = pc.is_nan(a) if pa.types.is_floating(a.type) else pa.scalar(False)
        b_nan = pc.is_nan(b) if pa.types.is_floating(b.type) else pa.scalar(False)
        both = pc.and_kleene(a_nan, b_nan)
        if kernel_name == "equal":
            return pc.or_kleene(ieee, both)
        if kernel_name == "not_equal":
            return pc.and_kleene(ieee, pc.invert(both))
        if kernel_name == "greater":
            return pc.or_kleene(ieee, pc.and_kleene(a_nan, pc.invert(b_nan)))
        # A NaN term alone must not turn a NULL comparison TRUE (NULL <= NaN is NULL).
        if kernel_name == "greater_equal":
            return pc.or_kleene(ieee, pc.and_kleene(a_nan, pc.is_valid(b)))
        if kernel_name == "less":
            return pc.or_kleene(ieee, pc.and_kleene(pc.invert(a_nan), b_nan))
        return pc.or_kleene(ieee, pc.and_kleene(b_nan, pc.is_valid(a)))  # less_equal

    return fn


def _concat(a: Any, b: Any) -> Any:
    """``||``: both sides as VARCHAR (DuckDB casts numbers, dates, booleans); NULL if either is."""
    a, b = unify_null(a, b)
    a = convert(a, pa.string()) if not pa.types.is_string(a.type) else a
    b = convert(b, pa.string()) if not pa.types.is_string(b.type) else b
    return pc.binary_join_element_wise(a, b, "")


def _temporal(wrap: Callable[[Any], Any], kernel: Callable[[Any, Any], Any]) -> Callable:
    """``+`` / ``-`` with DuckDB's DATE arithmetic (see eddies.engine.expr.datetime_arith)."""
    fn = wrap(kernel)
    return lambda a, b: fn(plain(a), plain(b))


#: A binary operator's node type -> its kernel over the (left, right) values.
BINARY: dict[type, Callable[[Any, Any], Any]] = {
    exp.Add: _temporal(dta.temporal_add, arithmetic(pc.add_checked)),
    exp.Sub: _temporal(dta.temporal_sub, arithmetic(pc.subtract_checked)),
    exp.Mul: arithmetic(pc.multiply_checked),
    exp.Div: divide,
    exp.Mod: modulo,
    exp.IntDiv: integer_divide,
    exp.EQ: _nan_aware("equal"),
    exp.NEQ: _nan_aware("not_equal"),
    exp.GT: _nan_aware("greater"),
    exp.GTE: _nan_aware("greater_equal"),
    exp.LT: _nan_aware("less"),
    exp.LTE: _nan_aware("less_equal"),
    exp.And: _binary(pc.and_kleene),
    exp.Or: _binary(pc.or_kleene),
    exp.DPipe: _concat,
}


def _chain(node: exp.And | exp.Or) -> list[exp.Expression]:
    """The operands of an AND (OR) chain, in order, found without recursion: sqlglot builds
    ``a OR b OR c ...`` left-deep, 5,000 levels for 5,000 terms."""
    kind, out, stack = type(node), [], [node]
    while stack:
        current = stack.pop()
        if type(current) is kind:
            stack += [current.expression, current.this]
        else:
            out.append(current)
    return out


def _kleene_chain(kind: type) -> Callable[..., Any]:
    """N-ary Kleene AND / OR: one Call over every operand of a chain."""
    pair = BINARY[kind]

    def fn(*values: Any) -> Any:
        out = values[0]
        for v in values[1:]:
            out = pair(out, v)
        return out

    return fn


def not_(v: Any) -> Any:
    """Kleene NOT; a bare NULL (typed null) is a NULL boolean."""
    if v.type == pa.null():
        v = v.cast(pa.bool_())
    return pc.invert(v)


def _in_list(value: Any, *items: Any) -> Any:
    """SQL IN: NULL if value is NULL, or if nothing matches and the list holds a NULL.

    Value and items are unified first (``k IN (1, 2.5)`` on an integer ``k`` compares as
    DECIMAL, as DuckDB)."""
    value, *items = unify([value, *items])
    non_null = [i for i in items if i.is_valid]
    has_null = len(non_null) < len(items)
    value_set = pa.array([i.as_py() for i in non_null], type=value.type)
    if pa.types.is_floating(value.type) and any(i.as_py() != i.as_py() for i in non_null):
        found = pc.or_kleene(
            pc.is_in(value, value_set=value_set, skip_nulls=True), pc.is_nan(value)
        )  # NaN IN (NaN) is true in DuckDB
    else:
        found = pc.is_in(value, value_set=value_set, skip_nulls=True)
    found = pc.if_else(pc.is_null(value), pa.scalar(None, pa.bool_()), found)
    if has_null:
        found = pc.if_else(found, True, pa.scalar(None, pa.bool_()))
    return found


def _distinct_from(negate: bool) -> Callable[[Any, Any], Any]:
    """``a IS [NOT] DISTINCT FROM b``: equality where NULL equals NULL; never NULL."""

    def fn(a: Any, b: Any) -> Any:
        a, b = unify([a, b])
        if a.type == pa.null():
            same = pa.scalar(True)
        else:
            equal = pc.fill_null(BINARY[exp.EQ](a, b), False)
            same = pc.or_(equal, pc.and_(pc.is_null(a), pc.is_null(b)))
        return same if negate else pc.invert(same)

    return fn


#: Operators DuckDB folds to a NULL constant when an operand is a NULL constant, so that
#: the other operand is never evaluated (AND, OR, IN, BETWEEN, COALESCE, concat() and
#: greatest() are not folded: they may still give a value, or DuckDB evaluates them).
_NULL_FOLDING = (
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Mod,
    exp.IntDiv,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.DPipe,
)


def _interval_arithmetic(node: exp.Add | exp.Sub, site: Site) -> Expr:
    """``x ± INTERVAL ...`` / ``INTERVAL ... + x`` with a constant interval."""
    if isinstance(node.this, exp.Interval):
        if isinstance(node, exp.Sub):
            raise UnsupportedQueryError(
                f"{describe(node)}: an INTERVAL minus a value is not supported (DuckDB "
                "subtracts an INTERVAL from a DATE or TIMESTAMP only)"
            )
        interval_node, other = node.this, node.expression
    else:
        interval_node, other = node.expression, node.this
    if isinstance(other, exp.Interval):
        raise UnsupportedQueryError(f"{describe(node)}: INTERVAL arithmetic is not supported")
    quantity, unit = interval_node.this, interval_node.args.get("unit")
    if not isinstance(quantity, exp.Literal):
        raise UnsupportedQueryError(
            f"{describe(interval_node)}: only constant INTERVALs are supported (a number or "
            "a string literal)"
        )
    interval = dta.parse_interval(
        str(quantity.this), unit.name if unit is not None else None, describe(interval_node)
    )
    if isinstance(node, exp.Sub):
        interval = interval.negated()
    return site.call(lambda v, i=interval: dta.add_interval(plain(v), i), [site.compile(other)])


def _in_expressions(v: Any, *xs: Any) -> Any:
    """``v IN (x, ...)`` over items that are not all constants: an OR of equalities."""
    eq = BINARY[exp.EQ]
    out = eq(v, xs[0])
    for x in xs[1:]:
        out = pc.or_kleene(out, eq(v, x))
    return out


#: The operators compiled as chains (one n-ary Call), not as pairs.
_CHAINS = (exp.And, exp.Or)


@register(*(node_type for node_type in BINARY if node_type not in _CHAINS))
def _compile_binary(node: exp.Binary, site: Site) -> Expr:
    """A binary operator: ``x ± INTERVAL`` apart; an integer literal on one side takes the
    other side's integer type; a NULL constant operand folds the result to NULL."""
    if isinstance(node, exp.Add | exp.Sub) and exp.Interval in (
        type(node.this),
        type(node.expression),
    ):
        return _interval_arithmetic(node, site)
    left, right = site.compile(node.this), site.compile(node.expression)
    kernel = BINARY[type(node)]
    if isinstance(node, LITERAL_FITTING):
        literal = (integer_literal(node.this, left), integer_literal(node.expression, right))
        if literal[0] != literal[1]:  # one side: it fits the other; both: INTEGER op INTEGER
            kernel = literal_fitting(kernel, 0 if literal[0] else 1)
    call = site.call(kernel, [left, right])
    if isinstance(node, _NULL_FOLDING) and (is_null_constant(left) or is_null_constant(right)):
        return NullFolded(call, site.sql)
    return call


@register(*_CHAINS)
def _compile_chain(node: exp.And | exp.Or, site: Site) -> Expr:
    return site.call(_kleene_chain(type(node)), [site.compile(o) for o in _chain(node)])


@register(exp.Neg)
def _compile_neg(node: exp.Neg, site: Site) -> Expr:
    inner = node.this
    if isinstance(inner, exp.Literal) and not inner.is_string:
        return Literal(number_literal("-" + inner.this), site.sql)  # -2147483648 is an INTEGER
    return site.call(lambda v: pc.negate_checked(plain(v)), [site.compile(node.this)])


@register(exp.Not)
def _compile_not(node: exp.Not, site: Site) -> Expr:
    return site.call(not_, [site.compile(node.this)])


@register(exp.Is)
def _compile_is(node: exp.Is, site: Site) -> Expr:
    if isinstance(node.expression, exp.Null):
        return site.call(pc.is_null, [site.compile(node.this)])
    raise UnsupportedQueryError(f"{describe(node)}: only IS [NOT] NULL is supported")


@register(exp.Interval)
def _compile_interval(node: exp.Interval, site: Site) -> Expr:
    raise UnsupportedQueryError(
        f"{describe(node)}: an INTERVAL is supported only added to or subtracted from "
        "a DATE or TIMESTAMP, or as time_bucket's width"
    )


@register(exp.Between)
def _compile_between(node: exp.Between, site: Site) -> Expr:
    ge, le = BINARY[exp.GTE], BINARY[exp.LTE]
    return site.call(
        lambda v, lo, hi: pc.and_kleene(ge(v, lo), le(v, hi)),
        [site.compile(node.this), site.compile(node.args["low"]), site.compile(node.args["high"])],
    )


@register(exp.In)
def _compile_in(node: exp.In, site: Site) -> Expr:
    if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
        raise UnsupportedQueryError(f"{describe(node)}: IN with a subquery is not supported")
    items = [site.compile(i) for i in node.expressions]
    kernel = _in_list if all(isinstance(i, Literal) for i in items) else _in_expressions
    return site.call(kernel, [site.compile(node.this), *items])


@register(exp.NullSafeEQ, exp.NullSafeNEQ)
def _compile_distinct_from(node: exp.NullSafeEQ | exp.NullSafeNEQ, site: Site) -> Expr:
    return site.call(
        _distinct_from(isinstance(node, exp.NullSafeEQ)), site.ops("this", "expression")
    )
