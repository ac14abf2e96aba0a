"""JoinSteps: outer joins and subquery semi-/anti-joins against a complete SteM.

An inner join in an eddy is symmetric: whichever component of a result arrives last
finds the others in their SteMs (stems-2003 §3.1, TimeStamp). An outer join also has to
say *no*: a preserved tuple without a match is emitted with NULLs — and that may be
said only once the other side can no longer produce a match for it. In the SteMs
paper's terms that is ProbeCompletion (§3.4): a probe is complete when the SteM holds
every tuple that can match it — its table's scan has delivered everything and BuildFirst
has put each row in the SteM (or, for an index AM, the EOT tuple of the lookup is held,
§2.1.3). The eddy (``router/eddy.py``) holds a tuple bound for a JoinStep until the
step table's SteM is complete, so one probe here sees all of its matches and "no match"
is final. The other direction of a RIGHT or FULL join (a stored tuple that nothing
matched) is final once no tuple can probe the step any more: the eddy sends a *flush*
when every source is done and nothing is in flight, and the step emits those tuples,
NULL-padded on the whole null-supplying side (row id -1, see
``modules.base.gather_nullable``).

Kinds (``JoinStep.kind``): ``inner``, ``left``, ``right``, ``full``; ``semi`` (EXISTS,
IN), ``anti`` (NOT EXISTS) and ``notin`` (NOT IN, three-valued: a NULL among the
subquery's values, or a NULL probe value against a non-empty subquery, gives NULL, so
the row is not kept). Keys are hashed with the SteMs' key coding
(``modules/key_encoding.py``: NULL never matches); the residual condition is evaluated
on the candidate pairs. Pairs are made in chunks of at most ``MAX_PAIRS``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from eddies.engine.errors import EddiesError, QueryTypeError
from eddies.modules.base import Module, gather_columns, gather_nullable
from eddies.modules.key_encoding import (
    KeyDictionary,
    encode_column,
    mix_codes,
    uses_dictionary,
    validity,
)
from eddies.modules.stem import SteM
from eddies.router.expressions import Expr, evaluate, evaluate_async
from eddies.router.messages import Work
from eddies.router.query_graph import JoinStep, QueryGraph
from eddies.router.tuple_batch import Signature, TupleBatch
from eddies.sources.table_store import TableStore

#: Candidate pairs made at once (probe tuples are taken in chunks below it).
MAX_PAIRS = 1 << 16


class JoinStepModule(Module):
    """Runs one :class:`~eddies.router.query_graph.JoinStep` (see the module docstring).

    ``stem``: the SteM of the step's table, complete whenever a Work arrives (the eddy's
    gate). Its stored row ids and key codes are read once, at the first Work.
    """

    kind = "step"

    def __init__(
        self, step: JoinStep, graph: QueryGraph, stores: dict[int, TableStore], stem: SteM
    ) -> None:
        self.step = step
        self.graph = graph
        self.stores = stores
        self.stem = stem
        self.name = f"step:{graph.aliases[step.alias].name}"
        self._bit = 1 << step.alias
        self._stored: np.ndarray | None = None
        self._hit: np.ndarray | None = None  # RIGHT / FULL: stored tuples matched so far
        self._dicts: list[KeyDictionary | None] = []
        self._codes: list[np.ndarray] = []
        self._order: np.ndarray | None = None  # stored positions sorted by key
        self._sorted: np.ndarray | None = None

    # -- the stored side -------------------------------------------------------------
    def _prepare(self) -> None:
        if self._stored is not None:
            return
        step = self.step
        self._stored = self.stem.stored_rows()
        self._hit = np.zeros(len(self._stored), dtype=bool)
        if not step.keys:
            return
        env = self._stored_env(np.arange(len(self._stored)))
        valid = np.ones(len(self._stored), dtype=bool)
        for _, stored_expr, kind in step.keys:
            values = evaluate(stored_expr, env, len(self._stored))
            dictionary = KeyDictionary() if uses_dictionary(kind) else None
            self._dicts.append(dictionary)
            self._codes.append(encode_column(values, kind, dictionary, grow=True))
            mask = validity(values)
            if mask is not None:
                valid &= mask
        mixed = mix_codes(self._codes)
        positions = np.flatnonzero(valid)  # NULL never joins: not indexed
        order = np.argsort(mixed[positions], kind="stable")
        self._order = positions[order]
        self._sorted = mixed[self._order]

    def _stored_env(self, pos: np.ndarray) -> dict:
        alias = self.step.alias
        keys = set()
        for _, stored_expr, _ in self.step.keys:
            keys |= stored_expr.column_keys()
        rows = self._stored[pos]
        return {
            key: gather_nullable(self.stores[alias], key[1], rows)
            for key in keys
            if isinstance(key, tuple)
        }

    # -- candidate pairs -------------------------------------------------------------
    def _probe_codes(self, batch: TupleBatch) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
        keys = set()
        for probe_expr, _, _ in self.step.keys:
            keys |= {k for k in probe_expr.column_keys() if isinstance(k, tuple)}
        env = gather_columns(batch, keys, self.stores)
        n = len(batch)
        valid = np.ones(n, dtype=bool)
        codes = []
        for (probe_expr, _, kind), dictionary in zip(self.step.keys, self._dicts, strict=True):
            values = evaluate(probe_expr, env, n)
            codes.append(encode_column(values, kind, dictionary, grow=False))
            mask = validity(values)
            if mask is not None:
                valid &= mask
        return mix_codes(codes), codes, valid

    def _candidates(self, batch: TupleBatch) -> tuple[np.ndarray, np.ndarray]:
        """Per probe tuple, the range of ``self._order`` with its key (or everything)."""
        n = len(batch)
        if not self.step.keys:
            return np.zeros(n, dtype=np.int64), np.full(n, len(self._stored), dtype=np.int64)
        mixed, codes, valid = self._probe_codes(batch)
        lo = np.searchsorted(self._sorted, mixed, side="left").astype(np.int64)
        hi = np.searchsorted(self._sorted, mixed, side="right").astype(np.int64)
        hi[~valid] = lo[~valid]
        self._probe_key_codes = codes
        return lo, hi

    def _pairs(self, lo: np.ndarray, hi: np.ndarray, idx: np.ndarray):
        """(probe index, stored position) of the candidates of probe tuples ``idx``."""
        counts = hi[idx] - lo[idx]
        probe_idx = np.repeat(idx, counts)
        starts = np.repeat(lo[idx] - (np.cumsum(counts) - counts), counts)
        at = np.arange(len(probe_idx), dtype=np.int64) + starts
        if not self.step.keys:
            return probe_idx, at
        pos = self._order[at]
        if len(self._codes) > 1 and len(pos):  # the mixed key may collide: check each column
            same = np.ones(len(pos), dtype=bool)
            for stored, probe in zip(self._codes, self._probe_key_codes, strict=True):
                same &= stored[pos] == probe[probe_idx]
            probe_idx, pos = probe_idx[same], pos[same]
        return probe_idx, pos

    async def _condition(self, batch: TupleBatch, probe_idx, pos, expr: Expr) -> pa.Array:
        """``expr`` over the pairs (three-valued, as an Arrow boolean array)."""
        keys = {k for k in expr.column_keys() if isinstance(k, tuple)}
        rows = {a: ids[probe_idx] for a, ids in batch.rows.items()}
        rows[self.step.alias] = self._stored[pos]
        pairs = TupleBatch(batch.signature, rows, batch.ts[probe_idx])
        env = gather_columns(pairs, keys, self.stores)
        try:
            if expr.udf_calls():
                return await evaluate_async(expr, env, len(pos))
            return evaluate(expr, env, len(pos))
        except EddiesError:
            raise
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise QueryTypeError(f"evaluating {self.step.sql} failed: {exc}") from exc

    # -- Works -----------------------------------------------------------------------
    async def process(self, work: Work) -> list[TupleBatch]:
        self._prepare()
        if work.flush:
            return self._flush()
        batch = work.batch
        lo, hi = self._candidates(batch)
        counts = hi - lo
        n = len(batch)
        matched = np.zeros(n, dtype=bool)  # a pair passed the whole condition
        unknown = np.zeros(n, dtype=bool)  # NOT IN: some comparison was NULL
        outputs: list[TupleBatch] = []
        start = 0
        while start < n:  # chunks of at most MAX_PAIRS candidate pairs (one tuple at least)
            ends = np.cumsum(counts[start:])
            stop = start + max(1, int(np.searchsorted(ends, MAX_PAIRS, side="right")))
            idx = np.arange(start, stop, dtype=np.int64)
            start = stop
            probe_idx, pos = self._pairs(lo, hi, idx)
            if not len(pos):
                continue
            if self.step.residual is not None:
                values = await self._condition(batch, probe_idx, pos, self.step.residual)
                keep = _true(values)
                probe_idx, pos = probe_idx[keep], pos[keep]
            if self.step.notin is not None:
                # x NOT IN S: FALSE if some x = y is TRUE, NULL if none is but one is NULL
                values = await self._condition(batch, probe_idx, pos, self.step.notin)
                unknown[probe_idx[_null(values)]] = True
                matched[probe_idx[_true(values)]] = True
                continue
            matched[probe_idx] = True
            if self.step.kind in ("inner", "left", "right", "full") and len(pos):
                self._hit[pos] = True
                outputs.append(self._joined(batch, probe_idx, pos))
        kind = self.step.kind
        if kind in ("left", "full"):
            lonely = np.flatnonzero(~matched)
            if len(lonely):
                outputs.append(self._padded(batch, lonely))
        elif kind == "semi":
            outputs.append(self._padded(batch, np.flatnonzero(matched)))
        elif kind == "anti":
            outputs.append(self._padded(batch, np.flatnonzero(~matched)))
        elif kind == "notin":
            outputs.append(self._padded(batch, np.flatnonzero(~matched & ~unknown)))
        return [b for b in outputs if len(b)]

    def _signature(self, batch: TupleBatch) -> Signature:
        sig = batch.signature
        return Signature(sig.span | self._bit, sig.done | 1 << self.step.predicate, True)

    def _joined(self, batch: TupleBatch, probe_idx: np.ndarray, pos: np.ndarray) -> TupleBatch:
        rows = {a: ids[probe_idx] for a, ids in batch.rows.items()}
        rows[self.step.alias] = self._stored[pos]
        return TupleBatch(self._signature(batch), rows, batch.ts[probe_idx])

    def _padded(self, batch: TupleBatch, idx: np.ndarray) -> TupleBatch:
        """Probe tuples ``idx`` with row id -1 for the step's table (NULLs for an outer
        join; a semi-/anti-join keeps the probe tuple alone)."""
        rows = {a: ids[idx] for a, ids in batch.rows.items()}
        rows[self.step.alias] = np.full(len(idx), -1, dtype=np.int64)
        return TupleBatch(self._signature(batch), rows, batch.ts[idx])

    def _flush(self) -> list[TupleBatch]:
        """RIGHT / FULL: every stored tuple no probe matched, NULL-padded on the prefix."""
        step = self.step
        lonely = np.flatnonzero(~self._hit)
        if not len(lonely):
            return []
        n = len(lonely)
        rows = {
            a.index: np.full(n, -1, dtype=np.int64)
            for a in self.graph.aliases
            if step.prefix >> a.index & 1
        }
        rows[step.alias] = self._stored[lonely]
        sig = Signature(step.prefix | self._bit, step.done_before | 1 << step.predicate, True)
        return [TupleBatch(sig, rows, np.zeros(n, dtype=np.int64))]


def _true(values: pa.Array) -> np.ndarray:
    """Mask of TRUE entries (NULL and FALSE are not)."""
    if values.type == pa.null():
        return np.zeros(len(values), dtype=bool)
    if values.null_count:
        values = values.fill_null(False)
    return values.to_numpy(zero_copy_only=False).astype(bool, copy=False)


def _null(values: pa.Array) -> np.ndarray:
    if values.type == pa.null():
        return np.ones(len(values), dtype=bool)
    if not values.null_count:
        return np.zeros(len(values), dtype=bool)
    return values.is_null().to_numpy(zero_copy_only=False)
