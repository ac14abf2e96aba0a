"""Arithmetic operators with DuckDB's types and errors: ``+ - *`` (DECIMAL results wider
than Arrow's 38-digit rule allows, computed in 76 digits and narrowed), ``/`` (DOUBLE,
IEEE on a zero divisor), ``%`` (the dividend's sign; exact over DECIMALs), ``//``
(truncating over integers), and the typing of an integer literal operand (``u8 + 1`` is a
UTINYINT, as DuckDB's INTEGER_LITERAL).

Kernels take and return pyarrow Scalars or Arrays; an overflow or a zero divisor of ``%``
and ``//`` raises (pyarrow's error or ZeroDivisionError, named by :class:`Call`).
"""

from __future__ import annotations

import decimal
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.engine.expr.casts import cast_to, unify_null
from eddies.engine.expr.types import MAX_DECIMAL_PRECISION, common_type, decimal_digits
from eddies.router.expressions import Expr, Literal


def _is_int(v: Any) -> bool:
    return pa.types.is_integer(v.type)


def arithmetic(kernel: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``+ - *`` with DuckDB's operand types: where a float meets another number both become
    :func:`common_type` (FLOAT with an integer or DECIMAL stays FLOAT), through our own
    casts, since Arrow's implicit DECIMAL-to-float cast can be one ulp off."""

    def fn(a: Any, b: Any) -> Any:
        a, b = unify_null(a, b)
        if a.type != b.type and (pa.types.is_floating(a.type) or pa.types.is_floating(b.type)):
            target = common_type([a.type, b.type])
            if target is not None and pa.types.is_floating(target):
                a, b = cast_to(a, target), cast_to(b, target)
        wide = _wide_decimal_result(kernel, a.type, b.type)
        if wide is not None:  # beyond 38 digits in Arrow's rule: compute in 76, then narrow
            out = kernel(_as_decimal256(a), _as_decimal256(b))
            return pc.cast(out, wide)  # a value that does not fit: ArrowInvalid, as DuckDB
        return kernel(a, b)

    return fn


def _wide_decimal_result(
    kernel: Callable[[Any, Any], Any], a: pa.DataType, b: pa.DataType
) -> pa.DataType | None:
    """DuckDB's DECIMAL type of ``a op b`` where Arrow's would pass 38 digits, else None.

    Arrow types ``+``/``-`` as max(p - s) + max(s) + 1 digits and ``*`` as p1 + p2 + 1, and
    refuses beyond 38 even when every value fits (``sum(price) * 0.9``: 38 + 2 + 1). DuckDB
    caps the width at 38 (scale max(s) for ``+ -``, s1 + s2 for ``*``) and raises only
    when a value overflows."""
    if not (pa.types.is_decimal(a) or pa.types.is_decimal(b)):
        return None
    da, db = decimal_digits(a), decimal_digits(b)
    if da is None or db is None:
        return None
    (pa_, sa), (pb, sb) = da, db
    if kernel is pc.multiply_checked:
        precision, scale = pa_ + pb + 1, sa + sb
    else:
        scale = max(sa, sb)
        precision = max(pa_ - sa, pb - sb) + scale + 1
    if precision <= MAX_DECIMAL_PRECISION or scale > MAX_DECIMAL_PRECISION:
        return None
    return pa.decimal128(MAX_DECIMAL_PRECISION, scale)


def _as_decimal256(v: Any) -> Any:
    digits = decimal_digits(v.type)
    assert digits is not None
    return pc.cast(v, pa.decimal256(*digits))


def _float_result(a: Any, b: Any) -> pa.DataType:
    """The type of ``/`` (and of ``%``/``//`` over floats) in DuckDB: FLOAT where a FLOAT
    meets a FLOAT, an integer or a DECIMAL, DOUBLE otherwise."""
    target = common_type([a.type, b.type])
    return pa.float32() if target == pa.float32() else pa.float64()


def _no_boolean(a: Any, b: Any, op: str) -> None:
    """DuckDB has no arithmetic on BOOLEAN (Arrow's ``+ - *`` refuse it themselves)."""
    if pa.types.is_boolean(a.type) or pa.types.is_boolean(b.type):
        raise TypeError(f"no {op} for BOOLEAN operands ({a.type} {op} {b.type})")


def divide(a: Any, b: Any) -> Any:
    """``/`` as DuckDB: DOUBLE (FLOAT over FLOAT operands), IEEE on a zero divisor
    (1/0 = inf, 0/0 = NaN). A FLOAT quotient is the DOUBLE quotient of the FLOAT operands
    rounded once more, which is the correctly rounded FLOAT quotient (53 >= 2 * 24 + 2)."""
    a, b = unify_null(a, b)
    _no_boolean(a, b, "/")
    target = _float_result(a, b)
    if target == pa.float32():
        a, b = cast_to(a, target), cast_to(b, target)
    out = pc.divide(cast_to(a, pa.float64()), cast_to(b, pa.float64()))
    return out if target == pa.float64() else pc.cast(out, target)


def _check_divisor(a: Any, b: Any) -> None:
    """DuckDB raises "Division by zero" for ``%`` and ``//`` where both operands are set."""
    zero = pc.and_kleene(pc.equal(b, pa.scalar(0, b.type)), pc.is_valid(a))
    if pc.any(zero).as_py() if isinstance(zero, pa.Array) else zero.as_py():
        raise ZeroDivisionError("division by zero")


def modulo(a: Any, b: Any) -> Any:
    """``%``: the remainder with the dividend's sign (C's fmod), as DuckDB: a zero divisor
    is an error over integers and DECIMALs and NaN where a float is involved."""
    a, b = unify_null(a, b)
    _no_boolean(a, b, "%")
    floating = pa.types.is_floating(a.type) or pa.types.is_floating(b.type)
    if not floating:
        _check_divisor(a, b)
    if _is_int(a) and _is_int(b):
        zero = pc.equal(b, pa.scalar(0, b.type))
        safe_b = pc.if_else(zero, pa.scalar(1, b.type), b)
        # truncating; checked: MIN % -1 overflows in DuckDB too (the quotient does not fit)
        return pc.subtract(a, pc.multiply(pc.divide_checked(a, safe_b), safe_b))
    if not floating and decimal_digits(a.type) is not None and decimal_digits(b.type) is not None:
        return _decimal_modulo(a, b)
    target = _float_result(a, b)
    if target == pa.float32():
        a, b = cast_to(a, target), cast_to(b, target)
    out = _fmod(cast_to(a, pa.float64()), cast_to(b, pa.float64()))
    return out if target == pa.float64() else pc.cast(out, target)


def _decimal_modulo(a: Any, b: Any) -> Any:
    """``%`` where a DECIMAL meets a DECIMAL or an integer (no zero divisor: checked), exact
    as DuckDB's: DECIMAL(max(p1 - s1, p2 - s2) + s, s) with s = max(s1, s2) (38 digits at
    most). ``0.3 % 0.1`` is 0.0; through DOUBLE it was 0.09999999999999998. The operands'
    unscaled integers at the common scale are divided in int64 (NumPy's fmod truncates, as
    DuckDB); a value past int64 at that scale is computed with Python's decimal instead."""
    (pa_, sa), (pb, sb) = decimal_digits(a.type), decimal_digits(b.type)  # type: ignore[misc]
    scale = max(sa, sb)
    precision = min(MAX_DECIMAL_PRECISION, max(pa_ - sa, pb - sb) + scale)
    target = pa.decimal128(max(precision, 1), scale)
    if isinstance(a, pa.Scalar) and isinstance(b, pa.Scalar):
        if not (a.is_valid and b.is_valid):
            return pa.scalar(None, target)
        x, y = decimal.Decimal(a.as_py()), decimal.Decimal(b.as_py())
        return pa.scalar(_decimal_remainder(x, y, scale), target)
    n = len(b) if isinstance(a, pa.Scalar) else len(a)
    xa, xb = (
        _unscaled(v if not isinstance(v, pa.Scalar) else pa.array([v.as_py()] * n, v.type), scale)
        for v in (a, b)
    )
    valid = pc.and_(pc.is_valid(a), pc.is_valid(b))
    if isinstance(valid, pa.Scalar):
        valid = pa.array(np.full(n, valid.as_py()))
    if xa is None or xb is None:  # beyond int64 at this scale: Python's exact decimals
        pairs = zip(_as_list(a, n), _as_list(b, n), strict=True)
        return pa.array(
            [None if x is None or y is None else _decimal_remainder(x, y, scale) for x, y in pairs],
            target,
        )
    divisor = np.where(xb == 0, 1, xb)  # zero only where the dividend is NULL (checked)
    remainder = np.fmod(xa, divisor)
    words = np.empty(2 * n, dtype=np.int64)
    words[0::2], words[1::2] = remainder, remainder >> 63  # little-endian 128-bit
    out = pa.Array.from_buffers(target, n, [None, pa.py_buffer(words.tobytes())])
    return pc.if_else(valid, out, pa.scalar(None, target))


def _decimal_remainder(x: decimal.Decimal, y: decimal.Decimal, scale: int) -> decimal.Decimal:
    """``x % y`` truncated toward zero (Python's Decimal ``%`` is), at ``scale`` digits."""
    with decimal.localcontext() as ctx:
        ctx.prec = 80
        return (x % y).quantize(decimal.Decimal(1).scaleb(-scale))


def _as_list(v: Any, n: int) -> list[Any]:
    if isinstance(v, pa.Scalar):
        return [None if v.as_py() is None else decimal.Decimal(v.as_py())] * n
    return [None if x is None else decimal.Decimal(x) for x in v.to_pylist()]


def _unscaled(v: pa.Array, scale: int) -> np.ndarray | None:
    """``v`` (integers or DECIMALs) as int64 multiples of ``10**-scale`` (NULLs as 0), or
    None when a value does not fit int64 so."""
    if pa.types.is_integer(v.type):
        try:  # a UBIGINT past 2**63 does not fit: Python's decimals instead
            ints = pc.fill_null(v, 0).cast(pa.int64()).to_numpy(zero_copy_only=False)
        except pa.ArrowInvalid:
            return None
        shift = scale
    else:
        v = v.cast(pa.decimal128(38, v.type.scale)) if pa.types.is_decimal256(v.type) else v
        words = np.frombuffer(v.buffers()[1], dtype=np.int64)[
            2 * v.offset : 2 * (v.offset + len(v))
        ]
        low, high = words[0::2], words[1::2]
        if not bool(np.all(high == (low >> 63))):
            return None
        ints = np.where(np.asarray(pc.is_valid(v)), low, 0)
        shift = scale - v.type.scale
    if shift:
        factor = 10**shift
        limit = (2**63 - 1) // factor
        if factor >= 2**63 or bool(np.any((ints > limit) | (ints < -limit))):
            return None
        ints = ints * factor
    return ints


def _fmod(a: Any, b: Any) -> Any:
    """C's ``fmod`` of two DOUBLE values (arrays or scalars), NULL where either is: exact,
    where ``a - trunc(a / b) * b`` is not (``1e300 % 7`` is 1, not 0); a FLOAT remainder
    computed so is the FLOAT one, as fmod is exact."""
    if isinstance(a, pa.Scalar) and isinstance(b, pa.Scalar):
        if not (a.is_valid and b.is_valid):
            return pa.scalar(None, pa.float64())
        with np.errstate(invalid="ignore"):
            out = np.fmod(np.float64(a.as_py()), np.float64(b.as_py()))
        return pa.scalar(float(out), pa.float64())
    valid = pc.and_(pc.is_valid(a), pc.is_valid(b))
    n = len(a) if not isinstance(a, pa.Scalar) else len(b)

    def values(v: Any) -> Any:
        if isinstance(v, pa.Scalar):
            return np.float64(v.as_py()) if v.is_valid else np.float64(0.0)
        return pc.fill_null(v, 0.0).to_numpy(zero_copy_only=False)

    with np.errstate(invalid="ignore"):
        out = np.fmod(values(a), values(b))
    mask = pa.array(np.full(n, valid.as_py())) if isinstance(valid, pa.Scalar) else valid
    return pa.array(out, type=pa.float64(), mask=pc.invert(mask).to_numpy(zero_copy_only=False))


def integer_divide(a: Any, b: Any) -> Any:
    """``//``: truncating division on integers; on other numbers DuckDB divides as ``/``."""
    a, b = unify_null(a, b)
    _no_boolean(a, b, "//")
    _check_divisor(a, b)
    if _is_int(a) and _is_int(b):
        target = common_type([a.type, b.type])
        a, b = cast_to(a, target), cast_to(b, target)
        safe_b = pc.if_else(pc.equal(b, pa.scalar(0, target)), pa.scalar(1, target), b)
        # Arrow's integer divide truncates, as C and DuckDB; MIN // -1 is an overflow error
        return pc.divide_checked(a, safe_b)
    return divide(a, b)


#: Operators whose integer literal operand takes the other operand's integer type.
LITERAL_FITTING = (exp.Add, exp.Sub, exp.Mul, exp.Mod, exp.IntDiv)


def integer_literal(node: exp.Expression, compiled: Expr) -> bool:
    """Whether ``node`` is an integer literal (``1``, ``-1``, ``(1)``; not a CAST or a
    folded ``1 + 1``), as DuckDB's INTEGER_LITERAL type marks it."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Neg):
        node = node.this
    return (
        isinstance(node, exp.Literal)
        and not node.is_string
        and isinstance(compiled, Literal)
        and pa.types.is_integer(compiled.value.type)
    )


def _fit_literal(literal: pa.Scalar, other: pa.DataType) -> pa.Scalar:
    """``literal`` in ``other``'s type when that is an integer type holding its value."""
    if not pa.types.is_integer(other) or other == literal.type or not literal.is_valid:
        return literal
    value, width = literal.as_py(), other.bit_width
    low, high = (
        (0, 2**width)
        if pa.types.is_unsigned_integer(other)
        else (-(2 ** (width - 1)), 2 ** (width - 1))
    )
    return pa.scalar(value, other) if low <= value < high else literal


def literal_fitting(kernel: Callable[[Any, Any], Any], side: int) -> Callable[[Any, Any], Any]:
    """``kernel`` whose operand ``side`` (0 left, 1 right), an integer literal, first takes
    the other operand's integer type where it fits, as DuckDB types an INTEGER_LITERAL:
    ``u8 + 1`` is a UTINYINT (overflowing past 255, an error), ``u8 + 300`` and
    ``u8 + (-1)`` an INTEGER; ``dec + 1`` stays DECIMAL with an INTEGER."""
    if side == 0:
        return lambda a, b: kernel(_fit_literal(a, b.type), b)
    return lambda a, b: kernel(a, _fit_literal(b, a.type))
