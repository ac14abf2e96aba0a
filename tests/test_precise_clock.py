"""engine/runtime/precise_clock.py: the clock the engine's own trio runs use hands epoll whole
milliseconds rounded down and sleeps a sub-millisecond remainder itself (so a deadline is
not met up to a millisecond late), and the engine's entry points run under it. Time is a
fake counter here: no test reads the wall clock."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
import trio

from eddies.engine import Catalog, run_query
from eddies.engine.runtime import precise_clock
from eddies.engine.runtime.precise_clock import EPOLL_UNIT, PreciseClock, run_clock


class FakeTime:
    """A settable counter (seconds) and a record of the sleeps asked for."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.parametrize(
    ("remaining", "epoll_ms", "slept"),
    [
        (0.0103, 10, []),  # epoll would round 10.3 ms up to 11 ms: 10 ms, then the rest
        (0.010, 10, []),
        (0.009, 9, []),  # 9 * 0.001 is 0.009000000000000001: CPython would wait 10 ms
        (0.0019, 1, []),
        (0.001, 1, []),
        (0.00025, 0, [0.00025]),  # under a millisecond: slept here, epoll not waited on
        (0.0, 0, []),
        (-0.5, 0, []),  # a deadline already passed
    ],
)
def test_whole_milliseconds_to_epoll_and_the_remainder_slept(remaining, epoll_ms, slept):
    """The wait handed to epoll is ``epoll_ms`` once CPython rounds it up to whole
    milliseconds (as ``select.epoll.poll`` does), and never past the deadline."""
    fake = FakeTime()
    clock = PreciseClock(now=lambda: fake.now, sleep=fake.sleep)
    assert clock.current_time() == fake.now
    got = clock.deadline_to_sleep_time(fake.now + remaining)
    assert math.ceil(round(got * 1e9) / 1e6) == epoll_ms  # seconds -> ns -> ms, rounded up
    assert got <= max(remaining, 0.0)
    assert fake.slept == pytest.approx(slept)


def test_a_wait_ends_at_its_deadline_not_a_millisecond_after():
    """The waits trio would do for a deadline 10.3 ms away: epoll 10 ms (woken on time by
    the fake), then 0.3 ms slept here, then nothing: the deadline is met exactly."""
    fake = FakeTime()
    clock = PreciseClock(now=lambda: fake.now, sleep=fake.sleep)
    deadline = fake.now + 0.0103
    waits = []
    while fake.now < deadline and len(waits) < 5:
        wait = clock.deadline_to_sleep_time(deadline)
        waits.append(wait)
        fake.now += wait  # epoll returns at its timeout
    assert math.ceil(round(waits[0] * 1e9) / 1e6) == 10 and not any(waits[1:])
    assert sum(fake.slept) == pytest.approx(0.0003, abs=2e-6)
    assert fake.now == pytest.approx(deadline)


def test_no_deadline_and_far_deadlines_pass_unchanged():
    fake = FakeTime()
    clock = PreciseClock(now=lambda: fake.now, sleep=fake.sleep)
    assert clock.deadline_to_sleep_time(math.inf) == math.inf
    assert clock.deadline_to_sleep_time(fake.now + 100_000.0) == pytest.approx(100_000.0)
    assert fake.slept == []
    assert EPOLL_UNIT == 0.001


def test_run_query_runs_under_the_precise_clock_unless_turned_off(monkeypatch):
    """run_query's trio loop has a PreciseClock (an async UDF sees it as the current
    clock); EDDIES_PRECISE_CLOCK=0 gives trio's own clock back."""
    seen = []

    async def which_clock(x):
        seen.append(type(trio.lowlevel.current_clock()))
        return x

    cat = Catalog()
    cat.add_table("t", pa.table({"x": [1, 2, 3]}))
    cat.add_function("which_clock", which_clock, vectorized=False, return_type=pa.int64())
    sql = "SELECT which_clock(t.x) AS y FROM t"
    assert sorted(run_query(sql, cat).table.column("y").to_pylist()) == [1, 2, 3]
    assert seen and set(seen) == {PreciseClock}
    for off in ("0", "off", "False", "no"):
        monkeypatch.setenv(precise_clock.ENV_VAR, off)
        assert run_clock() is None
    seen.clear()
    run_query(sql, cat)
    assert seen and PreciseClock not in set(seen)
    monkeypatch.setenv(precise_clock.ENV_VAR, "1")
    assert isinstance(run_clock(), PreciseClock)
