"""Which SteMs' keys filter which file scans, and the hook that pushes them (issue 11).

The planner offers a SteM filter ``filter:B@smK`` for an equi-join edge smK whose side B
has one alias, one scan AM and a SteM, in a query without join steps (inner equi-joins
only). When the other side's table A is also read from files (a ``pyarrow.dataset``), by
one scan AM, under one alias, with no index AM, and the key columns are of a pair
:func:`eddies.modules.scan_filter.pushable_pair` accepts, the same moment that makes the
SteM filter ready — B's SteM holds every row of B that can qualify — also pushes B's keys
into A's scan as a dynamic filter (:class:`~eddies.sources.dataset_source.DynamicFilter`):
the row groups A has not read yet are skipped where their statistics miss B's keys. The
eddy is unchanged: the hook wraps the callable it already asks whether a SteM filter is
ready (see ``Eddy._offer_filters``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eddies.modules.scan_filter import key_filter, pushable_pair
from eddies.modules.stem import SteM
from eddies.router.routing_table import Destination, DestinationKind
from eddies.sources.dataset_source import DynamicFilter


@dataclass
class ScanFilterPush:
    """B's keys on one edge, for A's scan: ``pairs`` are (B column, A column, A's file
    type) of the edge's pushable column pairs; ``name`` says where they come from."""

    stem_table: str
    target: int  # B's alias
    scan_table: str
    pairs: list[tuple[str, str, object]]
    name: str
    pushed: bool = False


def scan_filter_pushes(plan, filters: list[Destination]) -> dict[int, ScanFilterPush]:
    """Per SteM-filter destination in ``filters``, the push into the other side's file
    scan it allows (see the module docstring); destinations that allow none are left out."""
    graph = plan.graph
    pushes: dict[int, ScanFilterPush] = {}
    for d in filters:
        if d.kind is not DestinationKind.FILTER:
            continue
        p = graph.predicates[d.predicate]
        edge = p.edge
        other = edge.other(d.target_alias)
        table = graph.aliases[other].table
        entry = plan.tables[table]
        if (
            entry.stream is not None
            or len(entry.scans) != 1
            or entry.indexes
            or len(graph.aliases_of(table)) != 1
            or entry.scans[0].dataset is None
        ):
            continue
        source = entry.scans[0]
        build_schema = plan.tables[d.table].schema
        pairs = []
        for b_col, a_col in zip(edge.side(d.target_alias), edge.side(other), strict=True):
            file_type = source.dataset.schema.field(a_col).type
            if source.schema.field(a_col).type != file_type:  # e.g. a dictionary column
                continue
            if pushable_pair(build_schema.field(b_col).type, file_type):
                pairs.append((b_col, a_col, file_type))
        if pairs:
            name = f"keys of stem:{d.table} on {p.name} ({', '.join(a for _, a, _ in pairs)})"
            pushes[d.id] = ScanFilterPush(d.table, d.target_alias, table, pairs, name)
    return pushes


def pushing(
    ask: Callable[[], tuple[bool, bool] | None],
    push: ScanFilterPush,
    stem: SteM,
    dynamic: DynamicFilter,
) -> Callable[[], tuple[bool, bool] | None]:
    """``ask`` (a SteM filter's readiness callable for the eddy), which also pushes B's
    keys into ``dynamic`` the first time it answers (the SteM is then filter-ready)."""

    def ask_and_push() -> tuple[bool, bool] | None:
        pays = ask()
        if pays is not None and not push.pushed:
            push.pushed = True
            dynamic.add(_parts(push, stem), push.name)
        return pays

    return ask_and_push


def _parts(push: ScanFilterPush, stem: SteM) -> list[tuple] | None:
    """(A column, expression, sorted key codes) per column pair of the push; None if no
    row can join."""
    values = stem.key_values(push.target, tuple(b for b, _, _ in push.pairs))
    parts = []
    for column, (_, a_col, file_type) in zip(values, push.pairs, strict=True):
        found = key_filter(column, a_col, file_type)
        if found is None:
            return None
        parts.append((a_col, *found))
    return parts
