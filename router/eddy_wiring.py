"""What an eddy is built from (eddies-2000 §3), fixed when a query is lowered.

:class:`Source` is a scan AM as the eddy sees it; :class:`EddyWiring` the static wiring
(the routing table, one queue per destination, the sources, the modules visited inline);
:class:`EddyHooks` what the eddy calls in the rest of the query (the constraint checker,
commit points, SteM filters, STAIR migration); :class:`DestinationRoles` what the eddy
derives once from the routing table (which destinations build, look up, drop, or are
JoinSteps). :class:`eddies.router.eddy.Eddy` takes the first two and derives the last.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from eddies.router.constraints import ConstraintChecker
from eddies.router.messages import Returned, Work
from eddies.router.query_graph import AccessKind
from eddies.router.routing_table import DestinationKind, FilterOffer, RoutingTable


@dataclass
class Source:
    """A scan AM as the eddy sees it: its admission semaphore and its rank.

    ``rank``: among source batches that are ready, the eddy routes those of the lowest rank
    first. The planner ranks tables with fewer rows, then fewer join edges, first, so the
    largest table's tuples (and among equals a hub's) arrive after the others' SteMs are
    built and probe them, rather than every other tuple probing their SteM — the
    build-side choice of a hash join (stems-2003 §3.1, simulating non-pipelined joins).
    It is a preference among ready batches, never a wait: a slow source does not hold
    back the others.
    """

    name: str
    admission: trio.Semaphore
    rank: tuple = ()
    table: str = ""
    access: int = -1
    cancel_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    closed: bool = False
    # Batches the scan AM has appended to its store but the eddy has not accepted yet
    # (a send to a waiting receiver is in no buffer until the eddy runs): see idle().
    undelivered: int = 0


@dataclass(frozen=True)
class EddyWiring:
    """The static wiring of one eddy (eddies-2000 §3: the eddy and the operators it routes
    among, each behind a fixed-length queue).

    routing_table: which destinations a signature may go to. queues: ``queues[d]`` is
    destination d's bounded input channel (destinations of one module share it). sources:
    the scan AMs as the eddy sees them, ``sources[i]`` that of the scan that sends as i.
    inline: destination id -> the call that visits its module directly, for modules that
    never wait (the PostgreSQL eddy's function-call visits). scanned: table -> an event the
    eddy sets when a scan of it has delivered every row. stems: table -> its SteM (to fall
    back from a failed scan). coalesce_below: returned batches of fewer tuples are merged
    with the others of their signature in the priority buffer (0: never; only where the
    order of buffered tuples does not matter, as in STAIRs' symmetric hash joins).
    """

    routing_table: RoutingTable
    queues: Sequence[trio.MemorySendChannel]
    sources: Sequence[Source]
    inline: Mapping[int, Callable[[Work], Returned]] = field(default_factory=dict)
    scanned: Mapping[str, trio.Event] = field(default_factory=dict)
    stems: Mapping[str, Any] = field(default_factory=dict)
    coalesce_below: int = 0


@dataclass(frozen=True)
class EddyHooks:
    """What the eddy calls in the rest of the query; each optional.

    checker: checks every route and answer against the routing constraints (debug).
    on_idle: called whenever the eddy may have become idle, and when it ends (a continuous
    query's commit points, eddies.engine.streaming.commit_points). filters: SteM filter
    destination -> a call answering None while its SteM is incomplete, then a
    :class:`~eddies.router.routing_table.FilterOffer`. stasis: called at points of stasis
    (stairs-2004 App. A) with the source tuples admitted so far, where STAIR state may
    migrate (eddies.modules.stair.StairMigrator).
    """

    checker: ConstraintChecker | None = None
    on_idle: Callable[[], None] | None = None
    filters: Mapping[int, Callable[[], FilterOffer | None]] = field(default_factory=dict)
    stasis: Callable[[int], None] | None = None


@dataclass(frozen=True)
class DestinationRoles:
    """What the eddy needs to know of its destinations, derived once from the routing table.

    names: destination names, by id. builds: SteM build destination -> its table.
    lookups: index AM lookup destinations. index_access: access ids of index AMs (a build's
    tuples from one came from no scan). drops: SMs and SteM filters (their drops of unbuilt
    singletons may complete a SteM). step_tables: JoinStep destination over an index-only
    table -> that table (a step's bounced tuples wait for its next build). gate_tables:
    tables of JoinSteps over scanned tables (a step probes only a complete SteM).
    flushes: RIGHT / FULL JoinSteps as (destination, needs), in step order: flushed one by
    one once the query is otherwise finished.
    """

    names: tuple[str, ...]
    builds: Mapping[int, str]
    lookups: frozenset[int]
    index_access: frozenset[int]
    drops: frozenset[int]
    step_tables: Mapping[int, str]
    gate_tables: frozenset[str]
    flushes: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, routing_table: RoutingTable) -> DestinationRoles:
        """The roles of ``routing_table``'s destinations."""
        destinations = routing_table.destinations
        graph = routing_table.graph
        step_dest = {d.target_alias: d.id for d in destinations if d.kind is DestinationKind.STEP}
        return cls(
            names=tuple(d.name for d in destinations),
            builds={d.id: d.table for d in destinations if d.kind is DestinationKind.BUILD},
            lookups=frozenset(d.id for d in destinations if d.kind is DestinationKind.LOOKUP),
            index_access=frozenset(am.id for am in graph.access if am.kind is AccessKind.INDEX),
            drops=frozenset(
                d.id for d in destinations if d.kind in (DestinationKind.SM, DestinationKind.FILTER)
            ),
            step_tables={
                step_dest[s.alias]: graph.aliases[s.alias].table for s in graph.steps if s.lookup
            },
            gate_tables=frozenset(
                graph.aliases[s.alias].table for s in graph.steps if not s.lookup
            ),
            flushes=tuple((step_dest[s.alias], s.needs) for s in graph.steps if s.barrier),
        )
