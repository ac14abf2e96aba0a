"""Number functions with DuckDB's types and rounding: ``round`` (half away from zero),
``trunc``, ``floor``, ``ceil``, ``abs``, ``sqrt``, ``ln``, ``log``, ``exp``, ``power``,
``sign``, ``greatest`` and ``least`` (NULLs ignored; NaN above every number).

Kernels take and return pyarrow Scalars or Arrays; an overflow raises (``abs`` of the
smallest integer), as in DuckDB.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.engine.expr.casts import cast_to, round_half_away, unify
from eddies.engine.expr.guarded import NullFolded, is_null_constant
from eddies.engine.expr.registry import Site, register, register_kernels
from eddies.engine.expr.types import MAX_DECIMAL_PRECISION, plain
from eddies.errors import UnsupportedQueryError, describe
from eddies.router.expressions import Expr, Literal


def _decimal_round(v: Any, digits: int) -> Any:
    """``round(decimal, d)``: the rounded value with scale ``max(d, 0)`` as DuckDB prints it."""
    t = v.type
    if digits >= t.scale:
        return v
    rounded = round_half_away(v, digits)
    scale = max(digits, 0)
    precision = min(MAX_DECIMAL_PRECISION, max(1, t.precision + 1 - (t.scale - scale)))
    return pc.cast(rounded, pa.decimal128(precision, scale))


def _round(v: Any, d: Any = None) -> Any:
    """``round(x[, d])``: half away from zero, as DuckDB, for DOUBLE and DECIMAL alike."""
    v = plain(v)
    if d is not None and not d.is_valid:  # round(x, NULL) is NULL
        return pa.scalar(None, v.type) if isinstance(v, pa.Scalar) else pa.nulls(len(v), v.type)
    digits = 0 if d is None else d.as_py()
    if pa.types.is_integer(v.type):
        # DuckDB: a signed integer keeps its type, an unsigned one becomes a BIGINT
        # (round(u8, -1) of 255 is 260); an overflow is an error, as there.
        if pa.types.is_unsigned_integer(v.type) and v.type.bit_width < 64:
            v = cast_to(v, pa.int64())
        if digits >= 0:
            return v
    if pa.types.is_decimal(v.type):
        return _decimal_round(v, digits)
    return round_half_away(v, digits)


def _floor_ceil(kernel: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``floor``/``ceil`` typed as DuckDB: an integer becomes a DOUBLE (``floor(u8) + i32``
    must not overflow UTINYINT or INTEGER), a DECIMAL(p, s) a DECIMAL(p, 0)."""

    def fn(v: Any) -> Any:
        v = plain(v)
        if pa.types.is_integer(v.type):
            return cast_to(v, pa.float64())
        if pa.types.is_decimal(v.type):  # one more digit: floor(-99999.99) is -100000
            t = v.type
            out = kernel(
                pc.cast(v, pa.decimal128(min(MAX_DECIMAL_PRECISION, t.precision + 1), t.scale))
            )
            return pc.cast(out, pa.decimal128(t.precision, 0))
        return kernel(v)

    return fn


def _digits_literal(node: exp.Expression, digits: Expr) -> Expr:
    """The digits argument of ``round``/``trunc``: an integer literal or NULL (the result
    is then NULL, as DuckDB's); a column, an expression or ``1.5`` is refused (the kernels
    take one number of digits per call; DuckDB has no round(DOUBLE, DECIMAL) either)."""
    value = digits.value if isinstance(digits, Literal) else None
    if value is not None and not value.is_valid:
        return Literal(pa.scalar(None, pa.int32()), "NULL")
    if value is None or not pa.types.is_integer(value.type):
        raise UnsupportedQueryError(
            f"{describe(node)}: the number of digits must be an integer literal"
        )
    return digits


def _trunc(v: Any, d: Any = None) -> Any:
    """``trunc(x[, d])``: toward zero, in x's type as DuckDB (a DECIMAL(p, s) becomes
    DECIMAL(p, min(d, s)) and keeps its digits; an integer with d >= 0 is itself)."""
    v = plain(v)
    if d is not None and not d.is_valid:  # trunc(x, NULL) is NULL
        return pa.scalar(None, v.type) if isinstance(v, pa.Scalar) else pa.nulls(len(v), v.type)
    digits = 0 if d is None else d.as_py()
    if pa.types.is_integer(v.type):
        if digits >= 0:
            return v
        step = pa.scalar(10 ** min(-digits, 18), pa.int64())
        wide = cast_to(v, pa.int64())
        return cast_to(pc.multiply(pc.divide(wide, step), step), v.type)  # divide truncates
    if not (pa.types.is_decimal(v.type) or pa.types.is_floating(v.type)):
        raise TypeError(f"trunc needs a number, got {v.type}")
    if pa.types.is_decimal(v.type):  # Arrow wants a digit to spare (0.5 is DECIMAL(1, 1))
        t = v.type
        wider = pa.decimal128(min(MAX_DECIMAL_PRECISION, t.precision + 1), t.scale)
        out = pc.round(pc.cast(v, wider), ndigits=digits, round_mode="towards_zero")
        return pc.cast(out, pa.decimal128(t.precision, max(0, min(digits, t.scale))))
    return pc.round(v, ndigits=digits, round_mode="towards_zero")


def _double(v: Any) -> Any:
    return cast_to(plain(v), pa.float64())


def _power(a: Any, b: Any) -> Any:
    """``power(a, b)``: DOUBLE, IEEE results (0^-1 = inf, (-8)^(1/3) = NaN) as DuckDB."""
    return pc.power(_double(a), _double(b))


def _sign(v: Any) -> Any:
    """``sign(x)``: -1, 0 or 1 as TINYINT; NaN and -0.0 give 0, as DuckDB."""
    v = plain(v)
    if v.type == pa.null():
        return cast_to(v, pa.int8())
    if pa.types.is_decimal(v.type):
        v = cast_to(v, pa.float64())
    s = pc.sign(v)
    if pa.types.is_floating(v.type):
        s = pc.if_else(pc.is_nan(v), pa.scalar(0.0, v.type), s)
    return pc.cast(s, pa.int8())


def _extreme(greatest: bool) -> Callable[..., Any]:
    """``greatest``/``least``: NULLs ignored (NULL only if all are); NaN is above every
    number (greatest of anything with a NaN is NaN; least skips it), as DuckDB."""

    def fn(*values: Any) -> Any:
        values = unify(list(values))
        if values[0].type == pa.null():
            return values[0]
        kernel = pc.max_element_wise if greatest else pc.min_element_wise
        out = kernel(*values, skip_nulls=True)
        if pa.types.is_floating(out.type):
            nans = [pc.fill_null(pc.is_nan(v), False) for v in values]
            any_nan = nans[0]
            all_nan = pc.or_(nans[0], pc.is_null(values[0]))
            for x, v in zip(nans[1:], values[1:], strict=True):
                any_nan = pc.or_(any_nan, x)
                all_nan = pc.and_(all_nan, pc.or_(x, pc.is_null(v)))
            nan = pa.scalar(float("nan"), out.type)
            out = pc.if_else(any_nan if greatest else pc.and_(all_nan, any_nan), nan, out)
        return out

    return fn


register_kernels(
    {
        exp.Abs: lambda v: pc.abs_checked(plain(v)),
        exp.Floor: _floor_ceil(pc.floor),
        exp.Ceil: _floor_ceil(pc.ceil),
        exp.Sqrt: lambda v: pc.sqrt(cast_to(plain(v), pa.float64())),
        exp.Ln: lambda v: pc.ln(cast_to(plain(v), pa.float64())),
    }
)


@register(exp.Round, exp.Trunc)
def _compile_round(node: exp.Round | exp.Trunc, site: Site) -> Expr:
    """``round``/``trunc(x[, digits])``; NULL digits fold the call to NULL."""
    kernel = _round if isinstance(node, exp.Round) else _trunc
    if node.args.get("decimals") is not None:
        compiled = [site.compile(node.this), site.compile(node.args["decimals"])]
    else:
        compiled = site.this_and_expressions()
    if len(compiled) == 2:
        compiled[1] = _digits_literal(node, compiled[1])
        if is_null_constant(compiled[1]):
            return NullFolded(site.call(kernel, compiled), site.sql)
    return site.call(kernel, compiled)


@register(exp.Pow)
def _compile_power(node: exp.Pow, site: Site) -> Expr:
    return site.call(_power, site.ops("this", "expression"))


@register(exp.Log)
def _compile_log(node: exp.Log, site: Site) -> Expr:
    """``log(x)`` is log10 in DuckDB; ``log(b, x)`` the base-b logarithm."""
    if node.expression is None:
        return site.call(lambda x: pc.log10(_double(x)), site.ops("this"))
    return site.call(lambda b, x: pc.logb(_double(x), _double(b)), site.ops("this", "expression"))


@register(exp.Exp)
def _compile_exp(node: exp.Exp, site: Site) -> Expr:
    return site.call(lambda x: pc.exp(_double(x)), site.ops("this"))


@register(exp.Sign)
def _compile_sign(node: exp.Sign, site: Site) -> Expr:
    return site.call(_sign, site.ops("this"))


@register(exp.Greatest, exp.Least)
def _compile_extreme(node: exp.Greatest | exp.Least, site: Site) -> Expr:
    operands = [site.compile(node.this), *[site.compile(e) for e in node.expressions]]
    return site.call(_extreme(isinstance(node, exp.Greatest)), operands)
