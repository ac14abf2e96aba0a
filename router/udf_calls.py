"""A UDF's calls within one query: concurrent, de-duplicated, cached, timed out and retried.

stems-2003 §2.1.3 hides the latency of web sources behind many asynchronous lookups, each
bind value looked up once; the same idea applies to predicates that call a model or a
service per row (Hydro's ML predicates). So, per query and per registered function:

* A per-row ``async def`` function has up to ``max_concurrency`` calls in flight (a
  ``trio.CapacityLimiter`` per function); a sync one runs on at most ``max_concurrency``
  worker threads (the same limiter, handed to ``trio.to_thread``).
* Each distinct argument tuple is called once per query (``cache=True``): rows of a batch
  with equal arguments share one call, and a later batch (or a concurrent one: the SM works
  on several at once) finds the finished or in-flight call in the query's table of calls.
  ``cache=False`` calls the function once per row (a volatile function such as a sampler).
  Arguments that cannot be hashed (lists, structs) are called once per row.
* Each attempt gets ``timeout`` seconds and up to ``retries`` retries, ``backoff * 2**k``
  apart (:func:`~eddies.router.calls.call_with_retries`, shared with the index AMs); then
  the query fails with a UdfError naming the function and the arguments.
* Without a timeout, a sync function's calls of one batch are run in at most
  ``max_concurrency`` chunks, one worker thread each: a thread hop costs ~0.2 ms, more than
  most calls. With a timeout each call gets its own hop, so it can be abandoned.
* :class:`UdfStats` counts calls, cache hits, retries, seconds in calls and seconds the
  query waited for them; ``RunStats.functions`` shows them per function.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from eddies.errors import UdfError
from eddies.router.calls import CallFailed, call_with_retries, describe_exception

if TYPE_CHECKING:  # pragma: no cover
    from eddies.router.expressions import FunctionSpec


@dataclass
class UdfStats:
    """What one function did in a query.

    calls: distinct calls made (first attempts; per batch for vectorized functions);
    retries: further attempts; cache_hits: rows answered by another row's call (a
    duplicate in the batch, or a call of an earlier or concurrent batch); call_seconds:
    seconds in calls, summed over concurrent ones; waited_seconds: seconds evaluations
    waited for the function's results, summed over the batches that waited (trio clock).
    """

    name: str
    calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    call_seconds: float = 0.0
    waited_seconds: float = 0.0


@dataclass(eq=False)
class _Call:
    """One distinct argument tuple: called once, awaited by every row that needs it."""

    key: tuple
    done: trio.Event = field(default_factory=trio.Event)
    value: Any = None
    error: str | None = None
    attempts: int = 0
    finished: bool = False  # a value or an error is in


class FunctionCalls:
    """One function's calls in one query (see the module docstring).

    ``registry`` (the query's name -> UdfStats) gets this function's stats when it is
    first called, so a run's stats list the functions the query actually called.
    """

    def __init__(self, spec: FunctionSpec, registry: dict[str, UdfStats] | None = None) -> None:
        self.spec = spec
        self.stats = UdfStats(spec.name)
        self._registry = registry
        self._limiter: trio.CapacityLimiter | None = None
        self._memo: dict[tuple, _Call] = {}

    @property
    def limiter(self) -> trio.CapacityLimiter:
        if self._limiter is None:  # made in the query's trio run
            self._limiter = trio.CapacityLimiter(self.spec.max_concurrency)
        return self._limiter

    def _register(self) -> None:
        if self._registry is not None and self.spec.name not in self._registry:
            self._registry[self.spec.name] = self.stats

    def _on_retry(self, attempt: int, error: str) -> None:
        self.stats.retries += 1

    async def call_vectorized(self, args: list[Any], sql: object) -> Any:
        """One call of a vectorized function on a whole batch (async: awaited under the
        limiter; sync: on a worker thread of the limiter); UdfError when it fails."""
        self._register()
        spec, stats = self.spec, self.stats
        started = trio.current_time()
        stats.calls += 1
        if spec.is_async:

            def attempt():
                return spec.fn(*args)
        else:

            def attempt():
                return trio.to_thread.run_sync(
                    spec.fn, *args, limiter=self.limiter, abandon_on_cancel=True
                )

        try:
            if spec.is_async:
                async with self.limiter:
                    return await self._retrying(attempt)
            return await self._retrying(attempt)
        except CallFailed as failed:
            raise UdfError(
                f"function {spec.name!r} failed in {sql}{_attempts(failed)}: {failed.error}"
            ) from None
        finally:
            elapsed = trio.current_time() - started
            stats.call_seconds += elapsed
            stats.waited_seconds += elapsed

    async def call_per_row(self, columns: Sequence[list[Any]], n: int, sql: object) -> list[Any]:
        """The function's value for each of ``n`` rows (``columns``: one list per argument).

        Distinct argument tuples not called yet in this query are called now, concurrently;
        rows whose arguments are being called by another batch wait for that call.
        Raises UdfError naming the function and the first failed row's arguments.
        """
        self._register()
        started = trio.current_time()
        rows: Sequence[tuple] = list(zip(*columns, strict=True)) if columns else [()] * n
        new: list[_Call]
        if self.spec.cache:
            memo, calls, new = self._memo, [], []
            for row in rows:  # a dict probe per row: cheap next to a per-row Python call
                try:
                    call = memo.get(row)
                    if call is None:
                        call = memo[row] = _Call(row)
                        new.append(call)
                except TypeError:  # unhashable arguments: called for this row alone
                    call = _Call(row)
                    new.append(call)
                calls.append(call)
        else:
            calls = new = [_Call(row) for row in rows]
        self.stats.cache_hits += len(rows) - len(new)
        if new:
            async with trio.open_nursery() as nursery:
                if self.spec.is_async:
                    # At most max_concurrency workers take the calls in order: a task per
                    # call would spawn, and park on the limiter, every call past the limit
                    # (1-3 ms before the first of 100 calls started).
                    pending = collections.deque(new)
                    for _ in range(min(len(new), self.spec.max_concurrency)):
                        nursery.start_soon(self._call_pending, pending)
                else:
                    for chunk in self._chunks(new):
                        nursery.start_soon(self._call_in_thread, chunk)
        for call in calls:
            if not call.done.is_set():  # called by a concurrent batch
                await call.done.wait()
        self.stats.waited_seconds += trio.current_time() - started
        for call in calls:
            if call.error is not None:
                raise UdfError(
                    f"function {self.spec.name!r} failed in {sql} for arguments "
                    f"{_args(call.key)}{_attempts(call)}: {call.error}"
                )
        return [call.value for call in calls]

    def _chunks(self, calls: list[_Call]) -> list[list[_Call]]:
        """A sync function's calls, split over the worker threads (one call each when
        calls can time out, as only a thread of its own can be abandoned)."""
        if self.spec.timeout is not None:
            return [[c] for c in calls]
        k = min(len(calls), self.spec.max_concurrency)
        size = -(-len(calls) // k)
        return [calls[i : i + size] for i in range(0, len(calls), size)]

    async def _retrying(self, attempt: Callable, **kw: Any) -> Any:
        spec = self.spec
        return await call_with_retries(
            attempt,
            timeout=spec.timeout,
            retries=spec.retries,
            backoff=spec.backoff,
            on_retry=self._on_retry,
            **kw,
        )

    async def _call_pending(self, pending: collections.deque[_Call]) -> None:
        """Call what ``pending`` holds, one call at a time, until it is empty; calls left
        when this worker is cancelled are finished as failed (no row reads a NULL)."""
        try:
            while pending:
                await self._call_async(pending.popleft())
        finally:
            while pending:
                _finish(pending.popleft())

    async def _call_async(self, call: _Call) -> None:
        fn, limiter = self.spec.fn, self.limiter
        try:
            await _acquire(limiter)
            try:
                started = trio.current_time()
                self.stats.calls += 1
                try:
                    call.value = await self._retrying(lambda: fn(*call.key))
                except CallFailed as failed:
                    call.error, call.attempts = failed.error, failed.attempts
                else:
                    call.finished = True
                finally:
                    self.stats.call_seconds += trio.current_time() - started
            finally:
                limiter.release()
        finally:
            _finish(call)

    async def _call_in_thread(self, chunk: list[_Call]) -> None:
        fn = self.spec.fn
        started = trio.current_time()
        self.stats.calls += len(chunk)
        try:
            if self.spec.timeout is None:
                outcomes = await trio.to_thread.run_sync(
                    _call_each,
                    fn,
                    [c.key for c in chunk],
                    limiter=self.limiter,
                    abandon_on_cancel=True,
                )
            else:
                outcomes = [(False, "no attempt")] * len(chunk)
            for call, (ok, value) in zip(chunk, outcomes, strict=True):
                if ok:
                    call.value, call.finished = value, True
                    continue
                # First attempt failed in the chunk (or is still to make): retry alone.
                first = 1 if self.spec.timeout is None else 0
                try:
                    call.value = await self._retrying(
                        lambda call=call: trio.to_thread.run_sync(
                            fn, *call.key, limiter=self.limiter, abandon_on_cancel=True
                        ),
                        first_attempt=first,
                        last_error=value,
                    )
                except CallFailed as failed:
                    call.error, call.attempts = failed.error, failed.attempts
                call.finished = True
        finally:
            self.stats.call_seconds += trio.current_time() - started
            for call in chunk:
                _finish(call)


def _call_each(fn: Callable, keys: list[tuple]) -> list[tuple[bool, Any]]:
    """In a worker thread: fn(*key) for each key, as (True, value) or (False, error)."""
    outcomes: list[tuple[bool, Any]] = []
    for key in keys:
        try:
            outcomes.append((True, fn(*key)))
        except Exception as exc:  # the user's function failed: retried on the trio side
            outcomes.append((False, describe_exception(exc)))
    return outcomes


async def _acquire(limiter: trio.CapacityLimiter) -> None:
    """Take a slot of ``limiter``; a free slot is taken without a round of trio's scheduler
    (``async with limiter`` always yields once): the next call starts in the task step in
    which the previous one ended, not one scheduling batch later."""
    await trio.lowlevel.checkpoint_if_cancelled()
    try:
        limiter.acquire_nowait()
    except trio.WouldBlock:
        await limiter.acquire()


def _finish(call: _Call) -> None:
    if not call.finished:  # cancelled midway: no row may read its value as a NULL
        call.error = call.error or "cancelled before it finished"
    call.done.set()


def _args(key: tuple) -> str:
    text = ", ".join(repr(v) for v in key)
    return f"({text[:200]}{'...' if len(text) > 200 else ''})"


def _attempts(failed: CallFailed | _Call) -> str:
    return f" after {failed.attempts} attempts" if failed.attempts > 1 else ""
