"""What planning produces: the :class:`Plan` of one query and the :class:`FinalizeSpec`
of what runs above its eddy (projection, aggregation, HAVING, DISTINCT, ORDER BY, LIMIT;
eddies-in-postgresql §2), with the :class:`AggregateCall` of each aggregate.

:func:`eddies.engine.plan.planner.plan_query` builds them; lowering, execution, the
finalizer (:mod:`eddies.engine.above.finalize`), streaming and Spark read them. A plan is
not changed by running it, so one serves every run of its text (:mod:`.plan_cache`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from eddies.engine.catalog import CatalogTable
from eddies.router.expressions import Expr
from eddies.router.query_graph import QueryGraph
from eddies.router.routing_table import Destination
from eddies.router.udf_calls import UdfStats


@dataclass
class AggregateCall:
    """One aggregate: ``function`` is a pyarrow hash-aggregate name; arg None = COUNT(*)."""

    function: str
    arg: Expr
    sql: str
    options: Any = None  # pyarrow FunctionOptions for the kernel, if any
    extra: list[Expr] = field(default_factory=list)  # further arguments (arg_min's key)
    post: Any = None  # for the "list" kernel: how finalize.py finishes each group's list
    #: The type the aggregate has (aggregate_type), which its value over no rows takes too.
    result_type: pa.DataType | None = None


@dataclass
class FinalizeSpec:
    """What runs above the eddy; see :mod:`eddies.engine.above.finalize`."""

    names: list[str]
    select: list[Expr]
    order: list[tuple[Expr, bool, bool]] = field(default_factory=list)  # expr, desc, nulls_first
    distinct: bool = False
    limit: int | None = None
    offset: int = 0
    group: list[Expr] | None = None  # None: no aggregation
    aggregates: list[AggregateCall] = field(default_factory=list)
    having: Expr | None = None
    schema: pa.Schema | None = None

    @property
    def streaming(self) -> bool:
        """True when result batches can leave as soon as the eddy produces them."""
        return self.group is None and not self.order and not self.distinct

    def above_steps(self) -> tuple[str, ...]:
        """The operators that run above the eddy, in the order explain lists them: any of
        ``"aggregate"`` (GROUP BY or aggregates), ``"having"``, ``"distinct"``, ``"order"``,
        ``"limit"`` and ``"offset"`` (a nonzero OFFSET); empty: projection only. Each
        caller words them its own way (explain, the partitioned runner's finish steps)."""
        present = (
            ("aggregate", self.group is not None),
            ("having", self.having is not None),
            ("distinct", self.distinct),
            ("order", bool(self.order)),
            ("limit", self.limit is not None),
            ("offset", bool(self.offset)),
        )
        return tuple(name for name, on in present if on)


@dataclass
class Plan:
    """Everything needed to run one query."""

    sql: str
    graph: QueryGraph
    destinations: list[Destination]
    tables: dict[str, CatalogTable]
    index_kinds: dict[str, dict[tuple[str, ...], tuple[str, ...]]]
    output_columns: list[tuple[int, str]]
    finalize: FinalizeSpec
    # Per function the query calls: calls, cache hits, seconds waited (filled while it runs).
    udf_stats: dict[str, UdfStats] = field(default_factory=dict)
    # Per file-backed table (a pyarrow dataset read by one scan AM): the columns its scan
    # reads and the filter pushed into it (eddies.engine.plan.pushdown); absent: all, none.
    scan_columns: dict[str, list[str]] = field(default_factory=dict)
    scan_filters: dict[str, pc.Expression] = field(default_factory=dict)
    # "stems" (SteMs), or "eddyjoins" (STAIRs: eddies.engine.plan.join_state.with_join_state).
    join_state: str = "stems"
