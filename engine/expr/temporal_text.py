"""Text cast to DATE and TIMESTAMP with the shapes DuckDB 2.0 (our test oracle) accepts.

pyarrow's ISO-8601 parser casts the common shapes (``2002-03-01``,
``2002-03-01 10:00:00.5``); a column where it fails, or accepts what DuckDB refuses
(``2002-03-01 10``: an hour without minutes), is parsed here instead, vectorized with one
RE2 regular expression and NumPy. What DuckDB accepts (found by probing DuckDB 2.0, and
checked by tests/test_date_strings.py):

* leading whitespace; a year of any number of digits, ``-`` before it for years before 1
  AD (astronomical: ``-1`` is 2 BC); the separator ``-``, ``/``, ``\\`` or a space, the
  same twice; month and day of 1 or 2 digits (``2002-3-1``); `` (BC)`` after the date;
* a time after ``T`` or whitespace: ``H:M[:S[.fraction]]`` with 1-2 digit fields (the
  fraction truncated to microseconds), ``24:00:00`` being the next midnight;
* then an offset (``Z``, ``+HH``, ``+HHMM``, ``+HH:MM[:SS]``) and whitespace, or one
  space, a time zone name and whitespace (``10:00\t`` is refused, ``10:00Z\t`` is not);
* ``epoch`` (and ``infinity``, which eddies refuses: Arrow has no infinite dates).

A DATE also takes the date alone followed by whitespace (a TIMESTAMP does not), and takes
the date part of any TIMESTAMP text as written (the offset ignored). A TIMESTAMP ignores
the offset and zone name; a TIMESTAMPTZ applies the offset, and of zone names knows only
UTC and GMT (others are refused: eddies has no time zone database).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddies.errors import UnsupportedQueryError

_WS = r"[ \t\n\v\f\r]"  # DuckDB's StringUtil::CharacterIsSpace
_DATE = (
    rf"^{_WS}*(?P<neg>-?)(?P<y>\d+)(?P<s1>[-/ \\])(?P<m>\d{{1,2}})(?P<s2>[-/ \\])(?P<d>\d{{1,2}})"
)
_BC = rf"(?P<bc>{_WS}\([Bb][Cc]\))?"
_TIME = (
    rf"(?:T{_WS}*|{_WS}+)(?P<H>\d+):(?P<M>\d{{1,2}})(?::(?P<S>\d{{1,2}})(?:\.(?P<F>\d*))?)?"
    # an offset, then whitespace; or one space, a zone name, whitespace
    rf"(?:(?P<off>Z|[+-]\d{{2}}(?::?\d{{2}}(?::?\d{{2}})?)?){_WS}*"
    rf"| (?P<zone>[A-Za-z0-9_/+:-]+)?{_WS}*)?"
)
#: TIMESTAMP text; DATE text also takes the date alone with trailing whitespace.
_TIMESTAMP_RE = rf"{_DATE}{_BC}(?:{_TIME})?$"
_DATE_RE = rf"{_DATE}{_BC}(?:{_WS}*|{_TIME})$"
_SPECIAL_RE = rf"^{_WS}*(?P<sign>-?)(?P<word>(?i:epoch|infinity)){_WS}*$"
#: Days from 1970-01-01 of DuckDB's first and last DATE (-5877641-06-25, 5881580-07-10).
_DATE_RANGE = (-2147483646 + 1, 2147483646)
US_PER_DAY = 86_400_000_000
#: Days whose microseconds fit an int64 (DuckDB's TIMESTAMP range, to the day).
_STAMP_DAYS = (-106_751_991, 106_751_990)
#: Strings pyarrow's parser reads but DuckDB refuses (an hour without minutes).
_ARROW_ONLY = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}(?:[^:\d]|$)"


def text_to_date(v: Any, safe: bool) -> Any:
    """VARCHAR values (Scalar or Array) cast to DATE (date32) as DuckDB casts them.

    ``safe``: a string DuckDB rejects is NULL (TRY_CAST); else pa.ArrowInvalid naming it.
    UnsupportedQueryError for ``infinity``.
    """
    if isinstance(v, pa.Scalar):
        return text_to_date(pa.array([v.as_py()], pa.string()), safe)[0]
    try:
        return pc.cast(v, pa.date32())  # pyarrow's strict YYYY-MM-DD: a subset of DuckDB's
    except pa.ArrowInvalid:
        pass
    days, good = _parse(v, _DATE_RE, None, safe, "date")
    return pa.array(np.where(good, days, 0).astype(np.int32), pa.int32(), mask=~good).cast(
        pa.date32()
    )


def text_to_timestamp(v: Any, target: pa.DataType, safe: bool) -> Any:
    """VARCHAR values (Scalar or Array) cast to the TIMESTAMP type ``target`` as DuckDB
    casts them (a naive text is UTC for a TIMESTAMPTZ); ``safe`` as :func:`text_to_date`."""
    if isinstance(v, pa.Scalar):
        return text_to_timestamp(pa.array([v.as_py()], pa.string()), target, safe)[0]
    try:
        out = pc.cast(v, target)
    except pa.ArrowInvalid:
        pass
    else:
        if not pc.any(pc.match_substring_regex(v, _ARROW_ONLY)).as_py():
            return out
    micros, good = _parse(v, _TIMESTAMP_RE, target, safe, "timestamp")
    out = pa.array(np.where(good, micros, 0), pa.int64(), mask=~good)
    return out.cast(pa.timestamp("us", target.tz)).cast(target)


def _parse(
    v: pa.Array, pattern: str, target: pa.DataType | None, safe: bool, what: str
) -> tuple[np.ndarray, np.ndarray]:
    """(days or microseconds since the epoch, whether each row parsed) of strings ``v``;
    microseconds when ``target`` (a timestamp type) is given, else days."""
    v = v.cast(pa.string())
    present = _np(pc.is_valid(v))
    parts = pc.extract_regex(v, pattern=pattern)
    matched = _np(pc.is_valid(parts)) & present
    field = {name: pc.if_else(pc.is_valid(parts), parts.field(name), "") for name in _NAMES}
    good = matched & _np(pc.equal(field["s1"], field["s2"]))
    for name in ("y", "H"):  # more digits would overflow: DuckDB refuses them too
        good &= _np(pc.less_equal(pc.utf8_length(field[name]), 9))
    year = _number(field["y"], good)
    year = np.where(_np(pc.equal(field["neg"], "-")), -year, year)
    bc = _np(pc.not_equal(field["bc"], ""))
    good &= ~(bc & ((year <= 0) | _np(pc.equal(field["neg"], "-"))))
    year = np.where(bc, 1 - year, year)
    month, day = _number(field["m"], good), _number(field["d"], good)
    good &= (month >= 1) & (month <= 12) & (day >= 1)
    first = ((year - 1970) * 12 + np.clip(month, 1, 12) - 1).astype("datetime64[M]")
    length = (first + np.timedelta64(1, "M")).astype("datetime64[D]") - first.astype(
        "datetime64[D]"
    )
    good &= day <= length.astype(np.int64)
    days = first.astype("datetime64[D]").astype(np.int64) + day - 1
    has_time = _np(pc.not_equal(field["H"], ""))
    if target is None:
        good &= (days >= _DATE_RANGE[0]) & (days <= _DATE_RANGE[1])
        good &= ~has_time | _clock_ok(field, good)
        value = days
    else:
        good &= (days >= _STAMP_DAYS[0]) & (days <= _STAMP_DAYS[1]) & _clock_ok(field, good)
        offset = 0
        if target.tz is not None:
            offset, zoned = _offset_us(field, good, target)
            good &= zoned
        value = days * US_PER_DAY + _time_us(field, good) - offset
    value, good = _specials(v, value, good, target is not None)
    bad = present & ~good
    if bad.any() and not safe:
        text = v[int(np.argmax(bad))].as_py()
        raise pa.ArrowInvalid(
            f"invalid {what} field format: {text!r} (DuckDB's {what.upper()} text: "
            "YYYY-MM-DD, month and day of 1 or 2 digits, an optional time HH:MM[:SS[.f]])"
        )
    return np.where(good, value, 0), good


_NAMES = ("neg", "y", "s1", "m", "s2", "d", "bc", "H", "M", "S", "F", "off", "zone")


def _np(a: Any) -> np.ndarray:
    """A boolean Arrow array as NumPy, NULL as False."""
    return np.asarray(pc.fill_null(a, False).to_numpy(zero_copy_only=False), dtype=bool)


def _number(text: pa.Array, good: np.ndarray) -> np.ndarray:
    """Digit strings as int64 ('' and rows not ``good`` are 0)."""
    kept = pc.if_else(pa.array(good, pa.bool_()), text, "0")
    kept = pc.if_else(pc.equal(kept, ""), "0", kept)
    return np.asarray(pc.cast(kept, pa.int64()).to_numpy(zero_copy_only=False), np.int64)


def _clock_ok(field: dict[str, pa.Array], good: np.ndarray) -> np.ndarray:
    """Whether the time fields are a time of day (``24:00:00`` the next midnight)."""
    hour, minute, second = (_number(field[k], good) for k in ("H", "M", "S"))
    zero_fraction = _np(pc.match_substring_regex(field["F"], r"^0*$"))
    midnight = (hour == 24) & (minute == 0) & (second == 0) & zero_fraction
    return ((hour < 24) & (minute < 60) & (second < 60)) | midnight


def _time_us(field: dict[str, pa.Array], good: np.ndarray) -> np.ndarray:
    """Microseconds since midnight of the time fields (fraction truncated, as DuckDB)."""
    hour, minute, second = (_number(field[k], good) for k in ("H", "M", "S"))
    fraction = pc.utf8_rpad(pc.utf8_slice_codeunits(field["F"], 0, 6), width=6, padding="0")
    micros = _number(fraction, good)
    return ((hour * 60 + minute) * 60 + second) * 1_000_000 + micros


def _offset_us(
    field: dict[str, pa.Array], good: np.ndarray, target: pa.DataType
) -> tuple[np.ndarray, np.ndarray]:
    """(the UTC offset of each row in microseconds, whether its zone is one DuckDB accepts)
    for a TIMESTAMPTZ: a zone name (after whitespace) must be a name, not ``Z`` or an
    offset; UnsupportedQueryError for names other than UTC and GMT."""
    off = pc.replace_substring(field["off"], ":", "")
    off = pc.if_else(pc.equal(off, "Z"), "", off)
    sign = np.where(_np(pc.starts_with(off, "-")), -1, 1)
    digits = pc.utf8_rpad(pc.utf8_slice_codeunits(off, 1, 7), width=6, padding="0")
    hms = _number(digits, good)
    seconds = (hms // 10000) * 3600 + (hms // 100 % 100) * 60 + hms % 100
    zone = pc.utf8_upper(field["zone"])
    named = _np(pc.not_equal(zone, ""))
    utc_name = _np(pc.is_in(zone, pa.array(["UTC", "GMT"])))
    # ' Z' and ' +02' are no zone names to DuckDB's TIMESTAMPTZ cast
    wordlike = _np(pc.match_substring_regex(zone, r"^[A-Z][A-Z0-9_/+-]+$"))
    zoned = ~named | utc_name | wordlike
    unknown = named & wordlike & ~utc_name & good
    if unknown.any():
        name = field["zone"][int(np.argmax(unknown))].as_py()
        raise UnsupportedQueryError(
            f"time zone name {name!r} in text cast to {target}: eddies knows only UTC and "
            "GMT, or numeric offsets such as +02:00"
        )
    return sign * seconds * 1_000_000, zoned


def _specials(
    v: pa.Array, value: np.ndarray, good: np.ndarray, stamp: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``epoch`` is 0; ``infinity`` is refused (Arrow's dates and timestamps have none)."""
    parts = pc.extract_regex(v, pattern=_SPECIAL_RE)
    special = _np(pc.is_valid(parts))
    if not special.any():
        return value, good
    word = pc.utf8_lower(pc.if_else(pc.is_valid(parts), parts.field("word"), ""))
    if _np(pc.equal(word, "infinity")).any():
        kind = "TIMESTAMP" if stamp else "DATE"
        raise UnsupportedQueryError(f"infinite {kind} values ('infinity') are not supported")
    return np.where(special, 0, value), good | special
