"""Statistics of one run: per-module counters and the eddy's routing choices over time.

The counters are what the policies learn from (eddies-2000 §4: tuples in, tuples out, time
busy); the routing log is what the papers plot (eddies-2000 Fig. 6 and Fig. 11: the share
of tuples routed to each module as the run goes). The log is kept in compact arrays, one
entry per routing decision (a batch or a sub-batch), so per-tuple runs stay cheap.
"""

from __future__ import annotations

import array
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from eddies.router.estimates import Estimates
from eddies.router.query_graph import QueryGraph
from eddies.router.routing_table import Destination
from eddies.router.udf_calls import UdfStats
from eddies.settings import current


@dataclass
class ModuleStats:
    """Counters of one destination (or scan AM). busy_seconds: wall time spent in process.

    For a scan AM over files: fragments (files) and Parquet row groups it read, and those
    its pushed-down filter skipped (partition pruning, row-group statistics); and the row
    groups a dynamic filter from a complete SteM's join keys skipped, and the rows it
    removed from the row groups read after it arrived (eddies.modules.scan_filter).
    """

    name: str
    kind: str
    tuples_in: int = 0
    tuples_out: int = 0
    batches_in: int = 0
    busy_seconds: float = 0.0
    fragments: int = 0
    fragments_skipped: int = 0
    row_groups: int = 0
    row_groups_skipped: int = 0
    dynamic_row_groups_skipped: int = 0
    dynamic_rows_filtered: int = 0


@dataclass
class LookupStats:
    """What one index AM asked its source: lookups started (attempts beyond the first of a
    lookup are retries), lookups skipped (a scan or a competing AM delivered the values),
    rows its answers held, and seconds spent in lookups (summed over concurrent ones)."""

    name: str
    lookups: int = 0
    retries: int = 0
    skipped: int = 0
    rows: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class RoutingEvent:
    """One routing decision: ``tuples`` tuples of one signature sent to ``destination``."""

    time_s: float
    span: tuple[str, ...]
    done: tuple[str, ...]
    destination: str
    tuples: int
    built: bool = True  # False for singletons not yet built into their SteM


@dataclass
class RunStats:
    """What one query run did; filled in by the eddy while it runs."""

    graph: QueryGraph
    destinations: list[Destination]
    modules: dict[str, ModuleStats] = field(default_factory=dict)
    elapsed_seconds: float = 0.0
    rows_out: int = 0
    failures: list[str] = field(default_factory=list)  # errors of AMs that failed
    lookups: dict[str, LookupStats] = field(default_factory=dict)  # per index AM
    # Per UDF the query called: calls, cache hits, retries, seconds (Plan.udf_stats).
    functions: dict[str, UdfStats] = field(default_factory=dict)
    # Per stream table, its eddies.modules.window.StreamClock (late and evicted rows).
    windows: dict[str, Any] = field(default_factory=dict)
    # Observed costs and selectivities (eddies.router.estimates.Estimates), set by the eddy.
    estimates: Estimates | None = None
    # Most tuples the eddy held at once in its priority buffer and waiting for full queues
    # (intermediate results between modules; see eddies.router.eddy, bounded backlog).
    peak_buffered_tuples: int = 0
    # Per table: singletons not stored in its SteM because no later tuple could need them
    # (the relaxed BuildFirst chosen at run time, see eddies.modules.stem.BuildLedger).
    build_skipped: dict[str, int] = field(default_factory=dict)
    # A streaming aggregate's state (eddies.engine.streaming.incremental.AggregateStats: live and
    # evicted groups, late rows, the watermark); None for other queries.
    streaming_aggregate: Any = None
    # STAIRs (stairs-2004 §3.1.1): state migrations (cohorts moved) done by the eddy;
    # stored intermediate tuples demoted (removed: they contained a cohort's tuples),
    # intermediate tuples promoted (made and stored by the cohort through its new join),
    # and tuples migrated: demoted + promoted + the cohorts' base tuples relocated (all 0
    # with SteMs or EddyJoins; see eddies.modules.stair.StairMigrator).
    stair_migrations: int = 0
    stair_promotions: int = 0
    stair_demotions: int = 0
    stair_migrated_tuples: int = 0
    # Small returned batches merged into another of their signature before being routed
    # on (one module visit saved each; eddies.router.eddy, ``coalesce_below``).
    coalesced_batches: int = 0
    # Routing decisions kept in the log; beyond it the oldest half is folded into totals
    # (eddies.settings.Tuning.route_log_max_records, in force where the stats are made).
    max_route_records: int = field(default_factory=lambda: current().route_log_max_records)
    _time: array.array = field(default_factory=lambda: array.array("d"))
    _span: array.array = field(default_factory=lambda: array.array("q"))
    _done: array.array = field(default_factory=lambda: array.array("q"))
    _dest: array.array = field(default_factory=lambda: array.array("q"))
    _tuples: array.array = field(default_factory=lambda: array.array("q"))
    _folded: dict[tuple[int, int, int], int] = field(default_factory=dict)
    _folded_decisions: int = 0

    def __post_init__(self) -> None:
        for d in self.destinations:
            self.modules[d.name] = ModuleStats(d.name, d.kind.value)

    def module(self, name: str, kind: str) -> ModuleStats:
        found = self.modules.get(name)
        if found is None:
            found = self.modules[name] = ModuleStats(name, kind)
        return found

    def record_route(
        self, t: float, span: int, done: int, destination: int, tuples: int, built: bool = True
    ) -> None:
        # Unbuilt singletons are logged with a negative span, to keep one compact array.
        span = span if built else -span
        self._time.append(t)
        self._span.append(span)
        self._done.append(done)
        self._dest.append(destination)
        self._tuples.append(tuples)
        if len(self._dest) > self.max_route_records:
            self._fold(len(self._dest) // 2)

    def _fold(self, n: int) -> None:
        """Fold the oldest ``n`` decisions into per-signature totals: a continuous query
        keeps a bounded log (the routing summary stays exact)."""
        spans, dones, dests, tuples = (
            self._span[:n],
            self._done[:n],
            self._dest[:n],
            self._tuples[:n],
        )
        for key, count in zip(zip(spans, dones, dests, strict=True), tuples, strict=True):
            self._folded[key] = self._folded.get(key, 0) + count
        self._folded_decisions += n
        for log in (self._time, self._span, self._done, self._dest, self._tuples):
            del log[:n]

    @property
    def decisions(self) -> int:
        """How many routing decisions the eddy made."""
        return len(self._dest) + self._folded_decisions

    @property
    def routing(self) -> list[RoutingEvent]:
        """The routing decisions in order (the latest ``max_route_records`` / 2 at least, in a
        long continuous query; older ones are only in :meth:`routing_summary`)."""
        g = self.graph
        names = [d.name for d in self.destinations]
        return [
            RoutingEvent(t, g.alias_names(abs(s)), g.predicate_names(d), names[dest], n, s > 0)
            for t, s, d, dest, n in zip(
                self._time, self._span, self._done, self._dest, self._tuples, strict=True
            )
        ]

    def routing_table(self) -> pa.Table:
        """The routing log as a table: time_s, span, built, done, destination, tuples."""
        g = self.graph
        names = [d.name for d in self.destinations]
        return pa.table(
            {
                "time_s": pa.array(self._time, pa.float64()),
                "span": [",".join(g.alias_names(abs(s))) for s in self._span],
                "built": pa.array([s > 0 for s in self._span], pa.bool_()),
                "done": [",".join(g.predicate_names(d)) for d in self._done],
                "destination": [names[d] for d in self._dest],
                "tuples": pa.array(self._tuples, pa.int64()),
            }
        )

    def routing_summary(self) -> dict[tuple[str, str], dict[str, int]]:
        """Tuples sent to each destination, per signature ``(span, done)``."""
        summary: dict[tuple[str, str], dict[str, int]] = {}
        g = self.graph
        names = [d.name for d in self.destinations]
        logged = zip(
            zip(self._span, self._done, self._dest, strict=True), self._tuples, strict=True
        )
        for (s, d, dest), n in [*self._folded.items(), *logged]:
            span = ",".join(g.alias_names(abs(s))) + ("" if s > 0 else " (unbuilt)")
            key = (span, ",".join(g.predicate_names(d)) or "-")
            per_dest = summary.setdefault(key, {})
            per_dest[names[dest]] = per_dest.get(names[dest], 0) + n
        return summary

    def format(self) -> str:
        """A plain-text report: module counters, then routing choices per signature."""
        lines = [f"elapsed {self.elapsed_seconds * 1000:.1f} ms, {self.rows_out} rows out", ""]
        w = max([24] + [len(m.name) + 2 for m in self.modules.values()])
        header = f"{'module':<{w}}{'kind':<8}{'in':>12}{'out':>12}{'batches':>10}{'busy ms':>10}"
        lines += [header, "-" * len(header)]
        for m in self.modules.values():
            lines.append(
                f"{m.name:<{w}}{m.kind:<8}{m.tuples_in:>12}{m.tuples_out:>12}"
                f"{m.batches_in:>10}{m.busy_seconds * 1000:>10.1f}"
            )
        if self.lookups:
            lines += ["", "index AMs: lookups started, retried, skipped; rows; lookup seconds"]
            for s in self.lookups.values():
                lines.append(
                    f"  {s.name}: {s.lookups} lookups, {s.retries} retries, {s.skipped} "
                    f"skipped, {s.rows} rows, {s.seconds:.2f} s"
                )
        if self.functions:
            lines += ["", "functions: calls, cache hits, retries; seconds in calls, waited for"]
            for f in self.functions.values():
                lines.append(
                    f"  {f.name}: {f.calls} calls, {f.cache_hits} cache hits, {f.retries} "
                    f"retries, {f.call_seconds:.3f} s in calls, {f.waited_seconds:.3f} s waited"
                )
        if any(d.kind.value == "join" for d in self.destinations):
            lines += [
                "",
                f"STAIR state migration: {self.stair_migrations} migrations, "
                f"{self.stair_promotions} promotions, "
                f"{self.stair_demotions} demotions, {self.stair_migrated_tuples} tuples moved; "
                f"{self.coalesced_batches} small batches merged",
            ]
        if self.streaming_aggregate is not None:
            lines += ["", str(self.streaming_aggregate)]
        if self.failures:
            lines += ["", "access methods that failed (the eddy failed over):"]
            lines += [f"  {error}" for error in self.failures]
        if self.estimates is not None and self.estimates.by_destination:
            lines += ["", *self.format_estimates()]
        lines += ["", "routing choices per signature (span | done -> destination: tuples)"]
        for (span, done), per_dest in sorted(self.routing_summary().items()):
            total = sum(per_dest.values())
            choices = ", ".join(
                f"{name}: {n} ({100 * n / total:.0f}%)"
                for name, n in sorted(per_dest.items(), key=lambda kv: -kv[1])
            )
            lines.append(f"  {span} | {done} -> {choices}")
        return "\n".join(lines)

    def describe_signature(self, sig) -> str:
        """``span {…} done {…}`` (and flags) of a Signature, in the query's names."""
        g = self.graph
        span = ",".join(g.alias_names(sig.span))
        done = ",".join(g.predicate_names(sig.done)) or "-"
        flags = "" if sig.built else " (unbuilt)"
        if sig.prior:
            flags += f" (prior of {','.join(g.alias_names(sig.prior))})"
        if sig.looked:
            flags += f" (looked up {','.join(g.alias_names(sig.looked))})"
        if sig.floating:
            flags += " (floating)"
        return f"span {{{span}}}{flags} done {{{done}}}"

    def format_scans(self) -> list[str]:
        """What each file scan AM read and skipped, as text lines (none without files):
        files and row groups, those its pushed-down filter skipped, and those the dynamic
        filter from a complete SteM's keys skipped, with the rows it removed."""
        lines = []
        for m in self.modules.values():
            if m.kind != "scan" or not (m.fragments or m.row_groups):
                continue
            lines.append(
                f"  {m.name}: {m.tuples_out} rows; {m.fragments} files read "
                f"({m.fragments_skipped} pruned); {m.row_groups} row groups, "
                f"{m.row_groups_skipped} skipped by the pushed filter, "
                f"{m.dynamic_row_groups_skipped} by the dynamic filter "
                f"(which removed {m.dynamic_rows_filtered} rows of the others)"
            )
        return ["file scans:", *lines] if lines else []

    def format_estimates(self) -> list[str]:
        """The observed costs and selectivities (eddies.router.estimates), as text lines:
        per destination over the whole run, then per signature; decayed, so they describe
        the end of the run. ± columns are standard errors; weight is decayed tuples."""
        if self.estimates is None:
            return []
        names = [d.name for d in self.destinations]
        return [
            f"observed estimates (half-life {self.estimates.half_life:.0f} tuples):",
            *self.estimates.format_rows(names, self.describe_signature),
        ]
