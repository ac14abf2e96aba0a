"""How a run is shown: the one report of a :class:`~eddies.router.stats.RunStats`.

``RunStats.format()``, ``eddies query --stats`` and ``eddies demo`` all print the sections
built here, so a run reads the same wherever it is shown:

* **modules** — per module (eddies-2000 §2: scan AMs, SMs; stems-2003: SteM builds and
  probes, index AMs, SteM filters; stairs-2004: STAIR joins) what it does in words (an SM
  its predicate, a SteM its table and key), tuples in and out, out/in, batches and busy
  time: the counters the policies learn from (eddies-2000 §4); then why idle modules saw
  nothing;
* file scans, index AMs, functions, STAIR state migration, a streaming aggregate and the
  AMs that failed, when the run had any;
* **observed estimates** — cost and selectivity per destination and per signature, as the
  learning policies see them (eddies-in-postgresql §3), decayed;
* **routing choices per signature** — for each signature (span and Done bits, eddies-2000
  §3), how many tuples went to each destination (the shares of eddies-2000 Fig. 6): each
  tuple counted once, a SteM filter's pass being a Done bit of its own and a prober
  bounced back by a SteM a signature of its own (only the floating tuples of relaxed
  BuildFirst, stems-2003 §3.5, may probe again with one signature).

Every column holds a value measured in the run: a column whose every cell would be
unknown (a cost with one observation has no standard error) is left out, and durations
are in ms (per-tuple costs in µs).

Why a router module: :mod:`eddies.router.stats` cannot import the engine (layers import
downward), and the command line (``engine/cli``) can import the router; so the renderer
lives next to the statistics it reads, and both call it. It returns plain text
(:class:`Section`: a title, aligned lines, notes); :func:`format_report` joins the
sections, and the command line prints the same lines through rich with its own framing
(bold titles, dim notes, a glossary) — the characters are the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eddies.router.query_graph import QueryGraph
from eddies.router.routing_table import Destination, DestinationKind

if TYPE_CHECKING:
    from eddies.router.estimates import Estimate
    from eddies.router.stats import ModuleStats, RunStats

__all__ = [
    "MAX_SIGNATURES",
    "MISSING",
    "Column",
    "Section",
    "aligned",
    "describe_module",
    "duration",
    "estimate_section",
    "format_report",
    "report_sections",
    "scan_section",
]

#: A cell with no measured value (a column of only these is left out).
MISSING = "–"
#: Signatures listed in the routing choices and the estimates; the rest are counted.
MAX_SIGNATURES = 40


@dataclass(frozen=True)
class Column:
    """A column of an aligned table: its header; numbers are right-aligned."""

    header: str
    numeric: bool = False


def table_columns(*labels: str, text: int = 1) -> tuple[Column, ...]:
    """Columns headed ``labels``: the first ``text`` hold words, the rest numbers."""
    return tuple(Column(label, numeric=i >= text) for i, label in enumerate(labels))


@dataclass(frozen=True)
class Section:
    """One part of the report: a title (``""`` for the summary line), its lines (an
    aligned table or text) and notes under them (why a module was idle, a legend)."""

    title: str
    lines: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def text(self) -> str:
        """The section as plain text: title, lines, notes, one per line."""
        return "\n".join([self.title] * bool(self.title) + [*self.lines, *self.notes])


def aligned(columns: Sequence[Column], rows: Iterable[Sequence[str] | str]) -> list[str]:
    """``rows`` as text lines under a header and a rule, columns padded to one width.

    A row is a sequence of cells (one per column) or a string, printed as it is where it
    stands (a heading inside the table). A column whose every cell is :data:`MISSING` is
    left out; trailing spaces are stripped.
    """
    rows = list(rows)
    cells = [row for row in rows if not isinstance(row, str)]
    keep = [i for i in range(len(columns)) if not cells or any(r[i] != MISSING for r in cells)]
    widths = {i: max([len(columns[i].header), *(len(r[i]) for r in cells)]) for i in keep}

    def line(values: Sequence[str]) -> str:
        parts = [
            values[i].rjust(widths[i]) if columns[i].numeric else values[i].ljust(widths[i])
            for i in keep
        ]
        return "  ".join(parts).rstrip()

    header = line([c.header for c in columns])
    out = [header, "-" * len(header)]
    out += [row if isinstance(row, str) else line(row) for row in rows]
    return out


def duration(seconds: float) -> str:
    """``"60.1 ms"`` below a second, ``"2.50 s"`` from one on (elapsed time, once)."""
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f}"


def _counts(*values: int) -> tuple[str, ...]:
    return tuple(f"{v:,}" for v in values)


# --------------------------------------------------------------------------------------
# modules: what each does, in words


def _aliased(graph: QueryGraph, alias: int) -> str:
    """``"p (planes)"``, or ``"r"`` when the alias is its table's name."""
    a = graph.aliases[alias]
    return a.name if a.table == a.name else f"{a.name} ({a.table})"


def _keys(graph: QueryGraph, aliases: set[int]) -> str:
    """The join keys the SteM of ``aliases`` is probed on: ``"id"``, ``"(a, b); c"``."""
    keys: dict[str, None] = {}
    for p in graph.predicates:
        for alias in (p.edge.left, p.edge.right) if p.edge is not None else ():
            if alias in aliases:
                cols = p.edge.side(alias)
                keys[cols[0] if len(cols) == 1 else f"({', '.join(cols)})"] = None
    return "; ".join(keys)


def _build(d: Destination, graph: QueryGraph) -> str:
    keys = _keys(graph, set(graph.aliases_of(d.table or "")))
    return f"add {d.table} rows to its SteM" + (f", keyed on {keys}" if keys else "")


def _probe(d: Destination, graph: QueryGraph) -> str:
    assert d.target_alias is not None
    keys = _keys(graph, {d.target_alias})
    what = f"join with {_aliased(graph, d.target_alias)}: probe its SteM"
    return what + (f" on {keys}" if keys else "")


def _lookup(d: Destination, graph: QueryGraph) -> str:
    assert d.access is not None and d.target_alias is not None
    am = graph.access[d.access]
    what = f"index AM {am.name}: look up matching {_aliased(graph, d.target_alias)} rows"
    return what + (f" by {', '.join(am.on)}" if am.on else "")


def _sm(d: Destination, graph: QueryGraph) -> str:
    assert d.predicate is not None
    p = graph.predicates[d.predicate]
    return str(p.sql) + ("  (a join)" if p.edge is not None else "")


def _filter(d: Destination, graph: QueryGraph) -> str:
    assert d.predicate is not None and d.target_alias is not None
    edge = graph.predicates[d.predicate].edge
    assert edge is not None
    cols = edge.side(edge.other(d.target_alias))
    key = cols[0] if len(cols) == 1 else f"({', '.join(cols)})"
    return (
        f"SteM filter: keep tuples whose {key} the SteM of {_aliased(graph, d.target_alias)} holds"
    )


#: How a JoinStep's kind reads (outer joins, subqueries; see QueryGraph.steps).
_STEP_KINDS = {"semi": "semi-join", "anti": "anti-join", "notin": "NOT IN anti-join"}


def _step(d: Destination, graph: QueryGraph) -> str:
    assert d.target_alias is not None
    step = graph.step_of(d.target_alias)
    if step is None:
        return ""
    kind = _STEP_KINDS.get(step.kind, f"{step.kind.upper()} join")
    return f"{kind} with {_aliased(graph, d.target_alias)}, its SteM complete: {step.sql}"


def _join(d: Destination, graph: QueryGraph) -> str:
    assert d.predicate is not None
    p = graph.predicates[d.predicate]
    return f"STAIR join: insert into one side's STAIR, probe the other's, on {p.sql}"


_DESCRIBE: dict[DestinationKind, Callable[[Destination, QueryGraph], str]] = {
    DestinationKind.BUILD: _build,
    DestinationKind.PROBE: _probe,
    DestinationKind.LOOKUP: _lookup,
    DestinationKind.SM: _sm,
    DestinationKind.OUTPUT: lambda d, graph: "hand finished tuples to the result",
    DestinationKind.FILTER: _filter,
    DestinationKind.STEP: _step,
    DestinationKind.JOIN: _join,
}


def describe_module(name: str, graph: QueryGraph, destinations: Sequence[Destination]) -> str:
    """What the module ``name`` (a destination or a scan AM of ``RunStats.modules``) does,
    in words: ``"w.wind_speed > 25"`` for ``sm1``, ``"join with p (planes): probe its
    SteM on tailnum"`` for ``probe:p``, ``"add planes rows to its SteM, keyed on
    tailnum"`` for ``build:planes``. Names follow :class:`Destination`; unknown names
    give ``""``."""
    kind, _, rest = name.partition(":")
    if kind == "scan":
        return f"scan AM: read {rest}"
    for d in destinations:
        if d.name == name:
            return _DESCRIBE[d.kind](d, graph)
    return ""


def _module_row(m: ModuleStats, what: str) -> tuple[str, ...]:
    scan, output = m.kind == "scan", m.kind == "output"  # AMs take no tuples in
    ratio = f"{m.tuples_out / m.tuples_in:.3f}" if m.tuples_in and not output else MISSING
    return (
        m.name,
        what,
        MISSING if scan else f"{m.tuples_in:,}",
        MISSING if output else f"{m.tuples_out:,}",
        ratio,
        f"{m.batches_in:,}",
        _ms(m.busy_seconds),
    )


_MODULE_COLUMNS = table_columns(
    "module", "what it does", "tuples in", "tuples out", "out/in", "batches", "busy ms", text=2
)


def module_section(stats: RunStats) -> Section:
    """Per module (scan AMs first, then the destinations): what it does and its
    counters; notes say why idle modules saw no tuples."""
    ordered = sorted(stats.modules.values(), key=lambda m: m.kind != "scan")
    rows = [
        _module_row(m, describe_module(m.name, stats.graph, stats.destinations)) for m in ordered
    ]
    return Section("modules", tuple(aligned(_MODULE_COLUMNS, rows)), tuple(idle_notes(stats)))


def idle_notes(stats: RunStats) -> list[str]:
    """Why modules that saw (or gave) no tuples saw none: one line per reason."""
    joins = {str(p.name) for p in stats.graph.predicates if p.edge is not None}
    mods = stats.modules.values()
    idle = [m.name for m in mods if m.kind == "sm" and not m.tuples_in]
    notes = []
    idle_joins = [name for name in idle if name in joins]
    if idle_joins:
        stairs = any(d.kind is DestinationKind.JOIN for d in stats.destinations)
        notes.append(
            f"{', '.join(idle_joins)}: 0 tuples because "
            + ("the STAIR joins" if stairs else "SteM probes")
            + " apply these joins; the SM checks a join only for a tuple that already spans "
            "both sides (a cycle)"
        )
    others = [name for name in idle if name not in joins]
    if others:
        notes.append(
            f"{', '.join(others)}: 0 tuples because no tuple reached them (other modules "
            "dropped every candidate first, or a LIMIT ended the query)"
        )
    filters = [m.name for m in mods if m.kind == "filter" and not m.tuples_in]
    if filters:
        notes.append(
            f"{', '.join(filters)}: 0 tuples because a SteM filter is offered only once its "
            "SteM holds every qualifying row of its table, and only where it pays"
        )
    empty_probes = [m.name for m in mods if m.kind == "probe" and m.tuples_in and not m.tuples_out]
    if empty_probes:
        notes.append(
            f"{', '.join(empty_probes)}: 0 out because a probe finds only rows built before "
            "the probing tuple (the SteM TimeStamp rule: each result is made once); rows "
            "built later find that tuple from their side"
        )
    return notes


# --------------------------------------------------------------------------------------
# what the access methods, functions and STAIRs did


def scan_section(stats: RunStats) -> Section | None:
    """What each file scan AM read and skipped (None without files): files and row
    groups, those its pushed-down filter skipped, and those the dynamic filter from a
    complete SteM's keys skipped, with the rows it removed."""
    scans = [
        m for m in stats.modules.values() if m.kind == "scan" and (m.fragments or m.row_groups)
    ]
    if not scans:
        return None
    lines = tuple(
        f"  {m.name}: {m.tuples_out} rows; {m.fragments} files read "
        f"({m.fragments_skipped} pruned); {m.row_groups} row groups, "
        f"{m.row_groups_skipped} skipped by the pushed filter, "
        f"{m.dynamic_row_groups_skipped} by the dynamic filter "
        f"(which removed {m.dynamic_rows_filtered} rows of the others)"
        for m in scans
    )
    return Section("file scans:", lines)


def _lookup_section(stats: RunStats) -> Section | None:
    if not stats.lookups:
        return None
    heads = table_columns("index AM", "lookups", "retries", "skipped", "rows", "lookup ms")
    rows = [
        (s.name, *_counts(s.lookups, s.retries, s.skipped, s.rows), _ms(s.seconds))
        for s in stats.lookups.values()
    ]
    note = (
        "lookups: started (attempts beyond the first are retries); skipped: a scan or a "
        "competing AM delivered the values; lookup ms summed over concurrent lookups"
    )
    return Section("index AMs", tuple(aligned(heads, rows)), (note,))


def _function_section(stats: RunStats) -> Section | None:
    if not stats.functions:
        return None
    heads = table_columns("function", "calls", "cache hits", "retries", "ms in calls", "ms waited")
    rows = [
        (
            f.name,
            *_counts(f.calls, f.cache_hits, f.retries),
            _ms(f.call_seconds),
            _ms(f.waited_seconds),
        )
        for f in stats.functions.values()
    ]
    return Section("functions", tuple(aligned(heads, rows)))


def _stair_section(stats: RunStats) -> Section | None:
    if not any(d.kind is DestinationKind.JOIN for d in stats.destinations):
        return None
    line = (
        f"STAIR state migration: {stats.stair_migrations} migrations, "
        f"{stats.stair_promotions} promotions, {stats.stair_demotions} demotions, "
        f"{stats.stair_migrated_tuples} tuples moved; "
        f"{stats.coalesced_batches} small batches merged"
    )
    return Section("", (line,))


def _failure_section(stats: RunStats) -> Section | None:
    if not stats.failures:
        return None
    lines = tuple(f"  {error}" for error in stats.failures)
    return Section("access methods that failed (the eddy failed over):", lines)


# --------------------------------------------------------------------------------------
# observed estimates and routing choices


def _stderr(x: float, scale: float = 1.0) -> str:
    return f"{x * scale:.2g}" if math.isfinite(x) else MISSING


def _estimate_row(label: str, e: Estimate) -> tuple[str, ...]:
    return (
        label,
        f"{e.cost * 1e6:.3g}",
        _stderr(e.cost_stderr, 1e6),
        f"{e.selectivity:.3g}",
        _stderr(e.selectivity_stderr),
        f"{e.latency_per_work * 1e3:.2f}",
        f"{e.tuples:.0f}",
        f"{e.drifts}",
    )


_ESTIMATE_COLUMNS = table_columns(
    "destination", "µs/tuple", "±", "selectivity", "±", "ms/work", "weight", "drifts"
)


def estimate_section(stats: RunStats) -> Section | None:
    """The observed costs and selectivities (eddies.router.estimates): per destination
    over the whole run, then per signature; decayed, so they describe the end of the run.
    ± columns are standard errors; weight is decayed tuples. None without estimates."""
    est = stats.estimates
    if est is None or not est.by_destination:
        return None
    names = [d.name for d in stats.destinations]
    rows: list[Sequence[str] | str] = [
        _estimate_row(names[d], e) for d, e in sorted(est.by_destination.items())
    ]
    signatures = list(est.by_signature.items())
    for sig, arms in signatures[:MAX_SIGNATURES]:
        rows.append(f"at {stats.describe_signature(sig)}:")
        for d in sorted(arms):
            e = est.get(sig, d)
            if e is not None:
                rows.append(_estimate_row("  " + names[d], e))
    notes = [f"… {len(signatures) - MAX_SIGNATURES} more signatures"] * (
        len(signatures) > MAX_SIGNATURES
    )
    title = f"observed estimates (half-life {est.half_life:.0f} tuples):"
    return Section(title, tuple(aligned(_ESTIMATE_COLUMNS, rows)), tuple(notes))


def _signature_order(key: tuple[str, str]) -> tuple[int, str, int, int, str]:
    """Fewer aliases first; one span's signatures together — unbuilt, built, bounced back
    — with fewer Done bits first: the order a tuple goes through them."""
    span, done = key
    aliases, _, flags = span.partition(" (")
    stage = 0 if flags.startswith("unbuilt") else 2 if flags else 1
    bits = 0 if done == "-" else done.count(",") + 1
    return aliases.count(","), aliases, stage, bits, done


def _shares(per_dest: dict[str, int]) -> str:
    total = sum(per_dest.values())
    ranked = sorted(per_dest.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{dest} {n:,} ({n / total:.0%})" for dest, n in ranked)


#: The flags a span in the routing choices may carry: (text it starts with, what it means)
#: (stems-2003 §3.2, §3.4, §3.5).
_SPAN_FLAGS = (
    ("(unbuilt", "(unbuilt): singletons not yet built into their table's SteM"),
    ("(prior of", "(prior of b): probers the SteM of b bounced back, for b's index AM"),
    ("(looked up", "(looked up b): tuples that looked b up in its index AM directly"),
    ("(floating", "(floating): tuples of a table never built, counted at each probe"),
)


def _legend(spans: set[str]) -> str:
    """The routing choices' legend: span, done, and the flags that appear in ``spans``."""
    flags = [text for flag, text in _SPAN_FLAGS if any(flag in span for span in spans)]
    return (
        "span: the aliases a tuple covers; done: the predicates and SteM filters it has "
        "passed (its Done bits); "
        + "".join(f"{text}; " for text in flags)
        + "each tuple is counted once per signature."
    )


def routing_section(stats: RunStats) -> Section:
    """Per signature (fewest aliases first): its tuples and how many went to each
    destination; each tuple is counted once (RunStats.routing_summary)."""
    ranked = sorted(stats.routing_summary().items(), key=lambda kv: _signature_order(kv[0]))
    heads = (Column("span"), Column("done"), Column("tuples", True), Column("sent to"))
    rows = [
        (
            f"{{{span}}}",
            "{}" if done == "-" else f"{{{done}}}",
            f"{sum(per.values()):,}",
            _shares(per),
        )
        for (span, done), per in ranked[:MAX_SIGNATURES]
    ]
    notes = [f"… {len(ranked) - MAX_SIGNATURES} more signatures"] * (len(ranked) > MAX_SIGNATURES)
    notes.append(_legend({span for (span, _), _ in ranked}))
    title = f"routing choices per signature ({stats.decisions:,} decisions)"
    return Section(title, tuple(aligned(heads, rows)), tuple(notes))


# --------------------------------------------------------------------------------------
# the report


def report_sections(stats: RunStats, *, summary: bool = True) -> list[Section]:
    """The report's sections, in order; ``summary=False`` leaves out the first line
    (rows out and elapsed time), for a caller that has already said both."""
    first = Section("", (f"{stats.rows_out:,} rows out in {duration(stats.elapsed_seconds)}",))
    aggregate = stats.streaming_aggregate
    optional = [
        scan_section(stats),
        _lookup_section(stats),
        _function_section(stats),
        _stair_section(stats),
        None if aggregate is None else Section("", tuple(str(aggregate).splitlines())),
        _failure_section(stats),
        estimate_section(stats),
    ]
    sections = [first] if summary else []
    sections.append(module_section(stats))
    sections += [s for s in optional if s is not None]
    sections.append(routing_section(stats))
    return sections


def format_report(stats: RunStats, *, summary: bool = True) -> str:
    """The report as plain text, sections separated by a blank line."""
    return "\n\n".join(s.text() for s in report_sections(stats, summary=summary))
