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
from eddies.router.stats_report import estimate_section, format_report, scan_section
from eddies.router.udf_calls import UdfStats
from eddies.settings import current

#: Masks (spans, Done bits) from this one up do not fit a signed 64-bit log entry with room
#: for the unbuilt sign: they are logged as ``_WIDE + i``, ``i`` their index in
#: ``RunStats._wide`` (a query with more than 62 predicates and filters, or aliases). Below
#: it a mask is logged as itself, so the common case costs one comparison.
_WIDE = 1 << 62


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
    # Per decision, the id of its signature's (prior, looked, floating) in _bounces
    # (0: none of them), so that a bounced tuple is a signature of its own in the summary.
    _bounce: array.array = field(default_factory=lambda: array.array("q"))
    _bounces: dict[tuple[int, int, bool], int] = field(default_factory=lambda: {(0, 0, False): 0})
    _folded: dict[tuple[int, int, int, int], int] = field(default_factory=dict)
    # Masks of _WIDE and above, interned: the log holds _WIDE + their index here.
    _wide: list[int] = field(default_factory=list)
    _wide_ids: dict[int, int] = field(default_factory=dict)
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
        self,
        t: float,
        span: int,
        done: int,
        destination: int,
        tuples: int,
        built: bool = True,
        *,
        prior: int = 0,
        looked: int = 0,
        floating: bool = False,
    ) -> None:
        """Log one routing decision: ``tuples`` tuples of the signature (``span``, ``done``,
        ``built``, ``prior``, ``looked``, ``floating``; eddies.router.tuple_batch.Signature)
        sent to destination id ``destination`` at ``t`` seconds into the run."""
        if span >= _WIDE:
            span = self._wide_code(span)
        if done >= _WIDE:
            done = self._wide_code(done)
        # Unbuilt singletons are logged with a negative span, to keep one compact array.
        span = span if built else -span
        self._time.append(t)
        self._span.append(span)
        self._done.append(done)
        self._dest.append(destination)
        self._tuples.append(tuples)
        bounce = 0
        if prior or looked or floating:
            bounce = self._bounces.setdefault((prior, looked, floating), len(self._bounces))
        self._bounce.append(bounce)
        if len(self._dest) > self.max_route_records:
            self._fold(len(self._dest) // 2)

    def _wide_code(self, mask: int) -> int:
        """The log entry of a mask of ``_WIDE`` or more: ``_WIDE`` + its interned index."""
        found = self._wide_ids.get(mask)
        if found is None:
            found = self._wide_ids[mask] = len(self._wide)
            self._wide.append(mask)
        return _WIDE + found

    def _mask(self, code: int) -> int:
        """The mask a log entry stands for (of a span: its absolute value)."""
        code = abs(code)
        return code if code < _WIDE else self._wide[code - _WIDE]

    def _fold(self, n: int) -> None:
        """Fold the oldest ``n`` decisions into per-signature totals: a continuous query
        keeps a bounded log (the routing summary stays exact)."""
        keys = zip(self._span[:n], self._done[:n], self._dest[:n], self._bounce[:n], strict=True)
        for key, count in zip(keys, self._tuples[:n], strict=True):
            self._folded[key] = self._folded.get(key, 0) + count
        self._folded_decisions += n
        for log in (self._time, self._span, self._done, self._dest, self._tuples, self._bounce):
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
            RoutingEvent(
                t,
                g.alias_names(self._mask(s)),
                g.predicate_names(self._mask(d)),
                names[dest],
                n,
                s > 0,
            )
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
                "span": [",".join(g.alias_names(self._mask(s))) for s in self._span],
                "built": pa.array([s > 0 for s in self._span], pa.bool_()),
                "done": [",".join(g.predicate_names(self._mask(d))) for d in self._done],
                "destination": [names[d] for d in self._dest],
                "tuples": pa.array(self._tuples, pa.int64()),
            }
        )

    def done_names(self, mask: int) -> tuple[str, ...]:
        """The predicates and SteM filters whose Done bits ``mask`` sets, in the query's
        names (a filter's bit sits above the predicates', eddies.router.routing_table)."""
        filters = tuple(d.name for d in self.destinations if d.bit and mask & d.bit)
        return self.graph.predicate_names(mask) + filters

    def routing_summary(self) -> dict[tuple[str, str], dict[str, int]]:
        """Tuples sent to each destination, per signature ``(span, done)``: ``span`` the
        aliases, then ``" (unbuilt)"`` for singletons not yet built and the flags of
        tuples bounced back (``" (prior of p)"``, ``" (looked up p)"``, ``" (floating)"``);
        ``done`` the predicates and SteM filters passed (:meth:`done_names`), ``"-"`` for
        none. A tuple is counted once per signature: a filter's pass sets its own Done
        bit, and a prober bounced back by a SteM is a signature of its own (only floating
        tuples, stems-2003 §3.5, may probe again with one signature)."""
        totals: dict[tuple[int, int, int, int], int] = dict(self._folded)
        keys = zip(self._span, self._done, self._dest, self._bounce, strict=True)
        for key, n in zip(keys, self._tuples, strict=True):
            totals[key] = totals.get(key, 0) + n
        bounces = {i: self._bounce_flags(*key) for key, i in self._bounces.items()}
        summary: dict[tuple[str, str], dict[str, int]] = {}
        g = self.graph
        names = [d.name for d in self.destinations]
        for (s, d, dest, bounce), n in totals.items():
            span = ",".join(g.alias_names(self._mask(s))) + ("" if s > 0 else " (unbuilt)")
            key = (span + bounces[bounce], ",".join(self.done_names(self._mask(d))) or "-")
            per_dest = summary.setdefault(key, {})
            per_dest[names[dest]] = per_dest.get(names[dest], 0) + n
        return summary

    def format(self, *, summary: bool = True) -> str:
        """The run's report as plain text (eddies.router.stats_report, the one renderer
        ``eddies query --stats`` and ``eddies demo`` print too): rows out and elapsed time
        (not with ``summary=False``), module counters, file scans, index AMs, functions,
        STAIR migrations, failures, observed estimates, routing choices per signature."""
        return format_report(self, summary=summary)

    def describe_signature(self, sig) -> str:
        """``span {…} done {…}`` (and flags) of a Signature, in the query's names."""
        g = self.graph
        span = ",".join(g.alias_names(sig.span))
        done = ",".join(self.done_names(sig.done)) or "-"
        flags = "" if sig.built else " (unbuilt)"
        flags += self._bounce_flags(sig.prior, sig.looked, sig.floating)
        return f"span {{{span}}}{flags} done {{{done}}}"

    def _bounce_flags(self, prior: int, looked: int, floating: bool) -> str:
        """``" (prior of p) (looked up a) (floating)"``, each part only when set."""
        g = self.graph
        flags = f" (prior of {','.join(g.alias_names(prior))})" if prior else ""
        if looked:
            flags += f" (looked up {','.join(g.alias_names(looked))})"
        return flags + (" (floating)" if floating else "")

    def format_scans(self) -> list[str]:
        """What each file scan AM read and skipped, as text lines (none without files):
        files and row groups, those its pushed-down filter skipped, and those the dynamic
        filter from a complete SteM's keys skipped, with the rows it removed
        (eddies.router.stats_report.scan_section)."""
        section = scan_section(self)
        return [] if section is None else section.text().splitlines()

    def format_estimates(self) -> list[str]:
        """The observed costs and selectivities (eddies.router.estimates), as text lines:
        per destination over the whole run, then per signature; decayed, so they describe
        the end of the run. ± columns are standard errors; weight is decayed tuples
        (eddies.router.stats_report.estimate_section)."""
        section = estimate_section(self)
        return [] if section is None else section.text().splitlines()
