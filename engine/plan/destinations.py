"""The eddy's destinations for a planned :class:`QueryGraph` (stems-2003 §2.2 step 2).

One build per SteM table, one SM per predicate that is no join step, one destination per
join step, one probe per SteM alias of the inner-join region, one lookup per index AM and
alias that may be looked up, the SteM filters (semi-joins), and the output. Their order is
also the default static order (``policy="static"``); the routing table
(:mod:`eddies.router.routing_table`) says which of them a tuple of each signature may go to.
"""

from __future__ import annotations

from eddies.modules.selection import works_at_once
from eddies.router.query_graph import AliasInfo, QueryGraph
from eddies.router.routing_table import Destination, DestinationKind

#: Probe tuples per Work sent to an index AM: a few lookups' worth per lookup slot, so the
#: AM always has work queued, yet a big batch is spread over Works that the access chooser
#: places one by one (a slow mirror never holds a whole scan batch hostage).
LOOKUP_WORK_PER_LOOKUP = 4
LOOKUP_WORK_MIN = 64


class _Numbered(list):
    """Destinations numbered in the order they are added (a destination's id is its
    place in the plan's list)."""

    def add(
        self,
        name: str,
        kind: DestinationKind,
        module: str,
        alias: AliasInfo | None = None,
        **fields,
    ) -> None:
        if alias is not None:
            fields.update(table=alias.table, target_alias=alias.index)
        self.append(Destination(len(self), name, kind, module, **fields))


def destinations(graph: QueryGraph) -> list[Destination]:
    """Builds, then SMs, then join steps, then probes, then lookups, then SteM filters,
    then output: also the default static order."""
    dests = _Numbered()
    for table in graph.stem_tables:
        dests.add(f"build:{table}", DestinationKind.BUILD, f"stem:{table}", table=table)
    for p in graph.predicates:
        if not p.step:
            dests.add(
                p.name,
                DestinationKind.SM,
                p.name,
                predicate=p.index,
                cheap=not p.expr.udf_calls(),
                slots=works_at_once(p) if p.expr.udf_calls() else None,
            )
    for step in graph.steps:
        a = graph.aliases[step.alias]
        name = f"step:{a.name}"
        dests.add(name, DestinationKind.STEP, name, a, predicate=step.predicate)
    if graph.stem_tables:
        _add_probes(dests, graph)
        _add_lookups(dests, graph)
    _add_filters(dests, graph)
    dests.add("output", DestinationKind.OUTPUT, "output")
    return list(dests)


def _add_probes(dests: _Numbered, graph: QueryGraph) -> None:
    """A probe per alias of the inner-join region whose table has a SteM."""
    region = graph.region_mask
    for a in graph.aliases:
        if a.table not in graph.stem_tables or not region >> a.index & 1:
            continue
        dests.add(f"probe:{a.name}", DestinationKind.PROBE, f"stem:{a.table}", a)


def _add_lookups(dests: _Numbered, graph: QueryGraph) -> None:
    """A lookup per index AM of each alias in the region or looked up by its join step."""
    region = graph.region_mask
    looked_up = {s.alias for s in graph.steps if s.lookup}
    for a in graph.aliases:
        if not region >> a.index & 1 and a.index not in looked_up:
            continue
        for am in graph.indexes_of(a.table):
            dests.add(
                f"lookup:{am.name}@{a.name}",
                DestinationKind.LOOKUP,
                f"am:{am.name}",
                a,
                access=am.id,
                max_batch=max(LOOKUP_WORK_MIN, LOOKUP_WORK_PER_LOOKUP * am.max_concurrency),
            )


def _add_filters(dests: _Numbered, graph: QueryGraph) -> None:
    """SteM filters (see eddies.router.routing_table): one per equi-join edge and side
    whose table has one alias, one AM (a scan) and a SteM; none when a table is never
    built (relaxed BuildFirst: the floating tuples make every result). Their Done bits
    follow the predicates' bits. None either in a query with join steps (outer joins,
    subqueries): a filter drops the tuples an outer or anti-join must keep."""
    if graph.unbuilt or graph.steps:
        return
    bit = 1 << len(graph.predicates)
    for p in graph.predicates:
        if p.edge is None:
            continue
        for target in (p.edge.left, p.edge.right):
            table = graph.aliases[target].table
            if (
                table not in graph.stem_tables
                or len(graph.aliases_of(table)) != 1
                or graph.deduplicates(table)
                or not graph.has_scan(table)
            ):
                continue
            dests.add(
                f"filter:{graph.aliases[target].name}@{p.name}",
                DestinationKind.FILTER,
                f"stem:{table}",
                graph.aliases[target],
                predicate=p.index,
                bit=bit,
            )
            bit <<= 1
