"""Which delivered rows a SteM already holds: duplicate removal for competing AMs.

stems-2003 §3.2: when several AMs serve one table (mirrors, a scan and an index), the same
row can arrive more than once, and the SteM drops the copies when they are built (SteM
BounceBack: a duplicate build tuple is not bounced back). The paper uses set semantics;
SQL tables are bags, so a row here is identified by its key columns (the table's declared
key, else all its columns) *and its ordinal among identical rows in one AM's answer*: a
scan delivers every copy of a row, and an index lookup on a column returns every copy of
every row with that value, so "the k-th copy of row x" means the same row whichever AM
delivered it. A row is new iff its ordinal is at least the number of copies already held.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from eddies.modules.key_encoding import key_kind
from eddies.modules.key_set import DenseKeys


def rank_within(ids: np.ndarray) -> np.ndarray:
    """For each entry, how many earlier entries have the same id (0 for the first)."""
    if len(ids) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    ordered = ids[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    lengths = np.diff(np.r_[starts, len(ordered)])
    rank = np.empty(len(ids), dtype=np.int64)
    rank[order] = np.arange(len(ids)) - np.repeat(starts, lengths)
    return rank


class RowIdentity:
    """Tracks the copies of each row a SteM holds; see the module docstring.

    ``columns``: the identifying columns of ``schema``. ``fresh`` is called with each batch
    an AM delivers, in delivery order, and says which rows to keep.
    """

    def __init__(self, schema: pa.Schema, columns: tuple[str, ...]) -> None:
        self.columns = columns
        self._keys = DenseKeys(tuple(key_kind(schema.field(c).type) for c in columns))
        self._held = np.zeros(0, dtype=np.int64)  # copies held, per row id
        self._streamed: dict[int, np.ndarray] = {}  # per scan AM: copies it delivered

    def fresh(self, values: list[pa.Array], origin: int, streaming: bool) -> np.ndarray:
        """Boolean mask of rows not held yet; marks them held.

        values: the identifying columns of the batch; origin: the delivering AM; streaming:
        True for a scan (ordinals continue over its batches), False for an index AM's
        batch of complete lookup answers (ordinals start at 0 in each).
        """
        ids = self._keys.ids(values, grow=True)
        size = self._keys.size
        if size > len(self._held):
            self._held = _grown(self._held, size)
        ordinal = rank_within(ids)
        if streaming:
            seen = _grown(self._streamed.get(origin, np.zeros(0, np.int64)), size)
            ordinal += seen[ids]
            np.add.at(seen, ids, 1)
            self._streamed[origin] = seen
        keep = ordinal >= self._held[ids]
        np.maximum.at(self._held, ids, ordinal + 1)
        return keep


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    if len(array) >= size:
        return array
    grown = np.zeros(max(size, 2 * len(array)), dtype=array.dtype)
    grown[: len(array)] = array
    return grown
