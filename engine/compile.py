"""Compile sqlglot scalar expressions into :mod:`eddies.router.expressions` trees.

Semantics follow DuckDB, our test oracle: ``/`` is floating-point division, division or
modulo by zero gives NULL, ``IN`` with a NULL in the list is NULL when nothing matches,
integer arithmetic overflows raise, CAST of a float to an integer rounds.
A :class:`Scope` resolves column references and function names; anything it cannot resolve
or that eddies does not implement raises an :class:`EddiesError` naming the construct.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.engine.errors import UnsupportedQueryError, describe
from eddies.router.expressions import Call, ColumnRef, Expr, FunctionSpec, Literal, UdfCall


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
    digits); any float with numbers gives DOUBLE; string kinds give VARCHAR; DATE with
    TIMESTAMP gives TIMESTAMP.
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
        return pa.int64()
    if all(pa.types.is_integer(t) or pa.types.is_decimal(t) for t in types):
        scale = max(t.scale for t in types if pa.types.is_decimal(t))
        digits = max(
            (t.precision - t.scale) if pa.types.is_decimal(t) else _INT_DIGITS[t.bit_width]
            for t in types
        )
        return pa.decimal128(min(MAX_DECIMAL_PRECISION, digits + scale), scale)
    if all(
        pa.types.is_integer(t) or pa.types.is_decimal(t) or pa.types.is_floating(t) for t in types
    ):
        return pa.float64()
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
    """``/`` as DuckDB: always DOUBLE, IEEE on a zero divisor (1/0 = inf, 0/0 = NaN)."""
    a, b = _unify_null(a, b)
    return pc.divide(cast_to(a, pa.float64()), cast_to(b, pa.float64()))


def _check_divisor(a: Any, b: Any) -> None:
    """DuckDB raises "Division by zero" for ``%`` and ``//`` where both operands are set."""
    zero = pc.and_kleene(pc.equal(b, pa.scalar(0, b.type)), pc.is_valid(a))
    if pc.any(zero).as_py() if isinstance(zero, pa.Array) else zero.as_py():
        raise ZeroDivisionError("division by zero")


def _modulo(a: Any, b: Any) -> Any:
    """``%``: the remainder with the dividend's sign (C's fmod), as DuckDB."""
    a, b = _unify_null(a, b)
    _check_divisor(a, b)
    zero = pc.equal(b, pa.scalar(0, b.type))
    if _is_int(a) and _is_int(b):
        safe_b = pc.if_else(zero, pa.scalar(1, b.type), b)
        return pc.subtract(a, pc.multiply(pc.divide(a, safe_b), safe_b))  # truncating
    fa, fb = cast_to(a, pa.float64()), cast_to(b, pa.float64())
    return pc.subtract(fa, pc.multiply(pc.trunc(pc.divide(fa, fb)), fb))


def _integer_divide(a: Any, b: Any) -> Any:
    """``//``: truncating division on integers; on other numbers DuckDB divides as ``/``."""
    a, b = _unify_null(a, b)
    _check_divisor(a, b)
    if _is_int(a) and _is_int(b):
        target = common_type([a.type, b.type])
        a, b = cast_to(a, target), cast_to(b, target)
        safe_b = pc.if_else(pc.equal(b, pa.scalar(0, target)), pa.scalar(1, target), b)
        return pc.divide(a, safe_b)  # Arrow's integer divide truncates, as C and DuckDB
    return _divide(a, b)


def _concat(a: Any, b: Any) -> Any:
    """``||``: both sides as VARCHAR (DuckDB casts numbers, dates, booleans); NULL if either is."""
    a, b = _unify_null(a, b)
    a = convert(a, pa.string()) if not pa.types.is_string(a.type) else a
    b = convert(b, pa.string()) if not pa.types.is_string(b.type) else b
    return pc.binary_join_element_wise(a, b, "")


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
        params = [int(p.this.this) for p in node.expressions] if node.expressions else [18, 3]
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


def _case(n_whens: int, has_default: bool) -> Callable[..., Any]:
    def fn(*values: Any) -> Any:
        conds = [pc.fill_null(values[2 * i], False) for i in range(n_whens)]
        results = [values[2 * i + 1] for i in range(n_whens)]
        default = values[-1] if has_default else pa.scalar(None)
        *results, default = unify([*results, default])
        n = max((len(v) for v in values if isinstance(v, pa.Array)), default=1)
        cond_arrays = [_broadcast_bool(c, n) for c in conds]
        struct = pa.StructArray.from_arrays(cond_arrays, names=[f"c{i}" for i in range(n_whens)])
        return pc.case_when(struct, *results, default)

    return fn


def _broadcast_bool(c: Any, n: int) -> pa.Array:
    from eddies.router.expressions import broadcast

    if c.type == pa.null():
        c = pa.scalar(False)
    return broadcast(c, n)


def _coalesce(*values: Any) -> Any:
    return pc.coalesce(*unify(list(values)))


def _nullif(a: Any, b: Any) -> Any:
    a2, b2 = unify([a, b])
    return pc.if_else(pc.fill_null(_BINARY[exp.EQ](a2, b2), False), pa.scalar(None, a2.type), a2)


def _round(v: Any, d: Any = None) -> Any:
    """``round(x[, d])``: half away from zero, as DuckDB, for DOUBLE and DECIMAL alike."""
    v = _plain(v)
    digits = 0 if d is None else d.as_py()
    if pa.types.is_integer(v.type) and digits >= 0:
        return v
    if pa.types.is_decimal(v.type):
        return _decimal_round(v, digits)
    return _round_half_away(v, digits)


def _floor_ceil(kernel: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def fn(v: Any) -> Any:
        v = _plain(v)
        if pa.types.is_integer(v.type):
            return v
        out = kernel(v)
        if pa.types.is_decimal(v.type):  # DuckDB gives DECIMAL(p, 0)
            t = v.type
            return pc.cast(out, pa.decimal128(max(1, t.precision - t.scale), 0))
        return out

    return fn


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": lambda v: pc.abs_checked(_plain(v)),
    "lower": lambda v: pc.utf8_lower(_plain(v)),
    "upper": lambda v: pc.utf8_upper(_plain(v)),
    "length": lambda v: pc.utf8_length(_plain(v)),
    "coalesce": _coalesce,
    "round": _round,
    "floor": _floor_ceil(pc.floor),
    "ceil": _floor_ceil(pc.ceil),
    "sqrt": lambda v: pc.sqrt(cast_to(_plain(v), pa.float64())),
    "ln": lambda v: pc.ln(cast_to(_plain(v), pa.float64())),
    "nullif": _nullif,
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


def _compile_like(
    node: exp.Expression, escape: str | None, scope: Scope, sql: Any, negate: bool = False
) -> Expr:
    pattern = node.expression
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise UnsupportedQueryError(f"{describe(node)}: LIKE needs a string literal pattern")
    fn = _like(pattern.this, escape, isinstance(node, exp.ILike))
    expr: Expr = Call(fn, [compile_expr(node.this, scope)], sql)
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
        return Call(_case(n_whens, default is not None), args, sql)
    if isinstance(node, exp.If):
        args = [sub(node.this), sub(node.args["true"])]
        if node.args.get("false") is not None:
            args.append(sub(node.args["false"]))
        return Call(_case(1, len(args) == 3), args, sql)
    if isinstance(node, exp.Cast | exp.TryCast):
        safe = isinstance(node, exp.TryCast) or bool(node.args.get("safe"))
        return Call(_cast(_sql_type(node.to), safe), [sub(node.this)], sql)
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
