"""eddies.engine: the public API of the eddies query engine.

Run SQL over Arrow data with an eddy that routes tuples among scan AMs, SMs and SteMs and
learns the cheapest order while it runs (Avnur & Hellerstein, SIGMOD 2000; Raman, Deshpande
& Hellerstein, ICDE 2003).

The names below are loaded lazily (PEP 562), so importing one engine module does not pull
in the planner and the whole API; ``from eddies.engine import execute`` works as usual.
The error types live in the leaf module :mod:`eddies.errors`. Old module paths
(``eddies.engine.sinks``, ...) still import, with a DeprecationWarning
(:mod:`eddies.engine.deprecated_paths`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from eddies.engine import deprecated_paths
from eddies.engine.runtime.logging_setup import ensure_configured

#: Public name -> the module that defines it.
_EXPORTS = {
    "QueryResults": "eddies.engine.api",
    "QueryRun": "eddies.engine.api",
    "execute": "eddies.engine.api",
    "open_query": "eddies.engine.api",
    "run_query": "eddies.engine.api",
    "Catalog": "eddies.engine.catalog",
    "RunOptions": "eddies.engine.options",
    "DataSourceError": "eddies.errors",
    "EddiesError": "eddies.errors",
    "QueryTypeError": "eddies.errors",
    "SqlSyntaxError": "eddies.errors",
    "UdfError": "eddies.errors",
    "UnknownColumnError": "eddies.errors",
    "UnknownTableError": "eddies.errors",
    "UnsupportedQueryError": "eddies.errors",
    "explain": "eddies.engine.plan.explain",
    "configure_logging": "eddies.engine.runtime.logging_setup",
    "POLICIES": "eddies.router.run_choices",
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
    from eddies.engine.options import RunOptions
    from eddies.engine.plan.explain import explain
    from eddies.engine.runtime.logging_setup import configure_logging
    from eddies.errors import (
        DataSourceError,
        EddiesError,
        QueryTypeError,
        SqlSyntaxError,
        UdfError,
        UnknownColumnError,
        UnknownTableError,
        UnsupportedQueryError,
    )
    from eddies.router.run_choices import POLICIES
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


deprecated_paths.install()

# Quiet by default (warnings, to stderr) unless the application configured logging itself.
ensure_configured()
