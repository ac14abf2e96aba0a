"""SQL types as DuckDB, our test oracle, infers them: the common type operands are
implicitly cast to, the type of a numeric literal, and the Arrow type a SQL type name
(in a CAST) means.

Values here are pyarrow Scalars or Arrays; dictionary-encoded ones are decoded first
(:func:`plain`), as kernels want the value type.
"""

from __future__ import annotations

import decimal
import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.errors import UnsupportedQueryError, describe

#: Decimal digits an integer type needs, as DuckDB counts them when an integer meets a
#: DECIMAL (INTEGER is DECIMAL(10,0), BIGINT DECIMAL(19,0)).
_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}
MAX_DECIMAL_PRECISION = 38


def plain(v: Any) -> Any:
    """A value with dictionary encoding removed (kernels want the value type)."""
    if pa.types.is_dictionary(v.type):
        if isinstance(v, pa.Scalar):
            return v.value if v.is_valid else pa.scalar(None, v.type.value_type)
        return pc.cast(v, v.type.value_type)
    return v


def is_stringy(t: pa.DataType) -> bool:
    """Whether ``t`` is a string type (VARCHAR: Arrow's string or large_string)."""
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def decimal_digits(t: pa.DataType) -> tuple[int, int] | None:
    """(precision, scale) of a DECIMAL or an integer type (as DuckDB widens it), else None."""
    if pa.types.is_decimal(t):
        return t.precision, t.scale
    if pa.types.is_integer(t):
        return _INT_DIGITS[t.bit_width] + pa.types.is_uint64(t), 0
    return None


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
    if all(is_stringy(t) for t in types):
        return pa.string()
    if all(pa.types.is_integer(t) for t in types):
        return _common_integer(types)
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


def _common_integer(types: list[pa.DataType]) -> pa.DataType:
    """The common type of integer types: the widest where all are signed (or all unsigned),
    BIGINT where they mix, DECIMAL(20, 0) where a UBIGINT meets a signed type."""
    if all(pa.types.is_signed_integer(t) for t in types):
        return max(types, key=lambda t: t.bit_width)
    if all(pa.types.is_unsigned_integer(t) for t in types):
        return max(types, key=lambda t: t.bit_width)
    if any(pa.types.is_uint64(t) for t in types):
        return pa.decimal128(20, 0)  # UBIGINT with a signed type: both fit exactly
    return pa.int64()


def number_literal(text: str) -> pa.Scalar:
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


_T = exp.DataType.Type
#: SQL type names without parameters -> their Arrow types.
_SIMPLE_TYPES = {
    _T.TINYINT: pa.int8(),
    _T.SMALLINT: pa.int16(),
    _T.INT: pa.int32(),
    _T.BIGINT: pa.int64(),
    _T.UTINYINT: pa.uint8(),
    _T.USMALLINT: pa.uint16(),
    _T.UINT: pa.uint32(),
    _T.UBIGINT: pa.uint64(),
    _T.FLOAT: pa.float32(),
    _T.DOUBLE: pa.float64(),
    _T.VARCHAR: pa.string(),
    _T.TEXT: pa.string(),
    _T.CHAR: pa.string(),
    _T.BOOLEAN: pa.bool_(),
    _T.DATE: pa.date32(),
    _T.TIMESTAMP: pa.timestamp("us"),
    _T.TIMESTAMPNTZ: pa.timestamp("us"),  # DuckDB's TIMESTAMP, as sqlglot reads it
    _T.DATETIME: pa.timestamp("us"),
    _T.TIMESTAMP_S: pa.timestamp("s"),
    _T.TIMESTAMP_MS: pa.timestamp("ms"),
    _T.TIMESTAMP_NS: pa.timestamp("ns"),
    _T.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),  # shown in UTC, DuckDB's TimeZone here
}


def sql_type(node: exp.DataType) -> pa.DataType:
    """The Arrow type of a SQL type name (``DECIMAL`` alone is DECIMAL(18, 3), as DuckDB);
    UnsupportedQueryError for a type eddies has no Arrow type for or bad DECIMAL widths."""
    t = node.this
    if t in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[t]
    if t == _T.DECIMAL:
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
