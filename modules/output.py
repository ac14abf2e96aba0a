"""The output module: completed tuples leave the eddy here as Arrow RecordBatches.

A tuple is complete when it spans every alias and its Done bits cover every predicate
(eddies-2000 §3). The output module gathers the columns the query needs above the eddy
(projection, aggregation, ordering) from the table stores and sends a RecordBatch to the
results channel, whose bounded capacity passes the consumer's back-pressure to the eddy.
In debug mode it also checks that no result is produced twice (the duplicate avoidance of
stems-2003 Theorem 1): every result's combination of row ids must be unique.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import trio

from eddies.modules.base import Module, gather_columns
from eddies.router.constraints import ConstraintViolation
from eddies.router.messages import Work
from eddies.router.tuple_batch import TupleBatch
from eddies.sources.table_store import TableStore


class OutputModule(Module):
    """Turns complete tuples into RecordBatches with columns named ``"<alias>.<column>"``."""

    kind = "output"
    name = "output"

    def __init__(
        self,
        columns: list[tuple[int, str]],
        column_names: list[str],
        stores: dict[int, TableStore],
        results: trio.MemorySendChannel,
        debug: bool = False,
    ) -> None:
        self.columns = columns
        self.column_names = column_names
        self.stores = stores
        self.results = results
        self.debug = debug
        self._seen: list[np.ndarray] = []
        self._aliases: list[int] = []  # the aliases of _seen's columns, in order

    def to_record_batch(self, batch: TupleBatch) -> pa.RecordBatch:
        if not self.columns:  # e.g. count(*): only the number of rows matters
            return pa.RecordBatch.from_arrays([pa.nulls(len(batch))], names=["__row"])
        env = gather_columns(batch, set(self.columns), self.stores)
        return pa.RecordBatch.from_arrays(
            [env[key] for key in self.columns], names=self.column_names
        )

    async def process(self, work: Work) -> list[TupleBatch]:
        batch = work.batch
        if self.debug:
            self._aliases = sorted(batch.rows)
            self._seen.append(np.column_stack([batch.rows[a] for a in self._aliases]))
        await self.results.send(self.to_record_batch(batch))
        return []

    def renumber(self, store: TableStore, kept: np.ndarray) -> None:
        """A windowed SteM compacted ``store`` to the old row ids ``kept`` (row ``i`` is now
        ``kept[i]``'s): rewrite the recorded results' ids of the aliases reading it, so
        the duplicate check compares like with like. Evicted ids become ``-(id + 1)``:
        unique, and never equal to a live id (an expired tuple joins nothing again)."""
        columns = [i for i, a in enumerate(self._aliases) if self.stores.get(a) is store]
        if not columns or not self._seen:
            return
        seen = np.concatenate(self._seen)
        order = np.argsort(kept, kind="stable")
        ordered = kept[order]
        for i in columns:
            ids = seen[:, i]
            live = ids >= 0  # ids already evicted stay as they are
            old = ids[live]
            at = np.minimum(np.searchsorted(ordered, old), max(len(ordered) - 1, 0))
            found = (ordered[at] == old) if len(ordered) else np.zeros(len(old), dtype=bool)
            ids[live] = np.where(found, order[at] if len(ordered) else 0, -(old + 1))
        self._seen = [seen]

    async def close(self) -> None:
        await self.results.aclose()
        if self.debug and self._seen:
            every = np.concatenate(self._seen)
            distinct = np.unique(every, axis=0)
            if len(distinct) != len(every):
                raise ConstraintViolation(
                    f"duplicate avoidance: {len(every) - len(distinct)} result tuples were "
                    "produced more than once (TimeStamp or BoundedRepetition broken)"
                )
