"""What every module shares: its serve loop and helpers (the messages are in router.messages).

Modules are concurrent trio tasks (eddies-2000 §3: River runs each operator in its own
thread with fixed-length queues). Each reads :class:`Work` from a bounded input channel
and sends one :class:`Returned` per input back to the eddy, carrying its output batches
(SMs and SteMs "bounce back" tuples this way) and the time it was busy.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import trio

from eddies.router.messages import Returned, Work
from eddies.router.tuple_batch import TupleBatch
from eddies.settings import current
from eddies.sources.table_store import TableStore


class Module:
    """Base class: subclasses implement :meth:`process`."""

    name: str = "module"
    kind: str = "module"

    @property
    def inline(self) -> bool:
        """True when :meth:`process` never suspends, so the eddy may call it directly
        instead of through this module's queue (see ``Eddy`` on inline visits)."""
        return False

    async def process(self, work: Work) -> list[TupleBatch] | Returned:  # pragma: no cover
        """The outputs of one Work, or a whole :class:`Returned` (a SteM probe that
        stopped at its output bound returns its rest that way)."""
        raise NotImplementedError

    async def close(self) -> None:
        """Called once the eddy has closed the module's input channel."""

    def release(self) -> None:
        """Drop the state this module built during its query, once the query has ended.

        The modules of a query reference each other in cycles (a SteM and the build
        ledger, the eddy and its inline visits), which only the cycle collector frees:
        until its next full pass every SteM's arrays would stay allocated, and the next
        query would fault fresh pages in for its own (issue 11: the 5x1M star spent most
        of its system time so). Releasing them ends their lifetime with the query."""

    async def serve(
        self, inbox: trio.MemoryReceiveChannel, to_eddy: trio.MemorySendChannel
    ) -> None:
        self._to_eddy = to_eddy
        ended = False
        try:
            async for work in inbox:
                started = time.perf_counter()
                outputs = await self.process(work)
                busy = time.perf_counter() - started
                if isinstance(outputs, Returned):
                    outputs.busy_seconds = busy
                    outputs.work = work
                    await to_eddy.send(outputs)
                else:
                    await to_eddy.send(
                        Returned(work.destination, outputs, len(work.batch), busy, work=work)
                    )
            await self.close()
            ended = True
        finally:
            close_channels(inbox, to_eddy, ended)


def process_inline(module: Module, work: Work) -> Returned:
    """Run ``module.process(work)`` to its end on the caller's stack, without a trio hop:
    the Returned the module's serve loop would send. Only for an :attr:`Module.inline`
    module; one that suspends after all is an error (its coroutine is closed).

    A visit through the module's queue costs two trio channel hops and a task switch each
    way (≈40-60 µs); a SteM probe of 256 tuples costs about as much again. Calling the
    module directly is the PostgreSQL eddy's design (eddies-in-postgresql §2.1: the eddy
    calls its operators as functions), for modules that never wait.
    """
    coro = module.process(work)
    started = time.perf_counter()
    try:
        coro.send(None)
    except StopIteration as finished:
        outputs = finished.value
    else:
        coro.close()
        raise RuntimeError(f"module {module.name!r} suspended during an inline visit")
    busy = time.perf_counter() - started
    if isinstance(outputs, Returned):
        outputs.busy_seconds = busy
        outputs.work = work
        return outputs
    return Returned(work.destination, outputs, len(work.batch), busy, work=work)


def close_channels(
    inbox: trio.MemoryReceiveChannel, to_eddy: trio.MemorySendChannel, ended: bool
) -> None:
    """Close a module's channels as its serve loop ends, without a checkpoint (unlike
    ``async with``), so an error raised here is not replaced by the Cancelled that it
    causes in the other tasks.

    The inbox is closed only when the module ended normally (the eddy had closed it).
    After a failure, or a cancellation caused by another task's failure, it stays open:
    the eddy places Work with ``send_nowait`` and learns of the failure only at its next
    checkpoint; a closed inbox would make that send raise BrokenResourceError beside the
    real error, and the query would end in an exception group instead of with its error.
    """
    if ended:
        inbox.close()
    to_eddy.close()


def gather_columns(
    batch: TupleBatch, keys: set, stores: dict[int, TableStore]
) -> dict[tuple[int, str], pa.Array]:
    """The columns ``keys`` (``(alias, column)`` pairs) for the tuples of ``batch``; row id
    -1 (the NULL side of an outer join, or a semi-join's table) gives NULL."""
    return {
        (alias, col): gather_nullable(stores[alias], col, batch.rows[alias]) for alias, col in keys
    }


def gather_nullable(store: TableStore, col: str, row_ids: np.ndarray) -> pa.Array:
    """``store.gather(col, row_ids)`` where row id -1 gives NULL (a NULL-padded tuple)."""
    if not len(row_ids) or row_ids.min() >= 0:
        return store.gather(col, row_ids)
    missing = row_ids < 0
    dtype = store.schema.field(col).type
    if missing.all() or len(store) == 0:
        return pa.nulls(len(row_ids), dtype)
    values = store.gather(col, np.where(missing, 0, row_ids))
    return pc.if_else(pa.array(missing), pa.scalar(None, values.type), values)


# Batches of at least ``Tuning.offload_rows`` rows (eddies.settings) do their vectorized
# work in a worker thread (NumPy and Arrow kernels release the GIL). Off by default, as
# measured (2 cores, bench/joins.py queries, interleaved runs; bench/README.md, issue 11
# item 3): offloaded at >= 65,536 rows the 5x1M star took 182 ms against 163 inline, SF1
# 243 against 63, flights 35 against 32. The kernels do run in parallel (two 262k-row
# gathers at once take 1.2x one), but a visit is many small kernels between Python steps
# that hold the GIL, and an offloaded module is visited through its queue instead of
# inline. Sync UDFs still always run in worker threads (see expressions.py).

#: Worker threads doing vectorized work at once: one per core; more only fight for the GIL
#: between the kernels' GIL-free stretches.
WORKER_THREADS = max(1, os.cpu_count() or 1)
_limiter: trio.CapacityLimiter | None = None


def _worker_limiter() -> trio.CapacityLimiter:
    global _limiter
    if _limiter is None:
        _limiter = trio.CapacityLimiter(WORKER_THREADS)
    return _limiter


def vectorized_inline() -> bool:
    """True when :func:`run_vectorized` runs every call inline (never awaits): no
    ``Tuning.offload_rows`` is in force (read when a module is lowered)."""
    return current().offload_rows is None


async def run_vectorized(fn, *args, rows: int):
    """Run ``fn(*args)`` inline, or via ``trio.to_thread`` for a batch of at least
    ``Tuning.offload_rows`` rows (the knobs in force in this task, read per batch)."""
    offload_rows = current().offload_rows
    if offload_rows is not None and rows >= offload_rows:
        return await trio.to_thread.run_sync(fn, *args, limiter=_worker_limiter())
    return fn(*args)
