"""Date and time functions with DuckDB's semantics: ``extract`` / ``date_part`` and the
part functions (``year(x)``, ``dow(x)``, ...), ``date_trunc``, ``date_diff``,
``strftime``, ``make_date``, ``strptime`` and ``try_strptime``.

A DATE operand is its midnight; parts are BIGINT (epoch: DOUBLE seconds), weeks start on
Monday. ``x ± INTERVAL`` and DATE arithmetic are operators
(:mod:`~eddies.engine.expr.operators`, :mod:`~eddies.engine.expr.datetime_arith`);
``time_bucket`` and ``window`` are in :mod:`~eddies.engine.expr.functions.event_time`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.engine.expr import datetime_arith as dta
from eddies.engine.expr.casts import cast_to
from eddies.engine.expr.registry import Site, register
from eddies.engine.expr.types import plain
from eddies.errors import UnsupportedQueryError, describe
from eddies.router.expressions import Expr


def _stamp(v: Any) -> Any:
    """A DATE or TIMESTAMP operand as a timestamp (a DATE is its midnight)."""
    v = plain(v)
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
    parts = [pc.cast(cast_to(plain(x), pa.int64()), pa.string()) for x in (y, m, d)]
    parts = [pc.utf8_lpad(p, w, "0") for p, w in zip(parts, (4, 2, 2), strict=True)]
    return pc.cast(pc.binary_join_element_wise(*parts, "-"), pa.date32())


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
    return (lambda v: dta.strptime(plain(v), pattern, fmt.this, safe)), text


@register(exp.Extract)
def _compile_extract(node: exp.Extract, site: Site) -> Expr:
    part = _part_name(node.this.name, _PARTS, "date part", node)
    return site.call(_date_part(part), site.ops("expression"))


@register(*_PART_FUNCTIONS)
def _compile_part_function(node: exp.Func, site: Site) -> Expr:
    """``year(x)``, ``dayofweek(x)``, ... as sqlglot names them."""
    return site.call(_date_part(_PART_FUNCTIONS[type(node)]), site.ops("this"))


@register("date_part", "datepart")
def _compile_date_part(node: exp.Anonymous, site: Site) -> Expr:
    unit = node.expressions[0] if node.expressions else None
    if len(node.expressions) != 2 or not (isinstance(unit, exp.Literal) and unit.is_string):
        raise UnsupportedQueryError(
            f"{describe(node)}: date_part takes a part name (a string literal) and a value"
        )
    kernel = _date_part(_part_name(unit.this, _PARTS, "date part", node))
    return site.call(kernel, [site.compile(node.expressions[1])])


@register(*_PARTS)
def _compile_part_named(node: exp.Anonymous, site: Site) -> Expr:
    """A part function sqlglot has no node for (``isoyear(x)``, ``epoch(x)``, ...)."""
    if len(node.expressions) != 1:
        raise UnsupportedQueryError(f"{describe(node)} takes one argument")
    return site.call(_date_part(str(node.this).lower()), [site.compile(node.expressions[0])])


@register(exp.TimestampTrunc, exp.DateTrunc)
def _compile_date_trunc(node: exp.TimestampTrunc | exp.DateTrunc, site: Site) -> Expr:
    # sqlglot makes date_trunc of a CAST(... AS DATE) a DateTrunc, its unit a string
    unit_node = node.args["unit"]
    if isinstance(node, exp.DateTrunc) and not (
        isinstance(unit_node, exp.Literal) and unit_node.is_string
    ):
        raise UnsupportedQueryError(f"{describe(node)}: the unit must be a string literal")
    unit = _part_name(unit_node.name, _TRUNC_UNITS, "date_trunc unit", node)
    return site.call(_date_trunc(unit), site.ops("this"))


@register(exp.DateDiff)
def _compile_date_diff(node: exp.DateDiff, site: Site) -> Expr:
    unit = _part_name(node.args["unit"].name, _TRUNC_UNITS, "date_diff unit", node)
    return site.call(_date_diff(unit), site.ops("expression", "this"))


@register(exp.TimeToStr)
def _compile_strftime(node: exp.TimeToStr, site: Site) -> Expr:
    fmt = node.args.get("format")
    if not (isinstance(fmt, exp.Literal) and fmt.is_string):
        raise UnsupportedQueryError(f"{describe(node)}: the format must be a string literal")
    _check_strftime(fmt.this, node)
    return site.call(lambda v, f=fmt.this: _strftime(v, f), site.ops("this"))


@register(exp.DateFromParts)
def _compile_make_date(node: exp.DateFromParts, site: Site) -> Expr:
    return site.call(_make_date, site.ops("year", "month", "day"))


@register(exp.StrToTime)
def _compile_strptime(node: exp.StrToTime, site: Site) -> Expr:
    fn, text = _strptime_call(node, node.this, node.args.get("format"), False)
    return site.call(fn, [site.compile(text)])


@register("try_strptime")
def _compile_try_strptime(node: exp.Anonymous, site: Site) -> Expr:
    if len(node.expressions) != 2:
        raise UnsupportedQueryError(f"{describe(node)} takes a string and a format")
    fn, text = _strptime_call(node, node.expressions[0], node.expressions[1], True)
    return site.call(fn, [site.compile(text)])
