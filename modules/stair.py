"""STAIRs: join state that holds base *or intermediate* tuples (stairs-2004 §3).

A STAIR on relation R and attribute a (``R.a``) stores tuples that contain a base-table
component of R, and answers ``probe(R.a, val)`` with the stored tuples whose ``R.a``
equals ``val`` (§3.1). Each equi-join of the query's spanning tree gets two STAIRs, one
per side, *duals* of each other; routing a tuple "to the join R ⋈ S" means inserting it
into the STAIR of its own side and probing the dual with it, at once (the Dual Routing
Property of §3.1). Two STAIRs used so are a pipelined symmetric hash join: this is the
EddyJoins architecture of eddies-2000, the eddy choosing the join order tuple by tuple.

Unlike a SteM (:mod:`eddies.modules.stem`), a STAIR keeps intermediate tuples, so its
contents depend on the routing history — the "burden of history" of §2.3.

Layout: a STAIR keeps one *group* per stored signature (span, Done bits). A group holds
row ids per alias, the tuples' join-key codes and a :class:`SortedRunIndex` on them;
NULL keys are never stored (a tuple with a NULL join key joins nothing through this
edge, and — the join being inner — is in no result). Key codes come from one
:class:`EdgeCoder` per join, shared by both duals so that equal values get equal codes
(multi-column keys are mixed and then verified column by column).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from eddies.modules.base import Module
from eddies.modules.key_encoding import (
    KIND_INT,
    KeyDictionary,
    encode_column,
    mix_codes,
    uses_dictionary,
    validity,
)
from eddies.modules.stem_index import GrowableArray, SortedRunIndex
from eddies.router.messages import Work
from eddies.router.query_graph import Predicate
from eddies.router.tuple_batch import Signature, TupleBatch
from eddies.sources.table_store import TableStore


class EdgeCoder:
    """Join values of one equi-join edge to int64 codes, for both of its STAIRs.

    ``kinds``: the edge's key_encoding kind per column pair. ``encode`` returns
    ``(mixed keys, per-column codes, validity mask or None)``; with ``grow=False`` a
    dictionary value never inserted gets code -1 and matches nothing.
    """

    def __init__(self, kinds: tuple[str, ...]) -> None:
        self.kinds = kinds
        self.dictionaries = [KeyDictionary() if uses_dictionary(k) else None for k in kinds]

    def encode(
        self, store: TableStore, columns: tuple[str, ...], row_ids: np.ndarray, grow: bool
    ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray | None]:
        codes: list[np.ndarray] = []
        valid: np.ndarray | None = None
        for col, kind, dictionary in zip(columns, self.kinds, self.dictionaries, strict=True):
            if kind == KIND_INT:
                whole = store.int64_column(col)
                if whole is not None:  # no NULLs: plain NumPy indexing
                    codes.append(whole[row_ids])
                    continue
            values = store.gather(col, row_ids)
            if isinstance(values, pa.ChunkedArray):
                values = values.combine_chunks()
            mask = validity(values)
            if mask is not None:
                valid = mask if valid is None else valid & mask
            codes.append(encode_column(values, kind, dictionary, grow))
        return mix_codes(codes), codes, valid


@dataclass
class _Group:
    """Stored tuples of one signature: row ids per alias, key codes, an index on them."""

    signature: Signature
    rows: dict[int, GrowableArray]
    keys: GrowableArray = field(default_factory=lambda: GrowableArray(np.int64, 64))
    codes: list[GrowableArray] = field(default_factory=list)
    index: SortedRunIndex = field(default_factory=SortedRunIndex)

    def __len__(self) -> int:
        return len(self.keys)


class Stair:
    """One STAIR: ``relation`` (an alias) on the key ``columns`` of one join edge.

    insert(batch, keys, codes, valid): store the tuples (which span ``relation``).
    probe(keys, codes, valid): ``[(stored signature, probe index, rows per alias)]`` of
    the matching stored tuples, one entry per stored signature that matches.
    """

    def __init__(self, relation: int, columns: tuple[str, ...], name: str) -> None:
        self.relation = relation
        self.columns = columns
        self.name = name
        self.groups: dict[Signature, _Group] = {}

    def __len__(self) -> int:
        return sum(len(g) for g in self.groups.values())

    def signatures(self) -> list[Signature]:
        """The signatures of the tuples stored now (explain, tests)."""
        return [s for s, g in self.groups.items() if len(g)]

    def insert(
        self,
        batch: TupleBatch,
        keys: np.ndarray,
        codes: list[np.ndarray],
        valid: np.ndarray | None,
    ) -> None:
        if valid is not None:
            keep = np.flatnonzero(valid)
            batch, keys = batch.take(keep), keys[keep]
            codes = [c[keep] for c in codes]
        if not len(batch):
            return
        sig = batch.signature
        group = self.groups.get(sig)
        if group is None:
            group = self.groups[sig] = _Group(
                sig,
                {a: GrowableArray(np.int64, 64) for a in batch.rows},
                codes=[GrowableArray(np.int64, 64) for _ in codes] if len(codes) > 1 else [],
            )
        start = len(group)
        for alias, ids in batch.rows.items():
            group.rows[alias].extend(ids)
        group.keys.extend(keys)
        if len(codes) > 1:
            for stored, new in zip(group.codes, codes, strict=True):
                stored.extend(new)
        group.index.insert(keys, np.arange(start, start + len(keys), dtype=np.int64))

    def probe(
        self, keys: np.ndarray, codes: list[np.ndarray], valid: np.ndarray | None
    ) -> list[tuple[Signature, np.ndarray, dict[int, np.ndarray]]]:
        live = None if valid is None else np.flatnonzero(valid)
        probe_keys = keys if live is None else keys[live]
        out = []
        for sig, group in self.groups.items():
            if not len(group) or not len(probe_keys):
                continue
            probe_idx, pos = group.index.probe(probe_keys)
            if live is not None:
                probe_idx = live[probe_idx]
            if len(codes) > 1 and len(pos):  # a mixed key may collide: check each column
                same = np.ones(len(pos), dtype=bool)
                for stored, probe_codes in zip(group.codes, codes, strict=True):
                    same &= stored.view()[pos] == probe_codes[probe_idx]
                probe_idx, pos = probe_idx[same], pos[same]
            if len(pos):
                out.append((sig, probe_idx, {a: ids.view()[pos] for a, ids in group.rows.items()}))
        return out


class StairJoin(Module):
    """The two dual STAIRs of one equi-join edge ``predicate`` (stairs-2004 §3.1).

    A Work's batch spans exactly one side of the edge: it is inserted into that side's
    STAIR and probes the dual; the outputs are the joined tuples, grouped by the stored
    tuples' signatures, with the edge's Done bit set (span and Done bits ORed, as when
    two tuples join in eddies-2000 §3). Never waits, so the eddy visits it inline.
    """

    kind = "stair"

    def __init__(
        self,
        name: str,
        predicate: Predicate,
        stores: dict[int, TableStore],
        alias_names: list[str],
    ) -> None:
        edge = predicate.edge
        assert edge is not None
        self.name = name
        self.predicate = predicate
        self.edge = edge
        self.stores = stores
        self.coder = EdgeCoder(edge.kinds)
        self.stairs = {
            a: Stair(a, edge.side(a), f"{alias_names[a]}.({', '.join(edge.side(a))})")
            for a in (edge.left, edge.right)
        }

    @property
    def inline(self) -> bool:
        return True

    def side_of(self, span: int) -> int:
        """The edge's alias that ``span`` contains (exactly one does)."""
        return self.edge.left if span >> self.edge.left & 1 else self.edge.right

    def keys_of(self, batch: TupleBatch, alias: int, grow: bool):
        return self.coder.encode(self.stores[alias], self.edge.side(alias), batch.rows[alias], grow)

    async def process(self, work: Work) -> list[TupleBatch]:
        batch = work.batch
        if not len(batch):
            return []
        side = self.side_of(batch.signature.span)
        keys, codes, valid = self.keys_of(batch, side, grow=True)
        self.stairs[side].insert(batch, keys, codes, valid)
        dual = self.stairs[self.edge.other(side)]
        return self.joined(batch, dual.probe(keys, codes, valid))

    def joined(self, batch: TupleBatch, matches) -> list[TupleBatch]:
        """Concatenate probe tuples with their matches, one batch per stored signature."""
        sig = batch.signature
        out: list[TupleBatch] = []
        for stored, probe_idx, stored_rows in matches:
            rows = {a: ids[probe_idx] for a, ids in batch.rows.items()}
            rows.update(stored_rows)
            joined_sig = Signature(
                sig.span | stored.span, sig.done | stored.done | self.predicate.bit, True
            )
            out.append(TupleBatch(joined_sig, rows, batch.ts[probe_idx]))
        return out
