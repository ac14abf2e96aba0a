"""Selection modules (SMs): one predicate each, over one table's or several aliases' columns.

stems-2003 §2.1.2: an SM returns a tuple to the eddy iff it passes the predicate and marks
that in its TupleState (here: sets the predicate's Done bit on the surviving sub-batch).
Predicates are evaluated with pyarrow.compute; UDF predicates are awaited (async) or run in
a worker thread (sync), so an expensive predicate never stalls the eddy. An SM over several
aliases evaluates a non-equi join predicate, or an equi-join edge that closes a cycle.

Latency hiding (stems-2003 §2.1.3, applied to predicates): an SM whose predicate calls UDFs
works on several Works at once, one task each, so the eddy keeps routing while calls are in
flight and a later batch's calls join the function's pool of concurrent calls (see
:mod:`eddies.router.udf_calls`). Each Work's Returned leaves when it is done, in any order;
its busy seconds are its wall time, waiting included, so the policies see what a tuple
really costs here. Beyond ``works_in_flight`` Works the SM stops reading its queue, which
fills: back-pressure reaches the eddy as from any slow module.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import pyarrow as pa
import trio

from eddies.errors import EddiesError, QueryTypeError
from eddies.modules.base import Module, gather_columns, run_vectorized, vectorized_inline
from eddies.router.expressions import evaluate, evaluate_async, mask_of
from eddies.router.messages import Returned, Work
from eddies.router.query_graph import Predicate
from eddies.router.tuple_batch import TupleBatch
from eddies.sources.table_store import TableStore

#: Works an SM with per-row UDF calls has in flight, per call slot of its functions (and
#: at least WORKS_MIN): enough that, even at batch_size=1, every call slot can be busy while
#: the next Works' arguments are already known. An SM whose calls are all vectorized (one
#: call per Work) takes as many Works as its functions have call slots, no more: a Work
#: held waiting for a slot would hide from the eddy the back-pressure that tells it the
#: SM is slow.
WORKS_PER_CALL_SLOT = 2
WORKS_MIN = 8


def works_at_once(predicate: Predicate) -> int:
    """Works an SM for ``predicate`` serves at once: 1 without UDF calls or with vectorized
    ones at their default of one call at a time; the smallest ``max_concurrency`` of its
    vectorized calls; with a per-row call, ``WORKS_PER_CALL_SLOT`` per call slot (at least
    ``WORKS_MIN``), so calls of later Works fill the slots (stems-2003 §2.1.3)."""
    calls = predicate.expr.udf_calls()
    if not calls:
        return 1
    if any(not c.spec.vectorized for c in calls):
        slots = sum(c.spec.max_concurrency or 1 for c in calls)
        return max(WORKS_MIN, WORKS_PER_CALL_SLOT * slots)
    return min(c.spec.max_concurrency or 1 for c in calls)


class SelectionModule(Module):
    """Filters batches by one :class:`Predicate` and sets its Done bit on the survivors.

    With UDF calls in the predicate it serves up to ``works_in_flight`` Works at once.
    """

    kind = "sm"

    def __init__(
        self, predicate: Predicate, stores: dict[int, TableStore], ledger: Any = None
    ) -> None:
        self.predicate = predicate
        # A BuildLedger (eddies.modules.stem): told how many unbuilt singletons are dropped.
        self._ledger = ledger
        self.name = predicate.name
        self._stores = stores
        self._keys = predicate.expr.column_keys()
        self._has_udf = bool(predicate.expr.udf_calls())
        self.works_in_flight = works_at_once(predicate)

    @property
    def inline(self) -> bool:
        """A predicate without UDF calls is evaluated without waiting."""
        return not self._has_udf and vectorized_inline()

    async def serve(
        self, inbox: trio.MemoryReceiveChannel, to_eddy: trio.MemorySendChannel
    ) -> None:
        if not self._has_udf:
            await super().serve(inbox, to_eddy)
            return
        self._to_eddy = to_eddy
        failure: list[BaseException] = []
        try:
            async with trio.open_nursery() as nursery:
                slots = trio.Semaphore(self.works_in_flight)

                async def one(work: Work) -> None:
                    try:
                        started = time.perf_counter()
                        outputs = await self.process(work)
                        busy = time.perf_counter() - started
                        await to_eddy.send(
                            Returned(work.destination, outputs, len(work.batch), busy, work=work)
                        )
                    except Exception as exc:  # the first error fails the query, alone
                        if not failure:
                            failure.append(exc)
                        nursery.cancel_scope.cancel()
                    finally:
                        slots.release()

                async for work in inbox:
                    await slots.acquire()
                    nursery.start_soon(one, work)
            if failure:  # raised here, not from the nursery: one error, not a group
                raise failure[0]
            await self.close()
        finally:  # closed without a checkpoint: see Module.serve
            inbox.close()
            to_eddy.close()

    def _mask(self, batch: TupleBatch):
        env = gather_columns(batch, self._keys, self._stores)
        return mask_of(evaluate(self.predicate.expr, env, len(batch)))

    async def process(self, work: Work) -> list[TupleBatch]:
        batch = work.batch
        try:
            if self._has_udf:
                env = gather_columns(batch, self._keys, self._stores)
                mask = mask_of(await evaluate_async(self.predicate.expr, env, len(batch)))
            else:
                mask = await run_vectorized(self._mask, batch, rows=len(batch))
        except EddiesError:
            raise
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise QueryTypeError(f"evaluating {self.predicate.sql} failed: {exc}") from exc
        sig = batch.signature
        passed = dataclasses.replace(sig, done=sig.done | self.predicate.bit)
        if self._ledger is not None and not sig.built:
            kept = int(np.count_nonzero(mask))
            if kept < len(batch):
                alias = sig.span.bit_length() - 1
                self._ledger.drop(self._stores[alias].name, len(batch) - kept)
        if mask.all():
            return [batch.with_signature(passed)]
        if not mask.any():
            return []
        return [batch.take(mask).with_signature(passed)]
