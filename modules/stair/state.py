"""One STAIR: stored tuples of one side of an equi-join, grouped by signature (stairs-2004
§3.1).

A STAIR on relation R and attribute a (``R.a``) stores tuples that contain a base-table
component of R, and answers ``probe(R.a, val)`` with the stored tuples whose ``R.a``
equals ``val``. It keeps one :class:`SignatureGroup` per stored signature (span, Done
bits): row ids per alias, the tuples' join-key codes and a :class:`SortedRunIndex` on
them. NULL keys are never stored (a tuple with a NULL join key joins nothing through this
edge, and — the join being inner — is in no result). Demotions remove tuples by a base
component (:meth:`Stair.remove`, §3.1.1), filtering each group's index in place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from eddies.modules.stair.row_id_sets import among
from eddies.modules.stem.index import SortedRunIndex
from eddies.modules.stem.storage import GrowableArray
from eddies.router.tuple_batch import Signature, TupleBatch


@dataclass
class SignatureGroup:
    """Stored tuples of one signature: row ids per alias, key codes, an index on them."""

    signature: Signature
    rows: dict[int, GrowableArray]
    keys: GrowableArray = field(default_factory=lambda: GrowableArray(np.int64, 64))
    codes: list[GrowableArray] = field(default_factory=list)
    index: SortedRunIndex = field(default_factory=SortedRunIndex)

    def __len__(self) -> int:
        return len(self.keys)

    def batch(self) -> TupleBatch:
        """The group's tuples (row id views; timestamps 0: STAIRs need none)."""
        return TupleBatch(
            self.signature,
            {a: ids.view() for a, ids in self.rows.items()},
            np.zeros(len(self), dtype=np.int64),
        )


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
        self.groups: dict[Signature, SignatureGroup] = {}

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
        """Store ``batch`` (it spans ``relation``) with its key codes; tuples whose key is
        not ``valid`` (NULL) are left out."""
        if valid is not None:
            keep = np.flatnonzero(valid)
            batch, keys = batch.take(keep), keys[keep]
            codes = [c[keep] for c in codes]
        if not len(batch):
            return
        sig = batch.signature
        group = self.groups.get(sig)
        if group is None:
            group = self.groups[sig] = SignatureGroup(
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

    def count(self, span: int) -> int:
        """Stored tuples of ``span`` (any Done bits)."""
        return sum(len(g) for s, g in self.groups.items() if s.span == span)

    def batches(self, span: int) -> list[TupleBatch]:
        """The stored tuples of ``span``, one batch per signature (views, not copies)."""
        return [g.batch() for s, g in self.groups.items() if s.span == span and len(g)]

    def holding(self, alias: int, ids: np.ndarray) -> int:
        """Stored tuples whose ``alias`` component is one of ``ids`` (sorted)."""
        return sum(
            int(np.count_nonzero(among(g.rows[alias].view(), ids)))
            for s, g in self.groups.items()
            if s.span >> alias & 1
        )

    def remove(self, alias: int, ids: np.ndarray) -> int:
        """Drop every stored tuple whose ``alias`` component is one of ``ids`` (sorted);
        returns how many (a demotion of those tuples, stairs-2004 §3.1.1). The groups
        concerned keep their other rows, their index filtered (no re-sort)."""
        removed = 0
        for sig, g in list(self.groups.items()):
            if not sig.span >> alias & 1:
                continue
            drop = among(g.rows[alias].view(), ids)
            n = int(np.count_nonzero(drop))
            if not n:
                continue
            removed += n
            keep = np.flatnonzero(~drop)
            group = SignatureGroup(
                sig,
                {a: GrowableArray(np.int64, max(64, len(keep))) for a in g.rows},
                codes=[GrowableArray(np.int64, max(64, len(keep))) for _ in g.codes],
                index=g.index.without(drop),
            )
            for a, ids_ in g.rows.items():
                group.rows[a].extend(ids_.view()[keep])
            group.keys.extend(g.keys.view()[keep])
            for stored, old in zip(group.codes, g.codes, strict=True):
                stored.extend(old.view()[keep])
            self.groups[sig] = group
        return removed

    def take(self, span: int) -> list[TupleBatch]:
        """Remove the stored tuples of ``span`` and return them, one batch per signature
        (state migration: step 1 of a promotion, or a demotion, stairs-2004 §3.1.1)."""
        out = self.batches(span)
        self.groups = {s: g for s, g in self.groups.items() if s.span != span}
        return out

    def match_counts(
        self,
        keys: np.ndarray,
        codes: list[np.ndarray],
        valid: np.ndarray | None,
        skip: Callable[[Signature], bool] | None = None,
    ) -> np.ndarray:
        """Per probe key, how many stored tuples :meth:`probe` would match (int64), without
        gathering them (a single-column key needs no check per match)."""
        if len(codes) > 1:
            total = np.zeros(len(keys), dtype=np.int64)
            for _, probe_idx, _ in self.probe(keys, codes, valid, skip):
                total += np.bincount(probe_idx, minlength=len(keys))
            return total
        live = None if valid is None else np.flatnonzero(valid)
        probe_keys = keys if live is None else keys[live]
        counts = np.zeros(len(probe_keys), dtype=np.int64)
        for sig, group in self.groups.items():
            if len(group) and len(probe_keys) and (skip is None or not skip(sig)):
                counts += group.index.counts(probe_keys)
        if live is None:
            return counts
        total = np.zeros(len(keys), dtype=np.int64)
        total[live] = counts
        return total

    def probe(
        self,
        keys: np.ndarray,
        codes: list[np.ndarray],
        valid: np.ndarray | None,
        skip: Callable[[Signature], bool] | None = None,
    ) -> list[tuple[Signature, np.ndarray, dict[int, np.ndarray]]]:
        """Matches per stored signature; ``skip(signature)``: leave that group out."""
        live = None if valid is None else np.flatnonzero(valid)
        probe_keys = keys if live is None else keys[live]
        out = []
        for sig, group in self.groups.items():
            if not len(group) or not len(probe_keys) or (skip is not None and skip(sig)):
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
