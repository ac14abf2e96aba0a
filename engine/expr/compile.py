"""Compile sqlglot scalar expressions into :mod:`eddies.router.expressions` trees.

Semantics follow DuckDB, our test oracle: ``/`` is floating-point division, division or
modulo by zero gives NULL, ``IN`` with a NULL in the list is NULL when nothing matches,
integer arithmetic overflows raise, CAST of a float to an integer rounds.
A :class:`Scope` resolves column references and function names; anything it cannot resolve
or that eddies does not implement raises an :class:`EddiesError` naming the construct.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.engine.expr import datetime_arith as dta
from eddies.engine.expr.intervals import parse_span
from eddies.errors import EddiesError, ExpressionError, UnsupportedQueryError, describe
from eddies.router.expressions import (
    KERNEL_ERRORS,
    Call,
    ColumnRef,
    Env,
    Expr,
    FunctionSpec,
    Literal,
    UdfCall,
)
from eddies.sources.decimal_float import decimal_to_float


class Scope(Protocol):
    """Resolves names while compiling."""

    functions: Mapping[str, FunctionSpec]

    def resolve(self, column: exp.Column) -> ColumnRef: ...


# ------------------------------------------------------------------------ type unification
#: Decimal digits an integer type needs, as DuckDB counts them when an integer meets a
#: DECIMAL (INTEGER is DECIMAL(10,0), BIGINT DECIMAL(19,0)).
_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}
MAX_DECIMAL_PRECISION = 38


def _plain(v: Any) -> Any:
    """A value with dictionary encoding removed (kernels want the value type)."""
    if pa.types.is_dictionary(v.type):
        if isinstance(v, pa.Scalar):
            return v.value if v.is_valid else pa.scalar(None, v.type.value_type)
        return pc.cast(v, v.type.value_type)
    return v


def _is_stringy(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def common_type(types: list[pa.DataType]) -> pa.DataType | None:
    """The type DuckDB's implicit casts bring ``types`` to, or None if there is none.

    One rule set for CASE/COALESCE/IN/NULLIF/comparisons: NULL takes any type; integers
    widen; integers with DECIMALs give a DECIMAL wide enough for both (BIGINT counts as 19
    digits); FLOAT with integers or DECIMALs gives FLOAT, any DOUBLE with numbers gives
    DOUBLE; string kinds give VARCHAR; DATE with TIMESTAMP gives TIMESTAMP.
    """
    types = [t.value_type if pa.types.is_dictionary(t) else t for t in types]
    types = [t for t in types if t != pa.null()]
    if not types:
        return pa.null()
    first = types[0]
    if all(t == first for t in types):
        return first
    if all(_is_stringy(t) for t in types):
        return pa.string()
    if all(pa.types.is_integer(t) for t in types):
        if all(pa.types.is_signed_integer(t) for t in types):
            return max(types, key=lambda t: t.bit_width)
        if all(pa.types.is_unsigned_integer(t) for t in types):
            return max(types, key=lambda t: t.bit_width)
        if any(pa.types.is_uint64(t) for t in types):
            return pa.decimal128(20, 0)  # UBIGINT with a signed type: both fit exactly
        return pa.int64()
    if all(pa.types.is_integer(t) or pa.types.is_decimal(t) for t in types):
        scale = max(t.scale for t in types if pa.types.is_decimal(t))
        digits = max(
            (t.precision - t.scale)
            if pa.types.is_decimal(t)
            else _INT_DIGITS[t.bit_width] + pa.types.is_uint64(t)  # 2**64 - 1: 20 digits
            for t in types
        )
        return pa.decimal128(min(MAX_DECIMAL_PRECISION, digits + scale), scale)
    if all(
        pa.types.is_integer(t) or pa.types.is_decimal(t) or pa.types.is_floating(t) for t in types
    ):
        floats = {t for t in types if pa.types.is_floating(t)}
        return pa.float32() if floats == {pa.float32()} else pa.float64()
    if all(pa.types.is_timestamp(t) or pa.types.is_date(t) for t in types):
        stamps = [t for t in types if pa.types.is_timestamp(t)]
        if not stamps:
            return pa.date32()
        tz = next((t.tz for t in stamps if t.tz is not None), None)
        return pa.timestamp("us", tz=tz)
    return None


def cast_to(v: Any, target: pa.DataType) -> Any:
    """Cast an operand to an implicitly unified type (no value may change but a widening)."""
    v = _plain(v)
    if v.type == target:
        return v
    if v.type == pa.null():
        return pa.scalar(None, target) if isinstance(v, pa.Scalar) else pa.nulls(len(v), target)
    return convert(v, target)


def unify(values: list[Any]) -> list[Any]:
    """Operands brought to one type as DuckDB does before comparing or choosing among them.

    A string literal meeting a typed operand is cast to its type (``d = '2020-01-01'``,
    ``i = '2'``), as DuckDB treats string literals as of unknown type.
    """
    values = [_plain(v) for v in values]
    typed = [v.type for v in values if not _is_string_literal(v)]
    if typed and len(typed) < len(values):
        target = common_type(typed)
        if target is not None and target != pa.null() and not _is_stringy(target):
            values = [convert(v, target) if _is_string_literal(v) else v for v in values]
    target = common_type([v.type for v in values])
    if target is None:
        return values  # no implicit cast: the kernel names the mismatch
    return [cast_to(v, target) for v in values]


def _is_string_literal(v: Any) -> bool:
    return isinstance(v, pa.Scalar) and _is_stringy(v.type)


def _unify_null(a: Any, b: Any) -> tuple[Any, Any]:
    """Give a NULL operand the other operand's type and drop dictionary encoding (Arrow
    kernels reject the null type and most dictionary inputs)."""
    a, b = _plain(a), _plain(b)
    if a.type == pa.null() and b.type != pa.null():
        a = cast_to(a, b.type)
    if b.type == pa.null() and a.type != pa.null():
        b = cast_to(b, a.type)
    return a, b


def _binary(kernel: Callable[[Any, Any], Any], unified: bool = False) -> Callable:
    def fn(a: Any, b: Any) -> Any:
        if unified:
            a, b = unify([a, b])
        else:
            a, b = _unify_null(a, b)
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
        a, b = unify([a, b])
        if a.type == pa.null() and b.type == pa.null():  # NULL = NULL is NULL
            a, b = cast_to(a, pa.bool_()), cast_to(b, pa.bool_())
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
        # A NaN term alone must not turn a NULL comparison TRUE (NULL <= NaN is NULL).
        if kernel_name == "greater_equal":
            return pc.or_kleene(plain, pc.and_kleene(a_nan, pc.is_valid(b)))
        if kernel_name == "less":
            return pc.or_kleene(plain, pc.and_kleene(pc.invert(a_nan), b_nan))
        return pc.or_kleene(plain, pc.and_kleene(b_nan, pc.is_valid(a)))  # less_equal

    return fn


def _arithmetic(kernel: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``+ - *`` with DuckDB's operand types: where a float meets another number both become
    :func:`common_type` (FLOAT with an integer or DECIMAL stays FLOAT), through our own
    casts, since Arrow's implicit DECIMAL-to-float cast can be one ulp off."""

    def fn(a: Any, b: Any) -> Any:
        a, b = _unify_null(a, b)
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


def _digits(t: pa.DataType) -> tuple[int, int] | None:
    """(precision, scale) of a DECIMAL or an integer type (as DuckDB widens it), else None."""
    if pa.types.is_decimal(t):
        return t.precision, t.scale
    if pa.types.is_integer(t):
        return _INT_DIGITS[t.bit_width] + pa.types.is_uint64(t), 0
    return None


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
    da, db = _digits(a), _digits(b)
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
    digits = _digits(v.type)
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


def _divide(a: Any, b: Any) -> Any:
    """``/`` as DuckDB: DOUBLE (FLOAT over FLOAT operands), IEEE on a zero divisor
    (1/0 = inf, 0/0 = NaN). A FLOAT quotient is the DOUBLE quotient of the FLOAT operands
    rounded once more, which is the correctly rounded FLOAT quotient (53 >= 2 * 24 + 2)."""
    a, b = _unify_null(a, b)
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


def _modulo(a: Any, b: Any) -> Any:
    """``%``: the remainder with the dividend's sign (C's fmod), as DuckDB: a zero divisor
    is an error over integers and DECIMALs and NaN where a float is involved."""
    a, b = _unify_null(a, b)
    _no_boolean(a, b, "%")
    floating = pa.types.is_floating(a.type) or pa.types.is_floating(b.type)
    if not floating:
        _check_divisor(a, b)
    if _is_int(a) and _is_int(b):
        zero = pc.equal(b, pa.scalar(0, b.type))
        safe_b = pc.if_else(zero, pa.scalar(1, b.type), b)
        # truncating; checked: MIN % -1 overflows in DuckDB too (the quotient does not fit)
        return pc.subtract(a, pc.multiply(pc.divide_checked(a, safe_b), safe_b))
    if not floating and _digits(a.type) is not None and _digits(b.type) is not None:
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
    (pa_, sa), (pb, sb) = _digits(a.type), _digits(b.type)  # type: ignore[misc]
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


def _integer_divide(a: Any, b: Any) -> Any:
    """``//``: truncating division on integers; on other numbers DuckDB divides as ``/``."""
    a, b = _unify_null(a, b)
    _no_boolean(a, b, "//")
    _check_divisor(a, b)
    if _is_int(a) and _is_int(b):
        target = common_type([a.type, b.type])
        a, b = cast_to(a, target), cast_to(b, target)
        safe_b = pc.if_else(pc.equal(b, pa.scalar(0, target)), pa.scalar(1, target), b)
        # Arrow's integer divide truncates, as C and DuckDB; MIN // -1 is an overflow error
        return pc.divide_checked(a, safe_b)
    return _divide(a, b)


#: Operators whose integer literal operand takes the other operand's integer type.
_LITERAL_FITTING = (exp.Add, exp.Sub, exp.Mul, exp.Mod, exp.IntDiv)


def _integer_literal(node: exp.Expression, compiled: Expr) -> bool:
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


def _literal_fitting(kernel: Callable[[Any, Any], Any], side: int) -> Callable[[Any, Any], Any]:
    """``kernel`` whose operand ``side`` (0 left, 1 right), an integer literal, first takes
    the other operand's integer type where it fits, as DuckDB types an INTEGER_LITERAL:
    ``u8 + 1`` is a UTINYINT (overflowing past 255, an error), ``u8 + 300`` and
    ``u8 + (-1)`` an INTEGER; ``dec + 1`` stays DECIMAL with an INTEGER."""
    if side == 0:
        return lambda a, b: kernel(_fit_literal(a, b.type), b)
    return lambda a, b: kernel(a, _fit_literal(b, a.type))


def _concat(a: Any, b: Any) -> Any:
    """``||``: both sides as VARCHAR (DuckDB casts numbers, dates, booleans); NULL if either is."""
    a, b = _unify_null(a, b)
    a = convert(a, pa.string()) if not pa.types.is_string(a.type) else a
    b = convert(b, pa.string()) if not pa.types.is_string(b.type) else b
    return pc.binary_join_element_wise(a, b, "")


def _temporal(wrap: Callable[[Any], Any], kernel: Callable[[Any, Any], Any]) -> Callable:
    """``+`` / ``-`` with DuckDB's DATE arithmetic (see eddies.engine.expr.datetime_arith)."""
    fn = wrap(kernel)
    return lambda a, b: fn(_plain(a), _plain(b))


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    exp.Add: _temporal(dta.temporal_add, _arithmetic(pc.add_checked)),
    exp.Sub: _temporal(dta.temporal_sub, _arithmetic(pc.subtract_checked)),
    exp.Mul: _arithmetic(pc.multiply_checked),
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
        T.TIMESTAMPNTZ: pa.timestamp("us"),  # DuckDB's TIMESTAMP, as sqlglot reads it
        T.DATETIME: pa.timestamp("us"),
        T.TIMESTAMP_S: pa.timestamp("s"),
        T.TIMESTAMP_MS: pa.timestamp("ms"),
        T.TIMESTAMP_NS: pa.timestamp("ns"),
        T.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),  # shown in UTC, DuckDB's TimeZone here
    }
    if t in simple:
        return simple[t]
    if t == T.DECIMAL:
        texts = [
            p.this.sql() if isinstance(p.this, exp.Expression) else str(p.this)
            for p in node.expressions
        ]
        if not all(re.fullmatch(r"\d+", text) for text in texts) or len(texts) > 2:
            raise UnsupportedQueryError(
                f"type {describe(node)}: DECIMAL takes a width and a scale, both whole numbers"
            )
        params = [int(text) for text in texts] if texts else [18, 3]
        precision, scale = [*params, 0][:2]
        if not (1 <= precision <= MAX_DECIMAL_PRECISION and 0 <= scale <= precision):
            raise UnsupportedQueryError(f"type {node.sql()}: width must be 1..38, scale 0..width")
        return pa.decimal128(precision, scale)
    raise UnsupportedQueryError(f"type {node.sql()} is not supported")


# ------------------------------------------------------------------------------ casts
def _round_half_away(v: Any, digits: int) -> Any:
    """Round half away from zero (DuckDB's round and decimal casts); a DECIMAL gets one more
    digit first, so 99999999.99 rounds to 100000000.0 instead of overflowing its type."""
    if pa.types.is_decimal(v.type):
        t = v.type
        if digits >= t.scale:
            return v
        v = cast_to(v, pa.decimal128(min(MAX_DECIMAL_PRECISION, t.precision + 1), t.scale))
    return pc.round(v, ndigits=digits, round_mode="half_towards_infinity")


def _decimal_round(v: Any, digits: int) -> Any:
    """``round(decimal, d)``: the rounded value with scale ``max(d, 0)`` as DuckDB prints it."""
    t = v.type
    if digits >= t.scale:
        return v
    rounded = _round_half_away(v, digits)
    scale = max(digits, 0)
    precision = min(MAX_DECIMAL_PRECISION, max(1, t.precision + 1 - (t.scale - scale)))
    return pc.cast(rounded, pa.decimal128(precision, scale))


def _to_varchar(v: Any) -> Any:
    """Values as DuckDB prints them in ``CAST(x AS VARCHAR)``."""
    t = v.type
    if pa.types.is_boolean(t):
        return pc.if_else(v, "true", "false")
    if pa.types.is_floating(t):
        return _float_text(v)
    if pa.types.is_timestamp(t):
        text = pc.cast(v, pa.string())
        # '... 00:00:01.500000' -> '... 00:00:01.5'; '.000000' goes; UTC 'Z' is '+00'
        text = pc.replace_substring_regex(text, r"\.([0-9]*[1-9])0+($|Z)", r".\1\2")
        text = pc.replace_substring_regex(text, r"\.0+($|Z)", r"\1")
        if t.tz is not None:
            text = pc.replace_substring_regex(text, r"Z$", "+00")
        return text
    return pc.cast(v, pa.string())


def _float_text(v: Any) -> Any:
    """DOUBLE to text as DuckDB (and Python's repr): shortest round-trip digits, fixed
    notation for 1e-4 <= |x| < 1e16 with at least one decimal, else ``1e+16``/``2.5e-07``.

    Arrow gives the same digits with other layout rules; the rows whose layout differs
    (integral values get '.0', two-digit exponents) are fixed vectorized, and the rare rows
    where Arrow switches notation elsewhere than Python are re-rendered one by one.
    """
    text = pc.cast(v, pa.string())
    if isinstance(text, pa.Scalar):
        return pa.scalar(None if not text.is_valid else repr(v.as_py()), pa.string())
    text = pc.replace_substring_regex(text, r"^(-?[0-9]+)$", r"\1.0")
    text = pc.replace_substring_regex(text, r"e([+-])([0-9])$", r"e\10\2")
    absolute = pc.abs(v)
    sci = pc.match_substring(text, "e")
    fixed_range = pc.and_(pc.greater_equal(absolute, 1e-4), pc.less(absolute, 1e16))
    wrong = pc.fill_null(pc.xor(sci, pc.invert(fixed_range)), False)
    special = pc.fill_null(pc.or_(pc.invert(pc.is_finite(v)), pc.equal(absolute, 0.0)), True)
    wrong = pc.and_(wrong, pc.invert(special))
    if pc.any(wrong).as_py():
        idx = pc.indices_nonzero(pc.fill_null(wrong, False))
        fixed = pa.array([repr(x) for x in pc.take(v, idx).to_pylist()], pa.string())
        text = pc.replace_with_mask(text, pc.fill_null(wrong, False), fixed)
    return text


def convert(v: Any, target: pa.DataType) -> Any:
    """``CAST(v AS target)`` with DuckDB's rules.

    DOUBLE to integer rounds half to even, DECIMAL and text to integer half away from zero;
    integers widen to any DECIMAL their values fit; text parses with surrounding spaces;
    naive text cast to TIMESTAMPTZ is UTC; VARCHAR prints as DuckDB does. A value that does
    not fit or parse raises (pyarrow's error, named by :class:`Call`).
    """
    v = _plain(v)
    src = v.type
    if src == target:
        return v
    if src == pa.null():
        return cast_to(v, target)
    if _is_stringy(target):
        return pc.cast(_to_varchar(v), target)
    if _is_stringy(src) and not pa.types.is_timestamp(target):
        v = pc.utf8_trim_whitespace(v)
    if pa.types.is_integer(target):
        if pa.types.is_floating(src):
            v = pc.round(v, round_mode="half_to_even")  # as DuckDB: 2.5 -> 2, -0.5 -> 0
        elif pa.types.is_decimal(src):
            v = _round_half_away(v, 0)
        elif _is_stringy(src):
            try:
                return pc.cast(v, target)
            except pa.ArrowInvalid as exc:  # '1.5' is 2 in DuckDB
                try:
                    v = _round_half_away(pc.cast(v, pa.float64()), 0)
                except pa.ArrowInvalid:
                    raise exc from None
        return pc.cast(v, target)
    if pa.types.is_decimal(target):
        if pa.types.is_integer(src):
            v = pc.cast(v, pa.decimal128(MAX_DECIMAL_PRECISION, 0))
        elif _is_stringy(src):
            try:
                return pc.cast(v, target)
            except pa.ArrowInvalid:  # more digits than the scale: round them
                v = pc.cast(v, pa.float64())
        elif pa.types.is_boolean(src):
            v = pc.cast(pc.cast(v, pa.int8()), pa.decimal128(MAX_DECIMAL_PRECISION, 0))
        if pa.types.is_floating(v.type) or v.type.scale > target.scale:
            v = _round_half_away(v, target.scale)
        if pa.types.is_decimal(v.type) and v.type.scale < target.scale:
            v = pc.cast(v, pa.decimal128(MAX_DECIMAL_PRECISION, target.scale))
        return pc.cast(v, target)
    if pa.types.is_timestamp(target) and _is_stringy(src):
        try:
            return pc.cast(v, target)
        except pa.ArrowInvalid:  # no offset in the text: it is in the session's zone (UTC)
            return pc.cast(pc.cast(v, pa.timestamp(target.unit)), target)
    if pa.types.is_date(target) and pa.types.is_timestamp(src):
        return pc.cast(v, target, safe=False)  # the date part, as DuckDB
    if pa.types.is_decimal(src) and pa.types.is_floating(target):
        return decimal_to_float(v, target)  # Arrow's cast can be one ulp off
    if pa.types.is_integer(src) and pa.types.is_floating(target):
        return pc.cast(v, target, safe=False)  # rounds to nearest, as DuckDB (2**24 + 1)
    if pa.types.is_float64(src) and pa.types.is_float32(target):
        out = pc.cast(v, target)  # Arrow gives inf past FLOAT's range; DuckDB raises
        overflow = pc.and_(pc.is_inf(out), pc.is_finite(v))
        if pc.any(overflow).as_py() if not isinstance(overflow, pa.Scalar) else overflow.as_py():
            raise pa.ArrowInvalid("a DOUBLE value is out of range for FLOAT")
        return out
    return pc.cast(v, target)


def try_convert(v: Any, target: pa.DataType) -> Any:
    """``TRY_CAST``: as :func:`convert`, with NULL where a value does not convert.

    Vectorized: the whole array is cast at once; only when that fails are its halves cast
    separately, so k bad values cost O(k log n) casts rather than one per row.
    """
    try:
        return convert(v, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError, ValueError):
        if isinstance(v, pa.Scalar) or len(v) <= 1:
            if isinstance(v, pa.Scalar):
                return pa.scalar(None, target)
            return pa.nulls(len(v), target)
    half = len(v) // 2
    parts = [try_convert(v.slice(0, half), target), try_convert(v.slice(half), target)]
    return pa.concat_arrays(parts)


def _folded(call: Call) -> Expr:
    """``call`` evaluated once when its arguments are all literals (a CAST of a constant:
    ``DATE '1996-01-01'`` costs ~0.1 ms a batch otherwise), else ``call``. A call that
    fails is kept, so the error comes when it is evaluated, as before."""
    if not all(isinstance(a, Literal) for a in call.args):
        return call
    try:
        value = call.eval({}, 1)
    except Exception:  # raised again, the same way, at evaluation
        return call
    if not isinstance(value, pa.Scalar):
        return call
    return Literal(value, call.sql)


def _cast(target: pa.DataType, safe: bool) -> Callable[[Any], Any]:
    def fn(v: Any) -> Any:
        if safe:
            return try_convert(v, target)
        return convert(v, target)

    return fn


def _not(v: Any) -> Any:
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


def _as_bool(v: Any) -> Any:
    """A CASE condition: NULL-typed (``WHEN NULL``, a key column of no rows) as BOOLEAN."""
    v = _plain(v)
    return cast_to(v, pa.bool_()) if v.type == pa.null() else v


def _case(n_whens: int, has_default: bool) -> Callable[..., Any]:
    def fn(*values: Any) -> Any:
        conds = [pc.fill_null(_as_bool(values[2 * i]), False) for i in range(n_whens)]
        results = [values[2 * i + 1] for i in range(n_whens)]
        default = values[-1] if has_default else pa.scalar(None)
        *results, default = unify([*results, default])
        n = max((len(v) for v in values if isinstance(v, pa.Array)), default=1)
        cond_arrays = [_broadcast_bool(c, n) for c in conds]
        struct = pa.StructArray.from_arrays(cond_arrays, names=[f"c{i}" for i in range(n_whens)])
        out = pc.case_when(struct, *results, default)
        if not any(isinstance(v, pa.Array | pa.ChunkedArray) for v in values):
            return out[0]  # all constants: a constant (one value per row would be wrong)
        return out

    return fn


@dataclass(eq=False)
class Guarded(Expr):
    """CASE (``n_whens`` WHENs) or COALESCE (``n_whens`` None) evaluated as DuckDB does: a
    branch only over the rows that reach it, so ``CASE WHEN x <> 0 THEN 10 // x END`` and
    ``coalesce(a, 10 // x)`` do not fail on the rows the guard keeps away.

    ``eager`` (one vectorized call over every row, the common case) runs first; only when it
    raises an :class:`ExpressionError` is the expression evaluated branch by branch over
    the rows still undecided, and an error there is a real one. The result has the type
    the eager call gives (its operands unified as DuckDB does).
    """

    eager: Call
    n_whens: int | None
    sql: object = ""

    def eval(self, env: Env, n: int) -> Any:
        try:
            return self.eager.eval(env, n)
        except ExpressionError:
            if n == 0:  # a type error: no row to keep away
                raise
        pieces = self._case(env, n) if self.n_whens is not None else self._coalesce(env, n)
        try:
            return _assemble(pieces, n)
        except KERNEL_ERRORS as exc:
            raise ExpressionError(f"evaluating {self.sql} failed: {exc}") from exc

    def children(self) -> list[Expr]:
        return self.eager.args

    def _case(self, env: Env, n: int) -> list[tuple[np.ndarray, Any]]:
        args = self.eager.args
        rows = np.arange(n)
        pieces: list[tuple[np.ndarray, Any]] = []
        for i in range(self.n_whens or 0):
            cond = _as_bool(args[2 * i].eval(_rows_of(env, rows, args[2 * i]), len(rows)))
            keep = _mask(pc.fill_null(cond, False), len(rows))
            taken = rows[keep]
            then = args[2 * i + 1]
            pieces.append((taken, then.eval(_rows_of(env, taken, then), len(taken))))
            rows = rows[~keep]
        if len(args) % 2:  # ELSE
            pieces.append((rows, args[-1].eval(_rows_of(env, rows, args[-1]), len(rows))))
        else:
            pieces.append((rows, pa.scalar(None)))
        return pieces

    def _coalesce(self, env: Env, n: int) -> list[tuple[np.ndarray, Any]]:
        args = self.eager.args
        rows = np.arange(n)
        pieces: list[tuple[np.ndarray, Any]] = []
        for i, arg in enumerate(args):  # every argument, on no rows once all are set: types
            value = _plain(arg.eval(_rows_of(env, rows, arg), len(rows)))
            if i == len(args) - 1:
                set_ = np.ones(len(rows), dtype=bool)
            elif isinstance(value, pa.Scalar):
                set_ = np.full(len(rows), value.is_valid)
            else:
                set_ = _mask(pc.is_valid(value), len(rows))
            kept = value if isinstance(value, pa.Scalar) else value.filter(pa.array(set_))
            pieces.append((rows[set_], kept))
            rows = rows[~set_]
        return pieces


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


def _is_null(expr: Expr) -> bool:
    """A NULL constant: a NULL literal, or an operation folded to NULL."""
    return isinstance(expr, NullFolded) or (isinstance(expr, Literal) and not expr.value.is_valid)


@dataclass(eq=False)
class NullFolded(Expr):
    """An operation with a NULL constant operand (``(10 // x) + NULL``, ``s LIKE NULL``,
    ``round(x, NULL)``): NULL on every row, as DuckDB's optimizer folds it before running,
    so an error in the other operand (a division by zero) never surfaces. The call runs as
    usual (its type, and the common case); only if it raises are NULLs of its type given.
    """

    call: Call
    sql: object = ""

    def eval(self, env: Env, n: int) -> Any:
        try:
            return self.call.eval(env, n)
        except ExpressionError:
            if n == 0:  # a type error
                raise
            empty = _rows_of(env, np.zeros(0, dtype=np.int64), self.call)
            return pa.nulls(n, _plain(self.call.eval(empty, 0)).type)

    def children(self) -> list[Expr]:
        return [self.call]


def _rows_of(env: Env, rows: np.ndarray, expr: Expr) -> dict[Any, Any]:
    """The part of ``env`` that ``expr`` reads, at ``rows`` (positions)."""
    keys = [*expr.column_keys(), *expr.udf_calls()]
    return {k: env[k].take(rows) for k in keys if k in env}


def _mask(values: Any, n: int) -> np.ndarray:
    if isinstance(values, pa.Scalar):
        return np.full(n, bool(values.as_py()))
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=bool)


def _assemble(pieces: list[tuple[np.ndarray, Any]], n: int) -> pa.Array:
    """One array of ``n`` values from (positions, values) pieces covering every row once:
    the values unified as the eager call unifies them, then put back in row order."""
    from eddies.router.expressions import broadcast

    values = unify([v for _, v in pieces])
    arrays = [broadcast(v, len(rows)) for (rows, _), v in zip(pieces, values, strict=True)]
    positions = np.concatenate([rows for rows, _ in pieces])
    merged = pa.concat_arrays(arrays)
    order = np.empty(n, dtype=np.int64)
    order[positions] = np.arange(n)
    return merged.take(pa.array(order))


def _broadcast_bool(c: Any, n: int) -> pa.Array:
    from eddies.router.expressions import broadcast

    if c.type == pa.null():
        c = pa.scalar(False)
    return broadcast(c, n)


def _coalesce(*values: Any) -> Any:
    return pc.coalesce(*unify(list(values)))


def _nullif(a: Any, b: Any) -> Any:
    """``nullif(a, b)``: compared in the common type, of ``a``'s type as DuckDB types it
    (``nullif(i16, 1e2)`` is a SMALLINT, not a DOUBLE; ``nullif('1', i)`` a VARCHAR) unless
    ``a`` is NULL."""
    a2, b2 = unify([a, b])
    keep = _plain(a)
    if keep.type == pa.null():
        keep = a2
    return pc.if_else(
        pc.fill_null(_BINARY[exp.EQ](a2, b2), False), pa.scalar(None, keep.type), keep
    )


def _round(v: Any, d: Any = None) -> Any:
    """``round(x[, d])``: half away from zero, as DuckDB, for DOUBLE and DECIMAL alike."""
    v = _plain(v)
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
    return _round_half_away(v, digits)


def _floor_ceil(kernel: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``floor``/``ceil`` typed as DuckDB: an integer becomes a DOUBLE (``floor(u8) + i32``
    must not overflow UTINYINT or INTEGER), a DECIMAL(p, s) a DECIMAL(p, 0)."""

    def fn(v: Any) -> Any:
        v = _plain(v)
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
    v = _plain(v)
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


def _repeat(v: Any, n: Any) -> Any:
    """``repeat(s, n)``: ``s`` repeated ``n`` times, '' for ``n <= 0``, NULL if either is."""
    n = _plain(n)
    if n.type == pa.null():
        n = cast_to(n, pa.int64())
    if not pa.types.is_integer(n.type):
        raise TypeError(f"repeat needs an integer count, not {n.type}")
    count = pc.max_element_wise(cast_to(n, pa.int64()), pa.scalar(0, pa.int64()), skip_nulls=False)
    text = _null_as_text(v)
    if isinstance(count, pa.Scalar) and not count.is_valid:  # Arrow makes a broken array
        return (
            pa.scalar(None, text.type)
            if isinstance(text, pa.Scalar)
            else pa.nulls(len(text), text.type)
        )
    return pc.binary_repeat(text, count)


def _null_as_text(v: Any) -> Any:
    """A string function's operand with a NULL literal typed as VARCHAR (DuckDB's NULL
    casts to any type: ``upper(NULL)`` is NULL); other types as they are."""
    v = _plain(v)
    return cast_to(v, pa.string()) if v.type == pa.null() else v


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": lambda v: pc.abs_checked(_plain(v)),
    "lower": lambda v: pc.utf8_lower(_null_as_text(v)),
    "upper": lambda v: pc.utf8_upper(_null_as_text(v)),
    "length": lambda v: pc.utf8_length(_null_as_text(v)),
    "coalesce": _coalesce,
    "round": _round,
    "trunc": _trunc,
    "floor": _floor_ceil(pc.floor),
    "ceil": _floor_ceil(pc.ceil),
    "sqrt": lambda v: pc.sqrt(cast_to(_plain(v), pa.float64())),
    "ln": lambda v: pc.ln(cast_to(_plain(v), pa.float64())),
    "nullif": _nullif,
    "reverse": lambda v: pc.utf8_reverse(_null_as_text(v)),
    "repeat": lambda v, n: _repeat(v, n),
}
_SQLGLOT_FUNCTIONS: dict[type, str] = {
    exp.Abs: "abs",
    exp.Lower: "lower",
    exp.Upper: "upper",
    exp.Length: "length",
    exp.Coalesce: "coalesce",
    exp.Round: "round",
    exp.Trunc: "trunc",
    exp.Reverse: "reverse",
    exp.Repeat: "repeat",
    exp.Floor: "floor",
    exp.Ceil: "ceil",
    exp.Sqrt: "sqrt",
    exp.Ln: "ln",
    exp.Nullif: "nullif",
}


# ----------------------------------------------------- decorrelated scalar subqueries
#: The function engine/rewrite/decorrelate.py writes for a correlated subquery without aggregate.
ONE_ROW = "__eddies_one_row"
#: DuckDB 2.0's message for a scalar subquery with more than one row.
MORE_THAN_ONE_ROW = (
    "More than one row returned by a subquery used as an expression - scalar subqueries "
    "can only return a single row"
)


def _one_row(n: Any, value: Any) -> Any:
    """``__eddies_one_row(n, value)``: a correlated scalar subquery's value from its row
    count ``n`` per outer row: NULL where ``n`` is NULL or 0 (no row), ``value`` where it
    is 1, and EddiesError (as DuckDB's SINGLE join raises) if any row has more."""
    n, value = _plain(n), _plain(value)
    most = pc.max(n) if isinstance(n, pa.Array | pa.ChunkedArray) else n
    if (most.as_py() or 0) > 1:
        raise EddiesError(MORE_THAN_ONE_ROW)
    one = pc.fill_null(pc.greater_equal(n, 1), False)
    return pc.if_else(one, value, pa.scalar(None, value.type))


# ------------------------------------------------------------------- string functions
# DuckDB's string functions count characters (code points), as Arrow's utf8_* kernels do.
# Their non-string parameters (positions, widths, patterns) are nearly always constants:
# a kernel runs once per batch with them; a parameter that is a column runs the kernel
# once per distinct parameter value (still vectorized), see _per_params.


def _text(v: Any) -> Any:
    """A string operand: dictionary decoded, NULL typed as VARCHAR, other types cast as
    DuckDB casts them to VARCHAR."""
    v = _plain(v)
    if v.type == pa.null():
        return cast_to(v, pa.string())
    return convert(v, pa.string())  # large_string too: one result type


def _per_params(
    kernel: Callable[..., Any], out_type: pa.DataType, n_text: int = 1
) -> Callable[..., Any]:
    """Call ``kernel(*texts, *params)`` with ``params`` as Python values.

    The first ``n_text`` operands are string columns or scalars; the rest are parameters.
    Where a parameter is NULL the result is NULL. Where parameters are arrays, the kernel
    runs once per distinct combination and the results are merged by mask.
    """

    def fn(*values: Any) -> Any:
        from eddies.router.expressions import broadcast

        lengths = [len(v) for v in values if not isinstance(v, pa.Scalar)]
        n = max(lengths, default=1)
        texts = [broadcast(_text(v), n) for v in values[:n_text]]  # kernels want arrays
        params = [_plain(p) for p in values[n_text:]]
        if all(isinstance(p, pa.Scalar) for p in params):
            if not all(p.is_valid for p in params):
                out = pa.nulls(n, out_type)
            else:
                out = kernel(*texts, *[p.as_py() for p in params])
        else:
            cols = [broadcast(p, n) for p in params]
            names = [f"p{i}" for i in range(len(cols))]
            table = pa.table(dict(zip(names, cols, strict=True)))
            out = pa.nulls(n, out_type)
            for row in table.group_by(names).aggregate([]).to_pylist():
                if any(row[k] is None for k in names):
                    continue  # a NULL parameter: the result stays NULL
                mask = pc.equal(cols[0], pa.scalar(row["p0"], cols[0].type))
                for k, col in zip(names[1:], cols[1:], strict=True):
                    mask = pc.and_(mask, pc.equal(col, pa.scalar(row[k], col.type)))
                result = kernel(*texts, *[row[k] for k in names])
                out = pc.if_else(pc.fill_null(mask, False), result, out)
        return out if lengths else out[0]

    return fn


def _slice(s: Any, start: int, stop: int | None) -> Any:
    """Characters ``[start, stop)`` (0-based, Python slice rules)."""
    return pc.utf8_slice_codeunits(s, start, stop if stop is not None else 2**62)


def _from_end(s: Any, start: int, stop: int | None) -> Any:
    """Characters ``[start, stop)`` counted 0-based from the end of the string."""
    return pc.utf8_reverse(_slice(pc.utf8_reverse(s), start, stop))


def _substring(s: Any, start: int, length: int | None = None) -> Any:
    """``substring(s, start[, length])`` as DuckDB: 1-based; a negative start counts from
    the end (-1 is the last character); a negative length takes the characters before
    ``start``; the range is clipped to the string. Negative starts are taken on the
    reversed string so that no per-row length is needed."""
    if start >= 0:
        if length is None:
            return _slice(s, max(start - 1, 0), None)
        lo, hi = (start, start + length) if length >= 0 else (start + length, start)
        return _slice(s, max(lo - 1, 0), max(hi - 1, 0))
    p = -start  # position counted from the end, 1 = last
    if length is None:
        return _from_end(s, 0, p)
    lo, hi = (p - length, p) if length >= 0 else (p, p - length)
    return _from_end(s, max(lo, 0), max(hi, 0))


def _left(s: Any, k: int) -> Any:
    """``left(s, k)``: the first k characters; k < 0 drops the last -k."""
    if k >= 0:
        return _slice(s, 0, k)
    return _from_end(s, -k, None)


def _right(s: Any, k: int) -> Any:
    """``right(s, k)``: the last k characters; k < 0 drops the first -k."""
    if k >= 0:
        return _from_end(s, 0, k)
    return _slice(s, -k, None)


def _pad(left: bool) -> Callable[[Any, int, str], Any]:
    """``lpad``/``rpad(s, width, fill)`` as DuckDB: longer strings are cut to ``width``
    characters; the fill pattern repeats (and is cut) to the width; an empty pattern that
    would be needed is an error."""

    def fn(s: Any, width: int, fill: str) -> Any:
        width = max(width, 0)
        cut = _slice(s, 0, width)
        missing = pc.subtract(
            pa.scalar(width, pa.int64()), pc.cast(pc.utf8_length(cut), pa.int64())
        )
        if not fill:
            if (
                pc.any(pc.greater(missing, 0)).as_py()
                if isinstance(missing, pa.Array)
                else (missing.is_valid and missing.as_py() > 0)
            ):
                raise pa.ArrowInvalid(f"Insufficient padding in {'LPAD' if left else 'RPAD'}")
            return cut
        m = len(fill)
        whole = pc.binary_repeat(pa.scalar(fill), pc.divide(missing, m))
        rem = pc.subtract(missing, pc.multiply(pc.divide(missing, m), m))
        part = pa.scalar("", pa.string())
        for r in range(1, m):  # the cut-off end of the pattern: m distinct lengths at most
            part = pc.if_else(pc.equal(rem, r), pa.scalar(fill[:r]), part)
        padding = pc.binary_join_element_wise(whole, part, "")
        pieces = (padding, cut) if left else (cut, padding)
        return pc.cast(pc.binary_join_element_wise(*pieces, ""), s.type)

    return fn


def _integer_width(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``lpad``/``rpad`` take an INTEGER width, as DuckDB's: a BIGINT (or UINTEGER and
    wider) one is refused there (no implicit narrowing), so it is here."""

    def checked(s: Any, width: Any, fill: Any) -> Any:
        t = _plain(width).type
        if pa.types.is_integer(t) and (t.bit_width > 32 or t == pa.uint32()):
            raise TypeError(f"the width of lpad/rpad must be an INTEGER, not {t}; CAST it")
        return fn(s, width, fill)

    return checked


def _split_part(s: Any, delimiter: str, index: int) -> Any:
    """``split_part(s, delimiter, index)``: the index-th field (1-based; negative counts from
    the end); '' where there is no such field; an empty delimiter splits into characters."""
    if index == 0:
        return pc.if_else(pc.is_valid(s), pa.scalar("", s.type), pa.scalar(None, s.type))
    if delimiter == "":
        return _substring(s, index, 1)
    parts = pc.split_pattern(s, delimiter)
    count = pc.list_value_length(parts)
    if index > 0:  # one field or none per row: a list of at most one, joined with ''
        return pc.binary_join(pc.list_slice(parts, index - 1, index), "")
    # Negative index: fields counted from the end. A one-character delimiter splits the
    # reversed string the same way; a longer one may overlap itself, so rows are taken per
    # distinct field count instead (vectorized per count).
    if len(delimiter) == 1:
        rparts = pc.split_pattern(pc.utf8_reverse(s), delimiter)
        return pc.utf8_reverse(pc.binary_join(pc.list_slice(rparts, -index - 1, -index), ""))
    out = pc.if_else(pc.is_valid(s), pa.scalar("", s.type), pa.scalar(None, s.type))
    for c in pc.unique(count).to_pylist():
        if c is None or c + index < 0:
            continue
        field = pc.binary_join(pc.list_slice(parts, c + index, c + index + 1), "")
        out = pc.if_else(pc.fill_null(pc.equal(count, c), False), field, out)
    return out


def _strpos(s: Any, sub: str) -> Any:
    """``strpos(s, sub)``: 1-based character position of the first occurrence, 0 if none."""
    if sub == "":
        return pc.if_else(pc.is_valid(s), pa.scalar(1, pa.int64()), pa.scalar(None, pa.int64()))
    before = pc.split_pattern(s, sub, max_splits=1)
    found = pc.equal(pc.list_value_length(before), 2)
    head = pc.cast(pc.utf8_length(pc.list_element(before, 0)), pa.int64())
    return pc.if_else(found, pc.add(head, pa.scalar(1, pa.int64())), pa.scalar(0, pa.int64()))


def _replace(s: Any, old: str, new: str) -> Any:
    """``replace(s, old, new)``: every occurrence; an empty ``old`` changes nothing."""
    if old == "":
        return s
    return pc.replace_substring(s, old, new)


def _trim(where: str) -> Callable[..., Any]:
    """``trim``/``ltrim``/``rtrim(s[, characters])``: by default spaces only, as DuckDB."""
    kernel = {"both": pc.utf8_trim, "leading": pc.utf8_ltrim, "trailing": pc.utf8_rtrim}[where]

    def fn(s: Any, characters: str = " ") -> Any:
        return kernel(s, characters)

    return fn


def _join_skipping_nulls(*values: Any) -> Any:
    """``texts`` (all but the last operand) joined with the separator (the last, a Python
    str), NULL texts skipped; '' if all are NULL.

    Each present text gets the separator in front and the first separator is cut off.
    (Arrow's ``null_handling="skip"`` is not used: in pyarrow 26 it drops the rows where
    every value is NULL, returning a shorter array.)"""
    *texts, sep = values
    prefixed = [
        pc.if_else(pc.is_valid(t), pc.binary_join_element_wise(sep, t, ""), "") for t in texts
    ]
    joined = prefixed[0] if len(prefixed) == 1 else pc.binary_join_element_wise(*prefixed, "")
    return pc.utf8_slice_codeunits(joined, len(sep), 2**62)


def _concat_fn(*values: Any) -> Any:
    """``concat(...)``: every argument as VARCHAR, NULLs skipped (all NULL gives '')."""
    return _per_params(_join_skipping_nulls, pa.string(), len(values))(*values, pa.scalar(""))


def _concat_ws(sep: Any, *values: Any) -> Any:
    """``concat_ws(sep, ...)``: NULL arguments skipped; NULL if the separator is."""
    return _per_params(_join_skipping_nulls, pa.string(), len(values))(*values, _text(sep))


_REGEX_FLAGS = {"c": "", "i": "i", "s": "s", "g": ""}


def _regex(pattern: str, flags: str | None) -> tuple[str, bool]:
    """A pattern with DuckDB's option letters applied as RE2 inline flags; and whether
    ``g`` (replace every match) was given. Options DuckDB does not know are errors."""
    flags = flags or ""
    inline = ""
    for f in flags:
        if f in "mnpl":  # DuckDB's newline-sensitive and literal options
            raise pa.ArrowInvalid(f"regex option {f!r} is not supported by eddies")
        if f not in _REGEX_FLAGS:
            raise pa.ArrowInvalid(f"Unrecognized Regex option {f}")
        inline = inline.replace("i", "") if f == "c" else inline + _REGEX_FLAGS[f]
    return (f"(?{inline}){pattern}" if inline else pattern), "g" in flags


def _regexp_matches(s: Any, pattern: str, flags: str | None = None) -> Any:
    """``regexp_matches(s, pattern[, options])``: true if the RE2 pattern matches anywhere."""
    pattern, every = _regex(pattern, flags)
    if every:
        raise pa.ArrowInvalid("Option 'g' (global replace) is only valid for regexp_replace")
    return pc.match_substring_regex(s, pattern)


def _regexp_replace(s: Any, pattern: str, replacement: str, flags: str | None = None) -> Any:
    """``regexp_replace(s, pattern, replacement[, options])``: the first match (every
    match with option ``g``) replaced; ``\\1`` names a group (RE2 rewrite syntax)."""
    pattern, every = _regex(pattern, flags)
    return pc.replace_substring_regex(
        s, pattern, replacement, max_replacements=None if every else 1
    )


def _regexp_extract(s: Any, pattern: str, group: int = 0) -> Any:
    """``regexp_extract(s, pattern[, group])``: the group of the first match ('' if there is
    no match, or the group did not take part or does not exist); group 0..9."""
    if not 0 <= group <= 9:
        raise pa.ArrowInvalid("Group index must be between 0 and 9!")
    matched = pc.match_substring_regex(s, pattern)  # raises on a bad pattern
    # Match the whole string around the first match and rewrite it to the wanted group.
    whole = f"^(?s:.*?)({pattern})(?s:.*)$"
    try:
        picked = pc.replace_substring_regex(s, whole, f"\\{group + 1}", max_replacements=1)
    except pa.ArrowInvalid:  # the group does not exist: DuckDB gives ''
        picked = pc.if_else(pc.is_valid(s), pa.scalar("", s.type), pa.scalar(None, s.type))
    return pc.if_else(matched, picked, pa.scalar("", s.type))


def _starts_with(s: Any, prefix: str) -> Any:
    return pc.starts_with(s, prefix)


def _contains(s: Any, needle: str) -> Any:
    return pc.match_substring(s, needle)


# ------------------------------------------------------------------- number functions
def _double(v: Any) -> Any:
    return cast_to(_plain(v), pa.float64())


def _power(a: Any, b: Any) -> Any:
    """``power(a, b)``: DOUBLE, IEEE results (0^-1 = inf, (-8)^(1/3) = NaN) as DuckDB."""
    return pc.power(_double(a), _double(b))


def _sign(v: Any) -> Any:
    """``sign(x)``: -1, 0 or 1 as TINYINT; NaN and -0.0 give 0, as DuckDB."""
    v = _plain(v)
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


def _distinct_from(negate: bool) -> Callable[[Any, Any], Any]:
    """``a IS [NOT] DISTINCT FROM b``: equality where NULL equals NULL; never NULL."""

    def fn(a: Any, b: Any) -> Any:
        a, b = unify([a, b])
        if a.type == pa.null():
            same = pa.scalar(True)
        else:
            equal = pc.fill_null(_BINARY[exp.EQ](a, b), False)
            same = pc.or_(equal, pc.and_(pc.is_null(a), pc.is_null(b)))
        return same if negate else pc.invert(same)

    return fn


# --------------------------------------------------------------------- date functions
def _stamp(v: Any) -> Any:
    """A DATE or TIMESTAMP operand as a timestamp (a DATE is its midnight)."""
    v = _plain(v)
    if v.type == pa.null():
        return cast_to(v, pa.timestamp("us"))
    if pa.types.is_date(v.type):
        return pc.cast(v, pa.timestamp("us"))
    if not pa.types.is_timestamp(v.type):
        raise pa.ArrowInvalid(f"expected a DATE or TIMESTAMP, got {v.type}")
    return v


def _i64(v: Any) -> Any:
    return pc.cast(v, pa.int64())


def _epoch_us(t: Any) -> Any:
    """Microseconds since 1970-01-01 (UTC for TIMESTAMPTZ)."""
    return _i64(pc.cast(pc.cast(t, pa.timestamp("us", tz=t.type.tz)), pa.int64()))


def _sub_second(t: Any) -> Any:
    """Microseconds within the second, 0..999999."""
    us = _epoch_us(t)
    return pc.subtract(us, pc.multiply(pc.floor(pc.divide(pc.cast(us, pa.float64()), 1e6)), 1e6))


_PARTS: dict[str, Callable[[Any], Any]] = {
    "year": lambda t: _i64(pc.year(t)),
    "quarter": lambda t: _i64(pc.quarter(t)),
    "month": lambda t: _i64(pc.month(t)),
    "day": lambda t: _i64(pc.day(t)),
    "hour": lambda t: _i64(pc.hour(t)),
    "minute": lambda t: _i64(pc.minute(t)),
    "second": lambda t: _i64(pc.second(t)),
    "millisecond": lambda t: _i64(
        pc.add(pc.multiply(_i64(pc.second(t)), 1000), pc.divide(_i64(_sub_second(t)), 1000))
    ),
    "microsecond": lambda t: _i64(
        pc.add(pc.multiply(_i64(pc.second(t)), 1_000_000), _i64(_sub_second(t)))
    ),
    "dow": lambda t: _i64(pc.day_of_week(t, count_from_zero=True, week_start=7)),
    "isodow": lambda t: _i64(pc.day_of_week(t, count_from_zero=False, week_start=1)),
    "doy": lambda t: _i64(pc.day_of_year(t)),
    "week": lambda t: _i64(pc.iso_week(t)),
    "isoyear": lambda t: _i64(pc.iso_year(t)),
    "epoch": lambda t: pc.divide(pc.cast(_epoch_us(t), pa.float64()), 1e6),
}
_PART_ALIASES = {
    "years": "year", "y": "year", "yr": "year", "yrs": "year", "months": "month",
    "mon": "month", "days": "day", "d": "day", "dayofmonth": "day", "hours": "hour",
    "h": "hour", "hr": "hour", "minutes": "minute", "min": "minute", "m": "minute",
    "seconds": "second", "s": "second", "sec": "second", "milliseconds": "millisecond",
    "ms": "millisecond", "microseconds": "microsecond", "us": "microsecond",
    "dayofweek": "dow", "weekday": "dow", "dayofyear": "doy", "weeks": "week",
    "w": "week", "weekofyear": "week", "quarters": "quarter",
}  # fmt: skip


def _part_name(unit: str, known: Collection[str], what: str, node: exp.Expression) -> str:
    """A date part name as DuckDB spells it, or UnsupportedQueryError naming it."""
    name = unit.lower()
    name = _PART_ALIASES.get(name, name)
    if name not in known:
        raise UnsupportedQueryError(
            f"{what} {unit!r} is not supported (supported: {', '.join(sorted(known))}): "
            f"{describe(node)}"
        )
    return name


def _date_part(part: str) -> Callable[[Any], Any]:
    """``extract(part FROM x)`` / ``date_part('part', x)`` / ``year(x)`` ...: BIGINT
    (epoch: DOUBLE seconds) as DuckDB; a DATE is its midnight."""
    kernel = _PARTS[part]
    return lambda v: kernel(_stamp(v))


_TRUNC_UNITS = (
    "year", "quarter", "month", "week", "day", "hour", "minute", "second",
    "millisecond", "microsecond",
)  # fmt: skip


def _date_trunc(unit: str) -> Callable[[Any], Any]:
    """``date_trunc(unit, x)``: x floored to the unit (weeks start on Monday); a TIMESTAMP
    for DATE input too, as DuckDB 2.0."""

    def fn(v: Any) -> Any:
        t = _stamp(v)
        return pc.floor_temporal(t, unit=unit, week_starts_monday=True)

    return fn


_PER_US = {"s": 1_000_000, "ms": 1_000, "us": 1}


def floor_us(values: Any) -> Any:
    """TIMESTAMP values (an Array or ChunkedArray, any unit) as int64 microseconds since
    1970-01-01 UTC, nanoseconds floored; NULL stays NULL."""
    ticks = pc.cast(values, pa.int64())
    unit = values.type.unit
    if unit != "ns":
        return pc.multiply_checked(ticks, _PER_US[unit]) if unit != "us" else ticks
    valid = pc.is_valid(ticks).to_numpy(zero_copy_only=False)
    us = pc.fill_null(ticks, 0).to_numpy(zero_copy_only=False) // 1000
    return pa.array(us, pa.int64(), mask=~valid)


#: DuckDB's time_bucket origin for widths without months: Monday 2000-01-03 00:00 (UTC).
TIME_BUCKET_ORIGIN_US = 946_857_600_000_000


class TimeBucket:
    """``time_bucket(INTERVAL w, ts)``: the start of ts's bucket of width ``width_us``
    microseconds, buckets aligned on DuckDB's origin 2000-01-03 (UTC for TIMESTAMPTZ); a
    TIMESTAMP (TIMESTAMPTZ) of ts's type. Streaming aggregates read ``width_us`` to know
    when a bucket is final (its end, start + width, is behind the watermark)."""

    def __init__(self, width_us: int) -> None:
        self.width_us = width_us

    def __call__(self, v: Any) -> Any:
        v, out_type = _timestamp_argument(v, "time_bucket")
        if isinstance(v, pa.Scalar):
            return self(pa.array([v.as_py()], v.type))[0].cast(out_type)
        us = floor_us(v)
        valid = pc.is_valid(us).to_numpy(zero_copy_only=False)
        shifted = pc.fill_null(us, 0).to_numpy(zero_copy_only=False) - TIME_BUCKET_ORIGIN_US
        starts = shifted // self.width_us * self.width_us + TIME_BUCKET_ORIGIN_US
        return pa.array(starts, pa.int64(), mask=~valid).cast(out_type)


def _timestamp_argument(v: Any, function: str) -> tuple[Any, pa.DataType]:
    """An event-time function's argument (NULL-typed read as TIMESTAMP) and its output
    type, TIMESTAMP in µs with the argument's time zone; ArrowInvalid for another type."""
    v = _plain(v)
    if v.type == pa.null():
        v = cast_to(v, pa.timestamp("us"))
    if not pa.types.is_timestamp(v.type):
        raise pa.ArrowInvalid(f"{function} needs a TIMESTAMP, got {v.type}")
    return v, pa.timestamp("us", tz=v.type.tz)


class HopWindow:
    """Spark's ``window(ts, size[, slide])``: the start of every event-time window that
    holds ts, as a LIST of TIMESTAMPs (of ts's type) per row. Windows are
    ``[start, start + size)`` with starts at multiples of ``slide_us`` since 1970-01-01
    (UTC for TIMESTAMPTZ), as in Spark; without a slide they tumble (slide = size). A NULL
    ts is in no window (Spark drops such rows). Only a GROUP BY key may be one: the
    aggregation explodes the list, so a row counts once in each of its windows (the
    planner refuses it elsewhere); streaming aggregates read ``size_us`` to know when a
    window is final (its end behind the watermark)."""

    def __init__(self, size_us: int, slide_us: int) -> None:
        self.size_us = size_us
        self.slide_us = slide_us
        self.width_us = size_us  # a window ends size after its start, as a time_bucket

    def __call__(self, v: Any) -> Any:
        v, out_type = _timestamp_argument(v, "window")
        if isinstance(v, pa.Scalar):
            return self(pa.array([v.as_py()], v.type))[0]
        us = floor_us(v)
        valid = pc.is_valid(us).to_numpy(zero_copy_only=False)
        ts = pc.fill_null(us, 0).to_numpy(zero_copy_only=False)
        per_row = -(-self.size_us // self.slide_us)  # windows that can hold one ts
        last = ts // self.slide_us * self.slide_us
        back = np.arange(per_row - 1, -1, -1, dtype=np.int64) * self.slide_us
        starts = last[:, None] - back[None, :]  # ascending per row
        holds = (starts + self.size_us > ts[:, None]) & valid[:, None]
        offsets = np.zeros(len(ts) + 1, dtype=np.int32)
        np.cumsum(holds.sum(axis=1), out=offsets[1:])
        values = pa.array(starts[holds], pa.int64()).cast(out_type)
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


def _hop_window(node: exp.Anonymous) -> HopWindow:
    """The kernel of ``window(ts, size[, slide])``; size and slide are INTERVAL or string
    literals of fixed spans (``INTERVAL '10 minutes'``, ``'5 minutes'``)."""
    args = node.expressions
    if not 2 <= len(args) <= 3:
        raise UnsupportedQueryError(
            f"{describe(node)}: window takes an event-time column, a window size and an "
            "optional slide, e.g. window(ts, INTERVAL '10 minutes', INTERVAL '5 minutes') "
            "(no start-time offset)"
        )
    spans = []
    for arg in args[1:]:
        if isinstance(arg, exp.Interval) and isinstance(arg.this, exp.Literal):
            unit = arg.args.get("unit")
            text = f"{arg.this.this} {unit.name if unit is not None else ''}".strip()
        elif isinstance(arg, exp.Literal) and arg.is_string:
            text = arg.this
        else:
            raise UnsupportedQueryError(
                f"{describe(node)}: a window's size and slide must be INTERVAL or string "
                "literals, e.g. INTERVAL '10 minutes'"
            )
        try:
            spans.append(parse_span(text))
        except EddiesError as exc:
            raise UnsupportedQueryError(f"{describe(node)}: {exc}") from None
    size, slide = spans[0], spans[-1]
    if slide > size:
        raise UnsupportedQueryError(
            f"{describe(node)}: the slide ({slide} µs) is longer than the window ({size} µs): "
            "rows between windows would be in none"
        )
    return HopWindow(size, slide)


def is_hop_window(node: exp.Expression) -> bool:
    """Whether ``node`` is a ``window(...)`` call (see :class:`HopWindow`)."""
    return isinstance(node, exp.Anonymous) and str(node.this).lower() == "window"


def _time_bucket(node: exp.DateBin) -> TimeBucket:
    """The kernel of ``time_bucket(INTERVAL '...', ts)``; the width must be a fixed span."""
    width = node.this
    if not isinstance(width, exp.Interval) or not isinstance(width.this, exp.Literal):
        raise UnsupportedQueryError(
            f"{describe(node)}: the bucket width must be an INTERVAL literal, "
            "e.g. time_bucket(INTERVAL '10 minutes', ts)"
        )
    unit = width.args.get("unit")
    text = f"{width.this.this} {unit.name if unit is not None else ''}".strip()
    try:
        return TimeBucket(parse_span(text))
    except EddiesError as exc:
        raise UnsupportedQueryError(f"{describe(node)}: {exc}") from None


def _date_diff(unit: str) -> Callable[[Any, Any], Any]:
    """``date_diff(unit, start, end)``: the number of unit boundaries crossed from start to
    end (both floored to the unit first), as DuckDB; weeks are the day count // 7."""

    def fn(start: Any, end: Any) -> Any:
        a, b = _stamp(start), _stamp(end)
        if unit in ("year", "quarter", "month"):
            per = {"year": 1, "quarter": 4, "month": 12}[unit]

            def index(t: Any) -> Any:
                y = pc.multiply(_i64(pc.year(t)), per)
                if unit == "year":
                    return y
                sub = pc.quarter(t) if unit == "quarter" else pc.month(t)
                return pc.add(y, _i64(sub))

            return pc.subtract(index(b), index(a))
        if unit == "week":  # DuckDB: whole weeks of the day difference, truncated
            return pc.divide(_date_diff("day")(start, end), 7)
        per_us = {
            "day": 86_400_000_000, "hour": 3_600_000_000,
            "minute": 60_000_000, "second": 1_000_000, "millisecond": 1_000,
            "microsecond": 1,
        }[unit]  # fmt: skip
        fa = pc.floor_temporal(a, unit=unit, week_starts_monday=True)
        fb = pc.floor_temporal(b, unit=unit, week_starts_monday=True)
        return pc.divide(pc.subtract(_epoch_us(fb), _epoch_us(fa)), per_us)

    return fn


_STRFTIME_OK = set("YmdHMSfaAbBjpyI%")


def _check_strftime(fmt: str, node: exp.Expression) -> None:
    """Refuse a strftime format with a directive :func:`_strftime` does not render."""
    i = 0
    while i < len(fmt):
        if fmt[i] == "%":
            if i + 1 >= len(fmt) or fmt[i + 1] not in _STRFTIME_OK:
                raise UnsupportedQueryError(
                    f"strftime format {fmt!r}: directive {fmt[i : i + 2]!r} is not supported: "
                    f"{describe(node)}"
                )
            i += 2
        else:
            i += 1


def _strftime(v: Any, fmt: str) -> Any:
    """``strftime(x, format)`` with DuckDB's directives %Y %m %d %H %M %S %f %a %A %b %B %j
    %p %y %I %%: seconds are whole (Arrow's %S would add the fraction), %f is the
    six-digit microseconds."""
    t = _stamp(v)
    whole = pc.cast(pc.floor_temporal(t, unit="second"), pa.timestamp("s", tz=t.type.tz))
    pieces = fmt.replace("%%", "\0").split("%f")
    micro = pc.utf8_lpad(pc.cast(_i64(_sub_second(t)), pa.string()), 6, "0")
    out: list[Any] = []
    for k, piece in enumerate(pieces):
        if k:
            out.append(micro)
        if piece:
            out.append(pc.strftime(whole, format=piece.replace("\0", "%%")))
    if not out:
        return pc.if_else(pc.is_valid(t), "", pa.scalar(None, pa.string()))
    return out[0] if len(out) == 1 else pc.binary_join_element_wise(*out, "")


def _make_date(y: Any, m: Any, d: Any) -> Any:
    """``make_date(year, month, day)``: a DATE; an impossible date is an error."""
    parts = [pc.cast(cast_to(_plain(x), pa.int64()), pa.string()) for x in (y, m, d)]
    parts = [pc.utf8_lpad(p, w, "0") for p, w in zip(parts, (4, 2, 2), strict=True)]
    return pc.cast(pc.binary_join_element_wise(*parts, "-"), pa.date32())


def _number(text: str) -> pa.Scalar:
    """A numeric literal typed as DuckDB types it: INTEGER, else BIGINT, else HUGEINT (as
    DECIMAL(38,0)); ``1.5`` is DECIMAL(2,1); exponent notation or > 38 digits is DOUBLE."""
    try:
        value = int(text)
    except ValueError:
        pass
    else:
        for t in (pa.int32(), pa.int64()):
            if -(2 ** (t.bit_width - 1)) <= value < 2 ** (t.bit_width - 1):
                return pa.scalar(value, t)
        if abs(value) < 10**MAX_DECIMAL_PRECISION:
            return pa.scalar(decimal.Decimal(value), pa.decimal128(MAX_DECIMAL_PRECISION, 0))
        return pa.scalar(float(value), pa.float64())
    if "e" in text.lower():
        return pa.scalar(float(text), pa.float64())
    number = decimal.Decimal(text)
    digits = number.as_tuple()
    scale = max(0, -int(digits.exponent))
    precision = max(len(digits.digits), scale, 1)
    if precision > MAX_DECIMAL_PRECISION:
        return pa.scalar(float(text), pa.float64())
    return pa.scalar(number, pa.decimal128(precision, scale))


def _like(pattern: str, escape: str | None, ignore_case: bool) -> Callable[[Any], Any]:
    """``LIKE``/``ILIKE`` as DuckDB: no escape character unless ``ESCAPE`` names one.

    Arrow's ``match_like`` treats a backslash as an escape, so literal backslashes are
    doubled and the ESCAPE character becomes a backslash."""
    if escape is not None and len(escape) != 1:
        raise UnsupportedQueryError(f"LIKE ... ESCAPE needs one character, got {escape!r}")
    out: list[str] = []
    chars = iter(pattern)
    for ch in chars:
        if escape is not None and ch == escape:
            nxt = next(chars, None)
            if nxt is None:
                raise UnsupportedQueryError(
                    f"LIKE pattern {pattern!r} ends with its escape character {escape!r}"
                )
            out.append("\\" + nxt)
        elif ch == "\\":
            out.append("\\\\")
        else:
            out.append(ch)
    arrow_pattern = "".join(out)

    def fn(v: Any) -> Any:
        v = _plain(v)
        if v.type == pa.null():
            return pa.scalar(None, pa.bool_())
        return pc.match_like(v, arrow_pattern, ignore_case=ignore_case)

    return fn


_STR = pa.string()
_PART_FUNCTIONS: dict[type, str] = {
    exp.Year: "year",
    exp.Quarter: "quarter",
    exp.Month: "month",
    exp.Day: "day",
    exp.DayOfMonth: "day",
    exp.Hour: "hour",
    exp.Minute: "minute",
    exp.Second: "second",
    exp.DayOfWeek: "dow",
    exp.DayOfWeekIso: "isodow",
    exp.DayOfYear: "doy",
    exp.Week: "week",
    exp.TimeToUnix: "epoch",
}


def _compile_function(
    node: exp.Expression, sub: Callable[[exp.Expression], Expr]
) -> tuple[Callable[..., Any], list[Expr]] | None:
    """The kernel and operands of a built-in string or number function (None: not one)."""

    def ops(*names: str) -> list[Expr]:
        return [sub(node.args[k]) for k in names if node.args.get(k) is not None]

    if isinstance(node, exp.Anonymous) and str(node.this).lower() == ONE_ROW:
        if len(node.expressions) != 2:
            raise UnsupportedQueryError(f"{describe(node)} takes a count and a value")
        return _one_row, [sub(e) for e in node.expressions]
    if isinstance(node, exp.Substring):
        return _per_params(_substring, _STR), ops("this", "start", "length")
    if isinstance(node, exp.Trim):
        where = str(node.args.get("position") or "both").lower()
        return _per_params(_trim(where), _STR), ops("this", "expression")
    if isinstance(node, exp.ConcatWs):
        return _concat_ws, [sub(e) for e in node.expressions]
    if isinstance(node, exp.Concat):
        return _concat_fn, [sub(e) for e in node.expressions]
    if isinstance(node, exp.Replace):
        return _per_params(_replace, _STR), ops("this", "expression", "replacement")
    if isinstance(node, exp.Left):
        return _per_params(_left, _STR), ops("this", "expression")
    if isinstance(node, exp.Right):
        return _per_params(_right, _STR), ops("this", "expression")
    if isinstance(node, exp.Pad):
        fn = _pad(bool(node.args.get("is_left")))
        return _integer_width(_per_params(fn, _STR)), ops("this", "expression", "fill_pattern")
    if isinstance(node, exp.SplitPart):
        return _per_params(_split_part, _STR), ops("this", "delimiter", "part_index")
    if isinstance(node, exp.StrPosition):
        return _per_params(_strpos, pa.int64()), ops("this", "substr")
    if isinstance(node, exp.StartsWith):
        return _per_params(_starts_with, pa.bool_()), ops("this", "expression")
    if isinstance(node, exp.Contains):
        this, needle = node.this, node.expression
        if isinstance(needle, exp.Null) and isinstance(this, exp.Null | exp.Literal):
            # DuckDB cannot choose among contains() for strings, lists and maps
            raise UnsupportedQueryError(f"{describe(node)}: cast the NULL to a type")
        return _per_params(_contains, pa.bool_()), ops("this", "expression")
    if isinstance(node, exp.RegexpLike):
        return _per_params(_regexp_matches, pa.bool_()), ops("this", "expression", "flag")
    if isinstance(node, exp.RegexpReplace):
        operands = ops("this", "expression", "replacement", "modifiers")
        return _per_params(_regexp_replace, _STR), operands
    if isinstance(node, exp.RegexpExtract):
        return _per_params(_regexp_extract, _STR), ops("this", "expression", "group")
    if isinstance(node, exp.Pow):
        return _power, ops("this", "expression")
    if isinstance(node, exp.Log):
        if node.expression is None:  # log(x) is log10 in DuckDB
            return (lambda x: pc.log10(_double(x))), ops("this")
        return (lambda b, x: pc.logb(_double(x), _double(b))), ops("this", "expression")
    if isinstance(node, exp.Exp):
        return (lambda x: pc.exp(_double(x))), ops("this")
    if isinstance(node, exp.Sign):
        return _sign, ops("this")
    if isinstance(node, exp.Greatest | exp.Least):
        operands = [sub(node.this), *[sub(e) for e in node.expressions]]
        return _extreme(isinstance(node, exp.Greatest)), operands
    if isinstance(node, exp.Extract):
        part = _part_name(node.this.name, _PARTS, "date part", node)
        return _date_part(part), ops("expression")
    if type(node) in _PART_FUNCTIONS:
        return _date_part(_PART_FUNCTIONS[type(node)]), ops("this")
    if isinstance(node, exp.Anonymous) and str(node.this).lower() in ("date_part", "datepart"):
        unit = node.expressions[0] if node.expressions else None
        if len(node.expressions) != 2 or not (isinstance(unit, exp.Literal) and unit.is_string):
            raise UnsupportedQueryError(
                f"{describe(node)}: date_part takes a part name (a string literal) and a value"
            )
        return _date_part(_part_name(unit.this, _PARTS, "date part", node)), [
            sub(node.expressions[1])
        ]
    if isinstance(node, exp.Anonymous) and str(node.this).lower() in _PARTS:
        if len(node.expressions) != 1:
            raise UnsupportedQueryError(f"{describe(node)} takes one argument")
        return _date_part(str(node.this).lower()), [sub(node.expressions[0])]
    if isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
        # sqlglot makes date_trunc of a CAST(... AS DATE) a DateTrunc, its unit a string
        unit_node = node.args["unit"]
        if isinstance(node, exp.DateTrunc) and not (
            isinstance(unit_node, exp.Literal) and unit_node.is_string
        ):
            raise UnsupportedQueryError(f"{describe(node)}: the unit must be a string literal")
        unit = _part_name(unit_node.name, _TRUNC_UNITS, "date_trunc unit", node)
        return _date_trunc(unit), ops("this")
    if isinstance(node, exp.DateDiff):
        unit = _part_name(node.args["unit"].name, _TRUNC_UNITS, "date_diff unit", node)
        return _date_diff(unit), ops("expression", "this")
    if isinstance(node, exp.TimeToStr):
        fmt = node.args.get("format")
        if not (isinstance(fmt, exp.Literal) and fmt.is_string):
            raise UnsupportedQueryError(f"{describe(node)}: the format must be a string literal")
        _check_strftime(fmt.this, node)
        return (lambda v, f=fmt.this: _strftime(v, f)), ops("this")
    if isinstance(node, exp.DateFromParts):
        return _make_date, ops("year", "month", "day")
    if isinstance(node, exp.StrToTime):
        fn, text = _strptime_call(node, node.this, node.args.get("format"), False)
        return fn, [sub(text)]
    if isinstance(node, exp.Anonymous) and str(node.this).lower() == "try_strptime":
        if len(node.expressions) != 2:
            raise UnsupportedQueryError(f"{describe(node)} takes a string and a format")
        fn, text = _strptime_call(node, node.expressions[0], node.expressions[1], True)
        return fn, [sub(text)]
    if isinstance(node, exp.DateBin):
        return _time_bucket(node), ops("expression")
    if is_hop_window(node):
        return _hop_window(node), [sub(node.expressions[0])]
    if isinstance(node, exp.NullSafeEQ | exp.NullSafeNEQ):
        return _distinct_from(isinstance(node, exp.NullSafeEQ)), ops("this", "expression")
    return None


def _interval_arithmetic(
    node: exp.Add | exp.Sub, sub: Callable[[exp.Expression], Expr], sql: Any
) -> Expr:
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
    return Call(lambda v, i=interval: dta.add_interval(_plain(v), i), [sub(other)], sql)


def _strptime_call(
    node: exp.Expression, text: exp.Expression, fmt: Any, safe: bool
) -> tuple[Callable[..., Any], exp.Expression]:
    """``strptime(text, 'format')`` / ``try_strptime``: the kernel and the text operand."""
    if not (isinstance(fmt, exp.Literal) and fmt.is_string):
        raise UnsupportedQueryError(
            f"{describe(node)}: the format must be one string literal (a list of formats is "
            "not supported)"
        )
    pattern = dta.strptime_pattern(fmt.this, describe(node))
    return (lambda v: dta.strptime(_plain(v), pattern, fmt.this, safe)), text


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

    def __repr__(self) -> str:
        return repr(str(self))

    __format__ = lambda self, spec: format(str(self), spec)  # noqa: E731


#: A predicate's SQL text, rendered when shown (explain, an error): ~0.2 ms a predicate.
LazySql = _LazySql


def _unknown_match(v: Any) -> Any:
    """``v LIKE NULL``: a NULL BOOLEAN per row; ``v`` must still be text (or NULL)."""
    v = _plain(v)
    if not (_is_stringy(v.type) or v.type == pa.null()):
        raise TypeError(f"LIKE needs text, got {v.type}")
    if isinstance(v, pa.Scalar):
        return pa.scalar(None, pa.bool_())
    return pa.nulls(len(v), pa.bool_())


def _compile_like(
    node: exp.Expression, escape: str | None, scope: Scope, sql: Any, negate: bool = False
) -> Expr:
    pattern = node.expression
    if isinstance(pattern, exp.Null):  # x LIKE NULL is NULL for every row, as in DuckDB
        fn: Callable[[Any], Any] = _unknown_match
    elif not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise UnsupportedQueryError(f"{describe(node)}: LIKE needs a string literal pattern")
    else:
        fn = _like(pattern.this, escape, isinstance(node, exp.ILike))
    expr: Expr = Call(fn, [compile_expr(node.this, scope)], sql)
    if fn is _unknown_match:
        expr = NullFolded(expr, sql)
    if negate:  # NOT LIKE ... ESCAPE: the flag is on the LIKE under the Escape node
        expr = Call(_not, [expr], sql)
    return expr


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
        return Literal(_number(node.this), sql)
    if isinstance(node, exp.Boolean):
        return Literal(pa.scalar(bool(node.this), pa.bool_()), sql)
    if isinstance(node, exp.Null):
        return Literal(pa.scalar(None), sql)
    if isinstance(node, exp.Neg):
        inner = node.this
        if isinstance(inner, exp.Literal) and not inner.is_string:
            return Literal(_number("-" + inner.this), sql)  # -2147483648 is an INTEGER
        return Call(lambda v: pc.negate_checked(_plain(v)), [sub(node.this)], sql)
    if isinstance(node, exp.Not):
        return Call(_not, [sub(node.this)], sql)
    if isinstance(node, exp.Is):
        if isinstance(node.expression, exp.Null):
            return Call(pc.is_null, [sub(node.this)], sql)
        raise UnsupportedQueryError(f"{describe(node)}: only IS [NOT] NULL is supported")
    if isinstance(node, exp.And | exp.Or):
        return Call(_kleene_chain(type(node)), [sub(o) for o in _chain(node)], sql)
    if isinstance(node, exp.Add | exp.Sub) and exp.Interval in (
        type(node.this),
        type(node.expression),
    ):
        return _interval_arithmetic(node, sub, sql)
    if isinstance(node, exp.Interval):
        raise UnsupportedQueryError(
            f"{describe(node)}: an INTERVAL is supported only added to or subtracted from "
            "a DATE or TIMESTAMP, or as time_bucket's width"
        )
    if type(node) in _BINARY:
        left, right = sub(node.this), sub(node.expression)
        kernel = _BINARY[type(node)]
        if isinstance(node, _LITERAL_FITTING):
            literal = (_integer_literal(node.this, left), _integer_literal(node.expression, right))
            if literal[0] != literal[1]:  # one side: it fits the other; both: INTEGER op INTEGER
                kernel = _literal_fitting(kernel, 0 if literal[0] else 1)
        call = Call(kernel, [left, right], sql)
        if isinstance(node, _NULL_FOLDING) and (_is_null(left) or _is_null(right)):
            return NullFolded(call, sql)
        return call
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
    if isinstance(node, exp.Escape) and isinstance(node.this, exp.Like | exp.ILike):
        escape = node.expression
        if not (isinstance(escape, exp.Literal) and escape.is_string):
            raise UnsupportedQueryError(f"{describe(node)}: ESCAPE needs a string literal")
        return _compile_like(node.this, escape.this, scope, sql, bool(node.this.args.get("negate")))
    if isinstance(node, exp.Like | exp.ILike):
        if node.args.get("escape"):
            escape = node.args["escape"]
            if not (isinstance(escape, exp.Literal) and escape.is_string):
                raise UnsupportedQueryError(f"{describe(node)}: ESCAPE needs a string literal")
            return _compile_like(node, escape.this, scope, sql)
        return _compile_like(node, None, scope, sql)
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
        return Guarded(Call(_case(n_whens, default is not None), args, sql), n_whens, sql)
    if isinstance(node, exp.If):
        args = [sub(node.this), sub(node.args["true"])]
        if node.args.get("false") is not None:
            args.append(sub(node.args["false"]))
        return Guarded(Call(_case(1, len(args) == 3), args, sql), 1, sql)
    if isinstance(node, exp.Cast | exp.TryCast):
        safe = isinstance(node, exp.TryCast) or bool(node.args.get("safe"))
        cast = Call(_cast(_sql_type(node.to), safe), [sub(node.this)], sql)
        return _folded(cast)
    registered = isinstance(node, exp.Anonymous) and str(node.this).lower() in scope.functions
    built = None if registered else _compile_function(node, sub)
    if built is not None:
        return Call(built[0], built[1], sql)
    if type(node) in _SQLGLOT_FUNCTIONS:
        name = _SQLGLOT_FUNCTIONS[type(node)]
        operands = [node.this, *node.expressions] if node.this is not None else node.expressions
        if isinstance(node, exp.Round | exp.Trunc) and node.args.get("decimals") is not None:
            operands = [node.this, node.args["decimals"]]
        if isinstance(node, exp.Nullif):
            operands = [node.this, node.expression]
        if isinstance(node, exp.Repeat):
            operands = [node.this, node.args["times"]]
        compiled = [sub(o) for o in operands]
        if isinstance(node, exp.Round | exp.Trunc) and len(compiled) == 2:
            compiled[1] = _digits_literal(node, compiled[1])
            if _is_null(compiled[1]):
                return NullFolded(Call(_FUNCTIONS[name], compiled, sql), sql)
        if name == "coalesce":
            return Guarded(Call(_FUNCTIONS[name], compiled, sql), None, sql)
        return Call(_FUNCTIONS[name], compiled, sql)
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
