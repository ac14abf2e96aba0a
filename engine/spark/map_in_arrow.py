"""What a Spark task runs over its piece of rows: the ``mapInArrow`` runner and the eddy.

``DataFrame.mapInArrow(fn, schema)`` calls ``fn`` once per Spark partition with an
iterator of its RecordBatches and takes the RecordBatches ``fn`` yields. Every such
function of the scale-out modes (:mod:`eddies.engine.spark.partitioned`,
:mod:`eddies.engine.spark.executors`) wants the partition as one Table, skips an empty
one, and runs something over it: :func:`map_in_arrow` is that runner, written once.
:func:`eddy_batches` runs one independent eddy over a task's catalog and hands back its
rows before the operators above the eddy (aggregation, ORDER BY, ...), for a caller that
finishes them itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pyarrow as pa
import trio

from eddies.engine.api import unwrap_exception_group
from eddies.engine.execution.run import run_plan
from eddies.engine.options import RunOptions
from eddies.engine.plan.planner import Plan
from eddies.router.stats import RunStats
from eddies.sources.arrow_source import conform

#: What a runner does with a partition: its rows as one Table -> the batches to yield.
PieceFn = Callable[[pa.Table], Iterator[pa.RecordBatch]]


def map_in_arrow(
    run: PieceFn, schema: pa.Schema | None = None, what: str = ""
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function for ``DataFrame.mapInArrow``: the partition's non-empty batches as
    one Table — conformed to ``schema`` when given (a DataSourceError starting with
    ``what`` if its rows do not fit) — handed to ``run``, whose batches it yields. An
    empty partition yields nothing and does not call ``run``. It pickles (Spark ships
    it to the executors) when ``run`` does."""

    def runner(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = [b for b in batches if b.num_rows]
        if not rows:
            return
        table = pa.Table.from_batches(rows)
        yield from run(table if schema is None else conform(table, schema, what))

    return runner


async def eddy_batches(plan: Plan, options: RunOptions) -> list[pa.RecordBatch]:
    """One eddy over ``plan``: its output batches (columns as in ``plan.output_columns``),
    not finished (no aggregation, DISTINCT, ORDER BY or LIMIT). Raises the query's own
    error, not trio's exception group around it."""
    stats = RunStats(
        plan.graph,
        plan.destinations,
        max_route_records=options.knobs().route_log_max_records,
    )
    send, receive = trio.open_memory_channel(math.inf)
    batches: list[pa.RecordBatch] = []
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_plan, plan, options, send, stats)
            async with receive:
                batches = [b async for b in receive]
    except BaseExceptionGroup as group:
        raise unwrap_exception_group(group) from None
    return batches
