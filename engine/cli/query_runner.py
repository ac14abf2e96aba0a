"""How a subcommand runs a query: through :func:`~eddies.engine.open_query` under trio,
with the progress line, the run options taken from the command's arguments."""

from __future__ import annotations

import argparse
from typing import Any

import pyarrow as pa
import trio

from eddies.engine import Catalog, RunStats, open_query
from eddies.engine.cli.progress import QueryProgress
from eddies.engine.runtime.precise_clock import run_clock

__all__ = ["engine_options", "run_from_args", "run_with_progress"]


async def _collect(
    sql: str, catalog: Catalog, progress: QueryProgress, options: dict[str, Any]
) -> tuple[pa.Table, RunStats]:
    batches: list[pa.RecordBatch] = []
    async with open_query(sql, catalog, **options) as results:
        progress.watch(results.stats)
        async for batch in results:
            batches.append(batch)
            progress.add_rows(batch.num_rows)
    # Read results only after the block: when a LIMIT is satisfied the query cancels its
    # own scope, so code after the loop inside the block may never run.
    schema = getattr(results, "schema", None)
    if batches:
        table = pa.Table.from_batches(batches, schema=schema)
    elif schema is not None:
        table = schema.empty_table()
    else:
        table = pa.table({})
    return table, results.stats


def run_with_progress(
    sql: str,
    catalog: Catalog,
    *,
    label: str = "running query",
    progress: bool = True,
    **options: Any,
) -> tuple[pa.Table, RunStats]:
    """Run ``sql`` through :func:`open_query` under trio, showing a progress line on
    stderr for runs longer than a second; return ``(table, stats)``."""
    with QueryProgress(label, enabled=None if progress else False) as display:
        return trio.run(_collect, sql, catalog, display, options, clock=run_clock())


def engine_options(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """The run options (``open_query`` keywords) the arguments give: policy, batch size,
    join state and seed when given, and ``extra``."""
    options: dict[str, Any] = {"policy": args.policy, "batch_size": args.batch_size}
    if getattr(args, "join_state", "stems") != "stems":
        options["join_state"] = args.join_state
    if args.seed is not None:
        options["seed"] = args.seed
    options.update(extra)
    return options


def run_from_args(
    sql: str, catalog: Catalog, args: argparse.Namespace, *, label: str, **extra: Any
) -> tuple[pa.Table, RunStats]:
    """:func:`run_with_progress` with the run options of ``args`` (and ``extra``)."""
    return run_with_progress(
        sql, catalog, label=label, progress=args.progress, **engine_options(args, **extra)
    )
