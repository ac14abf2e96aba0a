"""The names a query run chooses among: its routing policy and its join state.

A leaf module (it imports nothing): the ``eddies`` command line lists these choices in its
``--help`` without importing the policies (:mod:`eddies.router.policies`, which pull in
numpy and the routing table) or the planner. The policies themselves live in
:mod:`eddies.router.policies` (eddies-2000 §4; rank, bandit and hybrid in
:mod:`eddies.router.policies.learning`); the join
states in :mod:`eddies.engine.plan.join_state` (stems-2003 SteMs, stairs-2004 STAIRs).
"""

from __future__ import annotations

__all__ = ["DEFAULT_POLICY", "JOIN_STATES", "POLICIES"]

#: Routing policies by name (see eddies.router.policies.make_policy).
POLICIES = (
    "static",
    "random",
    "naive",
    "lottery",
    "lottery-window",
    "rank",
    "bandit",
    "hybrid",
)
#: The policy of a query that names none (see eddies.router.policies.learning.HybridPolicy).
DEFAULT_POLICY = "hybrid"

#: Join state per query (see eddies.engine.plan.join_state): SteMs (stems-2003), STAIRs that
#: never migrate (the EddyJoins baseline of stairs-2004 §2.1) or STAIRs with state migration.
JOIN_STATES = ("stems", "eddyjoins", "stairs")
