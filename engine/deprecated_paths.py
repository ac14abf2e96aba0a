"""Old import paths of eddies.engine's modules, kept working for one release (0.1 -> 0.2).

The engine's modules moved into subpackages, one per stage of a query's life
(docs/concepts.md has the map). ``import eddies.engine.sinks`` and the like still work: a
meta-path finder answers each old name with the module at its new place (the same module
object, so monkeypatching either name patches both) and emits a DeprecationWarning naming
the new path. Installed by ``eddies.engine/__init__``; nothing else imports this module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

#: Old dotted module path -> where that module lives now.
MOVED: dict[str, str] = {
    "eddies.engine.errors": "eddies.errors",
    "eddies.engine.sql": "eddies.engine.frontend.parse",
    "eddies.engine.sql_allowlist": "eddies.engine.frontend.allowlist",
    "eddies.engine.unshadow": "eddies.engine.rewrite.unshadow",
    "eddies.engine.quantified": "eddies.engine.rewrite.quantified",
    "eddies.engine.subquery_merge": "eddies.engine.rewrite.subquery_merge",
    "eddies.engine.values_rows": "eddies.engine.rewrite.values_rows",
    "eddies.engine.decorrelate": "eddies.engine.rewrite.decorrelate",
    "eddies.engine.membership_bodies": "eddies.engine.rewrite.membership_bodies",
    "eddies.engine.compile": "eddies.engine.expr.compile",
    "eddies.engine.datetime_arith": "eddies.engine.expr.datetime_arith",
    "eddies.engine.intervals": "eddies.engine.expr.intervals",
    "eddies.engine.planner": "eddies.engine.plan.planner",
    "eddies.engine.join_steps": "eddies.engine.plan.outer_and_semi_joins",
    "eddies.engine.join_state": "eddies.engine.plan.join_state",
    "eddies.engine.pushdown": "eddies.engine.plan.pushdown",
    "eddies.engine.plan_cache": "eddies.engine.plan.plan_cache",
    "eddies.engine.explain": "eddies.engine.plan.explain",
    "eddies.engine.scan_filters": "eddies.engine.plan.scan_filter_choice",
    "eddies.engine.window_split": "eddies.engine.plan.window_split",
    "eddies.engine.having_split": "eddies.engine.plan.having_split",
    "eddies.engine.run": "eddies.engine.execution.run",
    "eddies.engine.composite": "eddies.engine.execution.composite",
    "eddies.engine.above": "eddies.engine.above.duckdb_runtime",
    "eddies.engine.finalize": "eddies.engine.above.finalize",
    "eddies.engine.incremental": "eddies.engine.streaming.incremental",
    "eddies.engine.commit_points": "eddies.engine.streaming.commit_points",
    "eddies.engine.sinks": "eddies.engine.streaming.sinks",
    "eddies.engine.durable": "eddies.engine.streaming.durable",
    "eddies.engine.spark_executors": "eddies.engine.spark.executors",
    "eddies.engine.partitioned": "eddies.engine.spark.partitioned",
    "eddies.engine.progress": "eddies.engine.cli.progress",
    "eddies.engine.gc_freeze": "eddies.engine.runtime.gc_freeze",
    "eddies.engine.malloc_retain": "eddies.engine.runtime.malloc_retain",
    "eddies.engine.precise_clock": "eddies.engine.runtime.precise_clock",
    "eddies.engine.logging_setup": "eddies.engine.runtime.logging_setup",
}


class _AliasLoader(importlib.abc.Loader):
    """Loads an old name as the module at its new path (one object under both names)."""

    def __init__(self, new: str) -> None:
        self.new = new
        self.saved_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        self.saved_spec = module.__spec__  # import machinery overwrites it next
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.saved_spec


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of :data:`MOVED` under their old names, with a DeprecationWarning."""

    def find_spec(self, fullname: str, path: object, target: object = None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        warnings.warn(
            f"{fullname} moved to {new}; the old path goes away in eddies 0.2",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (idempotent)."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
