"""explain(): the AMs, SMs and SteMs a query creates, its destinations and routing table.

The routing table shown is the set of signatures reachable from fresh singletons, each with
the destinations the eddy may choose from (stems-2003 Table 2 applied); at most
``MAX_SIGNATURES`` are listed.
"""

from __future__ import annotations

import dataclasses
from collections import deque

from eddies.engine.catalog import Catalog, CatalogTable
from eddies.engine.plan.join_state import stair_contents, with_join_state
from eddies.engine.plan.plan_types import FinalizeSpec, Plan
from eddies.engine.plan.planner import plan_query
from eddies.engine.plan.scan_filter_choice import scan_filter_pushes
from eddies.errors import EddiesError
from eddies.router.query_graph import QueryGraph
from eddies.router.routing_table import DestinationKind, RoutingTable
from eddies.router.run_choices import JOIN_STATES
from eddies.router.stats import RunStats
from eddies.router.tuple_batch import Signature

MAX_SIGNATURES = 64


def _successors(plan: Plan, table: RoutingTable, sig: Signature) -> list[Signature]:
    graph = plan.graph
    out: list[Signature] = []
    entry = table.entry(sig)
    steps = [
        (d, entry.edge_of(d))
        for top in entry.destinations
        for d in entry.alternatives.get(top, (top,))
    ]
    for dest_id, edge in steps:
        dest = plan.destinations[dest_id]
        if dest.kind is DestinationKind.LOOKUP:
            if sig.prior:
                continue  # a prior prober ends at the AM
            out.append(Signature(sig.span, sig.done, True, 0, sig.looked | 1 << dest.target_alias))
        elif dest.kind is DestinationKind.BUILD:
            out += [
                Signature(1 << a, sig.done if len(graph.aliases_of(dest.table)) == 1 else 0, True)
                for a in graph.aliases_of(dest.table)
            ]
        elif dest.kind is DestinationKind.SM:
            bit = graph.predicates[dest.predicate].bit
            out.append(dataclasses.replace(sig, done=sig.done | bit))
        elif dest.kind is DestinationKind.FILTER:
            out.append(dataclasses.replace(sig, done=sig.done | dest.bit))
        elif dest.kind is DestinationKind.STEP:
            step = graph.step_of(dest.target_alias)
            bit = graph.predicates[step.predicate].bit
            out.append(Signature(sig.span | 1 << dest.target_alias, sig.done | bit, True))
            if step.kind in ("right", "full"):  # the flush: NULL-padded stored tuples
                out.append(Signature(sig.span | 1 << step.alias, step.done_before | bit, True))
        elif dest.kind is DestinationKind.PROBE and sig.floating:
            bit = graph.predicates[edge].bit if edge is not None else 0
            span = sig.span | 1 << dest.target_alias
            out.append(Signature(span, sig.done | bit, False, 0, 0, True))
            out.append(Signature(sig.span, sig.done, False, 1 << dest.target_alias, 0, True))
        elif dest.kind is DestinationKind.PROBE:
            bit = graph.predicates[edge].bit if edge is not None else 0
            looked = sig.looked & ~(1 << dest.target_alias)
            out.append(
                Signature(sig.span | 1 << dest.target_alias, sig.done | bit, True, 0, looked)
            )
            if (
                edge is not None
                and not graph.has_scan(dest.table)
                and graph.bindable(graph.predicates[edge].edge, dest.target_alias)
            ):
                prior = 1 << dest.target_alias
                out.append(Signature(sig.span, sig.done, True, prior, sig.looked))
    return out


def explain_plan(plan: Plan) -> str:
    """The text of :func:`explain` for an already planned query: its AMs, SteMs (or
    STAIRs), SMs, SteM filters, join steps, destinations, the routing table reachable
    from fresh singletons (at most ``MAX_SIGNATURES`` signatures) and what runs above
    the eddy, one section after another."""
    lines = ["eddy plan", "", "access modules (AMs):"]
    for table, entry in plan.tables.items():
        lines += _access_lines(plan, table, entry)
    lines.append("")
    lines += _join_state_lines(plan)
    lines += ["", "predicates (SMs; Done bits):"]
    lines += _predicate_lines(plan)
    lines += _filter_lines(plan)
    lines += _step_lines(plan.graph)
    lines += [
        "",
        "destinations (default static order): " + ", ".join(d.name for d in plan.destinations),
        "",
        "routing table:",
    ]
    lines += _routing_lines(plan)
    fin = plan.finalize
    above = [text for step in fin.above_steps() if (text := _above_step(fin, step))]
    lines += ["", "above the eddy: " + (", ".join(above) or "projection only")]
    return "\n".join(lines)


def _access_lines(plan: Plan, table: str, entry: CatalogTable) -> list[str]:
    """The scan and index AMs of one table, what each scan reads and skips, and how
    competing AMs' duplicates are removed."""
    aliases = ", ".join(a.name for a in plan.graph.aliases if a.table == table)
    lines = []
    for source in entry.scans:
        where = source.path or (
            "in-memory table"
            if source.table is not None
            else "paged source"
            if source.pages is not None
            else "stream"
        )
        name = source.access_name or table
        lines.append(f"  scan:{name}  ({where}; table {table}; aliases: {aliases})")
        if table in plan.scan_columns:
            read = ", ".join(plan.scan_columns[table]) or "none (row counts only)"
            lines.append(f"    reads columns: {read}")
        if table in plan.scan_filters:
            pushed = " ".join(str(plan.scan_filters[table]).split())
            lines.append(f"    filter pushed into the scan: {pushed}")
    for index in entry.indexes:
        lines.append(
            f"  am:{index.name}  (index on ({', '.join(index.on)}), up to "
            f"{index.max_concurrency} lookups in flight; table {table}; aliases: {aliases})"
        )
    if entry.deduplicates:
        key = ", ".join(entry.key) if entry.key else "all columns"
        lines.append(f"    competing AMs of {table}: duplicates removed by ({key})")
    return lines


def _join_state_lines(plan: Plan) -> list[str]:
    """The SteMs and their hash indexes, or the STAIRs (stairs-2004)."""
    graph = plan.graph
    if plan.join_state != "stems":
        return _stairs_section(plan)
    lines = ["SteMs:" if graph.stem_tables else "SteMs: none (one table: no joins)"]
    for table in graph.stem_tables:
        indexes = ", ".join(f"({', '.join(c)})" for c in plan.index_kinds[table]) or "none"
        lines.append(f"  stem:{table}  hash indexes on {indexes}")
    return lines


def _predicate_lines(plan: Plan) -> list[str]:
    """One line per predicate: its SQL, the aliases it reads and its role."""
    graph = plan.graph
    lines = []
    for p in graph.predicates:
        role = " — equi-join edge: SteM probe key, or SM when closing a cycle" if p.edge else ""
        if p.edge is not None and plan.join_state != "stems":
            joined = any(
                d.predicate == p.index for d in plan.destinations if d.kind is DestinationKind.JOIN
            )
            role = " — equi-join edge: a STAIR join" if joined else " — closes a cycle: SM"
        if p.step:
            role = " — join step" + (" (its edge binds the lookups)" if p.edge else "")
        lines.append(f"  {p.name}: {p.sql}  [{', '.join(graph.alias_names(p.alias_mask))}]{role}")
    if not graph.predicates:
        lines.append("  none")
    return lines


def _filter_lines(plan: Plan) -> list[str]:
    """The SteM filters (semi-joins) and the scan filters they push, if any."""
    graph = plan.graph
    filters = [d for d in plan.destinations if d.kind is DestinationKind.FILTER]
    lines = []
    if filters:
        lines += ["", "SteM filters (semi-joins; offered once the SteM holds its table):"]
        for d in filters:
            p = graph.predicates[d.predicate]
            other = graph.aliases[p.edge.other(d.target_alias)].name
            lines.append(
                f"  {d.name}: tuples spanning {other} and not {graph.aliases[d.target_alias].name}"
                f" pass only if stem:{d.table} holds their {p.name} key"
            )
    pushes = scan_filter_pushes(plan, filters) if filters else {}
    if pushes:
        lines += ["", "dynamic scan filters (pushed once the SteM holds its table; row groups):"]
        for push in pushes.values():
            lines.append(f"  scan:{push.scan_table} skips by the {push.name}")
    return lines


def _step_lines(graph: QueryGraph) -> list[str]:
    """The join steps after the inner-join region, if any."""
    if not graph.steps:
        return []
    region = ", ".join(graph.alias_names(graph.region_mask))
    lines = [
        "",
        f"join steps (after the region {{{region}}}; a tuple takes those whose needs it "
        "spans, in the order the policy picks; each probes a complete SteM, or one "
        "holding its lookups' EOTs):",
    ]
    for step in graph.steps:
        alias = graph.aliases[step.alias].name
        needs = ", ".join(graph.alias_names(step.needs))
        lines.append(
            f"  step:{alias}  {step.kind} ({len(step.keys)} hashed key(s)"
            f"{', residual' if step.residual is not None else ''}"
            f"{', stored filter' if step.stored_filter is not None else ''}"
            f"{', EOT-gated: looks its keys up first' if step.lookup else ''}"
            f"{', in its FROM place' if step.barrier else ''}) needs {{{needs}}}: "
            f"{step.sql}"
        )
    return lines


def _routing_lines(plan: Plan) -> list[str]:
    """The routing table's entries for the signatures reachable from fresh singletons
    (STAIRs: every signature the STAIRs may hold), breadth first, at most
    ``MAX_SIGNATURES``."""
    table = RoutingTable(plan.graph, plan.destinations)
    seen: set[Signature] = set()
    queue = deque(table.start_signatures())
    if plan.join_state != "stems":  # STAIRs: every reachable signature, found at once
        queue = deque(stair_contents(plan, MAX_SIGNATURES)[0])
    lines = []
    while queue and len(seen) < MAX_SIGNATURES:
        sig = queue.popleft()
        if sig in seen:
            continue
        seen.add(sig)
        lines.append(_signature_line(plan, table, sig))
        queue.extend(s for s in _successors(plan, table, sig) if s not in seen)
    if queue:
        lines.append(f"  ... (more than {MAX_SIGNATURES} signatures)")
    return lines


def _signature_line(plan: Plan, table: RoutingTable, sig: Signature) -> str:
    """``span {...} done {...} -> destinations`` for one signature (alternatives of one
    choice in braces)."""
    graph = plan.graph
    entry = table.entry(sig)
    names = [
        "{" + " / ".join(plan.destinations[a].name for a in entry.alternatives[d]) + "}"
        if d in entry.alternatives
        else plan.destinations[d].name
        for d in entry.destinations
    ]
    span = ",".join(graph.alias_names(sig.span))
    done = ",".join(graph.predicate_names(sig.done)) or "-"
    built = "" if sig.built else " (unbuilt)"
    if sig.prior and not sig.floating:
        built += f" (prior prober of {','.join(graph.alias_names(sig.prior))})"
    if sig.looked:
        built += f" (looked up {','.join(graph.alias_names(sig.looked))})"
    if sig.floating:
        built = " (floating: never built)" + (
            f" (probes {','.join(graph.alias_names(sig.prior))} again)" if sig.prior else ""
        )
    dropped = (
        "(none: dropped — only its join step reads this SteM)"
        if graph.steps
        else "(none: dropped — the floating tuples make every result)"
    )
    target = " | ".join(names) or dropped
    return f"  span {{{span}}}{built} done {{{done}}} -> {target}"


def _above_step(fin: FinalizeSpec, step: str) -> str | None:
    """How explain words one of :meth:`FinalizeSpec.above_steps` (OFFSET: not shown)."""
    if step == "aggregate":
        return f"aggregate ({len(fin.group)} keys, {len(fin.aggregates)} aggregates)"
    if step == "limit":
        return f"LIMIT {fin.limit}" + (" (stops the eddy early)" if fin.streaming else "")
    return {"having": "HAVING", "distinct": "DISTINCT", "order": "ORDER BY"}.get(step)


def _stairs_section(plan: Plan) -> list[str]:
    """The STAIRs of a query (stairs-2004 §3.1): per join of the spanning tree, its two
    dual STAIRs and the signatures of the tuples each may hold."""
    graph = plan.graph
    lines = [
        f"STAIRs (join_state={plan.join_state!r}: symmetric hash joins of a spanning tree, "
        "two dual STAIRs each; "
        + (
            "state migrated when the greedy routing decisions change: misrouted base "
            "tuples promoted through their new join, tuples holding them demoted):"
            if plan.join_state == "stairs"
            else "no state migration):"
        )
    ]
    _, contents = stair_contents(plan, MAX_SIGNATURES)
    joins = [d for d in plan.destinations if d.kind is DestinationKind.JOIN]
    if not joins:
        lines.append("  none (one table: no joins)")
    for d in joins:
        p = graph.predicates[d.predicate]
        lines.append(f"  {d.name}  on {p.sql}  ({p.name})")
        for alias in (p.edge.left, p.edge.right):
            held = sorted(contents[(d.id, alias)], key=lambda s: (bin(s.span).count("1"), s.span))
            sigs = "; ".join(
                "{"
                + ",".join(graph.alias_names(s.span))
                + "}"
                + (" done {" + ",".join(graph.predicate_names(s.done)) + "}" if s.done else "")
                for s in held
            )
            cols = ", ".join(p.edge.side(alias))
            lines.append(
                f"    STAIR {graph.aliases[alias].name}.({cols}) holds: {sigs or 'nothing'}"
            )
    cycles = [
        p
        for p in graph.predicates
        if p.edge is not None and p.name not in {graph.predicates[d.predicate].name for d in joins}
    ]
    for p in cycles:
        lines.append(f"  {p.name} closes a cycle: an SM over composite tuples")
    return lines


def explain(
    sql: str,
    catalog: Catalog,
    stats: RunStats | None = None,
    join_state: str = "stems",
    **unexpected,
) -> str:
    """Describe how ``sql`` would run: AMs, SteMs, SMs, destinations, routing table.

    With ``stats`` (``run_query(...).stats`` of a run of the query), also what the run
    observed: seconds per tuple, selectivity and confidence per destination and per
    signature (eddies.router.estimates). Raises a subclass of EddiesError for a query
    that cannot run, and for any other keyword: the plan does not depend on run options
    (``policy``, ``batch_size``, ...), which apply to ``execute``/``run_query``, except
    ``join_state`` (SteMs or STAIRs, see :mod:`eddies.engine.plan.join_state`).
    """
    if unexpected:
        names = ", ".join(repr(k) for k in sorted(unexpected))
        raise EddiesError(
            f"explain() takes sql, catalog and stats; unexpected keyword {names} "
            "(run options such as policy or batch_size apply to execute/run_query, "
            "whose stats explain(..., stats=...) shows)"
        )
    if join_state not in JOIN_STATES:
        raise EddiesError(f"join_state must be one of {', '.join(JOIN_STATES)}, got {join_state!r}")
    text = explain_plan(with_join_state(plan_query(sql, catalog), join_state))
    if stats is not None:
        scans = stats.format_scans()
        if scans:
            text += "\n\n" + "\n".join(scans)
        text += "\n\n" + "\n".join(stats.format_estimates() or ["(no estimates recorded)"])
    return text
