"""STAIRs: join state that holds base *or intermediate* tuples (stairs-2004 §3).

A STAIR on relation R and attribute a (``R.a``) stores tuples that contain a base-table
component of R, and answers ``probe(R.a, val)`` with the stored tuples whose ``R.a``
equals ``val`` (§3.1). Each equi-join of the query's spanning tree gets two STAIRs, one
per side, *duals* of each other; routing a tuple "to the join R ⋈ S" means inserting it
into the STAIR of its own side and probing the dual with it, at once (the Dual Routing
Property of §3.1). Two STAIRs used so are a pipelined symmetric hash join: this is the
EddyJoins architecture of eddies-2000, the eddy choosing the join order tuple by tuple.

Unlike a SteM (:mod:`eddies.modules.stem`), a STAIR keeps intermediate tuples, so its
contents depend on the routing history — the "burden of history" of §2.3.

Layout: a STAIR keeps one *group* per stored signature (span, Done bits). A group holds
row ids per alias, the tuples' join-key codes and a :class:`SortedRunIndex` on them;
NULL keys are never stored (a tuple with a NULL join key joins nothing through this
edge, and — the join being inner — is in no result). Key codes come from one
:class:`EdgeCoder` per join, shared by both duals so that equal values get equal codes
(multi-column keys are mixed and then verified column by column).

The package, one file per concept:

* :mod:`~eddies.modules.stair.state` — :class:`Stair` and its signature groups;
* :mod:`~eddies.modules.stair.join` — :class:`StairJoin`, the two duals of one edge;
* :mod:`~eddies.modules.stair.greedy_plan` — the greedy plan of §4.1 and the join tree;
* :mod:`~eddies.modules.stair.cohort` — :class:`Cohort`, the unit of migration;
* :mod:`~eddies.modules.stair.migration` — :class:`StairMigrator`: the policy at points
  of stasis, promotion and demotion (§3.1.1, §3.2);
* :mod:`~eddies.modules.stair.migration_guard` — whether moving a cohort pays (§4.2);
* :mod:`~eddies.modules.stair.row_id_sets` — row-id membership for demotions and the guard.

The knobs (``eddies.settings.Tuning``: ``stair_check_every``, ``stair_greedy_routing``,
``stair_migration_cost``, ``stair_visit_cost``, ``stair_initial_plan_seed``,
``stair_look_again``, ``stair_coalesce_below``) are read where the migrator is created
or decides; the eddy's coalescing of small batches is set when a query is lowered.
"""

from eddies.modules.stair.cohort import Cohort
from eddies.modules.stair.greedy_plan import GreedyPlan, JoinTopology, initial_fanouts
from eddies.modules.stair.join import EdgeCoder, StairJoin
from eddies.modules.stair.migration import StairMigrator
from eddies.modules.stair.migration_guard import MigrationGuard
from eddies.modules.stair.state import SignatureGroup, Stair

__all__ = [
    "Cohort",
    "EdgeCoder",
    "GreedyPlan",
    "JoinTopology",
    "MigrationGuard",
    "SignatureGroup",
    "Stair",
    "StairJoin",
    "StairMigrator",
    "initial_fanouts",
]
