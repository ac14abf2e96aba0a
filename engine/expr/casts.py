"""CAST and the implicit casts: values brought to one type as DuckDB, our test oracle, does.

:func:`convert` is ``CAST(v AS t)`` (DOUBLE to integer rounds half to even, DECIMAL and
text half away from zero, VARCHAR prints as DuckDB prints), :func:`try_convert` is
``TRY_CAST``; :func:`cast_to`, :func:`unify` and :func:`unify_null` are the implicit
casts operators and functions apply to their operands, to the type
:func:`~eddies.engine.expr.types.common_type` names. Values are pyarrow Scalars or Arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.engine.expr.registry import Site, register
from eddies.engine.expr.temporal_text import text_to_date, text_to_timestamp
from eddies.engine.expr.types import MAX_DECIMAL_PRECISION, common_type, is_stringy, plain, sql_type
from eddies.router.expressions import Call, Expr, Literal
from eddies.sources.decimal_float import decimal_to_float


def cast_to(v: Any, target: pa.DataType) -> Any:
    """Cast an operand to an implicitly unified type (no value may change but a widening)."""
    v = plain(v)
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
    values = [plain(v) for v in values]
    typed = [v.type for v in values if not _is_string_literal(v)]
    if typed and len(typed) < len(values):
        target = common_type(typed)
        if target is not None and target != pa.null() and not is_stringy(target):
            values = [convert(v, target) if _is_string_literal(v) else v for v in values]
    target = common_type([v.type for v in values])
    if target is None:
        return values  # no implicit cast: the kernel names the mismatch
    return [cast_to(v, target) for v in values]


def _is_string_literal(v: Any) -> bool:
    return isinstance(v, pa.Scalar) and is_stringy(v.type)


def unify_null(a: Any, b: Any) -> tuple[Any, Any]:
    """Give a NULL operand the other operand's type and drop dictionary encoding (Arrow
    kernels reject the null type and most dictionary inputs)."""
    a, b = plain(a), plain(b)
    if a.type == pa.null() and b.type != pa.null():
        a = cast_to(a, b.type)
    if b.type == pa.null() and a.type != pa.null():
        b = cast_to(b, a.type)
    return a, b


def round_half_away(v: Any, digits: int) -> Any:
    """Round half away from zero (DuckDB's round and decimal casts); a DECIMAL gets one more
    digit first, so 99999999.99 rounds to 100000000.0 instead of overflowing its type."""
    if pa.types.is_decimal(v.type):
        t = v.type
        if digits >= t.scale:
            return v
        v = cast_to(v, pa.decimal128(min(MAX_DECIMAL_PRECISION, t.precision + 1), t.scale))
    return pc.round(v, ndigits=digits, round_mode="half_towards_infinity")


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
    v = plain(v)
    src = v.type
    if src == target:
        return v
    if src == pa.null():
        return cast_to(v, target)
    if is_stringy(target):
        return pc.cast(_to_varchar(v), target)
    if is_stringy(src) and (pa.types.is_date32(target) or pa.types.is_timestamp(target)):
        return _text_to_temporal(v, target, safe=False)
    if is_stringy(src):
        v = pc.utf8_trim_whitespace(v)
    if pa.types.is_integer(target):
        if pa.types.is_floating(src):
            v = pc.round(v, round_mode="half_to_even")  # as DuckDB: 2.5 -> 2, -0.5 -> 0
        elif pa.types.is_decimal(src):
            v = round_half_away(v, 0)
        elif is_stringy(src):
            try:
                return pc.cast(v, target)
            except pa.ArrowInvalid as exc:  # '1.5' is 2 in DuckDB
                try:
                    v = round_half_away(pc.cast(v, pa.float64()), 0)
                except pa.ArrowInvalid:
                    raise exc from None
        return pc.cast(v, target)
    if pa.types.is_decimal(target):
        if pa.types.is_integer(src):
            v = pc.cast(v, pa.decimal128(MAX_DECIMAL_PRECISION, 0))
        elif is_stringy(src):
            try:
                return pc.cast(v, target)
            except pa.ArrowInvalid:  # more digits than the scale: round them
                v = pc.cast(v, pa.float64())
        elif pa.types.is_boolean(src):
            v = pc.cast(pc.cast(v, pa.int8()), pa.decimal128(MAX_DECIMAL_PRECISION, 0))
        if pa.types.is_floating(v.type) or v.type.scale > target.scale:
            v = round_half_away(v, target.scale)
        if pa.types.is_decimal(v.type) and v.type.scale < target.scale:
            v = pc.cast(v, pa.decimal128(MAX_DECIMAL_PRECISION, target.scale))
        return pc.cast(v, target)
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


def _text_to_temporal(v: Any, target: pa.DataType, safe: bool) -> Any:
    """VARCHAR to DATE or TIMESTAMP with DuckDB's accepted shapes (``'2002-3-1'``)."""
    if pa.types.is_date32(target):
        return text_to_date(v, safe)
    return text_to_timestamp(v, target, safe)


def try_convert(v: Any, target: pa.DataType) -> Any:
    """``TRY_CAST``: as :func:`convert`, with NULL where a value does not convert.

    Vectorized: the whole array is cast at once; only when that fails are its halves cast
    separately, so k bad values cost O(k log n) casts rather than one per row. Text to DATE
    or TIMESTAMP marks its failures in one pass.
    """
    v = plain(v)
    if is_stringy(v.type) and (pa.types.is_date32(target) or pa.types.is_timestamp(target)):
        return _text_to_temporal(v, target, safe=True)
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


def _cast_kernel(target: pa.DataType, safe: bool) -> Callable[[Any], Any]:
    def fn(v: Any) -> Any:
        if safe:
            return try_convert(v, target)
        return convert(v, target)

    return fn


@register(exp.Cast)  # TryCast (and JSONCast) too: subclasses of Cast
def _compile_cast(node: exp.Cast, site: Site) -> Expr:
    """``CAST(x AS t)`` / ``TRY_CAST`` / ``x::t``, folded to a constant over a literal."""
    safe = isinstance(node, exp.TryCast) or bool(node.args.get("safe"))
    cast = site.call(_cast_kernel(sql_type(node.to), safe), [site.compile(node.this)])
    return _folded(cast)
