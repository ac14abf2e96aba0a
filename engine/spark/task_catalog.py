"""The catalog a Spark task's eddy runs against, and the catalog the driver plans with.

Every function Spark runs in an executor (``mapInArrow``, ``applyInArrow``,
``applyInPandasWithState``) is pickled with what its eddy needs besides its own piece of
rows: the broadcast tables, copied whole to every task (the small side of the Exchange /
Flux partitioning, Graefe 1990; Shah et al. 2003), the index-only lookup tables, and the
query's UDFs — a :class:`ShippedTables`. In the task, :meth:`ShippedTables.catalog`
registers them as the driver had them and adds the piece, so each task runs an ordinary
eddy over an ordinary catalog.

On the driver, the partitioned tables (or the streams) are Spark DataFrames, not catalog
tables: :func:`planning_catalog` stands an empty table of the right schema in for each,
so the query can be planned (and refused) before any Spark job starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from eddies.engine.catalog import Catalog, CatalogTable
from eddies.engine.spark.lookup_cache import cached_lookup, cached_session
from eddies.errors import DataSourceError
from eddies.router.expressions import FunctionSpec
from eddies.sources.index_access import IndexAccess

#: The scan AM settings a broadcast table keeps (``Catalog.add_table`` keywords).
SCAN_SETTINGS = ("build", "batch_size", "rate", "delay")
#: The retry settings a lookup table keeps (``Catalog.add_index`` keywords).
LOOKUP_SETTINGS = ("max_concurrency", "timeout", "retries", "backoff")


@dataclass(frozen=True)
class BroadcastTable:
    """A catalog table shipped whole to every task: its name, all its rows, and the
    ``Catalog.add_table`` keywords it was registered with (key, build, batch_size,
    rate, delay, access_name)."""

    name: str
    table: pa.Table
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LookupTable:
    """An index-only catalog table (``add_index``, a web source with ``scan=False``) as
    a task registers it: one per index AM, its lookups through the worker's cache."""

    name: str
    schema: pa.Schema
    key: tuple[str, ...] | None
    access: IndexAccess


def broadcast_tables(catalog: Catalog, names: Iterable[str]) -> list[BroadcastTable]:
    """The catalog tables ``names`` as shipped whole to every task (a Parquet/CSV table
    is read here, on the driver). Raises DataSourceError for a table read from files
    named in the query, and for one that is not a single in-memory or file scan (index
    AMs, mirrors, a stream, a reader, a paged scan)."""
    return [_broadcast(catalog, name) for name in names]


def _broadcast(catalog: Catalog, name: str) -> BroadcastTable:
    if not catalog.has_table(name):  # FROM 'path' / read_parquet(...) in the SQL
        raise DataSourceError(
            f"{name!r} is read from files named in the query; a partitioned query "
            "broadcasts catalog tables only: register it with add_table(name, path)"
        )
    entry = catalog.table(name)
    why = _not_broadcastable(entry)
    if why:
        raise DataSourceError(
            f"table {name!r} cannot be broadcast to Spark executors: {why}; register it "
            "with add_table(name, pyarrow_table) or pass it as a Spark DataFrame"
        )
    src = entry.scans[0]
    table = src.table
    if table is None:  # a Parquet/CSV file: read it here, ship the rows
        table = pa.Table.from_batches(list(src.open_batches(1 << 16)), schema=src.schema)
    settings = {"key": entry.key} | {k: getattr(src, k) for k in SCAN_SETTINGS}
    return BroadcastTable(name, table, settings | {"access_name": src.access_name or name})


def _not_broadcastable(entry: CatalogTable) -> str | None:
    """Why ``entry`` cannot be shipped as rows, or None."""
    if entry.indexes:
        return "it has index access methods (lookups are functions of this process)"
    if len(entry.scans) != 1:
        return "it has several scan access methods (mirrors)"
    if entry.scans[0].table is None and entry.scans[0].path is None:
        return "it is not in memory or in a file (a stream, a reader or a paged scan)"
    return None


def lookup_tables(catalog: Catalog, names: Iterable[str]) -> list[LookupTable]:
    """One :class:`LookupTable` per index AM of each catalog table in ``names``."""
    return [
        LookupTable(name, entry.schema, entry.key, access)
        for name in names
        for entry in [catalog.table(name)]
        for access in entry.indexes
    ]


def add_broadcasts(cat: Catalog, broadcasts: Sequence[BroadcastTable]) -> None:
    """Register the tables shipped whole to every task (broadcast), as the driver had
    them registered."""
    for b in broadcasts:
        cat.add_table(b.name, b.table, **b.settings)


def add_lookups(cat: Catalog, lookups: Sequence[LookupTable], query_id: str) -> None:
    """Register the lookup tables, their lookups answered from this worker process's
    cache of query ``query_id`` (:mod:`eddies.engine.spark.lookup_cache`)."""
    for one in lookups:
        a = one.access
        cat.add_index(
            one.name,
            one.schema,
            on=a.on,
            lookup=None if a.lookup is None else cached_lookup(query_id, a, a.lookup),
            session=None if a.session is None else cached_session(query_id, a),
            key=one.key,
            access_name=a.name,
            **{k: getattr(a, k) for k in LOOKUP_SETTINGS},
        )


@dataclass
class ShippedTables:
    """What every task of a query gets besides its piece (pickled with its function):
    the broadcast tables, the lookup tables, the UDFs (they must pickle), and the query
    id that keys the worker's lookup caches."""

    broadcast: list[BroadcastTable]
    functions: list[FunctionSpec]
    lookups: list[LookupTable] = field(default_factory=list)
    query_id: str = ""

    def catalog(self, pieces: Mapping[str, pa.Table]) -> Catalog:
        """A task's catalog: the shipped tables, then ``pieces`` (table name -> this
        task's rows of it, already in the schema the eddies see), then the UDFs."""
        cat = Catalog()
        add_broadcasts(cat, self.broadcast)
        add_lookups(cat, self.lookups, self.query_id)
        for name, rows in pieces.items():
            cat.add_table(name, rows)
        for f in self.functions:
            cat.add_function(f.name, f.fn, vectorized=f.vectorized, return_type=f.return_type)
        return cat


def ship_tables(
    catalog: Catalog,
    broadcast: Iterable[str],
    lookups: Iterable[str] = (),
    query_id: str = "",
) -> ShippedTables:
    """The :class:`ShippedTables` of a query over ``catalog``: the tables ``broadcast``
    as rows, the index-only tables ``lookups``, every UDF. Raises DataSourceError for a
    table that cannot be broadcast (see :func:`broadcast_tables`)."""
    return ShippedTables(
        broadcast_tables(catalog, broadcast),
        list(catalog.functions.values()),
        lookup_tables(catalog, lookups),
        query_id,
    )


class PlanningCatalog:
    """A catalog read through another: ``base`` with some of its tables replaced or
    added (``stand_ins``: name -> CatalogTable), for planning. Duck-types the part of
    :class:`~eddies.engine.catalog.Catalog` the planner reads; ``base`` is not changed."""

    def __init__(self, base: Catalog, stand_ins: Mapping[str, CatalogTable]) -> None:
        self.base = base
        self.stand_ins = {name.lower(): entry for name, entry in stand_ins.items()}

    @classmethod
    def over(cls, base: Catalog, stand_ins: Catalog) -> PlanningCatalog:
        """``base`` with every table of the catalog ``stand_ins`` standing in."""
        return cls(base, {name: stand_ins.table(name) for name in stand_ins.tables})

    def has_table(self, name: str) -> bool:
        return name.lower() in self.stand_ins or self.base.has_table(name)

    def table(self, name: str) -> CatalogTable:
        entry = self.stand_ins.get(name.lower())
        return self.base.table(name) if entry is None else entry

    @property
    def tables(self) -> list[str]:
        return sorted(set(self.base.tables) | set(self.stand_ins))

    @property
    def functions(self) -> dict[str, FunctionSpec]:
        return self.base.functions


def planning_catalog(
    base: Catalog, schemas: Mapping[str, pa.Schema], *, streams: bool = False
) -> PlanningCatalog:
    """``base`` with an empty table of each schema in ``schemas`` (name -> Arrow schema)
    standing in for the rows Spark holds; ``streams``: as stream tables (for a
    continuous query). Raises DataSourceError for a schema the catalog refuses."""
    stand_ins = Catalog()
    for name, schema in schemas.items():
        if streams:
            stand_ins.add_stream(name, schema)
        else:
            stand_ins.add_table(name, schema.empty_table())
    return PlanningCatalog.over(base, stand_ins)
