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

A step table with no scan AM is *EOT-gated* instead (``JoinStep.lookup``): tuples
look their keys up in its index AMs first, and the step answers those whose lookups' EOTs
the SteM holds, bouncing the others (marked ``prior``) for the eddy to hold until the
table's next build.

Kinds (``JoinStep.kind``): ``inner``, ``left``, ``right``, ``full``; ``semi`` (EXISTS,
IN), ``anti`` (NOT EXISTS) and ``notin`` (NOT IN, three-valued: a NULL among the
subquery's values, or a NULL probe value against a non-empty subquery, gives NULL, so
the row is not kept). Keys are hashed with the SteMs' key coding
(``modules/key_encoding.py``: NULL never matches); the residual condition is evaluated
on the candidate pairs, and the terms over the step's table alone filter its stored
tuples once. Pairs are made in chunks of at most ``MAX_PAIRS``; a semi- or anti-join
with no residual makes none (a count of candidates decides). NOT IN hashes ``x = y``
too: a probe tuple is dropped if it finds an equal ``y``, or (second probe, of the
stored tuples whose ``y`` is NULL) a NULL ``y``, or if its ``x`` is NULL and anything
passes the correlation (third probe).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from eddies.errors import EddiesError, QueryTypeError
from eddies.modules.base import Module, gather_columns, gather_nullable
from eddies.modules.key_encoding import (
    KeyDictionary,
    encode_column,
    mix_codes,
    uses_dictionary,
    validity,
)
from eddies.modules.key_set import bind_columns
from eddies.modules.stem import SteM
from eddies.modules.stem.index import Run
from eddies.router.expressions import Expr, evaluate, evaluate_async
from eddies.router.messages import Work
from eddies.router.query_graph import JoinStep, QueryGraph
from eddies.router.tuple_batch import Signature, TupleBatch
from eddies.sources.table_store import TableStore

#: Candidate pairs made at once (probe tuples are taken in chunks below it).
MAX_PAIRS = 1 << 16


class StepIndex:
    """A step's stored tuples (``positions`` of its stored rows; ``values``: the stored
    side of each key, one array per key, over those positions) indexed on the whole key
    ``keys`` ((probe expr, stored expr, kind) triples): one :class:`Run` over the mixed
    codes of all key columns (``run``; None when nothing non-NULL is stored), so a probe
    tuple finds its candidates in O(1) (a gather, or a hash lookup) whatever the number
    of key columns; each column's code is then compared, so a collision of mixed codes
    never makes a match. No keys: every stored tuple is a candidate of every probe.
    ``lookups`` counts :meth:`candidates` calls and ``candidates_seen`` the candidate
    pairs they returned (for tests: with distinct keys, as many as the matches)."""

    def __init__(self, keys: tuple, positions: np.ndarray, values: list[pa.Array]) -> None:
        self.keys = keys
        self.lookups = 0
        self.candidates_seen = 0
        self.dicts: list[KeyDictionary | None] = []
        codes: list[np.ndarray] = []
        valid = np.ones(len(positions), dtype=bool)
        for (_, _, kind), column in zip(keys, values, strict=True):
            dictionary = KeyDictionary() if uses_dictionary(kind) else None
            self.dicts.append(dictionary)
            codes.append(encode_column(column, kind, dictionary, grow=True))
            mask = validity(column)
            if mask is not None:
                valid &= mask
        self.codes = [c[valid] for c in codes]  # NULL never joins: not indexed
        self.positions = positions[valid]
        self.run: Run | None = None
        if keys and len(self.positions):
            # One index on the whole key (the mixed codes of every column): a direct or CSR
            # table when dense, else sorted with a hash table of its distinct keys for large
            # probes (eddies.modules.stem.index.Run), so a probe tuple costs O(1).
            self.run = Run.of(mix_codes(self.codes), np.arange(len(self.positions)))

    def candidates(self, env: dict, n: int, idx: np.ndarray | None = None):
        """(lo, hi, per-key probe codes): probe tuple i's candidates are entries
        ``lo[i]:hi[i]`` (all tuples, or those ``idx``; others get an empty range)."""
        if not self.keys:
            lo = np.zeros(n, dtype=np.int64)
            hi = np.full(n, len(self.positions), dtype=np.int64)
            if idx is not None:
                keep = np.zeros(n, dtype=bool)
                keep[idx] = True
                hi[~keep] = 0
            return lo, hi, []
        valid = np.ones(n, dtype=bool)
        codes = []
        for (probe_expr, _, kind), dictionary in zip(self.keys, self.dicts, strict=True):
            values = evaluate(probe_expr, env, n)
            codes.append(encode_column(values, kind, dictionary, grow=False))
            mask = validity(values)
            if mask is not None:
                valid &= mask
        if idx is not None:
            keep = np.zeros(n, dtype=bool)
            keep[idx] = True
            valid &= keep
        self.lookups += 1
        if self.run is None:  # nothing stored (or only NULL keys): nothing matches
            return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), codes
        lo, hi = self.run.bounds(mix_codes(codes))  # fresh arrays
        lo, hi = lo.astype(np.int64, copy=False), hi.astype(np.int64, copy=False)
        hi[~valid] = lo[~valid]
        self.candidates_seen += int((hi - lo).sum())
        return lo, hi, codes

    def pairs(self, lo, hi, codes, idx: np.ndarray):
        """(probe index, stored position) of the candidates of probe tuples ``idx``."""
        counts = hi[idx] - lo[idx]
        probe_idx = np.repeat(idx, counts)
        starts = np.repeat(lo[idx] - (np.cumsum(counts) - counts), counts)
        at = np.arange(len(probe_idx), dtype=np.int64) + starts
        if self.run is not None:  # entries of the run -> indexes of the stored tuples
            at = self.run.positions[at]
        pos = self.positions[at]
        if len(self.codes) > 1 and len(at):  # the mixed key may collide: check each column
            same = np.ones(len(at), dtype=bool)
            for stored, probe in zip(self.codes, codes, strict=True):
                same &= stored[at] == probe[probe_idx]
            probe_idx, pos = probe_idx[same], pos[same]
        return probe_idx, pos

    def exact_counts(self, lo, hi, codes) -> np.ndarray:
        """Candidates per probe tuple (exact: colliding multi-column keys removed)."""
        counts = hi - lo
        if len(self.codes) <= 1 or not counts.any():
            return counts
        probe_idx, _ = self.pairs(lo, hi, codes, np.flatnonzero(counts))
        return np.bincount(probe_idx, minlength=len(counts))


class JoinStepModule(Module):
    """Runs one :class:`~eddies.router.query_graph.JoinStep` (see the module docstring).

    ``stem``: the SteM of the step's table, complete whenever a Work arrives (the eddy's
    gate). Its stored tuples are read, filtered and hashed once, at the first Work.
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
        self._index: StepIndex | None = None
        self._null_y: StepIndex | None = None  # NOT IN: stored tuples whose y is NULL
        self._any: StepIndex | None = None  # NOT IN: everything past the correlation

    # -- the stored side -------------------------------------------------------------
    def _stored_values(self, exprs: list[Expr], pos: np.ndarray) -> list[pa.Array]:
        keys = {k for e in exprs for k in e.column_keys() if isinstance(k, tuple)}
        rows = self._stored[pos]
        alias = self.step.alias
        env = {key: gather_nullable(self.stores[alias], key[1], rows) for key in keys}
        return [evaluate(e, env, len(pos)) for e in exprs]

    def _prepare(self) -> None:
        if self._stored is not None and not (
            self.step.lookup and len(self.stem) != len(self._stored)
        ):
            return  # an index-only table's SteM grows with lookups: hashed again then
        step = self.step
        self._stored = self.stem.stored_rows()
        self._hit = np.zeros(len(self._stored), dtype=bool)
        positions = np.arange(len(self._stored), dtype=np.int64)
        if step.stored_filter is not None and len(positions):
            (passed,) = self._stored_values([step.stored_filter], positions)
            positions = positions[_true(passed)]
        keys = step.keys
        if step.notin_key is not None:
            (y,) = self._stored_values([step.notin_key[1]], positions)
            null_y = positions[_null(y)]
            self._null_y = self._build(keys, null_y)
            self._any = self._build(keys, positions)
            keys = (*keys, step.notin_key)
        self._index = self._build(keys, positions)

    def _build(self, keys: tuple, positions: np.ndarray) -> StepIndex:
        values = self._stored_values([k[1] for k in keys], positions) if keys else []
        return StepIndex(keys, positions, values)

    # -- candidate pairs -------------------------------------------------------------
    def _probe_env(self, batch: TupleBatch, index: StepIndex) -> dict:
        keys = {k for p, _, _ in index.keys for k in p.column_keys() if isinstance(k, tuple)}
        return gather_columns(batch, keys, self.stores)

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

    async def _matching(
        self,
        batch: TupleBatch,
        index: StepIndex,
        idx: np.ndarray | None = None,
        outputs: list[TupleBatch] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per probe tuple: whether some stored tuple passes the whole condition (with
        ``index``'s keys), and, for NOT IN without a hashable ``x = y``, whether some
        comparison was NULL. Joined tuples go to ``outputs`` when given."""
        step = self.step
        n = len(batch)
        lo, hi, codes = index.candidates(self._probe_env(batch, index), n, idx)
        matched = np.zeros(n, dtype=bool)
        unknown = np.zeros(n, dtype=bool)
        pairwise = outputs is not None or step.residual is not None
        pairwise = pairwise or (step.notin is not None and step.notin_key is None)
        if not pairwise:  # a count decides (semi-/anti-join, NOT IN by hashing)
            return index.exact_counts(lo, hi, codes) > 0, unknown
        counts = hi - lo
        start = 0
        while start < n:  # chunks of at most MAX_PAIRS candidate pairs (one tuple at least)
            ends = np.cumsum(counts[start:])
            stop = start + max(1, int(np.searchsorted(ends, MAX_PAIRS, side="right")))
            chunk = np.arange(start, stop, dtype=np.int64)
            start = stop
            probe_idx, pos = index.pairs(lo, hi, codes, chunk[counts[chunk] > 0])
            if not len(pos):
                continue
            if step.residual is not None:
                keep = _true(await self._condition(batch, probe_idx, pos, step.residual))
                probe_idx, pos = probe_idx[keep], pos[keep]
            if step.notin is not None and step.notin_key is None:
                # x NOT IN S: FALSE if some x = y is TRUE, NULL if none is but one is NULL
                values = await self._condition(batch, probe_idx, pos, step.notin)
                unknown[probe_idx[_null(values)]] = True
                probe_idx, pos = probe_idx[_true(values)], pos[_true(values)]
            matched[probe_idx] = True
            if outputs is not None and len(pos):
                self._hit[pos] = True
                outputs.append(self._joined(batch, probe_idx, pos))
        return matched, unknown

    # -- Works -----------------------------------------------------------------------
    async def process(self, work: Work) -> list[TupleBatch]:
        self._prepare()
        if work.flush:
            return self._flush()
        batch = work.batch
        outputs: list[TupleBatch] = []
        if self.step.lookup:
            covered = self._eots_held(batch)
            if not covered.all():
                sig = batch.signature
                bounced = batch.take(~covered).with_signature(
                    Signature(sig.span, sig.done, True, self._bit, sig.looked)
                )
                outputs.append(bounced)  # the eddy holds them until the next build
                if not covered.any():
                    return outputs
                batch = batch.take(covered)
        return outputs + await self._answer(batch)

    def _eots_held(self, batch: TupleBatch) -> np.ndarray:
        """EOT-gated step: per tuple, whether the SteM holds every match — an EOT of one
        of the index AMs its key binds is held, or the key is NULL (nothing matches)."""
        graph, alias = self.graph, self.step.alias
        edge = graph.predicates[self.step.predicate].edge
        probe_alias = edge.other(alias)
        schema = self.stem.store.schema
        covered = np.zeros(len(batch), dtype=bool)
        for am in graph.bindable(edge, alias):
            cols = tuple(edge.side(probe_alias)[edge.side(alias).index(c)] for c in am.on)
            values, usable = bind_columns(
                self.stores[probe_alias],
                cols,
                [schema.field(c).type for c in am.on],
                batch.rows[probe_alias],
            )
            covered |= ~usable | self.stem.eots[am.on].contains(values)
        return covered

    async def _answer(self, batch: TupleBatch) -> list[TupleBatch]:
        kind = self.step.kind
        outputs: list[TupleBatch] = []
        joins = kind in ("inner", "left", "right", "full")
        matched, unknown = await self._matching(
            batch, self._index, outputs=outputs if joins else None
        )
        if kind in ("left", "full"):
            lonely = np.flatnonzero(~matched)
            if len(lonely):
                outputs.append(self._padded(batch, lonely))
        elif kind == "semi":
            outputs.append(self._padded(batch, np.flatnonzero(matched)))
        elif kind == "anti":
            outputs.append(self._padded(batch, np.flatnonzero(~matched)))
        elif kind == "notin":
            if self.step.notin_key is not None:
                unknown |= await self._not_in_nulls(batch, matched)
            outputs.append(self._padded(batch, np.flatnonzero(~matched & ~unknown)))
        return [b for b in outputs if len(b)]

    async def _not_in_nulls(self, batch: TupleBatch, matched: np.ndarray) -> np.ndarray:
        """NOT IN by hashing: the tuples whose answer is NULL — a NULL ``y`` passes their
        correlation, or their ``x`` is NULL and some tuple passes it."""
        assert self._null_y is not None and self._any is not None
        rest = np.flatnonzero(~matched)
        unknown = np.zeros(len(batch), dtype=bool)
        if not len(rest):
            return unknown
        if len(self._null_y.positions):
            unknown |= (await self._matching(batch, self._null_y, rest))[0]
        probe_expr = self.step.notin_key[0]
        keys = {k for k in probe_expr.column_keys() if isinstance(k, tuple)}
        x = evaluate(probe_expr, gather_columns(batch, keys, self.stores), len(batch))
        null_x = rest[_null(x)[rest]]
        if len(null_x):
            unknown |= (await self._matching(batch, self._any, null_x))[0]
        return unknown

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
        """RIGHT / FULL: every stored tuple no probe matched, NULL-padded on the aliases
        before the step (its ``needs``: such a step is a barrier, see JoinStep)."""
        step = self.step
        lonely = np.flatnonzero(~self._hit)
        if not len(lonely):
            return []
        n = len(lonely)
        rows = {
            a.index: np.full(n, -1, dtype=np.int64)
            for a in self.graph.aliases
            if step.needs >> a.index & 1
        }
        rows[step.alias] = self._stored[lonely]
        sig = Signature(step.needs | self._bit, step.done_before | 1 << step.predicate, True)
        return [TupleBatch(sig, rows, np.zeros(n, dtype=np.int64))]


def _true(values: pa.Array) -> np.ndarray:
    """Mask of TRUE entries (NULL and FALSE are not)."""
    if isinstance(values, pa.Scalar):
        raise TypeError("expected an array")  # pragma: no cover - evaluate broadcasts
    if values.type == pa.null():
        return np.zeros(len(values), dtype=bool)
    if values.null_count:
        values = values.fill_null(False)
    return values.to_numpy(zero_copy_only=False).astype(bool, copy=False)


def _null(values: pa.Array) -> np.ndarray:
    """Mask of NULL entries."""
    if values.type == pa.null():
        return np.ones(len(values), dtype=bool)
    if not values.null_count:
        return np.zeros(len(values), dtype=bool)
    return values.is_null().to_numpy(zero_copy_only=False)
