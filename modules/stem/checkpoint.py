"""A SteM at a quiescent point: checkpoints (snapshot, restore) and window eviction.

A stream table's SteM, or a looked-up table's (its EOTs make it the cache of lookups,
stems-2003 §2.1.4), is saved at a commit point and rebuilt before the streams start again
(eddies.engine.streaming.commit_points, durable); a windowed SteM drops its expired tuples
for good once they are as many as the live ones (:mod:`eddies.modules.window`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from eddies.modules.stem.column_index import ColumnIndex, stop_direct_builds
from eddies.modules.stem.core import SteMCore
from eddies.modules.stem.storage import DoneBits, GrowableArray, RowIds
from eddies.modules.window import EventTimeWindow

#: A windowed SteM evicts once it holds at least this many dead rows (and as many as live).
EVICT_MIN_ROWS = 4096


@dataclass
class SteMState:
    """What a stream table's SteM holds at a commit point, for a checkpoint.

    rows: the live stored tuples' columns, in build order (expired tuples are left out:
    no later tuple can join them); done: their stored Done bits (uint64; Python ints in
    an object array past 64 bits, see DoneBits.view); deadlines: an event-time window's
    deadline per row (else None); watermark: that window's watermark (None before any
    row); counters: the window's late/evicted/peak stored rows; eots: a looked-up table's
    EOT bind values per index AM bind-column list (one row per completed lookup: the SteM
    holds all its matches, stems-2003 §2.1.4).
    """

    rows: pa.Table
    done: np.ndarray
    deadlines: np.ndarray | None = None
    watermark: object = None
    counters: dict[str, int] = field(default_factory=dict)
    eots: dict[tuple[str, ...], pa.Table] = field(default_factory=dict)


class SteMCheckpoints(SteMCore):
    """Snapshot, restore and eviction of a SteM's tuples (call at quiescent points only)."""

    def snapshot(self) -> SteMState:
        """The live tuples of a stream table's SteM, or every tuple and EOT of a table
        read by an index AM alone (the lookup cache; see :class:`SteMState`).

        Call only at a quiescent point (a commit point: every tuple pushed so far has
        been routed to completion, no row id is in flight). Vectorized: one gather per
        column.
        """
        clock = self.stream_clock
        rows = self.row_ids.view()
        windowed = clock is not None and clock.window is not None
        live = ~clock.expired(rows) if windowed else np.ones(len(rows), bool)
        ids = rows[live]
        schema = self.store.schema
        if len(ids):
            table = pa.table([self.store.gather(c, ids) for c in schema.names], schema=schema)
        else:
            table = schema.empty_table()
        eots = {
            cols: pa.Table.from_arrays(
                [pa.concat_arrays([v[i] for v in logged]) for i in range(len(cols))],
                names=list(cols),
            )
            for cols, logged in self.eot_log.items()
        }
        for cols, values in eots.items():  # one entry per bind-column list from now on
            self.eot_log[cols] = [tuple(c.combine_chunks() for c in values.columns)]
        if clock is None:
            return SteMState(table, self.stored_done.view()[live].copy(), eots=eots)
        deadlines = None
        if isinstance(clock.window, EventTimeWindow) and clock.watermark is not None:
            deadlines = clock.deadlines_of(ids)
        evicted = clock.evicted_rows + int(np.count_nonzero(~live))
        return SteMState(
            table,
            self.stored_done.view()[live].copy(),
            deadlines,
            clock.watermark,
            {
                "late_rows": clock.late_rows,
                "evicted_rows": evicted,
                "peak_stored_rows": clock.peak_stored_rows,
            },
        )

    def restore(self, state: SteMState) -> tuple[np.ndarray, np.ndarray]:
        """Rebuild a checkpoint's tuples into this (empty) stream SteM, in their old build
        order, with fresh build TimeStamps from the query's clock.

        Call at the quiescent point before the streams start: every static tuple is then
        built and routed, so the restored tuples are newer than all of them (as they were
        in the run that checkpointed them) and older than every tuple still to come, which
        therefore finds them by the TimeStamp rule (stems-2003 §3.1). They are not routed
        again: their results were committed. Indexes are rebuilt lazily on the next probe.
        Returns the restored (row ids, raw build TimeStamps).

        A looked-up table's SteM (no stream clock) is restored before any tuple is built
        at all: its tuples are then older than every other, and its EOTs make later probes
        with those bind values stay here instead of looking them up again.
        """
        clock = self.stream_clock
        assert not len(self) and not len(self.store)
        stop_direct_builds(self.indexes)  # the restored rows are indexed at the first probe
        row_ids = np.zeros(0, dtype=np.int64)
        for batch in state.rows.combine_chunks().to_batches():
            row_ids = np.concatenate([row_ids, self.store.append(batch)])
        raw_ts = self.clock.take(len(row_ids))
        self.row_ids.extend(row_ids)
        self.build_ts.extend(raw_ts)
        self.stored_done.extend(np.asarray(state.done))
        for cols, values in state.eots.items():
            arrays = tuple(values.column(c).combine_chunks() for c in cols)
            self.eots[cols].add(list(arrays))
            self.eot_log.setdefault(cols, []).append(arrays)
        if clock is not None:
            clock.restore(row_ids, raw_ts, state.deadlines, state.watermark, state.counters)
            clock.stored(len(self.store))
        return row_ids, raw_ts

    def evict_due(self) -> bool:
        """True when a windowed SteM's dead rows (expired, or never built) are at least
        as many as its live ones, and EVICT_MIN_ROWS: time to evict (amortized O(1))."""
        clock = self.stream_clock
        if clock is None or clock.window is None:
            return False
        n_live = len(self.row_ids) - clock.expired_rows
        return len(self.store) - n_live >= max(EVICT_MIN_ROWS, n_live)

    def evict(self) -> np.ndarray | None:
        """Drop expired tuples for good: from this SteM, its indexes and the row store.

        Call only at a quiescent point (no row id of this table in flight). Amortized: it
        runs once the dead rows (expired, or never built) are as many as the live ones.
        Returns the old row ids kept, in order (row id ``i`` is now ``kept[i]``'s), or
        None when nothing was evicted.
        """
        if not self.evict_due():
            return None
        clock = self.stream_clock
        assert clock is not None
        rows = self.row_ids.view()
        live = ~clock.expired(rows)
        kept = rows[live]
        n_live = len(kept)
        self.store.compact(kept)
        clock.renumber(kept)
        ts, done = self.build_ts.view()[live], self.stored_done.view()[live]
        capacity = max(1024, 2 * n_live)
        self.row_ids, self.build_ts, self.stored_done = (
            RowIds(capacity, implied=False),
            GrowableArray(np.int64, capacity),
            DoneBits(capacity),
        )
        self.row_ids.extend(np.arange(n_live, dtype=np.int64))
        self.build_ts.extend(ts)
        self.stored_done.extend(done)
        stop_direct_builds(self.indexes)
        self.indexes = {c: ColumnIndex(c, k) for c, k in self.index_kinds.items()}
        clock.stored(len(self.store))
        return kept
