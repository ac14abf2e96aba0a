"""eddies.engine: the public API of the eddies query engine.

Run SQL over Arrow data with an eddy that routes tuples among scan AMs, SMs and SteMs and
learns the cheapest order while it runs (Avnur & Hellerstein, SIGMOD 2000; Raman, Deshpande
& Hellerstein, ICDE 2003).

The names below are loaded lazily (PEP 562): ``import eddies.engine.errors`` from a lower
layer (modules, router, sources) must not pull in the planner and the whole API, or the
layers would import each other in a cycle. ``from eddies.engine import execute`` works as
usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from eddies.engine.logging_setup import ensure_configured

#: Public name -> the module that defines it.
_EXPORTS = {
    "QueryResults": "eddies.engine.api",
    "QueryRun": "eddies.engine.api",
    "execute": "eddies.engine.api",
    "open_query": "eddies.engine.api",
    "run_query": "eddies.engine.api",
    "Catalog": "eddies.engine.catalog",
    "RunOptions": "eddies.engine.options",
    "DataSourceError": "eddies.engine.errors",
    "EddiesError": "eddies.engine.errors",
    "QueryTypeError": "eddies.engine.errors",
    "SqlSyntaxError": "eddies.engine.errors",
    "UdfError": "eddies.engine.errors",
    "UnknownColumnError": "eddies.engine.errors",
    "UnknownTableError": "eddies.engine.errors",
    "UnsupportedQueryError": "eddies.engine.errors",
    "explain": "eddies.engine.explain",
    "configure_logging": "eddies.engine.logging_setup",
    "POLICIES": "eddies.router.policies",
    "ModuleStats": "eddies.router.stats",
    "RoutingEvent": "eddies.router.stats",
    "RunStats": "eddies.router.stats",
}

__all__ = [
    "POLICIES",
    "Catalog",
    "DataSourceError",
    "EddiesError",
    "ModuleStats",
    "QueryResults",
    "QueryRun",
    "QueryTypeError",
    "RoutingEvent",
    "RunOptions",
    "RunStats",
    "SqlSyntaxError",
    "UdfError",
    "UnknownColumnError",
    "UnknownTableError",
    "UnsupportedQueryError",
    "configure_logging",
    "execute",
    "explain",
    "open_query",
    "run_query",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from eddies.engine.api import QueryResults, QueryRun, execute, open_query, run_query
    from eddies.engine.catalog import Catalog
    from eddies.engine.errors import (
        DataSourceError,
        EddiesError,
        QueryTypeError,
        SqlSyntaxError,
        UdfError,
        UnknownColumnError,
        UnknownTableError,
        UnsupportedQueryError,
    )
    from eddies.engine.explain import explain
    from eddies.engine.logging_setup import configure_logging
    from eddies.engine.options import RunOptions
    from eddies.router.policies import POLICIES
    from eddies.router.stats import ModuleStats, RoutingEvent, RunStats


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'eddies.engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# Quiet by default (warnings, to stderr) unless the application configured logging itself.
ensure_configured()
