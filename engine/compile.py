"""Compile sqlglot scalar expressions into :mod:`eddies.engine.expressions` trees.

Semantics follow DuckDB, our test oracle: ``/`` is floating-point division, division or
modulo by zero gives NULL, ``IN`` with a NULL in the list is NULL when nothing matches,
integer arithmetic overflows raise, CAST of a float to an integer rounds.
A :class:`Scope` resolves column references and function names; anything it cannot resolve
or that eddies does not implement raises an :class:`EddiesError` naming the construct.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.engine.errors import UnsupportedQueryError, describe
from eddies.engine.expressions import Call, ColumnRef, Expr, FunctionSpec, Literal, UdfCall


class Scope(Protocol):
    """Resolves names while compiling."""

    functions: Mapping[str, FunctionSpec]

    def resolve(self, column: exp.Column) -> ColumnRef: ...


def _unify_null(a: Any, b: Any) -> tuple[Any, Any]:
    """Give a NULL literal the other operand's type (Arrow kernels reject the null type)."""
    if isinstance(a, pa.Scalar) and a.type == pa.null() and b.type != pa.null():
        a = pa.scalar(None, type=b.type)
    if isinstance(b, pa.Scalar) and b.type == pa.null() and a.type != pa.null():
        b = pa.scalar(None, type=a.type)
    return a, b


def _unify_temporal(a: Any, b: Any) -> tuple[Any, Any]:
    """Cast a string literal compared with a date/timestamp to that type, as DuckDB does."""
    for x, y, swap in ((a, b, False), (b, a, True)):
        if (
            isinstance(x, pa.Scalar)
            and pa.types.is_string(x.type)
            and (pa.types.is_temporal(y.type))
        ):
            x = pc.cast(pa.array([x.as_py()]), _naive(y.type))
            x = x.cast(y.type)[0]
            return (y, x) if swap else (x, y)
    return a, b


def _naive(t: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(t):
        return pa.timestamp(t.unit)
    return t


def _binary(kernel: Callable[[Any, Any], Any], temporal: bool = False) -> Callable:
    def fn(a: Any, b: Any) -> Any:
        a, b = _unify_null(a, b)
        if temporal:
            a, b = _unify_temporal(a, b)
        return kernel(a, b)

    return fn


def _is_int(v: Any) -> bool:
    return pa.types.is_integer(v.type)


def _nan_aware(kernel_name: str) -> Callable[[Any, Any], Any]:
    """A comparison with DuckDB's NaN order: NaN equals NaN and is above every number.

    Arrow compares NaN as IEEE does (always false); the extra terms fix that and keep
    NULL propagating (every term is NULL or false where an operand is NULL).
    """
    kernel = getattr(pc, kernel_name)

    def fn(a: Any, b: Any) -> Any:
        a, b = _unify_null(a, b)
        a, b = _unify_temporal(a, b)
        plain = kernel(a, b)
        if not (pa.types.is_floating(a.type) or pa.types.is_floating(b.type)):
            return plain
        a_nan = pc.is_nan(a) if pa.types.is_floating(a.type) else pa.scalar(False)
        b_nan = pc.is_nan(b) if pa.types.is_floating(b.type) else pa.scalar(False)
        both = pc.and_kleene(a_nan, b_nan)
        if kernel_name == "equal":
            return pc.or_kleene(plain, both)
        if kernel_name == "not_equal":
            return pc.and_kleene(plain, pc.invert(both))
        if kernel_name == "greater":
            return pc.or_kleene(plain, pc.and_kleene(a_nan, pc.invert(b_nan)))
        if kernel_name == "greater_equal":
            return pc.or_kleene(plain, a_nan)
        if kernel_name == "less":
            return pc.or_kleene(plain, pc.and_kleene(pc.invert(a_nan), b_nan))
        return pc.or_kleene(plain, b_nan)  # less_equal

    return fn


def _divide(a: Any, b: Any) -> Any:
    a, b = _unify_null(a, b)
    a = pc.cast(a, pa.float64()) if not pa.types.is_floating(a.type) else a
    b = pc.cast(b, pa.float64()) if not pa.types.is_floating(b.type) else b
    zero = pc.equal(b, 0.0)
    safe_b = pc.if_else(zero, 1.0, b)
    return pc.if_else(zero, pa.scalar(None, pa.float64()), pc.divide(a, safe_b))


def _modulo(a: Any, b: Any) -> Any:
    a, b = _unify_null(a, b)
    zero = pc.equal(b, 0)
    safe_b = pc.if_else(zero, 1, b) if _is_int(b) else pc.if_else(zero, 1.0, b)
    if _is_int(a) and _is_int(b):
        rem = pc.subtract(a, pc.multiply(pc.divide(a, safe_b), safe_b))  # truncating, as C
    else:
        fa, fb = pc.cast(a, pa.float64()), pc.cast(safe_b, pa.float64())
        rem = pc.subtract(fa, pc.multiply(pc.trunc(pc.divide(fa, fb)), fb))
    return pc.if_else(zero, pa.scalar(None, rem.type), rem)


def _integer_divide(a: Any, b: Any) -> Any:
    a, b = _unify_null(a, b)
    zero = pc.equal(b, 0)
    q = pc.floor(pc.divide(pc.cast(a, pa.float64()), pc.cast(pc.if_else(zero, 1, b), pa.float64())))
    out_type = a.type if _is_int(a) and _is_int(b) else pa.float64()
    return pc.if_else(zero, pa.scalar(None, out_type), pc.cast(q, out_type))


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    exp.Add: _binary(pc.add_checked),
    exp.Sub: _binary(pc.subtract_checked),
    exp.Mul: _binary(pc.multiply_checked),
    exp.Div: _divide,
    exp.Mod: _modulo,
    exp.IntDiv: _integer_divide,
    exp.EQ: _nan_aware("equal"),
    exp.NEQ: _nan_aware("not_equal"),
    exp.GT: _nan_aware("greater"),
    exp.GTE: _nan_aware("greater_equal"),
    exp.LT: _nan_aware("less"),
    exp.LTE: _nan_aware("less_equal"),
    exp.And: _binary(pc.and_kleene),
    exp.Or: _binary(pc.or_kleene),
    exp.DPipe: _binary(lambda a, b: pc.binary_join_element_wise(a, b, "")),
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
    pair = _BINARY[kind]

    def fn(*values: Any) -> Any:
        out = values[0]
        for v in values[1:]:
            out = pair(out, v)
        return out

    return fn


def _sql_type(node: exp.DataType) -> pa.DataType:
    t = node.this
    T = exp.DataType.Type
    simple = {
        T.TINYINT: pa.int8(),
        T.SMALLINT: pa.int16(),
        T.INT: pa.int32(),
        T.BIGINT: pa.int64(),
        T.UTINYINT: pa.uint8(),
        T.USMALLINT: pa.uint16(),
        T.UINT: pa.uint32(),
        T.UBIGINT: pa.uint64(),
        T.FLOAT: pa.float32(),
        T.DOUBLE: pa.float64(),
        T.VARCHAR: pa.string(),
        T.TEXT: pa.string(),
        T.CHAR: pa.string(),
        T.BOOLEAN: pa.bool_(),
        T.DATE: pa.date32(),
        T.TIMESTAMP: pa.timestamp("us"),
        T.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
    }
    if t in simple:
        return simple[t]
    if t == T.DECIMAL:
        params = [int(p.this.this) for p in node.expressions] if node.expressions else [18, 3]
        precision, scale = [*params, 0][:2]
        return pa.decimal128(precision, scale)
    raise UnsupportedQueryError(f"type {node.sql()} is not supported")


def _cast(target: pa.DataType) -> Callable[[Any], Any]:
    def fn(v: Any) -> Any:
        if pa.types.is_integer(target) and pa.types.is_floating(v.type):
            v = pc.round(v, round_mode="half_to_even")  # as DuckDB: 2.5 -> 2, -0.5 -> 0
        if pa.types.is_string(target) and pa.types.is_boolean(v.type):
            return pc.if_else(v, "true", "false")
        return pc.cast(v, target)

    return fn


def _not(v: Any) -> Any:
    """Kleene NOT; a bare NULL (typed null) is a NULL boolean."""
    if v.type == pa.null():
        v = v.cast(pa.bool_())
    return pc.invert(v)


def _in_list(value: Any, *items: Any) -> Any:
    """SQL IN: NULL if value is NULL, or if nothing matches and the list holds a NULL."""
    non_null = [i for i in items if i.is_valid]
    has_null = len(non_null) < len(items)
    if non_null:
        value_set = pa.array([i.as_py() for i in non_null]).cast(value.type)
        found = pc.is_in(value, value_set=value_set, skip_nulls=True)
    else:
        found = pc.is_in(value, value_set=pa.array([], type=value.type))
    found = pc.if_else(pc.is_null(value), pa.scalar(None, pa.bool_()), found)
    if has_null:
        found = pc.if_else(found, True, pa.scalar(None, pa.bool_()))
    return found


def _case(n_whens: int, has_default: bool) -> Callable[..., Any]:
    def fn(*values: Any) -> Any:
        conds = [pc.fill_null(values[2 * i], False) for i in range(n_whens)]
        results = [values[2 * i + 1] for i in range(n_whens)]
        default = values[-1] if has_default else None
        types = [r.type for r in results if r.type != pa.null()]
        if default is not None and default.type != pa.null():
            types.append(default.type)
        out_type = _common_type(types) if types else pa.null()
        results = [_cast_value(r, out_type) for r in results]
        default = _cast_value(default if default is not None else pa.scalar(None), out_type)
        n = max((len(v) for v in values if isinstance(v, pa.Array)), default=1)
        cond_arrays = [_broadcast_bool(c, n) for c in conds]
        struct = pa.StructArray.from_arrays(cond_arrays, names=[f"c{i}" for i in range(n_whens)])
        return pc.case_when(struct, *results, default)

    return fn


def _broadcast_bool(c: Any, n: int) -> pa.Array:
    from eddies.engine.expressions import broadcast

    return broadcast(c, n)


def _cast_value(v: Any, t: pa.DataType) -> Any:
    if v.type == t:
        return v
    if v.type == pa.null():
        return pa.scalar(None, t) if isinstance(v, pa.Scalar) else pa.nulls(len(v), t)
    return pc.cast(v, t)


def _common_type(types: list[pa.DataType]) -> pa.DataType:
    first = types[0]
    if all(t == first for t in types):
        return first
    if all(pa.types.is_integer(t) for t in types):
        return pa.int64()
    if all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in types):
        return pa.float64()
    if all(pa.types.is_string(t) or pa.types.is_large_string(t) for t in types):
        return pa.string()
    return first


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": pc.abs_checked,
    "lower": pc.utf8_lower,
    "upper": pc.utf8_upper,
    "length": pc.utf8_length,
    "coalesce": lambda *a: pc.coalesce(*a),
    "round": lambda v, d=None: pc.round(v, ndigits=d.as_py() if d is not None else 0),
    "floor": pc.floor,
    "ceil": pc.ceil,
    "sqrt": pc.sqrt,
    "ln": pc.ln,
    "nullif": lambda a, b: pc.if_else(
        pc.fill_null(pc.equal(a, b), False), pa.scalar(None, a.type), a
    ),
}
_SQLGLOT_FUNCTIONS: dict[type, str] = {
    exp.Abs: "abs",
    exp.Lower: "lower",
    exp.Upper: "upper",
    exp.Length: "length",
    exp.Coalesce: "coalesce",
    exp.Round: "round",
    exp.Floor: "floor",
    exp.Ceil: "ceil",
    exp.Sqrt: "sqrt",
    exp.Ln: "ln",
    exp.Nullif: "nullif",
}


def compile_expr(node: exp.Expression, scope: Scope) -> Expr:
    """Compile one sqlglot scalar expression; aggregates are the caller's to replace first."""
    expr = _compile(node, scope)
    if node.args.get("negate"):  # sqlglot marks NOT LIKE / NOT IN / ... with a flag
        return Call(_not, [expr], _LazySql(node))
    return expr


class _LazySql:
    """A node's SQL text, rendered only when shown (an error message): rendering every node
    of every expression eagerly made planning quadratic in the expression's size."""

    __slots__ = ("node",)

    def __init__(self, node: exp.Expression) -> None:
        self.node = node

    def __str__(self) -> str:
        return self.node.sql(dialect="duckdb")

    __format__ = lambda self, spec: format(str(self), spec)  # noqa: E731


def _compile(node: exp.Expression, scope: Scope) -> Expr:
    sql = _LazySql(node)

    def sub(n: exp.Expression) -> Expr:
        return compile_expr(n, scope)

    if isinstance(node, exp.Paren):
        return sub(node.this)
    if isinstance(node, exp.Column):
        if isinstance(node.this, exp.Star):
            raise UnsupportedQueryError(f"{describe(node)}: '*' is only allowed in SELECT")
        return scope.resolve(node)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return Literal(pa.scalar(node.this, pa.string()), sql)
        text = node.this
        try:
            return Literal(pa.scalar(int(text), pa.int64()), sql)
        except ValueError:
            return Literal(pa.scalar(float(text), pa.float64()), sql)
    if isinstance(node, exp.Boolean):
        return Literal(pa.scalar(bool(node.this), pa.bool_()), sql)
    if isinstance(node, exp.Null):
        return Literal(pa.scalar(None), sql)
    if isinstance(node, exp.Neg):
        return Call(pc.negate_checked, [sub(node.this)], sql)
    if isinstance(node, exp.Not):
        return Call(_not, [sub(node.this)], sql)
    if isinstance(node, exp.Is):
        if isinstance(node.expression, exp.Null):
            return Call(pc.is_null, [sub(node.this)], sql)
        raise UnsupportedQueryError(f"{describe(node)}: only IS [NOT] NULL is supported")
    if isinstance(node, exp.And | exp.Or):
        return Call(_kleene_chain(type(node)), [sub(o) for o in _chain(node)], sql)
    if type(node) in _BINARY:
        return Call(_BINARY[type(node)], [sub(node.this), sub(node.expression)], sql)
    if isinstance(node, exp.Between):
        ge, le = _BINARY[exp.GTE], _BINARY[exp.LTE]
        return Call(
            lambda v, lo, hi: pc.and_kleene(ge(v, lo), le(v, hi)),
            [sub(node.this), sub(node.args["low"]), sub(node.args["high"])],
            sql,
        )
    if isinstance(node, exp.In):
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise UnsupportedQueryError(f"{describe(node)}: IN with a subquery is not supported")
        items = [sub(i) for i in node.expressions]
        if all(isinstance(i, Literal) for i in items):
            return Call(_in_list, [sub(node.this), *items], sql)
        eq = _BINARY[exp.EQ]

        def in_exprs(v: Any, *xs: Any) -> Any:
            out = eq(v, xs[0])
            for x in xs[1:]:
                out = pc.or_kleene(out, eq(v, x))
            return out

        return Call(in_exprs, [sub(node.this), *items], sql)
    if isinstance(node, exp.Like | exp.ILike):
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            raise UnsupportedQueryError(f"{describe(node)}: LIKE needs a string literal pattern")
        if node.args.get("escape"):
            raise UnsupportedQueryError(f"{describe(node)}: LIKE ... ESCAPE is not supported")
        ignore_case = isinstance(node, exp.ILike)
        text = pattern.this
        return Call(
            lambda v: pc.match_like(v, text, ignore_case=ignore_case), [sub(node.this)], sql
        )
    if isinstance(node, exp.Case):
        args: list[Expr] = []
        operand = node.this
        for when in node.args.get("ifs") or []:
            cond = when.this if operand is None else exp.EQ(this=operand, expression=when.this)
            args += [sub(cond), sub(when.args["true"])]
        default = node.args.get("default")
        if default is not None:
            args.append(sub(default))
        n_whens = len(node.args.get("ifs") or [])
        return Call(_case(n_whens, default is not None), args, sql)
    if isinstance(node, exp.If):
        args = [sub(node.this), sub(node.args["true"])]
        if node.args.get("false") is not None:
            args.append(sub(node.args["false"]))
        return Call(_case(1, len(args) == 3), args, sql)
    if isinstance(node, exp.Cast | exp.TryCast):
        return Call(_cast(_sql_type(node.to)), [sub(node.this)], sql)
    if type(node) in _SQLGLOT_FUNCTIONS:
        name = _SQLGLOT_FUNCTIONS[type(node)]
        operands = [node.this, *node.expressions] if node.this is not None else node.expressions
        if isinstance(node, exp.Round) and node.args.get("decimals") is not None:
            operands = [node.this, node.args["decimals"]]
        if isinstance(node, exp.Nullif):
            operands = [node.this, node.expression]
        return Call(_FUNCTIONS[name], [sub(o) for o in operands], sql)
    if isinstance(node, exp.Anonymous):
        name = str(node.this).lower()
        if name in scope.functions:
            return UdfCall(scope.functions[name], [sub(a) for a in node.expressions], sql)
        raise UnsupportedQueryError(
            f"unknown function {describe(node)}; register Python functions with "
            "Catalog.add_function"
        )
    if isinstance(node, exp.AggFunc):
        raise UnsupportedQueryError(f"aggregate {describe(node)} is not allowed here")
    if isinstance(node, exp.Window):
        raise UnsupportedQueryError(f"window function {describe(node)} is not supported")
    if isinstance(node, exp.Subquery | exp.Select | exp.Exists):
        raise UnsupportedQueryError(f"subquery {describe(node)} is not supported")
    if isinstance(node, exp.Func):
        name = node.sql_name().lower() if hasattr(node, "sql_name") else type(node).__name__
        if name in scope.functions:
            return UdfCall(scope.functions[name], [sub(a) for a in node.iter_expressions()], sql)
        raise UnsupportedQueryError(f"function {describe(node)} is not supported")
    raise UnsupportedQueryError(f"expression {describe(node)} is not supported")
