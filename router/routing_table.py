"""Destinations and the routing table: which modules a signature may be routed to.

The PostgreSQL eddy indexes a routing array by the tuple's signature bitmap and computes
each entry once (eddies-in-postgresql §2.1.4); we do the same, lazily, with a dict keyed
by :class:`~eddies.router.tuple_batch.Signature`. An entry lists the eligible destinations
under the routing constraints of stems-2003 Table 2:

* **BuildFirst** — an unbuilt singleton may only be built into its table's SteM, or (for a
  table with one alias, where no other role can need the row) first pass its own SMs; it
  never probes before it is built.
* **BoundedRepetition** — a destination whose work the signature already records (a set
  Done bit, a spanned alias, a finished build) is never eligible again, so every tuple
  visits every module at most once and the query terminates.
* Probes go only to aliases joined to the span by an equi-join edge; a cross product is
  offered only when no such alias exists. A complete tuple goes to the output.
"""

from __future__ import annotations

from dataclasses import dataclass

from eddies.router.query_graph import QueryGraph
from eddies.router.tuple_batch import Signature


@dataclass(frozen=True)
class Destination:
    """Where the eddy can send a batch: a build into, or a probe of, a SteM; an SM; output.

    name: as shown by explain and used in ``policy="static"`` orders — ``build:<table>``,
    ``probe:<alias>``, ``sm<k>`` (k-th predicate, 1-based) and ``output``.
    """

    id: int
    name: str
    kind: str  # "build" | "probe" | "sm" | "output"
    module: str
    table: str | None = None
    target_alias: int | None = None
    predicate: int | None = None


@dataclass(frozen=True)
class RouteEntry:
    """Eligible destinations for one signature; ``edges[i]`` is the probe key (predicate
    index) for a probe destination, None otherwise (or for a cross product)."""

    destinations: tuple[int, ...]
    edges: tuple[int | None, ...]
    complete: bool = False


class RoutingTable:
    """Maps signatures to :class:`RouteEntry`, computing each entry once."""

    def __init__(self, graph: QueryGraph, destinations: list[Destination]) -> None:
        self.graph = graph
        self.destinations = destinations
        self._build = {d.table: d.id for d in destinations if d.kind == "build"}
        self._probe = {d.target_alias: d.id for d in destinations if d.kind == "probe"}
        self._sm = {d.predicate: d.id for d in destinations if d.kind == "sm"}
        self.output = next(d.id for d in destinations if d.kind == "output")
        self._entries: dict[Signature, RouteEntry] = {}

    def entry(self, sig: Signature) -> RouteEntry:
        found = self._entries.get(sig)
        if found is None:
            found = self._entries[sig] = self._compute(sig)
        return found

    def _compute(self, sig: Signature) -> RouteEntry:
        graph = self.graph
        if sig.span == graph.all_aliases and sig.done == graph.all_predicates:
            return RouteEntry((self.output,), (None,), complete=True)
        dests: list[int] = []
        edges: list[int | None] = []
        pending = [p for p in graph.predicates if not sig.done & p.bit]
        if not sig.built:
            alias = sig.span.bit_length() - 1
            table = graph.aliases[alias].table
            dests.append(self._build[table])
            edges.append(None)
            if len(graph.aliases_of(table)) == 1:
                for p in pending:
                    if p.alias_mask & ~sig.span == 0:
                        dests.append(self._sm[p.index])
                        edges.append(None)
            return RouteEntry(tuple(dests), tuple(edges))
        for p in pending:
            if p.alias_mask & ~sig.span == 0:
                dests.append(self._sm[p.index])
                edges.append(None)
        outside = [a.index for a in graph.aliases if not sig.span >> a.index & 1]
        connected: list[tuple[int, int]] = []
        for b in outside:
            for p in pending:
                e = p.edge
                if e is not None and b in (e.left, e.right) and sig.span >> e.other(b) & 1:
                    connected.append((b, p.index))
                    break
        if connected:
            for b, pred in connected:
                dests.append(self._probe[b])
                edges.append(pred)
        else:
            for b in outside:
                dests.append(self._probe[b])
                edges.append(None)
        return RouteEntry(tuple(dests), tuple(edges))

    def start_signatures(self) -> list[Signature]:
        """The signatures of fresh singletons, one per table (for explain)."""
        seen: dict[str, Signature] = {}
        for a in self.graph.aliases:
            if a.table not in seen:
                built = a.table not in self._build
                seen[a.table] = Signature(1 << a.index, 0, built)
        return list(seen.values())
