"""The join state of a query: SteMs (the default) or STAIRs (stairs-2004).

``join_state="stems"`` is the engine of stems-2003: one SteM per table, base tuples only.
``join_state="eddyjoins"`` replaces the SteMs by STAIRs that never migrate — the
EddyJoins baseline of stairs-2004 §2.1 and §5: one pipelined symmetric hash join per edge
of a spanning tree of the query graph, broken into two dual STAIRs
(:mod:`eddies.modules.stair`), whose order the eddy picks tuple by tuple. Edges that close
a cycle are SMs over composite tuples. ``join_state="stairs"`` adds state migration
(§3.1.1, §3.2, §4): at points of stasis, the base tuples the greedy plan of §4.1 would now
send to another join, where moving them pays, are moved — every stored tuple holding one
demoted, the base tuples promoted through the new join
(:class:`eddies.modules.stair.StairMigrator`).

:func:`with_join_state` rewrites a planned query's destinations for the chosen join state
and refuses, with an :class:`UnsupportedQueryError` naming the construct, what STAIRs do
not run here.
"""

from __future__ import annotations

import dataclasses

from eddies.engine.plan.plan_types import Plan
from eddies.errors import UnsupportedQueryError
from eddies.router.routing_table import Destination, DestinationKind, RoutingTable
from eddies.router.tuple_batch import Signature

__all__ = [
    "check_stairs_query",
    "spanning_tree",
    "stair_contents",
    "with_join_state",
]


def with_join_state(plan: Plan, join_state: str) -> Plan:
    """``plan`` run with ``join_state``: unchanged for ``"stems"``; for ``"eddyjoins"``,
    builds, probes and SteM filters replaced by one ``join:<a>-<b>`` destination per
    spanning-tree edge (SMs and the output kept, renumbered); ``"stairs"`` likewise, its
    modules migrating. Raises UnsupportedQueryError for queries STAIRs do not run (see
    :func:`check_stairs_query`)."""
    if join_state == "stems":
        return plan
    check_stairs_query(plan, join_state)
    graph = plan.graph
    tree = spanning_tree(plan)
    dests: list[Destination] = []
    for d in plan.destinations:
        if d.kind is DestinationKind.SM:
            dests.append(dataclasses.replace(d, id=len(dests)))
    for index in tree:
        edge = graph.predicates[index].edge
        assert edge is not None
        name = f"join:{graph.aliases[edge.left].name}-{graph.aliases[edge.right].name}"
        dests.append(Destination(len(dests), name, DestinationKind.JOIN, name, predicate=index))
    dests.append(Destination(len(dests), "output", DestinationKind.OUTPUT, "output"))
    return dataclasses.replace(plan, destinations=dests, join_state=join_state)


def spanning_tree(plan: Plan) -> list[int]:
    """Indexes of the equi-join edge predicates that form the spanning tree: in predicate
    (WHERE) order, each edge that joins two not yet connected parts (Kruskal without
    weights). The eddy cannot change the spanning tree of EddyJoins (stairs-2004 §2.3)."""
    graph = plan.graph
    parent = list(range(len(graph.aliases)))

    def root(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    tree: list[int] = []
    for p in graph.predicates:
        if p.edge is None:
            continue
        left, right = root(p.edge.left), root(p.edge.right)
        if left != right:
            parent[left] = right
            tree.append(p.index)
    return tree


def check_stairs_query(plan: Plan, join_state: str) -> None:
    """Refuse what STAIRs do not run here, naming it: joins that are not inner equi-joins
    connecting every table (outer joins, IN/EXISTS subqueries, cross products), self-joins,
    index AMs and competing AMs, stream tables and windows, and relaxed BuildFirst."""
    graph = plan.graph
    what = f'join_state="{join_state}"'
    if graph.steps:
        raise UnsupportedQueryError(
            f"{what} runs inner equi-joins only: outer joins and [NOT] IN / [NOT] EXISTS "
            'subqueries (join steps) need SteMs (join_state="stems")'
        )
    for table, entry in plan.tables.items():
        if entry.indexes:
            raise UnsupportedQueryError(
                f"{what}: table {table!r} has index access methods, which STAIRs do not "
                "use (no index joins or lookups with STAIRs yet)"
            )
        if len(entry.scans) != 1:
            raise UnsupportedQueryError(
                f"{what}: table {table!r} has {len(entry.scans)} scan access methods; "
                "STAIRs take one scan per table (no competing AMs)"
            )
        if entry.stream is not None or entry.window is not None:
            raise UnsupportedQueryError(
                f"{what}: table {table!r} is a stream; STAIRs run over static tables "
                "only (no streams or windows)"
            )
        if len(graph.aliases_of(table)) > 1:
            raise UnsupportedQueryError(
                f"{what}: table {table!r} appears more than once (a self-join); STAIRs "
                "take each table once"
            )
    if graph.unbuilt:
        raise UnsupportedQueryError(
            f"{what}: relaxed BuildFirst (tables never built) is a SteM technique"
        )
    tree = spanning_tree(plan)
    if len(tree) != len(graph.aliases) - 1:
        raise UnsupportedQueryError(
            f"{what}: every table must be joined to the others by equalities (no cross "
            "products with STAIRs)"
        )


def stair_contents(
    plan: Plan, limit: int = 256
) -> tuple[list[Signature], dict[tuple[int, int], set[Signature]]]:
    """What STAIRs can hold, for explain: the signatures reachable from fresh singletons
    under the plan's routing table, and per ``(join destination, alias)`` STAIR the
    signatures of the tuples that may be inserted into it (a fixpoint: a join's outputs
    combine a routed signature with whatever its dual may hold). At most ``limit``
    signatures are explored."""
    graph = plan.graph
    table = RoutingTable(graph, plan.destinations)
    sigs: list[Signature] = [Signature(1 << a.index, 0, True) for a in graph.aliases]
    seen = set(sigs)
    contents: dict[tuple[int, int], set[Signature]] = {}
    for d in plan.destinations:
        if d.kind is DestinationKind.JOIN:
            edge = graph.predicates[d.predicate].edge
            contents[(d.id, edge.left)] = set()
            contents[(d.id, edge.right)] = set()
    changed = True
    while changed and len(seen) < limit:
        changed = False
        for sig in list(sigs):
            for dest_id in table.entry(sig).destinations:
                d = plan.destinations[dest_id]
                new: list[Signature] = []
                if d.kind is DestinationKind.SM:
                    bit = graph.predicates[d.predicate].bit
                    new.append(Signature(sig.span, sig.done | bit, True))
                elif d.kind is DestinationKind.JOIN:
                    p = graph.predicates[d.predicate]
                    side = p.edge.left if sig.span >> p.edge.left & 1 else p.edge.right
                    if sig not in contents[(d.id, side)]:
                        contents[(d.id, side)].add(sig)
                        changed = True
                    for stored in list(contents[(d.id, p.edge.other(side))]):
                        new.append(
                            Signature(sig.span | stored.span, sig.done | stored.done | p.bit, True)
                        )
                for s in new:
                    if s not in seen:
                        seen.add(s)
                        sigs.append(s)
                        changed = True
    return sigs, contents
