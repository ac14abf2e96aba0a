"""TupleBatch: tuples that share one signature, with their TupleState kept in vectors.

The SteMs paper (stems-2003 §2.1.1) gives every tuple a TupleState: the tables it spans
and the predicates it has passed (the Done bits of eddies-2000 §3). Moving one Python
object per tuple costs ~10 µs a hop under trio (DESIGN.md), so tuples travel in batches
whose members share that state — the batch's *signature* — and only what differs per
tuple lives in NumPy vectors:

* ``rows[alias]``: int64 row ids into the alias's base-table store (the PostgreSQL eddy's
  "array of pointers to source tuples"); columns are gathered only where needed.
* ``ts``: int64 TimeStamp keys (stems-2003 §3.1). A singleton's key is assigned when it is
  built into its SteM; a composite tuple's key is the max of its components'. Keys carry
  an alias tiebreak (``build_ts * n_aliases + alias``) so that in a self-join the copies of
  one base tuple under different aliases still have distinct keys and exactly one
  component of every result is its last-arriving one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: TimeStamp of a singleton not yet built into its SteM (the paper's ∞).
UNBUILT_TS = np.iinfo(np.int64).max


@dataclass(frozen=True, slots=True)
class Signature:
    """What all tuples of a batch share: routing depends on this alone.

    span: bitmask over aliases (bit i = alias i); done: bitmask over predicates
    (Done bits); built: for singletons, whether BuildFirst has been satisfied.
    """

    span: int
    done: int
    built: bool


@dataclass(slots=True)
class TupleBatch:
    """A batch of tuples with one :class:`Signature` and per-tuple row ids and TimeStamps.

    Shapes: every array in ``rows`` and ``ts`` has length ``len(self)``.
    """

    signature: Signature
    rows: dict[int, np.ndarray]
    ts: np.ndarray

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, index: np.ndarray) -> TupleBatch:
        """The tuples at ``index`` (an int array or a boolean mask), same signature."""
        return TupleBatch(
            self.signature,
            {alias: ids[index] for alias, ids in self.rows.items()},
            self.ts[index],
        )

    def with_signature(self, signature: Signature) -> TupleBatch:
        """The same tuples under another signature (e.g. with a Done bit set)."""
        return TupleBatch(signature, self.rows, self.ts)

    def split_by(self, choice: np.ndarray) -> dict[int, TupleBatch]:
        """Split by a per-tuple vector of small non-negative ints; empty groups left out."""
        if len(choice) == 0:
            return {}
        first = choice[0]
        if (choice == first).all():
            return {int(first): self}
        return {int(v): self.take(choice == v) for v in np.unique(choice)}


def singleton_batch(alias: int, row_ids: np.ndarray, built: bool) -> TupleBatch:
    """New singleton tuples of one base table, as a scan AM emits them."""
    ts = np.full(len(row_ids), UNBUILT_TS, dtype=np.int64)
    return TupleBatch(Signature(1 << alias, 0, built), {alias: row_ids}, ts)
