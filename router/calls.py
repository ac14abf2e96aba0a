"""Calls of slow outside code — a source's lookup, a UDF — with a timeout and retries.

What the index AMs (stems-2003 §2.1.3: lookups on web sources) and per-row UDFs share: each
attempt of a call gets ``timeout`` seconds; a failed attempt (an exception, or the timeout)
is retried up to ``retries`` times, ``backoff * 2**k`` seconds apart (exponential backoff);
when the retries are used up, :class:`CallFailed` says what the last attempt did wrong.
Concurrency and de-duplication stay with the callers (an index AM's worker tasks, a UDF's
per-query table of calls, :mod:`eddies.router.udf_calls`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio


class CallFailed(Exception):
    """Every attempt of a call failed: ``error`` describes the last one; ``attempts`` ran."""

    def __init__(self, error: str, attempts: int) -> None:
        super().__init__(error)
        self.error = error
        self.attempts = attempts


async def call_with_retries(
    attempt: Callable[[], Awaitable[Any]],
    *,
    timeout: float | None,
    retries: int,
    backoff: float,
    on_retry: Callable[[int, str], None] | None = None,
    first_attempt: int = 0,
    last_error: str = "no attempt",
    wait_asked: Callable[[Exception], float | None] | None = None,
    on_wait: Callable[[float, str], None] | None = None,
    max_waits: int = 32,
) -> Any:
    """Await ``attempt()`` until one succeeds; its result, or CallFailed.

    ``timeout``: seconds per attempt (None: no limit); attempt k (k >= 1) starts
    ``backoff * 2**(k-1)`` seconds after attempt k-1 failed; ``on_retry(k, error)`` is
    called before it. ``first_attempt``/``last_error``: attempts already made elsewhere
    (a UDF's first attempt may run in a batch of calls in one worker thread).

    Back-pressure is not failure: when ``wait_asked(exc)`` gives a number of seconds for a
    failed attempt's exception (a source's HTTP 429 with ``Retry-After``), the call waits
    that long (``on_wait(seconds, error)`` first) and asks again without using up an
    attempt, at most ``max_waits`` times.
    """
    if timeout is None and retries == first_attempt == 0 and wait_asked is None:
        # One attempt, no limit: the common case of a UDF call, without the loop's
        # bookkeeping (it runs once per distinct row, ~100k times in a large query).
        try:
            return await attempt()
        except Exception as exc:
            raise CallFailed(describe_exception(exc), 1) from None
    error = last_error
    k, waits, delay = first_attempt, 0, 0.0
    while k <= retries:
        if delay:
            await trio.sleep(delay)
        try:
            if timeout is None:
                return await attempt()
            with trio.fail_after(timeout):
                return await attempt()
        except trio.TooSlowError:
            error = f"timed out after {timeout} s"
        except Exception as exc:  # any failure of outside code counts; it is retried
            error = describe_exception(exc)
            wait = wait_asked(exc) if wait_asked is not None else None
            if wait is not None and waits < max_waits:
                waits += 1
                if on_wait is not None:
                    on_wait(wait, error)
                delay = wait
                continue
        k += 1
        if k <= retries:
            if on_retry is not None:
                on_retry(k, error)
            delay = backoff * 2 ** (k - 1)
    raise CallFailed(error, retries + 1)


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` (or just the type when the message is empty)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
