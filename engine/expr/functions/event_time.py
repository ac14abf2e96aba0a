"""Event-time windows: ``time_bucket(INTERVAL w, ts)`` (:class:`TimeBucket`, buckets
aligned as DuckDB aligns them) and Spark's ``window(ts, size[, slide])``
(:class:`HopWindow`, tumbling or hopping windows). Streaming aggregates read their widths
to know when a window is final (its end behind the watermark); :func:`floor_us` gives
event times as int64 microseconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.engine.expr.casts import cast_to
from eddies.engine.expr.intervals import parse_span
from eddies.engine.expr.registry import Site, register
from eddies.engine.expr.types import plain
from eddies.errors import EddiesError, UnsupportedQueryError, describe
from eddies.router.expressions import Expr

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
    v = plain(v)
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


@register(exp.DateBin)
def _compile_time_bucket(node: exp.DateBin, site: Site) -> Expr:
    return site.call(_time_bucket(node), site.ops("expression"))


@register("window")
def _compile_window(node: exp.Anonymous, site: Site) -> Expr:
    return site.call(_hop_window(node), [site.compile(node.expressions[0])])
