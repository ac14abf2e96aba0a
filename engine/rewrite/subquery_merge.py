"""Merge derived tables and CTEs into the query that reads them, with sqlglot's optimizer.

``FROM (SELECT a, b FROM t WHERE a > 1) AS d JOIN u ON d.a = u.a`` needs no query of its
own: sqlglot's ``qualify`` and ``merge_subqueries`` rules rewrite it to
``FROM t JOIN u ON t.a = u.a WHERE t.a > 1``, one eddy that routes over both tables, keeps
its adaptivity across what was the subquery's boundary, streams, and stops early on a
LIMIT. A CTE used once is merged the same way. What sqlglot cannot merge (an aggregate,
DISTINCT, LIMIT, a window inside, a CTE used twice) is left for engine/execution/composite.py to run
as its own eddy query.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.merge_subqueries import merge_subqueries
from sqlglot.optimizer.qualify import qualify

from eddies.engine.rewrite.alias_lists import has_unsized_list


def _subqueries(node: exp.Expression) -> int:
    """Derived tables and CTEs in ``node``."""
    return sum(
        1
        for n in node.walk()
        if isinstance(n, exp.CTE)
        or (isinstance(n, exp.Subquery) and isinstance(n.parent, exp.From | exp.Join))
    )


def merge(node: exp.Expression, tables: Any) -> exp.Expression:
    """``node`` with the derived tables and CTEs sqlglot can merge merged, or ``node``
    itself when none can be (or sqlglot cannot qualify it: the planner then names the
    problem). ``tables`` has ``has_table``/``table`` as a Catalog. Output column names of
    the top SELECT stay as they were (qualify would name ``a + 1`` ``_col_0``). A column
    alias list over a ``*`` body keeps its statement unmerged (alias_lists.py says why).
    """
    before = _subqueries(node)
    if before == 0 or _null_supplied_derived(node) or has_unsized_list(node):
        return node
    schema = {
        t.name.lower(): {f.name: "INT" for f in tables.table(t.name).schema}
        for t in node.find_all(exp.Table)
        if t.name and tables.has_table(t.name)
    }
    try:
        merged = merge_subqueries(qualify(node.copy(), schema=schema, dialect="duckdb"))
    except (SqlglotError, KeyError, ValueError):
        return node
    if _subqueries(merged) >= before:
        return node  # nothing merged: keep the user's text
    if isinstance(node, exp.Select) and isinstance(merged, exp.Select):
        _keep_names(node, merged)
    return merged


def _null_supplied_derived(node: exp.Expression) -> bool:
    """Whether a derived table or CTE sits on the NULL-supplying side of an outer join in
    ``node``. Merged, its SELECT items would be evaluated on the padded rows: ``'x' AS n``
    or ``coalesce(u.y, 0)`` would give ``'x'`` / ``0`` where SQL gives NULL (sqlglot's
    merge_subqueries does not check this), so such statements are not merged; composite.py
    runs the derived table as its own query and the eddy pads its rows with NULLs."""
    ctes = {c.alias_or_name.lower() for c in node.find_all(exp.CTE)}

    def derived(item: exp.Expression | None) -> bool:
        if isinstance(item, exp.Subquery):
            return True
        return isinstance(item, exp.Table) and item.name.lower() in ctes

    for select in node.find_all(exp.Select):
        joins = select.args.get("joins") or []
        from_ = select.args.get("from_")
        earlier = [from_.this] if from_ is not None else []
        for join in joins:
            side = (join.args.get("side") or "").upper()
            if side in ("LEFT", "FULL") and derived(join.this):
                return True
            if side in ("RIGHT", "FULL") and any(derived(item) for item in earlier):
                return True
            earlier.append(join.this)
    return False


def _keep_names(original: exp.Select, merged: exp.Select) -> None:
    """Give the merged top SELECT's items the output names the original's had."""
    if any(i.is_star for i in original.expressions):
        return  # expanded by qualify under the columns' own names
    if len(original.expressions) != len(merged.expressions):
        return
    for before, after in zip(original.expressions, merged.expressions, strict=True):
        if isinstance(before, exp.Alias | exp.Column) or not isinstance(after, exp.Alias):
            continue
        after.set("alias", exp.to_identifier(before.sql(dialect="duckdb"), quoted=True))
