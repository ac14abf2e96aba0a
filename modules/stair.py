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
from eddies.modules.stem.index import SortedRunIndex
from eddies.modules.stem.storage import GrowableArray
from eddies.router.estimates import DEFAULT_HALF_LIFE
from eddies.router.messages import Work
from eddies.router.query_graph import Predicate, QueryGraph
from eddies.router.stats import RunStats
from eddies.router.tuple_batch import Signature, TupleBatch, concat_batches
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

    def batch(self) -> TupleBatch:
        """The group's tuples (row id views; timestamps 0: STAIRs need none)."""
        return TupleBatch(
            self.signature,
            {a: ids.view() for a, ids in self.rows.items()},
            np.zeros(len(self), dtype=np.int64),
        )


def _dense(values: np.ndarray, sorted_ids: np.ndarray) -> int:
    """The length of a dense table over row ids ``0..max(sorted_ids)`` when one is cheap
    (at most ``DENSE_FACTOR`` × the elements looked at: row ids are positions in a table
    store, so usually), else 0. A dense lookup is one gather; a binary search of
    unsorted values misses the cache at every step (~50× slower on 1.5M values)."""
    n = int(sorted_ids[-1]) + 1 if len(sorted_ids) else 0
    return n if 0 < n <= DENSE_FACTOR * (len(values) + len(sorted_ids)) else 0


def _among(values: np.ndarray, sorted_ids: np.ndarray) -> np.ndarray:
    """Mask of ``values`` (row ids, ≥ 0) found in ``sorted_ids`` (vectorized)."""
    if not len(sorted_ids) or not len(values):
        return np.zeros(len(values), dtype=bool)
    n = _dense(values, sorted_ids)
    if n:
        table = np.zeros(n, dtype=bool)
        table[sorted_ids] = True
        inside = values < n
        if inside.all():
            return table[values]
        out = np.zeros(len(values), dtype=bool)
        out[inside] = table[values[inside]]
        return out
    pos = np.minimum(np.searchsorted(sorted_ids, values), len(sorted_ids) - 1)
    return sorted_ids[pos] == values


def _occurrences(values: np.ndarray, sorted_ids: np.ndarray) -> np.ndarray:
    """Per id of ``sorted_ids`` (unique), how many of ``values`` (row ids) equal it."""
    n = _dense(values, sorted_ids)
    if n:
        return np.bincount(values[values < n], minlength=n)[sorted_ids]
    hit = values[_among(values, sorted_ids)]
    return np.bincount(np.searchsorted(sorted_ids, hit), minlength=len(sorted_ids))


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

    def count(self, span: int) -> int:
        """Stored tuples of ``span`` (any Done bits)."""
        return sum(len(g) for s, g in self.groups.items() if s.span == span)

    def batches(self, span: int) -> list[TupleBatch]:
        """The stored tuples of ``span``, one batch per signature (views, not copies)."""
        return [g.batch() for s, g in self.groups.items() if s.span == span and len(g)]

    def holding(self, alias: int, ids: np.ndarray) -> int:
        """Stored tuples whose ``alias`` component is one of ``ids`` (sorted)."""
        return sum(
            int(np.count_nonzero(_among(g.rows[alias].view(), ids)))
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
            drop = _among(g.rows[alias].view(), ids)
            n = int(np.count_nonzero(drop))
            if not n:
                continue
            removed += n
            keep = np.flatnonzero(~drop)
            group = _Group(
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
        # Decayed sums for the join selectivity (see :meth:`selectivity`): pairs made,
        # and pairs looked at (probe tuples × stored tuples probed).
        self._pairs = 0.0
        self._exposure = 0.0

    def selectivity(self) -> float | None:
        """The edge's join selectivity: matches per (probe tuple, stored tuple) pair,
        over the probes of both sides, decayed by probe tuples (half-life
        ``DEFAULT_HALF_LIFE``, as the router's estimates); None before any probe met a
        stored tuple. A tuple's fan-out here is this times the dual STAIR's size, which
        grows as the input arrives: an observed fan-out says what the state was, this
        what it is (:meth:`StairMigrator._fanouts`)."""
        return self._pairs / self._exposure if self._exposure > 0 else None

    def _observe(self, probes: int, stored: int, pairs: int) -> None:
        if probes:
            f = 0.5 ** (probes / DEFAULT_HALF_LIFE)
            self._pairs = self._pairs * f + pairs
            self._exposure = self._exposure * f + probes * stored

    @property
    def inline(self) -> bool:
        return True

    def release(self) -> None:
        """Free both STAIRs' stored tuples (see Module.release)."""
        for stair in self.stairs.values():
            stair.groups = {}

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
        matches = dual.probe(keys, codes, valid, skip)
        stored = sum(len(g) for s, g in dual.groups.items() if skip is None or not skip(s))
        if stored:
            probes = len(keys) if valid is None else int(np.count_nonzero(valid))
            self._observe(probes, stored, sum(len(m[1]) for m in matches))
        return self.joined(batch, matches)

    def store(self, batch: TupleBatch) -> None:
        """Insert ``batch`` into its side's STAIR without probing (a migration relocating
        tuples: steps 1-2 of a promotion, stairs-2004 §3.1.1)."""
        if len(batch):
            side = self.side_of(batch.signature.span)
            self.stairs[side].insert(batch, *self.keys_of(batch, side, grow=True))

    def join_with(self, batch: TupleBatch, span: int) -> list[TupleBatch]:
        """Probe the dual STAIR with ``batch``, matching only stored tuples of ``span``,
        inserting nothing (a migration making super-tuples: step 3 of a promotion)."""
        if not len(batch):
            return []
        side = self.side_of(batch.signature.span)
        keys, codes, valid = self.keys_of(batch, side, grow=False)
        dual = self.stairs[self.edge.other(side)]
        return self.joined(batch, dual.probe(keys, codes, valid, lambda s: s.span != span))

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
#: After the first check, no greedy check (routing change or migration) before this
#: many admitted source tuples (bench/stairs.py, Fig. 7(ii): the cost of state
#: migration as the first change of the early routing decisions is delayed).
FIRST_CHECK = 0
#: True: join_state="stairs" and "eddyjoins" route tuples among the joins by the greedy
#: plan of §4.1, as the paper's STAIRs and EddyJoins do (the policy still orders SMs and
#: the join; EddyJoins re-plan at the same checks but never migrate). False (default):
#: the policy routes, and the migrator moves the cohorts it misrouted — on
#: bench/stairs.py this made 4-14× fewer intermediate tuples than greedy routing.
GREEDY_ROUTING = False
#: The guard counts a vectorized scan over one stored tuple as this fraction of the cost
#: of making one intermediate tuple (a migration scans every stored tuple holding the
#: cohort's relation to demote).
SCAN_COST = 0.02
#: ... and a migration itself as costing this many intermediate tuples: whatever it
#: moves, it rebuilds the groups holding the relation and routes the cohort and its
#: results through the joins in a few eddy visits (bench/README.md, Fig. 8: 3-5 small
#: migrations of 100-650 tuples cost STAIRs 1.1-1.4× EddyJoins' CPU).
MIGRATION_COST = 1000
#: STAIR join states: the eddy merges returned batches of fewer tuples than this with the
#: others of their signature waiting in its priority buffer before routing them on (a
#: probe of a STAIR holding several signatures — after a migration especially — returns
#: one small batch per signature, and their paths meet again: one module visit, ~0.1 ms,
#: for all; eddies.router.eddy). 0: never.
COALESCE_BELOW = 128
#: ... and each module visit a migration adds later as this many (a visit costs ~0.1 ms,
#: bench/README.md, issue 11; making and routing on an intermediate tuple ~1 µs): a span
#: more in a STAIR splits each later probe's answer into one batch more
#: (:meth:`StairMigrator.visits_caused`).
VISIT_COST = 100
#: Tests: a seed forces migrations — at each point of stasis, with probability
#: ``RANDOM_MIGRATION_P``, a random cohort moves to a random other join, its
#: intermediate results routed by random choices (state migration at arbitrary points
#: and to arbitrary plans must still give every result exactly once); None: greedy.
RANDOM_PLANS_SEED: int | None = None
RANDOM_MIGRATION_P = 0.5
#: Greedy routing: a seed draws the plan used before the first check (the greedy plan
#: under random fan-outs, 0.01-100 log-uniform per join side: "the initial plan ... chosen
#: randomly", stairs-2004 §5.3); None: every fan-out 1 (ties to the lower join id).
INITIAL_PLAN_SEED: int | None = None
#: Membership tests of row ids (demotions, the guard) use a dense table over the ids when
#: it is at most this many times the elements looked at, else a binary search.
DENSE_FACTOR = 8
#: The greedy policy's hysteresis (§4.2, thrashing): a cohort is a candidate only when
#: its new join's cumulative selectivity is at least this fraction below its old one's.
MIGRATION_MARGIN = 0.2
#: A cohort the guard looked at is looked at again only once the admitted input grew
#: this many times: each look scans the stored tuples holding its relation, and on
#: bench/stairs.py Fig. 8 the looks that moved nothing were most of what STAIRs' CPU
#: exceeded EddyJoins' by (1.25: 79-80% of the setups within 1.1x, 1.5: 82%, 2: 84%).
LOOK_AGAIN = 2.0


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
        topology: JoinTopology | None = None,
        observed: dict[tuple[int, int], float] | None = None,
    ) -> None:
        self.joins = joins
        self.fanout = fanout
        # what the migration guard spreads over the rows to come (StairMigrator._spread)
        self.observed = fanout if observed is None else observed
        self.random = random
        self.topology = topology or JoinTopology(joins)
        self._choices: dict[int, int] = {}
        self._cumulative: dict[tuple[int, int], float] = {}

    def choice(self, span: int) -> int:
        found = self._choices.get(span)
        if found is None:
            found = self._choices[span] = self._choose(span)
        return found

    def agrees_with(self, other: GreedyPlan) -> bool:
        """Whether this plan chooses as ``other`` did for every span ``other`` was asked
        about (those ask this plan now, so the next comparison covers them too)."""
        return all(self.choice(span) == d for span, d in other._choices.items())

    def boundary(self, span: int) -> list[int]:
        """Joins with exactly one side in ``span``."""
        return [d for d, (a, b) in self.topology.ends.items() if (span >> a & 1) != (span >> b & 1)]

    def _choose(self, span: int) -> int:
        options = self.boundary(span)
        if self.random is not None:
            return options[int(self.random.integers(len(options)))]
        return min(options, key=lambda d: (self.cumulative(span, d), d))

    def cumulative(self, span: int, d: int) -> float:
        """The product of fan-outs from ``span`` through join ``d`` and every join beyond."""
        found = self._cumulative.get((span, d))
        if found is None:
            found = self._cumulative[(span, d)] = self._cumulate(span, d)
        return found

    def _cumulate(self, span: int, d: int) -> float:
        ends, at = self.topology.ends, self.topology.at
        left, right = ends[d]
        total = 1.0
        frontier = [(d, left if span >> left & 1 else right)]
        seen = {d}
        while frontier:
            join, near = frontier.pop()
            total *= self.fanout.get((join, near), 1.0)
            a, b = ends[join]
            far = b if near == a else a
            for other in at[far]:
                if other not in seen:
                    seen.add(other)
                    frontier.append((other, far))
        return total


class JoinTopology:
    """The spanning tree's joins, computed once per query for the checks: ``ends[d]``
    the two aliases of join ``d``; ``at[alias]`` the joins touching ``alias``;
    ``choosing``: ``(alias, its joins)`` for the aliases with more than one join (only
    those have a routing decision, hence cohorts that may move)."""

    def __init__(self, joins: dict[int, StairJoin]) -> None:
        self.ends = {d: (j.edge.left, j.edge.right) for d, j in joins.items()}
        self.at: dict[int, list[int]] = {}
        for d, (a, b) in self.ends.items():
            self.at.setdefault(a, []).append(d)
            self.at.setdefault(b, []).append(d)
        self.choosing = [(a, ds) for a, ds in sorted(self.at.items()) if len(ds) > 1]


def initial_fanouts(joins: dict[int, StairJoin], seed: int | None) -> dict[tuple[int, int], float]:
    """Fan-outs per (join, side) for the plan before the first check: {} (all 1) without
    ``seed``, else drawn log-uniform in 0.01-100 (a random plan, the same for every
    technique given the seed: it depends on the joins only)."""
    if seed is None:
        return {}
    rng = np.random.default_rng(seed)
    return {
        (d, side): float(10 ** rng.uniform(-2, 2))
        for d in sorted(joins)
        for side in (joins[d].edge.left, joins[d].edge.right)
    }


@dataclass
class Cohort:
    """The base tuples of ``alias`` first routed to join ``source`` (their singletons are
    stored in its STAIR on ``alias``), to be moved to join ``target``: the paper's S^R
    (S tuples routed to R ⋈ S, stairs-2004 §3.2). ``ids``: their row ids, sorted."""

    alias: int
    source: int
    target: int
    ids: np.ndarray


class StairMigrator:
    """State migration between STAIRs by promotion and demotion (stairs-2004 §3.1.1,
    §3.2, §4.2), moving only the tuples of the cohorts whose routing decision changed.

    The eddy routes tuples to the joins by its policy, as with EddyJoins (or, with
    ``GREEDY_ROUTING``, by the current plan: :meth:`choice`, asked by the routing table,
    ``on_plan_change`` telling it to forget its entries). Every ``CHECK_EVERY`` admitted
    source tuples, at a point of stasis (nothing in flight or buffered: App. A), the
    greedy policy computes a :class:`GreedyPlan` from the router's estimates. A *cohort*
    — the base tuples of one relation X whose first join was e while the plan now sends
    X to e' (cumulative selectivity ``MIGRATION_MARGIN`` lower) — is migrated, as Figure 6
    does for S^R, as far as its tuples are worth moving (:meth:`worth_moving`, per tuple):

    1. **demotion**: every stored tuple containing a cohort tuple is removed (the
       intermediate tuples the cohort made through e, wherever they went on; the
       singletons themselves come out of e's STAIR);
    2. **promotion**: the cohort is routed again, as if it arrived now, into e' (insert
       into X's STAIR of e', probe the dual) and its intermediate results on through the
       joins the plan picks, except that joins which would complete a result skip it:
       every result containing a cohort tuple was produced already.

    Batches move whole (numpy masks and Arrow-style take, no per-row loop).
    Correctness: removing every stored tuple containing the cohort leaves the state of
    the same routing history without the cohort (no other stored tuple depends on it);
    routing it again is an EddyJoins history in which the cohort arrived last. From such
    a state every result not produced yet comes exactly once, whatever the eddy routes or
    migrates next (symmetric hash joins meet each pair of tuples once; App. A, Lemmas
    A.3-A.4), and the results the cohort completes now were all produced before (A.4 at
    the previous point of stasis). Invariant B of §3.1.2 alone would not guarantee it
    (docs/concepts.md, "STAIRs"), which is why every tuple holding a moved base tuple
    goes. Points of stasis are needed for that argument (a tuple in flight holding a
    cohort tuple would be stored after its demotion), as in the paper's App. A.

    ``totals``: rows per alias when known (in-memory tables), for the input to come.
    ``migrates=False``: EddyJoins under greedy routing — the same plans at the same
    checks, no state migration (the paper's baseline, stairs-2004 §4.1, §5).
    """

    def __init__(
        self,
        joins: dict[int, StairJoin],
        graph: QueryGraph,
        stats: RunStats,
        random: np.random.Generator | None = None,
        totals: dict[int, int | None] | None = None,
        migrates: bool = True,
    ) -> None:
        self.joins = joins
        self.migrates = migrates
        self.graph = graph
        self.stats = stats
        if random is None and RANDOM_PLANS_SEED is not None and migrates:
            random = np.random.default_rng(RANDOM_PLANS_SEED)
        self.random = random
        self.totals = totals or {}
        self._checked_at = 0
        self._interval = CHECK_EVERY
        self.routes = GREEDY_ROUTING and random is None
        self.topology = JoinTopology(joins)
        self.plan = GreedyPlan(
            joins, initial_fanouts(joins, INITIAL_PLAN_SEED), topology=self.topology
        )
        self.on_plan_change: Callable[[], None] | None = None
        self._moves: set[tuple[int, int, int]] = set()  # (alias, from, to) done
        self._looked: dict[tuple[int, int, int], int] = {}  # cohort -> admitted then

    def at_stasis(self, admitted: int) -> None:
        """The eddy is at a point of stasis with ``admitted`` source tuples admitted."""
        if not self.joins:
            return
        if self.random is not None:
            if self.random.random() < RANDOM_MIGRATION_P:
                plan = GreedyPlan(self.joins, {}, self.random, self.topology)
                cohorts = self.cohorts(None)
                if cohorts:
                    self.migrate(cohorts[int(self.random.integers(len(cohorts)))], plan)
            return
        # every CHECK_EVERY tuples, or every 1/32 of those admitted so far: a long run
        # checks O(log n) times more, not n / 1000 times (each check builds a plan)
        interval = max(self._interval, admitted // 32)
        if admitted - self._checked_at < interval or (admitted < FIRST_CHECK and self._checked_at):
            return
        self._checked_at = admitted
        observed = self._observed_fanouts()
        plan = GreedyPlan(
            self.joins, self._fanouts(observed), topology=self.topology, observed=observed
        )
        if self.routes:
            # routing entries ask choice() per span: only a changed choice needs them anew
            changed = not plan.agrees_with(self.plan)
            self.plan = plan
            if changed and self.on_plan_change is not None:
                self.on_plan_change()
        if not self.migrates:
            return
        for cohort in self.cohorts(plan, admitted):
            if (cohort.alias, cohort.target, cohort.source) in self._moves:
                self._interval *= 2  # moving back: a sign of thrashing, back off
            self._moves.add((cohort.alias, cohort.source, cohort.target))
            self.migrate(cohort, plan)

    def choice(self, span: int) -> int | None:
        """The join a tuple of ``span`` goes to under greedy routing (None: all aliases)."""
        return None if span == self.graph.all_aliases else self.plan.choice(span)

    def cohorts(self, plan: GreedyPlan | None, admitted: int = 0) -> list[Cohort]:
        """The cohorts to migrate now. Greedy: for each relation X and join e holding
        singletons of X while the plan sends X to e' with a cumulative selectivity
        ``MIGRATION_MARGIN`` lower, the tuples of that cohort worth moving
        (:meth:`worth_moving`); each cohort looked at again only once the admitted tuples
        grew ``LOOK_AGAIN`` times (stages, not a check every ``CHECK_EVERY``). With no plan
        (``self.random``): a random part of each cohort, to a random other join."""
        out = []
        # Only an alias with more than one join has a routing decision to undo; the
        # cheap tests (same join, looked at lately, not better enough) come first.
        for alias, options in self.topology.choosing:
            span = 1 << alias
            for d in options:
                if plan is None:
                    others = [o for o in options if o != d]
                    target = others[int(self.random.integers(len(others)))]
                else:
                    target = plan.choice(span)
                    if target == d:
                        continue
                    key = (alias, d, target)
                    if admitted < LOOK_AGAIN * self._looked.get(key, 0) or plan.cumulative(
                        span, target
                    ) >= (1 - MIGRATION_MARGIN) * plan.cumulative(span, d):
                        continue
                    self._looked[key] = admitted
                waiting = self.joins[d].stairs[alias].count(span)
                if not waiting or (
                    plan is not None and not self.may_pay(alias, d, target, waiting, admitted, plan)
                ):
                    continue
                batches = self.joins[d].stairs[alias].batches(span)
                ids = np.sort(np.concatenate([b.rows[alias] for b in batches]), kind="stable")
                cohort = Cohort(alias, d, target, ids)
                if plan is None:
                    cohort.ids = ids[self.random.random(len(ids)) < 0.7]
                else:
                    cohort.ids = self.worth_moving(cohort, admitted, plan)
                if len(cohort.ids):
                    out.append(cohort)
        return out

    def _horizon(self, admitted: int) -> tuple[float, float | None]:
        """(ahead, left): the input still to come over the input admitted (1 when the
        totals are unknown), and the fraction of the input still to come (None: unknown)."""
        totals = list(self.totals.values())
        known = bool(totals) and all(t is not None for t in totals) and admitted > 0
        if not known:
            return 1.0, None
        total = sum(totals)
        return max(total - admitted, 0) / admitted, max(1.0 - admitted / total, 0.0)

    def _spread(self, plan: GreedyPlan, d: int, alias: int, left: float | None) -> float:
        """f × n / s at join ``d`` for ``alias``'s side (see :meth:`worth_moving`)."""
        join = self.joins[d]
        far = join.edge.other(alias)
        stored = len(join.stairs[alias])
        total = self.totals.get(far)
        to_come = total * left if left is not None and total else len(join.stairs[far])
        return plan.observed.get((d, far), 0.0) * to_come / max(stored, 1)

    def _holding(self, alias: int) -> tuple[int, int]:
        """(stored tuples holding ``alias`` that are not its singletons, all stored tuples
        holding it): what the guard's scans and a demotion look at."""
        made = scanned = 0
        for j in self.joins.values():
            for s in j.stairs.values():
                for sig, g in s.groups.items():
                    if sig.span >> alias & 1:
                        scanned += len(g)
                        made += len(g) if sig.span != 1 << alias else 0
        return made, scanned

    def _threshold(self, scanned: int, visits: float) -> float:
        """What a migration's savings must exceed: the scan of the ``scanned`` stored
        tuples holding its relation, the migration itself and the ``visits`` more module
        visits it causes (§4.2)."""
        return SCAN_COST * scanned + MIGRATION_COST + VISIT_COST * visits

    def new_signatures(self, alias: int, target: int, plan: GreedyPlan) -> list[tuple[int, int]]:
        """The (join, side) STAIRs in which promoting ``alias``'s tuples through join
        ``target`` would store a span none of them holds now: the cohort's singletons at
        ``target``, then each intermediate span along the plan's choices until the one
        a join completes (not stored)."""
        out, span, d = [], 1 << alias, target
        everything = self.graph.all_aliases
        while span != everything:
            join = self.joins[d]
            side = join.side_of(span)
            if not join.stairs[side].count(span):
                out.append((d, side))
            span |= 1 << join.edge.other(side)
            if span == everything:
                break
            d = plan.choice(span)
        return out

    def visits_caused(self, alias: int, target: int, plan: GreedyPlan, ahead: float) -> float:
        """The module visits a migration of ``alias``'s tuples to ``target`` adds: each
        STAIR holding a span more (:meth:`new_signatures`) answers each later probe with
        a batch more (routed on: a visit), and a join is probed from one side by about
        half of the batches routed to it; later = ``ahead`` × those routed so far."""
        return sum(
            self.stats.modules[self.joins[d].name].batches_in * ahead / 2
            for d, _ in self.new_signatures(alias, target, plan)
        )

    def may_pay(
        self, alias: int, d: int, target: int, waiting: int, admitted: int, plan: GreedyPlan
    ) -> bool:
        """A bound, from counts alone, on what moving the ``waiting`` singletons of
        ``alias`` out of join ``d`` to ``target`` can save: each tuple x saves at most
        ``max(d_x × ahead, spread_d) - spread_target - 1 ≤ d_x × ahead + max(spread_d -
        spread_target - 1, 0)`` (see :meth:`worth_moving`), and the d_x sum to at most
        the stored tuples holding ``alias`` beyond its singletons. False:
        :meth:`worth_moving` would move nothing, so its per-tuple scans are skipped (most
        checks: the guard refuses most cohorts)."""
        ahead, left = self._horizon(admitted)
        made, scanned = self._holding(alias)
        beyond = self._spread(plan, d, alias, left) - self._spread(plan, target, alias, left) - 1
        bound = ahead * made + waiting * max(beyond, 0.0)
        return bound >= self._threshold(scanned, self.visits_caused(alias, target, plan, ahead))

    def worth_moving(self, cohort: Cohort, admitted: int, plan: GreedyPlan) -> np.ndarray:
        """The guard against thrashing and late migrations (§4.2), per tuple. A tuple x
        of the cohort made ``d_x`` stored intermediate tuples through its join so far
        (one vectorized pass over the stored tuples holding the cohort's relation) and
        would make ``p_x`` through the target now (probing its dual with the cohort).
        Left where it is, x is expected to meet ``max(d_x × ahead, f × n / s)`` more
        partners: its past repeated over the input still to come (``ahead`` = rows known
        minus admitted, over admitted; 1 when unknown), or the partners' side's current
        fan-out ``f`` (router estimates) over the ``n`` partner rows still to come, spread
        over the ``s`` tuples stored beside x (when the partners' selectivity changed,
        the past says little). Likewise at the target, with ``p_x``. Moving x pays when
        it saves more than it costs now: ``1 + p_x`` (the relocation and the promotions;
        demotions drop tuples).

        The tuples it does not pay for one by one stay behind as a *remnant* in the old
        join's STAIR, and every later probe there that meets one of them answers with a
        small batch more, routed on through the joins (a module visit, ``VISIT_COST``).
        When those visits — at most the remnant's expected partners, at most one per
        probe batch still to come — outweigh what moving the remnant too would cost, the
        whole cohort moves (TPC-H §5.2: 169 orders of 89 k left behind made 164 visits of
        ~3 tuples each to customer ⋈ orders). Returns the sorted ids of the tuples to
        move."""
        ids, alias = cohort.ids, cohort.alias
        made = self._made(ids, alias)
        ahead, left = self._horizon(admitted)
        stay = np.maximum(made * ahead, self._spread(plan, cohort.source, alias, left))
        hopeful = stay > 1
        if not hopeful.any():
            return ids[:0]
        sig = Signature(1 << alias, 0, True)
        batch = TupleBatch(sig, {alias: ids}, np.zeros(len(ids), dtype=np.int64))
        join = self.joins[cohort.target]
        everything = self.graph.all_aliases
        dual = join.stairs[join.edge.other(alias)]
        keys, codes, valid = join.keys_of(batch, alias, grow=False)
        promised = dual.match_counts(keys, codes, valid, lambda s: s.span | sig.span == everything)
        go = np.maximum(promised * ahead, self._spread(plan, cohort.target, alias, left))
        gain = stay - go - (1 + promised)
        moving = hopeful & (gain > 0)
        # A migration also scans every stored tuple holding the relation (to demote):
        # what it saves must outweigh that scan too, or small cohorts cost more than
        # they save.
        visits = self.visits_caused(alias, cohort.target, plan, ahead)
        if gain[moving].sum() < self._threshold(self._holding(alias)[1], visits):
            return ids[:0]
        kept = ~moving
        if kept.any():
            probes_to_come = self.stats.modules[self.joins[cohort.source].name].batches_in
            kept_visits = min(float(stay[kept].sum()), probes_to_come * ahead / 2)
            if gain[kept].sum() + VISIT_COST * kept_visits > 0:
                return ids
        return ids[moving]

    def _made(self, ids: np.ndarray, alias: int) -> np.ndarray:
        """Per id of ``ids`` (sorted), the stored non-singleton tuples holding it."""
        made = np.zeros(len(ids), dtype=np.int64)
        for j in self.joins.values():
            for s in j.stairs.values():
                for sig, g in s.groups.items():
                    if sig.span >> alias & 1 and sig.span != 1 << alias and len(g):
                        made += _occurrences(g.rows[alias].view(), ids)
        return made

    def _observed_fanouts(self) -> dict[tuple[int, int], float]:
        """Per (join, side): decayed tuples out ÷ tuples in over every signature that
        reached the join from that side (eddies.router.estimates). The guard spreads
        these over the partner rows to come (:meth:`_spread`): a fan-out per tuple that
        reached the join, times base rows, is what the guard was built on; the state
        model of :meth:`_fanouts`, times base rows, would count every partner row as if it
        passed the selections before the join (TPC-H §5.2: 4.8 per customer, of whom 1 in
        260 passes; bench/stairs.py Fig. 7(ii) then kept a cohort of 30 k orders)."""
        estimates = self.stats.estimates
        if estimates is None:
            return {}
        sums: dict[tuple[int, int], list[float]] = {}
        for sig, arms in estimates.by_signature.items():
            for d, j in self.joins.items():
                if d in arms:
                    est = estimates.get(sig, d)
                    acc = sums.setdefault((d, j.side_of(sig.span)), [0.0, 0.0])
                    acc[0] += est.out
                    acc[1] += est.tuples
        return {k: o / n for k, (o, n) in sums.items() if n > 0}

    def _fanouts(
        self, observed: dict[tuple[int, int], float] | None = None
    ) -> dict[tuple[int, int], float]:
        """Per (join, side), for the plan's choices: the fan-out a tuple from that side
        meets now — the join's selectivity (:meth:`StairJoin.selectivity`) times the
        dual STAIR's stored tuples; for a join no probe has met stored tuples at yet,
        the ``observed`` one (:meth:`_observed_fanouts`). The state model matters when a
        join's state grows while the eddy sends a relation elsewhere: the observed
        fan-out of the abandoned join would stay what it was when it was left (no tuple
        refreshes it), and the plan would turn back to it (TPC-H §5.2: orders back to
        orders ⋈ lineitem for 16 k tuples, the routing thrash of §4.2)."""
        out = dict(self._observed_fanouts() if observed is None else observed)
        for d, j in self.joins.items():
            sigma = j.selectivity()
            if sigma is None:
                continue
            for side in (j.edge.left, j.edge.right):
                out[(d, side)] = sigma * len(j.stairs[j.edge.other(side)])
        return out

    def migrate(self, cohort: Cohort, plan: GreedyPlan) -> None:
        """Move ``cohort`` to its target join: demote, then promote (see the class);
        ``plan`` routes its intermediate results."""
        alias, span = cohort.alias, 1 << cohort.alias
        singletons = [
            b.take(np.flatnonzero(_among(b.rows[alias], cohort.ids)))
            for b in self.joins[cohort.source].stairs[alias].batches(span)
        ]
        relocated = sum(len(b) for b in singletons)
        removed = sum(
            s.remove(alias, cohort.ids) for j in self.joins.values() for s in j.stairs.values()
        )
        demoted = removed - relocated
        everything = self.graph.all_aliases
        queue = deque((cohort.target, b) for b in singletons)
        promoted = 0
        while queue:
            d, batch = queue.popleft()
            # the other batches of its signature bound for the same join go along: one
            # insert and probe (the order of a symmetric hash join's inputs is free)
            same = [b for e, b in queue if e == d and b.signature == batch.signature]
            if same:
                queue = deque((e, b) for e, b in queue if e != d or b.signature != batch.signature)
                batch = concat_batches([batch, *same])
            promoted += len(batch) if batch.signature.span != span else 0
            union = batch.signature.span
            for made in self.joins[d].route(
                batch, skip=lambda s, u=union: s.span | u == everything
            ):
                queue.append((plan.choice(made.signature.span), made))
        self.stats.stair_migrations += 1
        self.stats.stair_demotions += demoted
        self.stats.stair_promotions += promoted
        self.stats.stair_migrated_tuples += relocated + demoted + promoted
        log.debug(
            "STAIR cohort migrated",
            alias=alias,
            source=self.joins[cohort.source].name,
            target=self.joins[cohort.target].name,
            relocated=relocated,
            demoted=demoted,
            promoted=promoted,
        )
