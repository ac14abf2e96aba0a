"""Turn a parsed query into what the eddy runs: AMs, SMs, SteMs, destinations, and what runs
above the eddy (projection, aggregation, ordering).

stems-2003 §2.2: "the use of an eddy and SteMs obviates the need for query optimization":
planning creates a scan AM per table, an SM per predicate and a SteM per base table, and
leaves every ordering decision to the eddy. :func:`plan_query` takes a query through the
stages, each a module of its own:

* the FROM tables (catalog tables, or files named in FROM) and their aliases, here;
* column resolution (``column_scope``), JOIN ... USING / NATURAL JOIN (``using_joins``);
* the query graph (``query_graph_build``): WHERE conjuncts classified into join edges and
  SMs, the bind-field check of index AMs (Nail's algorithm), outer joins and [NOT] IN /
  [NOT] EXISTS subqueries as JoinSteps (``engine/plan/outer_and_semi_joins.py``): joins
  against a complete SteM after the inner-join region the eddy orders freely; the steps
  that commute are taken in the order the eddy's policy picks;
* the eddy's destinations (``destinations``);
* what runs above the eddy (``finalize_plan``, ``select_items``, ``aggregate_calls``):
  aggregation, HAVING, DISTINCT, ORDER BY and LIMIT, as in the PostgreSQL implementation
  (eddies-in-postgresql §2);
* the columns and filters pushed into file scans (``pushdown``).

The result is a :class:`~eddies.engine.plan.plan_types.Plan`.
"""

from __future__ import annotations

from eddies.engine.catalog import Catalog, CatalogTable
from eddies.engine.frontend.parse import QueryBlock, TableRef, parse_query
from eddies.engine.plan import outer_and_semi_joins as join_steps
from eddies.engine.plan.column_scope import BaseScope
from eddies.engine.plan.destinations import destinations
from eddies.engine.plan.finalize_plan import plan_finalize
from eddies.engine.plan.plan_types import FinalizeSpec, Plan
from eddies.engine.plan.pushdown import prune_scans
from eddies.engine.plan.query_graph_build import build_query_graph, index_kinds
from eddies.engine.plan.using_joins import plan_joins
from eddies.errors import DataSourceError, UnknownTableError, UnsupportedQueryError, describe
from eddies.router.query_graph import AliasInfo
from eddies.router.udf_calls import UdfStats
from eddies.sources.arrow_source import make_source


def plan_query(sql: str, catalog: Catalog) -> Plan:
    """Parse, resolve, type-check and plan ``sql``. Raises a subclass of EddiesError."""
    block = parse_query(sql, functions=[name.lower() for name in catalog.functions])
    aliases, sources = _from_tables(block, catalog)
    # This query's own copies: its calls of each function share one limit, cache and stats.
    udf_stats: dict[str, UdfStats] = {}
    functions = {name: f.for_query(udf_stats) for name, f in catalog.functions.items()}
    scope = BaseScope(list(aliases), [sources[a.table].schema for a in aliases], functions)
    n_from = len(aliases)
    refs = join_steps.subquery_refs(block)
    join_steps.subquery_aliases(refs, aliases, catalog, sources)
    types = BaseScope(aliases, [sources[a.table].schema for a in aliases], functions).types()
    plan_joins(block, scope)
    graph = build_query_graph(block, scope, types, aliases, sources, refs, n_from)
    kinds = index_kinds(graph, scope)
    finalize = plan_finalize(block, scope, types, functions)
    plan = Plan(
        sql,
        graph,
        destinations(graph),
        sources,
        kinds,
        _output_columns(finalize),
        finalize,
        udf_stats,
    )
    prune_scans(plan, block, scope)
    return plan


def _from_tables(
    block: QueryBlock, catalog: Catalog
) -> tuple[list[AliasInfo], dict[str, CatalogTable]]:
    """The FROM aliases, in order, and the tables they read by name (a catalog table, or
    a file named in FROM: the same path twice is a self-join of one table). Raises
    UnknownTableError, or UnsupportedQueryError for an alias used twice."""
    aliases: list[AliasInfo] = []
    sources: dict[str, CatalogTable] = {}
    for ref in block.tables:
        is_file = ref.path is not None and (
            ref.format is not None or not catalog.has_table(ref.name)
        )
        if not is_file and not catalog.has_table(ref.name):
            raise UnknownTableError(
                f"unknown table {describe(ref.node)}; the catalog has {sorted(catalog.tables)}"
            )
        if any(a.name == ref.alias for a in aliases):
            raise UnsupportedQueryError(
                f"alias {ref.alias!r} is used twice in FROM ({describe(ref.node)})"
            )
        if is_file:
            aliases.append(AliasInfo(len(aliases), ref.alias, ref.path))
            if ref.path not in sources:
                sources[ref.path] = _file_table(ref)
        else:
            aliases.append(AliasInfo(len(aliases), ref.alias, ref.name))
            sources[ref.name] = catalog.table(ref.name)
    return aliases, sources


def _file_table(ref: TableRef) -> CatalogTable:
    """The table a file reference in FROM reads (``FROM 'x.parquet'``, ``read_csv(...)``)."""
    assert ref.path is not None
    where = describe(ref.node)
    try:
        source = make_source(ref.path, ref.path)
    except DataSourceError as exc:
        raise DataSourceError(f"{exc} (in FROM: {where})") from None
    if ref.format is not None and source.dataset is not None:
        formats = {type(f.format).__name__ for f in source.dataset.get_fragments()}
        wanted = "ParquetFileFormat" if ref.format == "parquet" else "CsvFileFormat"
        if formats != {wanted}:
            raise DataSourceError(
                f"read_{ref.format}({ref.path!r}) names files that are not "
                f"{ref.format.upper()}: {where}"
            )
    source.access_name = ref.path
    return CatalogTable(ref.path, source.schema, scans=[source])


def _output_columns(finalize: FinalizeSpec) -> list[tuple[int, str]]:
    """The base columns the finalizer reads, sorted; post-aggregate keys are strings,
    not (alias, column)."""
    everything = finalize.select + [o[0] for o in finalize.order] + (finalize.group or [])
    everything += [a.arg for a in finalize.aggregates]
    everything += [e for a in finalize.aggregates for e in a.extra]
    return sorted({k for e in everything for k in e.column_keys() if isinstance(k, tuple)})
