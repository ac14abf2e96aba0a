"""Plans remembered per catalog and SQL text, so a repeated query is not planned again.

Planning (parsing, resolving names, typing, the query graph, the finalizer) costs about
1.1 ms of a 7 ms Wisconsin 5-way star join over 10k rows (issue 11: that query is
mostly the engine's fixed cost per query). A :class:`~eddies.engine.plan.plan_types.Plan` is
not changed by running it (``lower`` builds each run's modules, stores and routing state
from it, ``with_join_state`` returns a copy), so one plan serves every run of its text.

Only plans that hold no per-query state are kept: every table the query reads is one
in-memory scan registered in the catalog (no stream, no index AM, no file named in FROM),
and the catalog has no functions (a plan binds per-query copies of them, with their own
concurrency limits, caches and stats). The cache is per catalog object (weakly held) and
keyed on :attr:`Catalog.version`, which every added, replaced or dropped table or
function advances; at most ``MAX_PLANS`` texts per catalog, oldest forgotten first.
"""

from __future__ import annotations

import threading
import weakref

from eddies.engine.catalog import Catalog
from eddies.engine.plan.plan_types import Plan
from eddies.engine.plan.planner import plan_query

#: Plans kept per catalog.
MAX_PLANS = 128

_plans: weakref.WeakKeyDictionary[Catalog, tuple[int, dict[str, Plan]]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()  # queries may run in several threads (Spark executors)


def cached_plan(sql: str, catalog: Catalog) -> Plan:
    """``plan_query(sql, catalog)``, remembered when reusable (see the module docstring).
    Raises what plan_query raises (errors are not remembered)."""
    if type(catalog) is not Catalog:  # a duck-typed view (the partitioned runner's)
        return plan_query(sql, catalog)
    version = catalog.version
    with _lock:
        entry = _plans.get(catalog)
        if entry is None or entry[0] != version:
            entry = _plans[catalog] = (version, {})
        plan = entry[1].get(sql)
    if plan is not None:
        return plan
    plan = plan_query(sql, catalog)
    if reusable(plan, catalog):
        with _lock:
            plans = entry[1]
            if len(plans) >= MAX_PLANS:
                del plans[next(iter(plans))]
            plans[sql] = plan
    return plan


def reusable(plan: Plan, catalog: Catalog) -> bool:
    """True when ``plan`` holds no per-query state: no functions in the catalog, and each
    table it reads is the catalog's own entry with one in-memory scan (not a stream)."""
    if catalog.functions:
        return False
    for name, table in plan.tables.items():
        if not catalog.has_table(name) or catalog.table(name) is not table:
            return False
        if table.table is None or table.stream is not None:
            return False
    return True
