"""Selection modules (SMs): one predicate each, over one table's or several aliases' columns.

stems-2003 §2.1.2: an SM returns a tuple to the eddy iff it passes the predicate and marks
that in its TupleState (here: sets the predicate's Done bit on the surviving sub-batch).
Predicates are evaluated with pyarrow.compute; UDF predicates are awaited (async) or run in
a worker thread (sync), so an expensive predicate never stalls the eddy. An SM over several
aliases evaluates a non-equi join predicate, or an equi-join edge that closes a cycle.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from eddies.engine.errors import EddiesError, QueryTypeError
from eddies.modules.base import Module, gather_columns, run_vectorized
from eddies.router.expressions import evaluate, evaluate_async, mask_of
from eddies.router.messages import Work
from eddies.router.query_graph import Predicate
from eddies.router.tuple_batch import TupleBatch
from eddies.sources.table_store import TableStore


class SelectionModule(Module):
    """Filters batches by one :class:`Predicate` and sets its Done bit on the survivors."""

    kind = "sm"

    def __init__(self, predicate: Predicate, stores: dict[int, TableStore]) -> None:
        self.predicate = predicate
        self.name = predicate.name
        self._stores = stores
        self._keys = predicate.expr.column_keys()
        self._has_udf = bool(predicate.expr.udf_calls())

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
        if mask.all():
            return [batch.with_signature(passed)]
        if not mask.any():
            return []
        return [batch.take(mask).with_signature(passed)]
