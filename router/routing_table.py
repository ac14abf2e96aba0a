"""Destinations and the routing table: which modules a signature may be routed to.

The PostgreSQL eddy indexes a routing array by the tuple's signature bitmap and computes
each entry once (eddies-in-postgresql §2.1.4); we do the same, lazily, with a dict keyed
by :class:`~eddies.router.tuple_batch.Signature`. An entry lists the eligible destinations
under the routing constraints of stems-2003 Table 2:

* **BuildFirst** — an unbuilt singleton may only be built into its table's SteM, or (for a
  table with one alias and one scan AM, where no other role can need the row and no
  duplicate can arrive) first pass its own SMs; it never probes before it is built.
* **BoundedRepetition** — a destination whose work the signature already records (a set
  Done bit, a spanned alias, a finished build, a direct lookup) is never eligible again, so
  every tuple visits every module a bounded number of times and the query terminates.
* **ProbeCompletion** (§3.4) — a prior prober (bounced back by the SteM of alias b because
  not all of its matches were there) may go to SMs and to an index AM of b's table, and
  to no SteM; the AM ends its life in the dataflow.
* Probes go only to aliases joined to the span by an equi-join edge (preferring an edge
  that binds an index AM of the target); a cross product is offered only when no such
  alias exists. A complete tuple goes to the output.
* **SteM filters** (semi-joins; sideways information passing) — once the SteM of a table
  holds every qualifying row of it (its scan has ended and every delivered row is built
  or was dropped by an SM), a tuple that spans one side of an edge to that table and not
  the table itself may first pass a membership filter of the SteM's join keys: a tuple
  whose key is not there can never join, and is dropped before it is probed or gathered
  further; an unbuilt singleton may pass it before its build (BuildFirst's exception
  for SMs: a tuple no result can contain need not be stored). The filter has a Done
  bit of its own (``Destination.bit``, above the predicates' bits), so a tuple passes it
  at most once; it is optional — a tuple is complete without it — and the policy learns
  whether it pays, like any SM. Filters become eligible at run time
  (:meth:`RoutingTable.mark_filter_ready`).
* **Relaxed BuildFirst** (§3.5) — when one table is never built, its *floating* tuples
  produce every result: they probe the other SteMs (and, bounced back by a SteM that is
  not complete yet, probe that SteM again, relaxing BoundedRepetition; their
  LastMatchTimeStamps keep the repeats from matching twice). Tuples of the other tables
  are only built — anything they could join would never meet the unbuilt table — so an
  entry for them is empty and the eddy drops them after the build.

With STAIRs (stairs-2004, ``join_state="eddyjoins"`` or ``"stairs"``) there are no builds
or probes: a signature may go to its SMs and to every join of the spanning tree with
exactly one side in its span (``join:<a>-<b>``: insert into that side's STAIR, probe the
dual); see :meth:`RoutingTable._stair_entry`.

Access choice (stems-2003 §3.2, §4.3): where one logical step can be done by several
modules — probing the SteM of a table that also has index AMs (hash or index join), or
choosing among the index AMs (mirrors) of a prior prober's table — the entry lists one
top-level destination whose ``alternatives`` are those modules; the policy picks the step,
and an access chooser picks the module. AMs that failed are left out (failover).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from eddies.router.query_graph import QueryGraph
from eddies.router.tuple_batch import Signature


class DestinationKind(enum.Enum):
    """What a destination does (its ``value`` is the label shown in statistics)."""

    BUILD = "build"  # insert singletons into their table's SteM
    PROBE = "probe"  # probe the SteM of a target alias
    LOOKUP = "lookup"  # look the target alias up in an index AM
    SM = "sm"  # a selection module: one predicate
    OUTPUT = "output"  # complete tuples leave the eddy
    FILTER = "filter"  # a semi-join: keep tuples whose key a complete SteM holds
    STEP = "step"  # an outer, semi- or anti-join against a complete SteM (JoinStep)
    JOIN = "join"  # insert into one STAIR of an equi-join and probe its dual (stairs-2004)


@dataclass(frozen=True)
class Destination:
    """Where the eddy can send a batch: a build into, or a probe of, a SteM; a lookup in an
    index AM; an SM; the output.

    name: as shown by explain and used in ``policy="static"`` orders — ``build:<table>``,
    ``probe:<alias>``, ``lookup:<am>@<alias>``, ``sm<k>`` (k-th predicate, 1-based) and
    ``output``.
    """

    id: int
    name: str
    kind: DestinationKind
    module: str
    table: str | None = None
    target_alias: int | None = None
    predicate: int | None = None
    access: int | None = None  # for lookups: the AM's id in QueryGraph.access
    max_batch: int | None = None  # larger batches are sent as several Works
    bit: int = 0  # a filter's Done bit
    cheap: bool = False  # an SM whose predicate calls no UDF (an Arrow kernel, ~µs a tuple)
    # An SM calling UDFs: Works its module serves at once (queued Works beyond them wait).
    slots: int | None = None


@dataclass(frozen=True)
class FilterOffer:
    """A complete SteM's answer about its filter (eddies.modules.stem.SteM.filter_pays):
    offer it to built tuples (``built``), to unbuilt singletons before their build
    (``unbuilt``), and the fraction of the other side's tuples it is expected to keep
    before any has gone through it (``prior_selectivity``, in [0, 1]; None when unknown):
    the SteM's qualifying keys over its table's rows, the selectivity of a semi-join on a
    foreign key whose values are spread like the referenced rows."""

    built: bool
    unbuilt: bool
    prior_selectivity: float | None = None


@dataclass(frozen=True)
class RouteEntry:
    """Eligible destinations for one signature.

    ``edges[i]`` is the probe key (predicate index) of ``destinations[i]`` for a probe,
    None otherwise (or for a cross product). ``alternatives`` maps a top-level destination
    to the modules that can do its step (itself included), with their edges in
    ``alternative_edges``. ``stranded`` names a table none of whose AMs can serve these
    tuples any more (all failed): routing them is an error.
    """

    destinations: tuple[int, ...]
    edges: tuple[int | None, ...]
    complete: bool = False
    alternatives: dict[int, tuple[int, ...]] = field(default_factory=dict)
    alternative_edges: dict[int, int | None] = field(default_factory=dict)
    stranded: str | None = None
    # JoinSteps: destination -> the table whose SteM must be complete before it is taken
    # (the eddy's gate; EOT-gated steps and their lookups are not listed).
    gates: dict[int, str] = field(default_factory=dict)

    def only(self, destinations: list[int]) -> RouteEntry:
        """This entry restricted to ``destinations`` (a subset, in order): the steps whose
        SteMs are complete now, when some of them are not."""
        keep = set(destinations)
        modules = keep.union(*(g for d, g in self.alternatives.items() if d in keep))
        return RouteEntry(
            tuple(destinations),
            tuple(e for d, e in zip(self.destinations, self.edges, strict=True) if d in keep),
            self.complete,
            {d: g for d, g in self.alternatives.items() if d in keep},
            {a: e for a, e in self.alternative_edges.items() if a in modules},
            self.stranded,
            {d: t for d, t in self.gates.items() if d in keep},
        )

    def offers(self, destination: int) -> bool:
        return destination in self.destinations or destination in self.alternative_edges

    def edge_of(self, destination: int) -> int | None:
        if destination in self.alternative_edges:
            return self.alternative_edges[destination]
        return self.edges[self.destinations.index(destination)]


class RoutingTable:
    """Maps signatures to :class:`RouteEntry`, computing each entry once."""

    def __init__(self, graph: QueryGraph, destinations: list[Destination]) -> None:
        self.graph = graph
        self.destinations = destinations
        self._build = {d.table: d.id for d in destinations if d.kind is DestinationKind.BUILD}
        self._probe = {
            d.target_alias: d.id for d in destinations if d.kind is DestinationKind.PROBE
        }
        self._sm = {d.predicate: d.id for d in destinations if d.kind is DestinationKind.SM}
        self._lookup = {
            (d.access, d.target_alias): d.id
            for d in destinations
            if d.kind is DestinationKind.LOOKUP
        }
        self.output = next(d.id for d in destinations if d.kind is DestinationKind.OUTPUT)
        self.filters = [d for d in destinations if d.kind is DestinationKind.FILTER]
        self.ready_filters: set[int] = set()  # filters offered to built tuples (they pay)
        # Filters whose SteM is complete, offered to unbuilt singletons (see _compute).
        self.build_filters: set[int] = set()
        self._step = {d.target_alias: d.id for d in destinations if d.kind is DestinationKind.STEP}
        # STAIR joins (join_state "eddyjoins" or "stairs"): edge predicate -> destination.
        self._joins = {d.predicate: d.id for d in destinations if d.kind is DestinationKind.JOIN}
        self.failed: set[int] = set()  # ids of AMs that failed
        self.scanless: set[str] = set()  # tables whose every scan failed (lookups remain)
        self._entries: dict[Signature, RouteEntry] = {}
        # join_state="stairs": span -> the one join a tuple of that span goes to (the
        # greedy routing of stairs-2004 §4.1), None: every boundary join is offered.
        self.join_choice: Callable[[int], int | None] | None = None
        # Per alias, (Done bit, index, alias at the other end) of the edges touching it, in
        # predicate order: what probe_edge scans instead of every predicate (a 70-alias
        # chain has 139 predicates and a signature per sub-chain, issue 26).
        self._edges_at: dict[int, list[tuple[int, int, int]]] = {}
        for p in graph.predicates:
            if p.edge is not None:
                for end in dict.fromkeys((p.edge.left, p.edge.right)):
                    self._edges_at.setdefault(end, []).append((p.bit, p.index, p.edge.other(end)))

    def set_join_choice(self, choice: Callable[[int], int | None] | None) -> None:
        """Offer a tuple of span s only the STAIR join ``choice(s)`` (when not None); the
        choices may change: call :meth:`forget` then."""
        self.join_choice = choice
        self._entries.clear()

    def forget(self) -> None:
        """Compute every entry again (the STAIR routing decisions changed)."""
        self._entries.clear()

    def entry(self, sig: Signature) -> RouteEntry:
        found = self._entries.get(sig)
        if found is None:
            found = self._entries[sig] = self._compute(sig)
        return found

    def mark_failed(self, access: int) -> None:
        """AM ``access`` failed: route around it from now on."""
        self.failed.add(access)
        self._entries.clear()

    def mark_filter_ready(self, destination: int, built: bool = True, unbuilt: bool = True) -> None:
        """The SteM behind filter ``destination`` holds its table's qualifying rows: the
        filter is offered from now on to built tuples if ``built`` (it does more than the
        probe would), to unbuilt singletons if ``unbuilt`` (it saves storing them)."""
        if unbuilt:
            self.build_filters.add(destination)
        if built:
            self.ready_filters.add(destination)
        self._entries.clear()

    def complete(self, sig: Signature) -> bool:
        """Every alias spanned and every predicate's Done bit set (filters are optional)."""
        graph = self.graph
        return sig.span == graph.all_aliases and (
            sig.done & graph.all_predicates == graph.all_predicates
        )

    def has_scan(self, table: str) -> bool:
        """The table has a scan AM that has not failed."""
        return self.graph.has_scan(table) and table not in self.scanless

    def mark_scanless(self, table: str) -> None:
        """Every scan of ``table`` failed: from now on it is served by its index AMs."""
        self.scanless.add(table)
        self._entries.clear()

    def probe_edge(self, sig: Signature, target: int) -> int | None:
        """The pending edge a tuple of ``sig`` probes alias ``target`` by: one that binds
        an index AM of the target's table if there is one, else the first; None if the
        target is not joined to the span."""
        graph = self.graph
        first: int | None = None
        for bit, index, other in self._edges_at.get(target, ()):
            if sig.done & bit or not sig.span >> other & 1:
                continue
            if graph.bindable(graph.predicates[index].edge, target):
                return index
            if first is None:
                first = index
        return first

    def live_lookups(self, target: int, edge: int) -> list[int]:
        """Lookup destinations of AMs that the edge binds for ``target`` and that work."""
        graph = self.graph
        return [
            self._lookup[(am.id, target)]
            for am in graph.bindable(graph.predicates[edge].edge, target)
            if am.id not in self.failed
        ]

    def _compute(self, sig: Signature) -> RouteEntry:
        graph = self.graph
        dests: list[int] = []
        edges: list[int | None] = []
        pending = [p for p in graph.predicates if not sig.done & p.bit]
        if sig.floating:
            return self._floating(sig, pending)
        if self._joins:
            return self._stair_entry(sig, pending)
        if not sig.built:  # an unbuilt singleton: BuildFirst, even if nothing else is left
            alias = sig.span.bit_length() - 1
            table = graph.aliases[alias].table
            dests.append(self._build[table])
            edges.append(None)
            if len(graph.aliases_of(table)) == 1 and not graph.strict_build_first(table):
                for p in pending:
                    if p.alias_mask & ~sig.span == 0:
                        dests.append(self._sm[p.index])
                        edges.append(None)
                # A complete SteM's key filter before the build: a tuple it drops joins
                # nothing, so it need not be stored (the SteM stays small, and the tuple's
                # table may become final sooner; its drops count like an SM's).
                for f in self.filters:
                    if f.id in self.build_filters and self._filters_now(sig, f):
                        dests.append(f.id)
                        edges.append(f.predicate)
            return RouteEntry(tuple(dests), tuple(edges))
        if self.complete(sig):
            return RouteEntry((self.output,), (None,), complete=True)
        if graph.unbuilt:  # only floating tuples produce results: built ones are done
            return RouteEntry((), ())
        if graph.steps:
            stepped = self._stepped(sig, pending)
            if stepped is not None:
                return stepped
        for p in pending:
            if p.alias_mask & ~sig.span == 0:
                dests.append(self._sm[p.index])
                edges.append(None)
        if sig.prior:
            return self._prior_prober(sig, dests, edges)
        for f in self.filters:
            if f.id in self.ready_filters and self._filters_now(sig, f):
                dests.append(f.id)
                edges.append(f.predicate)
        region = graph.region_mask
        outside = [a.index for a in graph.aliases if not sig.span >> a.index & 1]
        outside = [b for b in outside if region >> b & 1]
        alternatives: dict[int, tuple[int, ...]] = {}
        alternative_edges: dict[int, int | None] = {}
        connected = [(b, edge) for b in outside if (edge := self.probe_edge(sig, b)) is not None]
        lookups_first = [(b, edge) for b, edge in connected if self._binds_index_only(b, edge)]
        # A probe of an index-only table by a join that binds none of its indexes can ask
        # for nothing: take it only when nothing else is left.
        asking = [(b, e) for b, e in connected if self.has_scan(graph.aliases[b].table)]
        for b, edge in lookups_first or asking or connected:
            probe = self._probe[b]
            dests.append(probe)
            edges.append(edge)
            table = graph.aliases[b].table
            if self.has_scan(table) and not sig.looked >> b & 1:
                # Index or hash join for this step (stems-2003 §4.3): the AM's matches
                # will build into the SteM that a scan also fills.
                lookups = self.live_lookups(b, edge)
                if lookups:
                    alternatives[probe] = (probe, *lookups)
                    alternative_edges.update(dict.fromkeys(alternatives[probe], edge))
        if not connected:
            for b in outside:
                dests.append(self._probe[b])
                edges.append(None)
        return RouteEntry(
            tuple(dests),
            tuple(edges),
            alternatives=alternatives,
            alternative_edges=alternative_edges,
        )

    def _stair_entry(self, sig: Signature, pending) -> RouteEntry:
        """Routing with STAIRs (stairs-2004 §2.1, §3.1): the SMs whose aliases the tuple
        spans, and every join of the spanning tree with exactly one side in its span
        (routing there inserts it into that side's STAIR and probes the dual). Tuples
        need no build first: the insert is part of the join (Dual Routing Property).
        An edge closing a cycle is no join here, only an SM."""
        if self.complete(sig):
            return RouteEntry((self.output,), (None,), complete=True)
        dests: list[int] = []
        edges: list[int | None] = []
        chosen = self.join_choice(sig.span) if self.join_choice is not None else None
        for p in pending:
            if p.alias_mask & ~sig.span == 0:
                dests.append(self._sm[p.index])
                edges.append(None)
            elif p.index in self._joins and chosen in (None, self._joins[p.index]):
                e = p.edge
                if (sig.span >> e.left & 1) != (sig.span >> e.right & 1):
                    dests.append(self._joins[p.index])
                    edges.append(p.index)
        return RouteEntry(tuple(dests), tuple(edges))

    def _filters_now(self, sig: Signature, f: Destination) -> bool:
        """Filter ``f`` applies to ``sig``: not passed yet, its edge pending, the edge's
        other side spanned and the SteM's alias not."""
        p = self.graph.predicates[f.predicate]
        edge = p.edge
        assert edge is not None and f.target_alias is not None
        return (
            not sig.done & (f.bit | p.bit)
            and not sig.span >> f.target_alias & 1
            and bool(sig.span >> edge.other(f.target_alias) & 1)
        )

    def _stepped(self, sig: Signature, pending) -> RouteEntry | None:
        """Routing around JoinSteps (outer joins, subqueries), or None for a tuple inside
        the region, routed as usual. A tuple spanning the region passes the SMs over its
        span first, then takes any step whose ``needs`` it spans (steps that commute, see
        ``engine/plan/outer_and_semi_joins.py: step_needs``): the policy picks among them, and the
        eddy
        offers only those whose SteM is complete (``RouteEntry.gates``). An EOT-gated step
        offers its lookup instead; a tuple that has looked its keys up takes that step
        next. A step table's own built singletons go nowhere: only the step reads its
        SteM, once complete (the gate). Its unbuilt ones were handled above (BuildFirst)."""
        graph = self.graph
        region = graph.region_mask
        span = sig.span
        if span & region != region:
            if not span & ~region:
                return None
            return RouteEntry((), ())  # a step table's built singleton
        sms = [self._sm[p.index] for p in pending if p.alias_mask & ~span == 0]
        if sms:
            return RouteEntry(tuple(sms), (None,) * len(sms))
        eligible = [s for s in graph.steps if not span >> s.alias & 1 and not s.needs & ~span]
        for step in eligible:
            if step.lookup and (sig.looked | sig.prior) >> step.alias & 1:
                return RouteEntry((self._step[step.alias],), (None,))
        dests: list[int] = []
        edges: list[int | None] = []
        alternatives: dict[int, tuple[int, ...]] = {}
        alternative_edges: dict[int, int | None] = {}
        gates: dict[int, str] = {}
        for step in eligible:
            table = graph.aliases[step.alias].table
            if step.lookup:  # EOT-gated: look the keys up first; the step checks the EOTs
                lookups = self.live_lookups(step.alias, step.predicate)
                if not lookups:
                    return RouteEntry((), (), stranded=table)
                dests.append(lookups[0])
                edges.append(step.predicate)
                if len(lookups) > 1:
                    alternatives[lookups[0]] = tuple(lookups)
                alternative_edges.update(dict.fromkeys(lookups, step.predicate))
            else:
                dests.append(self._step[step.alias])
                edges.append(None)
                gates[self._step[step.alias]] = table
        # None eligible: complete tuples were sent to the output above.
        return RouteEntry(
            tuple(dests),
            tuple(edges),
            alternatives=alternatives,
            alternative_edges=alternative_edges,
            gates=gates,
        )

    def _binds_index_only(self, target: int, edge: int) -> bool:
        """The edge binds an index AM of ``target``'s table, which has no scan.

        Such a probe comes first: the table's rows arrive only when looked up, so every
        tuple that can bind them asks before it goes anywhere else; otherwise, in a cycle,
        a result's other components could meet by another path and its row would never be
        fetched. The SteM bounces the probe to an index AM unless an EOT says the rows are
        there (§3.3). A probe by a join that binds no index of such a table is taken only
        when the tuple has nothing else to do (see ``_compute``)."""
        graph = self.graph
        table = graph.aliases[target].table
        return not self.has_scan(table) and bool(
            graph.bindable(graph.predicates[edge].edge, target)
        )

    def _floating(self, sig: Signature, pending) -> RouteEntry:
        """Floating tuples: SMs, then the SteMs of every other alias (relaxed BuildFirst)."""
        graph = self.graph
        if self.complete(sig):
            return RouteEntry((self.output,), (None,), complete=True)
        dests: list[int] = []
        edges: list[int | None] = []
        for p in pending:
            if p.alias_mask & ~sig.span == 0:
                dests.append(self._sm[p.index])
                edges.append(None)
        if sig.prior:  # bounced by an incomplete SteM: probe it again, and only it
            target = sig.prior.bit_length() - 1
            dests.append(self._probe[target])
            edges.append(self.probe_edge(sig, target))
            return RouteEntry(tuple(dests), tuple(edges))
        outside = [a.index for a in graph.aliases if not sig.span >> a.index & 1]
        connected = [(b, edge) for b in outside if (edge := self.probe_edge(sig, b)) is not None]
        for b, edge in connected or [(b, None) for b in outside]:
            dests.append(self._probe[b])
            edges.append(edge)
        return RouteEntry(tuple(dests), tuple(edges))

    def _prior_prober(self, sig: Signature, dests: list[int], edges: list[int | None]):
        target = sig.prior.bit_length() - 1
        edge = self.probe_edge(sig, target)
        assert edge is not None, "a prior prober is always joined to its target"
        lookups = self.live_lookups(target, edge)
        if not lookups:
            table = self.graph.aliases[target].table
            return RouteEntry(tuple(dests), tuple(edges), stranded=table)
        dests.append(lookups[0])
        edges.append(edge)
        alternatives = {lookups[0]: tuple(lookups)} if len(lookups) > 1 else {}
        return RouteEntry(
            tuple(dests),
            tuple(edges),
            alternatives=alternatives,
            alternative_edges=dict.fromkeys(lookups, edge),
        )

    def start_signatures(self) -> list[Signature]:
        """The signatures of fresh singletons, one per table (for explain)."""
        seen: dict[str, Signature] = {}
        for a in self.graph.aliases:
            if a.table not in seen:
                floating = a.table in self.graph.unbuilt
                built = a.table not in self._build and not floating
                seen[a.table] = Signature(1 << a.index, 0, built, floating=floating)
        return list(seen.values())
