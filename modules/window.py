"""Windows over stream tables: SteMs that forget (stems-2003 §2.3; CACQ, Madden et al. 2002).

Over a stream that never ends a SteM cannot keep every tuple. A stream table registered
with a window keeps only the tuples still inside it, and a join result is produced only
from tuples that were all inside their windows at the moment the newest of them arrived —
the usual sliding-window join, made exact under an eddy's asynchronous routing:

* Every tuple of a stream table gets its **arrival** TimeStamp when its SteM builds it
  (the query's global build clock, stems-2003 §3.1).
* A windowed tuple u gets an **expiry** TimeStamp once the tuple that pushes it out of
  the window is built: for ``RowWindow(n)``, the n-th tuple of its table built after it;
  for ``EventTimeWindow(column, span)``, the first tuple of its table (u itself, if it
  arrives late) at whose arrival the table's watermark — the largest event time built so
  far — exceeds ``event_time(u) + span``. A tuple with a NULL event time is late.
* A result (or partial result) is valid iff ``stream_time < expiry(c)`` for every
  windowed component c, where stream_time is the latest arrival among its stream
  components. Static tables (read in full before the streams start) and rows looked up
  from index AMs carry no time: a web lookup that takes 20 ms does not age a result.

The check runs on every SteM probe's output. It never drops a tuple that the final result
needs — a partial result's stream_time can only grow as it spans more tables — and an
expiry that is still unknown lies in the future, after every arrival so far, so checking
with what is known now is exact. Results are thus a function of the arrival order alone,
not of routing. Expired tuples are logically dead at once and physically evicted (SteM
entries, index, row store) at the next quiescent point, where no probe is in flight
(see :mod:`eddies.engine.streaming.commit_points`): memory is bounded by the window plus what
arrives between two quiescent points.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddies.errors import DataSourceError

#: Expiry of a tuple that is still inside its window (or of an unwindowed stream's).
NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True)
class RowWindow:
    """Keep the last ``rows`` tuples of the stream (a count-based sliding window)."""

    rows: int


@dataclass(frozen=True)
class EventTimeWindow:
    """Keep the tuples whose ``column`` is within ``span`` of the largest value seen.

    column: a numeric, timestamp or date column; span: a number in the column's units, or
    a ``datetime.timedelta`` for timestamp and date columns.
    """

    column: str
    span: float | int | dt.timedelta


Window = RowWindow | EventTimeWindow


def check_window(window: object, schema: pa.Schema, where: str) -> None:
    """Raise DataSourceError naming ``where`` unless ``window`` fits ``schema``."""
    if isinstance(window, RowWindow):
        if isinstance(window.rows, bool) or not isinstance(window.rows, int) or window.rows < 1:
            raise DataSourceError(f"{where}: RowWindow needs rows >= 1, got {window.rows!r}")
        return
    if not isinstance(window, EventTimeWindow):
        raise DataSourceError(
            f"{where}: window must be RowWindow(rows) or EventTimeWindow(column, span), "
            f"got {window!r}"
        )
    if window.column not in schema.names:
        raise DataSourceError(
            f"{where}: window column {window.column!r} is not in the schema "
            f"({', '.join(schema.names)})"
        )
    typ = schema.field(window.column).type
    temporal = pa.types.is_timestamp(typ) or pa.types.is_date(typ)
    if not (temporal or pa.types.is_integer(typ) or pa.types.is_floating(typ)):
        raise DataSourceError(
            f"{where}: window column {window.column!r} has type {typ}; "
            "it must be numeric, a timestamp or a date"
        )
    span = window.span
    if isinstance(span, dt.timedelta):
        if not temporal:
            raise DataSourceError(
                f"{where}: a timedelta span needs a timestamp or date column, "
                f"{window.column!r} is {typ}"
            )
        positive = span > dt.timedelta(0)
    elif isinstance(span, int | float) and not isinstance(span, bool):
        positive = span > 0
    else:
        raise DataSourceError(f"{where}: window span must be a number or timedelta, got {span!r}")
    if not positive:
        raise DataSourceError(f"{where}: window span must be positive, got {span!r}")


def event_times(values: pa.Array, window: EventTimeWindow) -> tuple[np.ndarray, np.ndarray, Any]:
    """(event times, NULL mask, span in the same units).

    Integer, timestamp and date columns with a whole span compare exactly as int64 (a
    nanosecond timestamp would lose precision as float64); others as float64.
    """
    typ = values.type
    span = window.span
    if pa.types.is_timestamp(typ):
        raw = values.cast(pa.int64())
        if isinstance(span, dt.timedelta):  # exactly, in the column's unit
            per_unit = {"s": 10**6, "ms": 10**3, "us": 1, "ns": Fraction(1, 1000)}[typ.unit]
            span = Fraction(span // dt.timedelta(microseconds=1)) / per_unit
    elif pa.types.is_date(typ):
        raw = values.cast(pa.date32()).cast(pa.int64())  # days
        if isinstance(span, dt.timedelta):
            span = Fraction(span // dt.timedelta(microseconds=1), 86_400 * 10**6)
    else:
        raw = values
    null = raw.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_integer(raw.type) and Fraction(span).denominator == 1:
        times = pc.fill_null(raw.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
        return times, null, int(span)
    times = pc.fill_null(raw.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False)
    return times, null, float(span)


class StreamClock:
    """Arrival and expiry TimeStamps of one stream table's tuples, indexed by row id.

    Owned by the table's SteM (which calls :meth:`built`); read by every SteM's probe
    through :func:`valid_mask`. ``window`` None: tuples never expire (only arrivals).
    """

    def __init__(self, table: str, window: Window | None) -> None:
        self.table = table
        self.window = window
        self.arrival = np.zeros(0, dtype=np.int64)  # by row id
        self.expiry = np.zeros(0, dtype=np.int64)  # by row id
        self.late_rows = 0  # event-time windows: rows that arrived already expired
        self.evicted_rows = 0
        self.expired_rows = 0  # rows with a known expiry, still stored
        self.stored_rows = 0  # rows in the table's store (set by its SteM)
        self.peak_stored_rows = 0
        # Event-time windows: live rows, their deadlines, and the watermark.
        self._live = np.zeros(0, dtype=np.int64)
        self._deadline = np.zeros(0, dtype=np.int64)
        self._watermark: Any = None  # the largest event time built so far

    def _grow(self, size: int) -> None:
        if size > len(self.arrival):
            capacity = max(size, 2 * len(self.arrival), 1024)
            self.arrival = _resized(self.arrival, capacity, NEVER)
            self.expiry = _resized(self.expiry, capacity, NEVER)

    def built(
        self,
        row_ids: np.ndarray,
        ts: np.ndarray,
        built_rows: np.ndarray,
        built_ts: np.ndarray,
        times: np.ndarray | None = None,
        nulls: np.ndarray | None = None,
        span: Any = 0,
    ) -> None:
        """Record a build of ``row_ids`` at raw TimeStamps ``ts``; set the expiries it
        causes. built_rows/built_ts: every row built so far in build order (this batch
        last); times/nulls/span: this batch's event times and NULL mask, and the span, for
        an event-time window (see :func:`event_times`)."""
        if len(row_ids) == 0:
            return
        self._grow(int(row_ids.max()) + 1)
        self.arrival[row_ids] = ts
        window = self.window
        if isinstance(window, RowWindow):
            n, k = len(built_rows), len(row_ids)
            first, last = max(0, n - k - window.rows), n - window.rows
            if last > first:  # positions pushed out by this batch
                self.expiry[built_rows[first:last]] = built_ts[first + window.rows : n]
                self.expired_rows += last - first
        elif isinstance(window, EventTimeWindow):
            assert times is not None and nulls is not None
            lowest = _lowest(times.dtype)
            if self._watermark is None:
                self._watermark = lowest
                self._deadline = np.zeros(0, dtype=times.dtype)
            filled = np.where(nulls, lowest, times)
            marks = np.maximum.accumulate(np.concatenate([[self._watermark], filled]))[1:]
            deadlines = np.where(nulls, lowest, times + span)
            late = nulls | (marks > deadlines)
            self.late_rows += int(np.count_nonzero(late))
            live = np.concatenate([self._live, row_ids])
            deadline = np.concatenate([self._deadline, deadlines])
            # The first arrival at which the watermark passes each deadline (a row's own
            # arrival at the earliest: a late row is expired when it arrives).
            at = np.searchsorted(marks, deadline, side="right")
            own = np.arange(len(ts))
            at[len(self._live) :] = np.where(late, own, np.maximum(at[len(self._live) :], own))
            gone = at < len(ts)
            self.expiry[live[gone]] = ts[at[gone]]
            self.expired_rows += int(np.count_nonzero(gone))
            self._live, self._deadline = live[~gone], deadline[~gone]
            self._watermark = marks[-1]

    def deadlines_of(self, row_ids: np.ndarray) -> np.ndarray:
        """The event-time deadlines of live ``row_ids`` (an event-time window's; every id
        must be live: built and not expired), for a checkpoint."""
        by_row = np.zeros(max(len(self.arrival), 1), dtype=self._deadline.dtype)
        by_row[self._live] = self._deadline
        return by_row[row_ids]

    def restore(
        self,
        row_ids: np.ndarray,
        ts: np.ndarray,
        deadlines: np.ndarray | None,
        watermark: Any,
        counters: dict[str, int],
    ) -> None:
        """Take back a checkpoint's live tuples, rebuilt as ``row_ids`` at raw TimeStamps
        ``ts`` (in their old build order): none has expired, so their expiries are unknown;
        an event-time window gets back its deadlines and watermark. ``counters``: late,
        evicted and peak stored rows as checkpointed. Call before any other build."""
        self.late_rows = counters.get("late_rows", 0)
        self.evicted_rows = counters.get("evicted_rows", 0)
        self.peak_stored_rows = counters.get("peak_stored_rows", 0)
        if len(row_ids):
            self._grow(int(row_ids.max()) + 1)
            self.arrival[row_ids] = ts
        if isinstance(self.window, EventTimeWindow) and watermark is not None:
            assert deadlines is not None
            self._live = np.asarray(row_ids, dtype=np.int64).copy()
            self._deadline = np.asarray(deadlines)
            self._watermark = self._deadline.dtype.type(watermark)

    @property
    def watermark(self) -> Any:
        """An event-time window's watermark (the largest event time built; None before)."""
        return None if self._watermark is None else np.asarray(self._watermark).item()

    def stored(self, rows: int) -> None:
        self.stored_rows = rows
        self.peak_stored_rows = max(self.peak_stored_rows, rows)

    def expired(self, row_ids: np.ndarray) -> np.ndarray:
        """Mask of ``row_ids`` whose expiry is known (they can go at a quiescent point)."""
        return self.expiry[row_ids] != NEVER

    def renumber(self, kept: np.ndarray) -> None:
        """The row store kept only ``kept`` (old row ids), renumbered 0..len(kept)-1."""
        self.evicted_rows += self.expired_rows
        self.expired_rows = 0
        new_ids = np.full(len(self.arrival), -1, dtype=np.int64)
        new_ids[kept] = np.arange(len(kept), dtype=np.int64)
        self.arrival = self.arrival[kept].copy()
        self.expiry = self.expiry[kept].copy()
        if len(self._live):
            self._live = new_ids[self._live]


def _lowest(dtype: np.dtype) -> Any:
    """Below every event time (and every NULL's deadline): the watermark's start."""
    return np.iinfo(dtype).min if np.issubdtype(dtype, np.integer) else -np.inf


def _resized(values: np.ndarray, capacity: int, fill: int) -> np.ndarray:
    grown = np.full(capacity, fill, dtype=values.dtype)
    grown[: len(values)] = values
    return grown


def valid_mask(rows: dict[int, np.ndarray], clocks: dict[int, StreamClock]) -> np.ndarray | None:
    """Which tuples of a (partial) result satisfy every window; None: all of them.

    rows: row ids per alias; clocks: the StreamClock of each stream alias in the query.
    """
    present = [(a, clocks[a]) for a in rows if a in clocks]
    if not present or not any(c.window is not None for _, c in present):
        return None
    stream_time = present[0][1].arrival[rows[present[0][0]]]
    for alias, clock in present[1:]:
        stream_time = np.maximum(stream_time, clock.arrival[rows[alias]])
    ok: np.ndarray | None = None
    for alias, clock in present:
        if clock.window is None:
            continue
        inside = stream_time < clock.expiry[rows[alias]]
        ok = inside if ok is None else ok & inside
    return ok
