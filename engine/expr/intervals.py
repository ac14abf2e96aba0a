"""Fixed-length time spans written as text: ``'10 minutes'``, ``'1 hour 30 minutes'``.

Used for ``time_bucket``'s width (``INTERVAL '10 minutes'``) and a stream's allowed
lateness (``watermarks={"clicks": ("ts", "10 seconds")}``). Only spans of fixed length
exist here (microseconds to weeks): a month or a year has no fixed length, so it is
refused rather than approximated.
"""

from __future__ import annotations

import datetime as dt
import re

from eddies.errors import EddiesError

#: Microseconds per unit, with DuckDB's spellings of each.
_UNIT_US = {
    "microsecond": 1,
    "millisecond": 1_000,
    "second": 1_000_000,
    "minute": 60_000_000,
    "hour": 3_600_000_000,
    "day": 86_400_000_000,
    "week": 7 * 86_400_000_000,
}
_ALIASES = {
    "us": "microsecond", "usec": "microsecond", "microseconds": "microsecond",
    "ms": "millisecond", "msec": "millisecond", "milliseconds": "millisecond",
    "s": "second", "sec": "second", "secs": "second", "seconds": "second",
    "m": "minute", "min": "minute", "mins": "minute", "minutes": "minute",
    "h": "hour", "hr": "hour", "hrs": "hour", "hours": "hour",
    "d": "day", "days": "day", "w": "week", "weeks": "week",
}  # fmt: skip
_TERM = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*")


def parse_span(text: str, *, allow_zero: bool = False) -> int:
    """``text`` (``'10 minutes'``, ``'1 hour 30 min'``, ``'500 ms'``) in microseconds.

    Raises EddiesError for anything else: an unknown unit, months or years (no fixed
    length), a number without a unit, or a span that is not positive (zero is allowed
    with ``allow_zero``: a lateness of no time).
    """
    if not isinstance(text, str) or not text.strip():
        raise EddiesError(f"a time span must be text such as '10 seconds', got {text!r}")
    total, pos = 0.0, 0
    while pos < len(text):
        match = _TERM.match(text, pos)
        if match is None:
            raise EddiesError(f"cannot read the time span {text!r} (write e.g. '10 seconds')")
        unit = match.group(2).lower()
        unit = _ALIASES.get(unit, unit)
        if unit not in _UNIT_US:
            calendar = unit.startswith(("mon", "y"))
            fixed = "months and years have no fixed length; " if calendar else ""
            raise EddiesError(
                f"time span {text!r}: unit {match.group(2)!r} is not supported ({fixed}"
                f"supported: {', '.join(_UNIT_US)})"
            )
        total += float(match.group(1)) * _UNIT_US[unit]
        pos = match.end()
    if total < 0 or (total == 0 and not allow_zero) or total != int(total):
        what = "a non-negative" if allow_zero else "a positive"
        raise EddiesError(f"time span {text!r} must be {what} whole number of microseconds")
    return int(total)


def span_us(value: object, *, allow_zero: bool = False) -> int:
    """A span given as text (see :func:`parse_span`) or a ``datetime.timedelta``, in
    microseconds; EddiesError for anything else or a negative (or zero, unless
    ``allow_zero``) span."""
    if isinstance(value, dt.timedelta):
        us = value // dt.timedelta(microseconds=1)
        if us < 0 or (us == 0 and not allow_zero):
            raise EddiesError(f"a time span must be positive, got {value!r}")
        return us
    if isinstance(value, str):
        return parse_span(value, allow_zero=allow_zero)
    raise EddiesError(
        f"a time span must be text such as '10 seconds' or a timedelta, got {value!r}"
    )
