"""eddies.engine: the public API of the eddies query engine.

Run SQL over Arrow data with an eddy that routes tuples among scan AMs, SMs and SteMs and
learns the cheapest order while it runs (Avnur & Hellerstein, SIGMOD 2000; Raman, Deshpande
& Hellerstein, ICDE 2003).
"""

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
from eddies.engine.logging_setup import configure_logging, ensure_configured
from eddies.router.policies import POLICIES
from eddies.router.stats import ModuleStats, RoutingEvent, RunStats

# Quiet by default (warnings, to stderr) unless the application configured logging itself.
ensure_configured()

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
