"""Date and time arithmetic with DuckDB's semantics: INTERVAL constants, ``date ± integer``,
``date - date``, and ``strptime`` / ``try_strptime``.

Every kernel is vectorized (pyarrow.compute and NumPy over int64 microseconds), NULLs
propagate. What DuckDB 2.0 does, and so what these do:

* ``DATE ± INTERVAL`` and ``TIMESTAMP ± INTERVAL`` give a TIMESTAMP. The interval's months
  are added first, clamping the day to the new month's last day (Jan 31 + 1 month is
  Feb 29 in a leap year), then its days, then its microseconds. Only constant intervals
  are supported (``INTERVAL 3 DAY``, ``INTERVAL '2 hours'``, ``INTERVAL '1 month 2 days'``);
  a quantity of DAY, MONTH, YEAR, WEEK, QUARTER, HOUR, MINUTE or MICROSECOND is truncated
  toward zero (``INTERVAL 1.5 DAY`` is one day), of SECOND and MILLISECOND kept exact.
* ``DATE ± INTEGER`` (TINYINT..INTEGER, UTINYINT, USMALLINT) adds days and gives a DATE;
  ``INTEGER + DATE`` too. ``DATE - DATE`` is the BIGINT number of days between them.
  BIGINT operands, ``TIMESTAMP ± INTEGER`` and ``INTEGER - DATE`` are type errors, as in
  DuckDB; ``TIMESTAMP - TIMESTAMP`` (an INTERVAL in DuckDB) is refused.
* ``strptime(text, format)`` parses with the directives %Y %y %m %d %H %M %S %f %b %B %%:
  leading and trailing whitespace is skipped, a space in the format matches one or more
  whitespace characters, other characters match exactly; numbers take 1 to 2 digits (%Y 1
  to 4, %f 1 to 6, right-padded to microseconds), %y 69-99 is 19xx and 00-68 20xx, month
  names are case-insensitive; a missing year is 1900, a missing month or day 1. A string
  that does not match, or an impossible date, is an error for ``strptime`` and NULL for
  ``try_strptime``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddies.errors import ExpressionError, QueryTypeError, UnsupportedQueryError

US_PER_DAY = 86_400_000_000

#: Interval unit -> (months, days, microseconds) per unit, and whether it is truncated.
_UNITS: dict[str, tuple[int, int, int, bool]] = {
    "year": (12, 0, 0, True),
    "quarter": (3, 0, 0, True),
    "month": (1, 0, 0, True),
    "mon": (1, 0, 0, True),
    "week": (0, 7, 0, True),
    "day": (0, 1, 0, True),
    "hour": (0, 0, 3_600_000_000, True),
    "minute": (0, 0, 60_000_000, True),
    "second": (0, 0, 1_000_000, False),
    "millisecond": (0, 0, 1_000, False),
    "microsecond": (0, 0, 1, True),
}
_UNIT_ALIASES = {"yr": "year", "min": "minute", "sec": "second", "ms": "millisecond"}
_UNIT_ALIASES |= {"us": "microsecond", "h": "hour", "d": "day", "mons": "mon"}


@dataclass(frozen=True)
class Interval:
    """A constant INTERVAL: months, days and microseconds, applied in that order."""

    months: int = 0
    days: int = 0
    micros: int = 0

    def negated(self) -> Interval:
        return Interval(-self.months, -self.days, -self.micros)

    def __add__(self, other: Interval) -> Interval:
        return Interval(
            self.months + other.months, self.days + other.days, self.micros + other.micros
        )


def _unit(name: str, where: str) -> tuple[int, int, int, bool]:
    key = name.lower()
    key = _UNIT_ALIASES.get(key, key)
    if key not in _UNITS and key.endswith("s"):
        key = key[:-1]
    if key not in _UNITS:
        raise UnsupportedQueryError(f"INTERVAL unit {name!r} is not supported: {where}")
    return _UNITS[key]


def _quantity(text: str, unit: str, where: str) -> Interval:
    months, days, micros, truncated = _unit(unit, where)
    try:
        value = float(text)
    except ValueError:
        raise UnsupportedQueryError(
            f"INTERVAL quantity {text!r} is not a number: {where}"
        ) from None
    if truncated:
        whole = int(value)  # toward zero, as DuckDB's trunc
        return Interval(months * whole, days * whole, micros * whole)
    return Interval(0, 0, round(value * micros))


def parse_interval(text: str, unit: str | None, where: str) -> Interval:
    """The Interval of ``INTERVAL 'text' unit`` (``unit`` None: the text names its units,
    ``'1 month 2 days'``). Raises UnsupportedQueryError naming ``where``."""
    if unit is not None:
        return _quantity(text.strip(), unit, where)
    tokens = text.split()
    if not tokens or len(tokens) % 2:
        raise UnsupportedQueryError(
            f"INTERVAL {text!r}: expected 'number unit [number unit ...]': {where}"
        )
    out = Interval()
    for i in range(0, len(tokens), 2):
        out = out + _quantity(tokens[i], tokens[i + 1], where)
    return out


def _stamp(v: Any) -> Any:
    """A DATE or TIMESTAMP operand as a microsecond timestamp (a DATE at midnight)."""
    if pa.types.is_date(v.type):
        return pc.cast(v, pa.timestamp("us"))
    if pa.types.is_timestamp(v.type):
        return v if v.type.unit == "us" else pc.cast(v, pa.timestamp("us", tz=v.type.tz))
    raise QueryTypeError(f"an INTERVAL can be added to a DATE or TIMESTAMP, not to {v.type}")


def _add_months(days: np.ndarray, months: int) -> np.ndarray:
    """Days since the epoch plus ``months`` calendar months, the day clamped to the new
    month's last day (DuckDB's month arithmetic)."""
    day = days.astype("datetime64[D]")
    month = day.astype("datetime64[M]")
    offset = (day - month.astype("datetime64[D]")).astype(np.int64)
    target = month + np.timedelta64(months, "M")
    start = target.astype("datetime64[D]")
    length = ((target + np.timedelta64(1, "M")).astype("datetime64[D]") - start).astype(np.int64)
    return (start + np.minimum(offset, length - 1)).astype(np.int64)


def add_interval(v: Any, interval: Interval) -> Any:
    """``v + interval`` for a DATE or TIMESTAMP array or scalar: a TIMESTAMP (the tz kept)."""
    if isinstance(v, pa.Scalar):
        return add_interval(pa.array([v.as_py()], v.type), interval)[0]
    stamps = _stamp(v)
    us = pc.cast(stamps, pa.int64()).to_numpy(zero_copy_only=False)
    valid = pc.is_valid(stamps).to_numpy(zero_copy_only=False)
    us = np.where(valid, np.nan_to_num(us, nan=0), 0).astype(np.int64)
    if interval.months:
        days = np.floor_divide(us, US_PER_DAY)
        us = _add_months(days, interval.months) * US_PER_DAY + (us - days * US_PER_DAY)
    us = us + interval.days * US_PER_DAY + interval.micros
    out = pa.array(us, pa.int64(), mask=~valid)
    return pc.cast(out, stamps.type)


_SMALL_INTS = (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16())


def _kind(v: Any) -> str:
    t = v.type
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if t in _SMALL_INTS:
        return "int"
    if t == pa.null():
        return "null"
    if pa.types.is_integer(t):
        return "bigint"
    return "other"


def temporal_add(kernel: Any) -> Any:
    """``a + b`` with DATE + INTEGER (either order) as DuckDB; ``kernel`` for the rest."""

    def fn(a: Any, b: Any) -> Any:
        kinds = {_kind(a), _kind(b)}
        if "date" in kinds or "timestamp" in kinds:
            date, other = (a, b) if _kind(a) in ("date", "timestamp") else (b, a)
            if kinds == {"date", "int"}:
                return _shift_days(date, other, 1)
            if "null" in kinds:  # NULL + DATE is a DATE, NULL + TIMESTAMP a TIMESTAMP
                return _nulls(a, b, date.type)
            _refuse("+", a, b)
        return kernel(a, b)

    return fn


def temporal_sub(kernel: Any) -> Any:
    """``a - b`` with DATE - INTEGER and DATE - DATE as DuckDB; ``kernel`` for the rest."""

    def fn(a: Any, b: Any) -> Any:
        ka, kb = _kind(a), _kind(b)
        if "date" in (ka, kb) or "timestamp" in (ka, kb):
            if (ka, kb) == ("date", "int"):
                return _shift_days(a, b, -1)
            if (ka, kb) == ("date", "date"):
                return pc.subtract(_days(a), _days(b))
            if kb == "null" and ka in ("date", "timestamp"):
                return _nulls(a, b, a.type)
            if (ka, kb) == ("null", "date"):
                return _nulls(a, b, pa.int64())
            if {ka, kb} <= {"date", "timestamp"}:
                raise UnsupportedQueryError(
                    f"{_sql_name(a)} - {_sql_name(b)} is an INTERVAL in DuckDB, which eddies "
                    "does not support; use date_diff(unit, start, end)"
                )
            _refuse("-", a, b)
        return kernel(a, b)

    return fn


def _sql_name(v: Any) -> str:
    """A value's type as DuckDB names it, for error messages."""
    t = v.type
    names = {pa.date32(): "DATE", pa.null(): "NULL", pa.int64(): "BIGINT", pa.int32(): "INTEGER"}
    names |= {pa.int16(): "SMALLINT", pa.int8(): "TINYINT", pa.uint32(): "UINTEGER"}
    names |= {pa.uint64(): "UBIGINT", pa.float64(): "DOUBLE", pa.string(): "VARCHAR"}
    if pa.types.is_timestamp(t):
        return "TIMESTAMP WITH TIME ZONE" if t.tz else "TIMESTAMP"
    return names.get(t, str(t).upper())


def _refuse(op: str, a: Any, b: Any) -> None:
    raise QueryTypeError(
        f"no operator {op}({_sql_name(a)}, {_sql_name(b)}): DuckDB adds INTEGER days to a "
        "DATE and INTERVALs to a DATE or TIMESTAMP (cast the operand)"
    )


def _nulls(a: Any, b: Any, type_: pa.DataType) -> Any:
    """All NULL, as long as the array operand (a scalar if both are scalars)."""
    for v in (a, b):
        if not isinstance(v, pa.Scalar):
            return pa.nulls(len(v), type_)
    return pa.scalar(None, type_)


def _days(date: Any) -> Any:
    return pc.cast(pc.cast(date, pa.int32()), pa.int64())


def _shift_days(date: Any, days: Any, sign: int) -> Any:
    total = pc.add_checked(_days(date), pc.multiply(pc.cast(days, pa.int64()), sign))
    return pc.cast(pc.cast(total, pa.int32()), pa.date32())


# ---------------------------------------------------------------------------- strptime
_MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_DIRECTIVES = {
    "Y": ("year", r"\d{1,4}"),
    "y": ("year2", r"\d{1,2}"),
    "m": ("month", r"\d{1,2}"),
    "d": ("day", r"\d{1,2}"),
    "H": ("hour", r"\d{1,2}"),
    "M": ("minute", r"\d{1,2}"),
    "S": ("second", r"\d{1,2}"),
    "f": ("fraction", r"\d{1,6}"),
    "b": ("mon", "(?i:" + "|".join(m[:3] for m in _MONTHS) + ")"),
    "B": ("monthname", "(?i:" + "|".join(_MONTHS) + ")"),
}
_GROUP_FIELD = {"year2": "year", "mon": "month", "monthname": "month"}


def strptime_pattern(fmt: str, where: str) -> str:
    """The anchored regular expression (named groups) a DuckDB strptime format matches;
    UnsupportedQueryError for a directive not listed in the module docstring."""
    out = [r"^\s*"]
    seen: set[str] = set()
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch == "%":
            if i + 1 >= len(fmt):
                raise UnsupportedQueryError(f"strptime format {fmt!r} ends with '%': {where}")
            code = fmt[i + 1]
            i += 2
            if code == "%":
                out.append("%")
                continue
            if code not in _DIRECTIVES:
                raise UnsupportedQueryError(
                    f"strptime format {fmt!r}: directive %{code} is not supported (supported: "
                    f"%Y %y %m %d %H %M %S %f %b %B %%): {where}"
                )
            group, regex = _DIRECTIVES[code]
            field = _GROUP_FIELD.get(group, group)
            if field in seen:
                raise UnsupportedQueryError(
                    f"strptime format {fmt!r} sets the {field} twice: {where}"
                )
            seen.add(field)
            out.append(f"(?P<{group}>{regex})")
            continue
        out.append(r"\s+" if ch.isspace() else re.escape(ch))
        i += 1
    out.append(r"\s*$")
    return "".join(out)


def strptime(text: Any, pattern: str, fmt: str, safe: bool) -> Any:
    """Parse strings ``text`` with ``pattern`` (from :func:`strptime_pattern` of ``fmt``)
    into TIMESTAMPs; a failure is NULL when ``safe``, else an ExpressionError."""
    if isinstance(text, pa.Scalar):
        return strptime(pa.array([text.as_py()], pa.string()), pattern, fmt, safe)[0]
    if text.type == pa.null():
        return pa.nulls(len(text), pa.timestamp("us"))
    if not pa.types.is_string(text.type) and not pa.types.is_large_string(text.type):
        raise QueryTypeError(f"strptime takes a VARCHAR, not {text.type}")
    names = re.findall(r"\(\?P<(\w+)>", pattern)
    if names:
        parts = pc.extract_regex(text, pattern=pattern)
        matched = pc.and_(pc.is_valid(parts), pc.is_valid(text))
        fields = {name: parts.field(name) for name in names}
    else:
        matched = pc.and_(pc.match_substring_regex(text, pattern), pc.is_valid(text))
        fields = {}
    matched_np = np.asarray(matched.to_numpy(zero_copy_only=False), dtype=bool)
    valid_np = np.asarray(pc.is_valid(text).to_numpy(zero_copy_only=False), dtype=bool)
    n = len(text)

    def number(name: str, default: int) -> np.ndarray:
        if name not in fields:
            return np.full(n, default, dtype=np.int64)
        col = pc.if_else(matched, fields[name], "0")
        return np.asarray(pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False), np.int64)

    year = number("year", 1900)
    if "year2" in fields:
        short = number("year2", 0)
        year = np.where(short >= 69, 1900 + short, 2000 + short)
    month = number("month", 1)
    for group, names_ in (("mon", [m[:3] for m in _MONTHS]), ("monthname", _MONTHS)):
        if group in fields:
            lowered = pc.utf8_lower(pc.if_else(matched, fields[group], names_[0]))
            month = np.asarray(
                pc.add(pc.index_in(lowered, pa.array(names_)), 1).to_numpy(zero_copy_only=False),
                np.int64,
            )
    day = number("day", 1)
    hour, minute, second = number("hour", 0), number("minute", 0), number("second", 0)
    micros = np.zeros(n, dtype=np.int64)
    if "fraction" in fields:
        digits = pc.utf8_rpad(pc.if_else(matched, fields["fraction"], "0"), width=6, padding="0")
        micros = np.asarray(pc.cast(digits, pa.int64()).to_numpy(zero_copy_only=False), np.int64)
    clock_ok = (hour < 24) & (minute < 60) & (second < 60)
    month_ok = (month >= 1) & (month <= 12)
    first = ((year - 1970) * 12 + np.clip(month, 1, 12) - 1).astype("datetime64[M]")
    length = (
        (first + np.timedelta64(1, "M")).astype("datetime64[D]") - first.astype("datetime64[D]")
    ).astype(np.int64)
    date_ok = month_ok & (day >= 1) & (day <= length)
    good = matched_np & clock_ok & date_ok
    bad = valid_np & ~good
    if bad.any() and not safe:
        row = int(np.argmax(bad))
        value = text[row].as_py()
        if matched_np[row] and clock_ok[row]:
            raise ExpressionError(
                f"strptime: date out of range: {value!r} (format {fmt!r}) is no calendar date"
            )
        raise ExpressionError(
            f"strptime: could not parse string {value!r} according to format {fmt!r}"
        )
    days = first.astype("datetime64[D]").astype(np.int64) + day - 1
    us = days * US_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1_000_000 + micros
    us = np.where(good, us, 0)
    return pa.array(us, pa.int64(), mask=~good).cast(pa.timestamp("us"))
