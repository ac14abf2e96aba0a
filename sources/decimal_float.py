"""DECIMAL to FLOAT/DOUBLE, correctly rounded.

Arrow's cast from a decimal to a float multiplies the unscaled integer by a power of ten in
floating point, so a value can come out one ulp off: ``CAST(0.3 AS DOUBLE)`` gives
0.30000000000000004 (pyarrow 26), where DuckDB, Python's ``float(Decimal)`` and IEEE 754
give the double nearest 0.3. One ulp is enough for a wrong answer: ``WHERE f = 0.3`` over
a DOUBLE column kept 0.30000000000000004 and dropped 0.3, and a DECIMAL join key met a
DOUBLE key in the wrong bucket. Every decimal-to-float conversion of the engine goes
through :func:`decimal_to_float`.

How: for a decimal of at most 15 digits, the unscaled integer and 10**scale are both exact
doubles, and one IEEE division of two exact values is correctly rounded. Wider decimals,
and FLOAT (single precision) targets, go through the decimal's text, which Arrow parses
correctly rounded to the target type.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Digits whose unscaled integer is an exact double (10**15 < 2**53).
EXACT_DIGITS = 15


def decimal_to_float(values: Any, target: pa.DataType | None = None) -> Any:
    """``values`` (a decimal Array, ChunkedArray or Scalar) as ``target`` (float32, or
    float64 by default), each value the float nearest to the decimal; NULLs stay NULL.

    Raises TypeError if ``values`` is not a decimal or ``target`` not a float type.
    """
    target = pa.float64() if target is None else target
    if not pa.types.is_decimal(values.type):
        raise TypeError(f"decimal_to_float needs a decimal, got {values.type}")
    if not pa.types.is_floating(target) or pa.types.is_float16(target):
        raise TypeError(f"decimal_to_float converts to float32 or float64, not {target}")
    if isinstance(values, pa.Scalar):
        if not values.is_valid:
            return pa.scalar(None, target)
        return pc.cast(pa.scalar(str(values.as_py()), pa.string()), target)
    if isinstance(values, pa.ChunkedArray):
        return pa.chunked_array([_array(c, target) for c in values.chunks], target)
    return _array(values, target)


def _array(values: pa.Array, target: pa.DataType) -> pa.Array:
    dtype = values.type
    if len(values) == 0:
        return pa.array([], target)
    if dtype.precision <= EXACT_DIGITS and target == pa.float64():
        if dtype != pa.decimal128(dtype.precision, dtype.scale):  # decimal32/64/256: exact
            values = values.cast(pa.decimal128(dtype.precision, dtype.scale))
        return _divided(values, dtype.scale)
    return pc.cast(pc.cast(values, pa.string()), target)


def _divided(values: pa.Array, scale: int) -> pa.Array:
    """unscaled ÷ 10**scale in one IEEE division (both operands exact doubles)."""
    words = np.frombuffer(values.buffers()[1], dtype=np.int64)
    # A decimal128 is two little-endian 64-bit words; a value of <= 15 digits is its low
    # word read as signed (the high word only extends the sign).
    low = words[2 * values.offset : 2 * (values.offset + len(values)) : 2]
    out = low.astype(np.float64) / (10.0**scale)
    mask = values.is_null().to_numpy(zero_copy_only=False) if values.null_count else None
    return pa.array(out, pa.float64(), mask=mask)


def as_double(values: Any) -> Any:
    """``values`` (any numeric Arrow array, chunked array or scalar) as float64, decimals
    correctly rounded (:func:`decimal_to_float`), integers rounded to the nearest double
    as DuckDB casts them (Arrow's safe cast refuses integers beyond 2**53), other types by
    Arrow's cast."""
    if pa.types.is_decimal(values.type):
        return decimal_to_float(values, pa.float64())
    if pa.types.is_integer(values.type):
        return values.cast(pa.float64(), safe=False)
    return values.cast(pa.float64())
