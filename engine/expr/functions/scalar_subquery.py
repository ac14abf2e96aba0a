"""Decorrelated scalar subqueries: ``__eddies_one_row(n, value)``, the function
engine/rewrite/decorrelate.py writes for a correlated scalar subquery without an
aggregate, and DuckDB's error for one that returns more than one row.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from eddies.engine.expr.registry import Site, register
from eddies.engine.expr.types import plain
from eddies.errors import EddiesError, UnsupportedQueryError, describe
from eddies.router.expressions import Expr

#: The function engine/rewrite/decorrelate.py writes for a correlated subquery without aggregate.
ONE_ROW = "__eddies_one_row"
#: DuckDB 2.0's message for a scalar subquery with more than one row.
MORE_THAN_ONE_ROW = (
    "More than one row returned by a subquery used as an expression - scalar subqueries "
    "can only return a single row"
)


def _one_row(n: Any, value: Any) -> Any:
    """``__eddies_one_row(n, value)``: a correlated scalar subquery's value from its row
    count ``n`` per outer row: NULL where ``n`` is NULL or 0 (no row), ``value`` where it
    is 1, and EddiesError (as DuckDB's SINGLE join raises) if any row has more."""
    n, value = plain(n), plain(value)
    most = pc.max(n) if isinstance(n, pa.Array | pa.ChunkedArray) else n
    if (most.as_py() or 0) > 1:
        raise EddiesError(MORE_THAN_ONE_ROW)
    one = pc.fill_null(pc.greater_equal(n, 1), False)
    return pc.if_else(one, value, pa.scalar(None, value.type))


@register(ONE_ROW)
def _compile_one_row(node: Any, site: Site) -> Expr:
    if len(node.expressions) != 2:
        raise UnsupportedQueryError(f"{describe(node)} takes a count and a value")
    return site.call(_one_row, site.arguments())
