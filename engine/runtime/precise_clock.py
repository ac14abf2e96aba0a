"""A trio clock whose timers fire within tens of microseconds, not up to a millisecond late.

trio waits for its next deadline in ``epoll_wait``, whose timeout is whole milliseconds:
CPython rounds the wait *up* (``select.epoll.poll``), so a deadline 0.2 ms away costs a
full millisecond. An eddy waits on many deadlines that fall close together: an async UDF
with ``max_concurrency`` calls in flight (issue 10, eddies-2000 §4's latency hiding
applied to predicates) starts each wave of calls within a few hundred microseconds, the
first wake-up covers only the calls that started first, and the rest of the wave waits one
more millisecond. On the reference VM 100 calls of 10 ms, 32 in flight, take 45-48 ms
under trio's own clock (4 waves of ~11.3 ms) and 43-44 ms under this one
(``bench/adaptive_async.py`` prints both floors).

:class:`PreciseClock` (a :class:`trio.abc.Clock`) hands ``epoll_wait`` only whole
milliseconds, rounded *down*, and sleeps a remainder under one millisecond in
``nanosleep`` (``time.sleep``: microsecond resolution, the kernel's 50 µs timer slack).
No CPU is spent spinning. It is consulted only when no task is runnable; during such a
sub-millisecond sleep the loop does not poll for I/O, so a socket or a worker thread that
becomes ready then is served at most that long later, never later than its deadline
(trio's own clock can be up to a millisecond late for timers instead). Other threads run
meanwhile (the GIL is released). A signal interrupting the sleep is handled as trio
handles it anywhere in its run loop (the loop's frames are KeyboardInterrupt-protected).

:func:`run_clock` is what the engine passes to the ``trio.run`` calls it owns
(``run_query``, ``execute``, the CLI, the partitioned and streaming runners). Inside a
program's own trio run (``open_query``) pass ``clock=PreciseClock()`` to ``trio.run``.
``EDDIES_PRECISE_CLOCK=0`` (or off/false/no) gives trio's default clock back.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

import trio

#: The environment variable; 0, off, false or no = trio's default clock.
ENV_VAR = "EDDIES_PRECISE_CLOCK"
#: epoll's unit of waiting, in seconds.
EPOLL_UNIT = 0.001
#: Longer waits are handed to epoll as they are (trio caps them at a day anyway).
_UNROUNDED_ABOVE = 86_400.0
#: How far under a whole number of milliseconds a wait is handed to epoll (in ms).
_UNDER = 0.001


class PreciseClock(trio.abc.Clock):
    """trio's time source (``time.perf_counter``, seconds) with sub-millisecond wake-ups.

    ``now`` and ``sleep`` are injectable for tests (seconds; defaults ``time.perf_counter``
    and ``time.sleep``). See the module docstring for why and what it costs.
    """

    def __init__(
        self,
        now: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._now = now
        self._sleep = sleep

    def start_clock(self) -> None:
        """Nothing to start: the time source is the process's monotonic counter."""

    def current_time(self) -> float:
        """Seconds on ``time.perf_counter``'s monotonic scale."""
        return self._now()

    def deadline_to_sleep_time(self, deadline: float) -> float:
        """Seconds trio's I/O wait may block before ``deadline``: the whole milliseconds
        left, rounded down (epoll would round a fraction up); under one millisecond left,
        sleeps it here and returns 0. ``inf`` (no deadline) and far deadlines pass as is."""
        remaining = deadline - self._now()
        if remaining <= 0:
            return 0.0
        if remaining >= _UNROUNDED_ABOVE:
            return remaining
        if remaining >= EPOLL_UNIT:
            # A hair under the whole milliseconds: 9 * 0.001 is 0.009000000000000001 in
            # binary, which CPython would round up to 10 ms, the very overshoot avoided here.
            whole = math.floor(remaining / EPOLL_UNIT)
            return (whole - _UNDER) * EPOLL_UNIT
        self._sleep(remaining)
        return 0.0


def precise_clock_enabled() -> bool:
    """Whether ``EDDIES_PRECISE_CLOCK`` leaves the precise clock on (the default)."""
    value = os.environ.get(ENV_VAR, "1").strip().lower()
    return value not in ("0", "off", "false", "no")


def run_clock() -> PreciseClock | None:
    """The clock for a ``trio.run`` the engine owns: a new :class:`PreciseClock`, or None
    (trio's default) when ``EDDIES_PRECISE_CLOCK`` turns it off."""
    return PreciseClock() if precise_clock_enabled() else None
