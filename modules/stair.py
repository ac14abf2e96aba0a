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

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import structlog

from eddies.modules.base import Module
from eddies.modules.key_encoding import KeyDictionary, encode_rows, uses_dictionary
from eddies.modules.stem_index import GrowableArray, SortedRunIndex
from eddies.router.messages import Work
from eddies.router.query_graph import Predicate, QueryGraph
from eddies.router.stats import RunStats
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
        return encode_rows(store, columns, row_ids, self.kinds, self.dictionaries, grow)


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

    def clear(self) -> None:
        """Forget every stored tuple (the start of a state migration)."""
        self.groups = {}

    def base_tuples(self) -> list[TupleBatch]:
        """The stored tuples that are base tuples of ``relation`` (span of one alias), one
        batch per signature (their Done bits are the SMs they passed before the join)."""
        return [
            TupleBatch(
                g.signature,
                {a: ids.view() for a, ids in g.rows.items()},
                np.zeros(len(g), dtype=np.int64),
            )
            for g in self.groups.values()
            if g.signature.span == 1 << self.relation and len(g)
        ]

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
        return self.route(work.batch)

    def route(self, batch: TupleBatch, skip: Callable[[Signature], bool] | None = None):
        """Insert ``batch`` into its side's STAIR and probe the dual (Dual Routing
        Property); ``skip``: stored signatures of the dual not to join with."""
        if not len(batch):
            return []
        side = self.side_of(batch.signature.span)
        keys, codes, valid = self.keys_of(batch, side, grow=True)
        self.stairs[side].insert(batch, keys, codes, valid)
        dual = self.stairs[self.edge.other(side)]
        return self.joined(batch, dual.probe(keys, codes, valid, skip))

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


log = structlog.get_logger("eddies.modules")

#: The greedy migration policy looks at the routing decisions again after this many more
#: source tuples were admitted (the paper's eddy could change its routing every 1000
#: tuples, stairs-2004 §5.1).
CHECK_EVERY = 1000
#: Tests: a seed makes every check migrate, to plans drawn at random (state migration
#: under arbitrary decisions must still give every result exactly once); None: greedy.
RANDOM_PLANS_SEED: int | None = None
#: Connected sets of aliases a plan is compared on (a star of n tables has 2^(n-1) + n);
#: beyond it only the decisions for base tuples are compared.
MAX_PLAN_SPANS = 4096


class GreedyPlan:
    """Where a tuple of each span goes next: the join of lowest *cumulative selectivity*
    (stairs-2004 §4.1: for each join the tuple could be routed to, the selectivity of
    joining it with everything the join connects it to — for an R tuple and R ⋈ S in
    R ⋈ S ⋈ T, with S ⋈ T — and the lowest wins).

    ``fanout[(join, alias)]``: the observed fan-out of the join for tuples that reach it
    from ``alias``'s side (router estimates, tuples out ÷ tuples in; 1.0 when unseen). The
    cumulative selectivity of join e for span C is the product of the fan-outs of e and of
    every join beyond it, away from C. ``choice(span)``: the join destination id; ties go
    to the lower id. ``random``: a generator that draws the choices instead (tests: state
    migration under arbitrary plans).
    """

    def __init__(
        self,
        joins: dict[int, StairJoin],
        fanout: dict[tuple[int, int], float],
        random: np.random.Generator | None = None,
    ) -> None:
        self.joins = joins
        self.fanout = fanout
        self.random = random
        self._choices: dict[int, int] = {}

    def choice(self, span: int) -> int:
        found = self._choices.get(span)
        if found is None:
            found = self._choices[span] = self._choose(span)
        return found

    def boundary(self, span: int) -> list[int]:
        """Joins with exactly one side in ``span``."""
        return [
            d
            for d, j in self.joins.items()
            if (span >> j.edge.left & 1) != (span >> j.edge.right & 1)
        ]

    def _choose(self, span: int) -> int:
        options = self.boundary(span)
        if self.random is not None:
            return options[int(self.random.integers(len(options)))]
        return min(options, key=lambda d: (self.cumulative(span, d), d))

    def cumulative(self, span: int, d: int) -> float:
        """The product of fan-outs from ``span`` through join ``d`` and every join beyond."""
        total = 1.0
        frontier = [(d, self.joins[d].side_of(span))]
        seen = {d}
        while frontier:
            join, near = frontier.pop()
            total *= self.fanout.get((join, near), 1.0)
            far = self.joins[join].edge.other(near)
            for other, j in self.joins.items():
                if other not in seen and far in (j.edge.left, j.edge.right):
                    seen.add(other)
                    frontier.append((other, far))
        return total


class StairMigrator:
    """State migration between STAIRs under the greedy policy of stairs-2004 §4.2: when
    the routing decisions change, migrate the state eagerly, as if every tuple seen so far
    had been routed by the new decisions (§3.2, Figure 6).

    Called at points of stasis (nothing in flight: stairs-2004 App. A), every
    ``CHECK_EVERY`` admitted source tuples, twice as many after each migration (back-off).
    It computes a :class:`GreedyPlan` from the router's estimates; when the plan's choice
    differs from the last one for some span, it migrates:

    1. **demotion** of every stored tuple to its base tuple: each base tuple seen (and
       passed by its SMs before its first join) is stored exactly once, with its own span,
       in the STAIR of the first join it was routed to; those are kept, every
       intermediate tuple is dropped;
    2. **promotion** along the new plan: the base tuples are routed again through the
       STAIRs (insert into one, probe the dual), their intermediate results on to the
       next join the plan picks, and so on; joins that would complete a result skip it
       (every result of the tuples seen was produced already).

    The state is then exactly what an EddyJoins run routing by the plan from the start
    would hold at this point, over the same tuples (up to tuples with a NULL join key,
    which are in no result); such a state produces every later
    result exactly once whatever the eddy routes next (the correctness of eddies with
    symmetric hash joins, stairs-2004 App. A, Lemmas A.3-A.4). This rebuilds the whole
    state rather than moving only what the changed decision touches (the paper's
    promote/demote per tuple): its local duplicate rule (Invariant B, §3.1.2) does not by
    itself keep a migrated state duplicate-free (docs/concepts.md, "STAIRs").
    """

    def __init__(
        self,
        joins: dict[int, StairJoin],
        graph: QueryGraph,
        stats: RunStats,
        random: np.random.Generator | None = None,
    ) -> None:
        self.joins = joins
        self.graph = graph
        self.stats = stats
        if random is None and RANDOM_PLANS_SEED is not None:
            random = np.random.default_rng(RANDOM_PLANS_SEED)
        self.random = random  # tests: migrate at every check, to random plans
        self.plan: GreedyPlan | None = None
        self._checked_at = 0
        # Back-off against thrashing (§4.2 plans one): each greedy migration doubles the
        # admitted tuples until the next check, so a run migrates O(log n) times.
        self._interval = CHECK_EVERY
        self._spans = _connected_spans(graph, joins)

    def at_stasis(self, admitted: int) -> None:
        """The eddy is at a point of stasis with ``admitted`` source tuples admitted."""
        if not self.joins or admitted - self._checked_at < self._interval:
            return
        self._checked_at = admitted
        plan = GreedyPlan(self.joins, self._fanouts(), self.random)
        if self.plan is None and self.random is None:
            self.plan = plan  # the first decisions: nothing to undo yet
            return
        if self.random is None and all(plan.choice(s) == self.plan.choice(s) for s in self._spans):
            return
        self.migrate(plan)
        if self.random is None:
            self._interval *= 2

    def _fanouts(self) -> dict[tuple[int, int], float]:
        """Per (join, side): decayed tuples out ÷ tuples in over every signature that
        reached the join from that side (eddies.router.estimates)."""
        estimates = self.stats.estimates
        sums: dict[tuple[int, int], list[float]] = {}
        if estimates is None:
            return {}
        for sig, arms in estimates.by_signature.items():
            for d, j in self.joins.items():
                if d in arms:
                    est = estimates.get(sig, d)
                    acc = sums.setdefault((d, j.side_of(sig.span)), [0.0, 0.0])
                    acc[0] += est.out
                    acc[1] += est.tuples
        return {k: out / n for k, (out, n) in sums.items() if n > 0}

    def migrate(self, plan: GreedyPlan) -> None:
        """Rebuild every STAIR's state as routing by ``plan`` would have left it."""
        base: deque[TupleBatch] = deque()
        intermediate = 0
        for join in self.joins.values():
            for stair in join.stairs.values():
                base.extend(stair.base_tuples())
                intermediate += sum(
                    len(g) for g in stair.groups.values() if g.signature.span != 1 << stair.relation
                )
                stair.clear()
        everything = self.graph.all_aliases
        promoted = 0
        moved = 0
        while base:
            batch = base.popleft()
            moved += len(batch)
            if batch.signature.span & (batch.signature.span - 1):
                promoted += len(batch)
            join = self.joins[plan.choice(batch.signature.span)]
            span = batch.signature.span
            base.extend(join.route(batch, skip=lambda s, span=span: s.span | span == everything))
        self.plan = plan
        self.stats.stair_migrations += 1
        self.stats.stair_demotions += intermediate
        self.stats.stair_promotions += promoted
        self.stats.stair_migrated_tuples += moved
        log.debug(
            "STAIR state migrated",
            demoted=intermediate,
            promoted=promoted,
            stored=sum(len(s) for j in self.joins.values() for s in j.stairs.values()),
        )


def _connected_spans(graph: QueryGraph, joins: dict[int, StairJoin]) -> list[int]:
    """Connected sets of aliases of the spanning tree, short of all (at most
    ``MAX_PLAN_SPANS``; beyond, the singletons only)."""
    spans = {1 << a.index for a in graph.aliases}
    frontier = list(spans)
    while frontier:
        span = frontier.pop()
        for j in joins.values():
            if (span >> j.edge.left & 1) != (span >> j.edge.right & 1):
                grown = span | 1 << j.edge.left | 1 << j.edge.right
                if grown != graph.all_aliases and grown not in spans:
                    spans.add(grown)
                    frontier.append(grown)
        if len(spans) > MAX_PLAN_SPANS:
            return [1 << a.index for a in graph.aliases]
    return sorted(spans)
