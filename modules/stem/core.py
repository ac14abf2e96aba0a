"""What a SteM holds: its stored tuples, indexes, EOTs and knobs, shared by its parts.

:class:`SteMCore` is the state of one table's SteM (stems-2003 §2.1.4) and the few
questions every part of it asks (how many tuples are stored, whether the table is
complete, an index caught up). The parts that decide — builds
(:mod:`~eddies.modules.stem.build`), probes (:mod:`~eddies.modules.stem.matching`,
:mod:`~eddies.modules.stem.bounded_probe`), bounce-backs
(:mod:`~eddies.modules.stem.bounce_back`), SteM filters
(:mod:`~eddies.modules.stem.filters`) and checkpoints
(:mod:`~eddies.modules.stem.checkpoint`) — are classes over it, joined in
:class:`~eddies.modules.stem.stem.SteM`.
"""

from __future__ import annotations

import numpy as np
import trio

from eddies.modules.base import Module
from eddies.modules.key_encoding import key_kind
from eddies.modules.key_set import KeySet
from eddies.modules.stem.build_clock import BuildClock
from eddies.modules.stem.build_ledger import BuildLedger
from eddies.modules.stem.column_index import ColumnIndex, start_direct_builds, stop_direct_builds
from eddies.modules.stem.row_identity import RowIdentity
from eddies.modules.stem.storage import DoneBits, GrowableArray, RowIds
from eddies.modules.window import StreamClock
from eddies.router.query_graph import QueryGraph
from eddies.settings import current
from eddies.sources.table_store import TableStore


class SteMCore(Module):
    """The state of the SteM of one base table; see :class:`~eddies.modules.stem.SteM`.

    Per stored tuple, by stored position (build order): ``row_ids`` (:class:`RowIds`),
    ``build_ts`` (raw build TimeStamps, int64, increasing) and ``stored_done`` (the Done
    bits it carried when built, :class:`DoneBits`; kept for one-alias tables only).
    ``indexes``: one :class:`ColumnIndex` per join column list. ``eots``: the EOT bind
    values held per index AM bind-column list (``eot_log``: their values, for
    checkpoints). ``max_output_rows``: the most tuples one probe Work returns
    (``Tuning.stem_max_output_rows``, read at creation; stems-2003 §2.1).
    """

    def __init__(
        self,
        table: str,
        graph: QueryGraph,
        stores: dict[int, TableStore],
        clock: BuildClock,
        index_kinds: dict[tuple[str, ...], tuple[str, ...]],
        build_destination: int,
        probe_targets: dict[int, int],
        key: tuple[str, ...] | None = None,
        scanned: trio.Event | None = None,
        clocks: dict[int, StreamClock] | None = None,
        ledger: BuildLedger | None = None,
        filter_targets: dict[int, tuple[int, int, int]] | None = None,
    ) -> None:
        self.name = f"stem:{table}"
        # SteM filters (eddies.router.routing_table): destination id -> (alias, edge
        # predicate index, Done bit); their key sets are made on first use.
        self.filter_targets = filter_targets or {}
        self.ledger = ledger
        if ledger is not None:
            ledger.stems[table] = self
        self.table = table
        self.graph = graph
        self.aliases = graph.aliases_of(table)
        self.single_alias = len(self.aliases) == 1
        self.n_aliases = len(graph.aliases)
        self.stores = stores
        self.store = stores[self.aliases[0]]
        self.clock = clock
        self.index_kinds = index_kinds
        self.indexes = {cols: ColumnIndex(cols, kinds) for cols, kinds in index_kinds.items()}
        # Stream tables: arrival/expiry TimeStamps per stream alias (windows, see
        # eddies.modules.window); this table's own clock if it is a stream.
        self.clocks = clocks or {}
        self.stream_clock = self.clocks.get(self.aliases[0])
        self.windowed = any(c.window is not None for c in self.clocks.values())
        self.build_destination = build_destination
        self.probe_targets = probe_targets
        self.max_output_rows = current().stem_max_output_rows
        self._store_tuples()
        self.scanned = scanned  # set when the table's scan has delivered every row
        schema = self.store.schema
        # Competing AMs: remember which rows are held (by key, else by every column).
        self.identity: RowIdentity | None = None
        if graph.deduplicates(table):
            self.identity = RowIdentity(schema, key or tuple(schema.names))
        self.scan_origins = {a.id for a in graph.scans_of(table)}
        if not self.clocks:
            start_direct_builds(self.indexes, self.store)
        # EOT tuples held, per index AM bind-column list (only needed without a scan AM).
        self.has_scan = graph.has_scan(table)
        self.eots: dict[tuple[str, ...], KeySet] = {}
        self.eot_log: dict[tuple[str, ...], list[tuple]] = {}  # their values (checkpoints)
        for am in graph.indexes_of(table):
            kinds = tuple(key_kind(schema.field(c).type) for c in am.on)
            self.eots.setdefault(am.on, KeySet(kinds))

    def _store_tuples(self) -> None:
        """The empty per-tuple columns, sized for the whole table when it is known, so
        builds never copy on growth. Row ids and Done bits are not written while they are
        implied (eddies.modules.stem.storage): the positions, and one value for every
        tuple."""
        capacity = max(1024, self.store.preloaded_rows or 0)
        self.row_ids = RowIds(capacity, implied=not self.clocks, range_start=self.store.range_start)
        self.build_ts = GrowableArray(np.int64, capacity)
        self.stored_done = DoneBits(capacity)

    def __len__(self) -> int:
        return len(self.row_ids)

    @property
    def complete(self) -> bool:
        """True when the SteM holds every row of its table (its scan is done and every
        delivered row is built): a floating probe then finds all its matches."""
        return self.scanned is not None and self.scanned.is_set() and len(self) == len(self.store)

    def stored_rows(self) -> np.ndarray:
        """Row ids of every tuple held (int64, in build order): what a JoinStep reads
        once the SteM is complete (modules/join_step.py)."""
        return self.row_ids.view().copy()

    def caught_up(self, index: ColumnIndex) -> ColumnIndex:
        """``index`` with every stored tuple indexed (see :meth:`ColumnIndex.catch_up`)."""
        return index.catch_up(self.store, self.row_ids)

    def release(self) -> None:
        """Free the stored tuples, indexes and EOTs (see Module.release)."""
        stop_direct_builds(self.indexes)
        self.row_ids = RowIds(0)
        self.build_ts = GrowableArray(np.int64, 0)
        self.stored_done = DoneBits(0)
        self.indexes = {}
        self.identity = None
        self.eots = {}
        self.eot_log = {}
