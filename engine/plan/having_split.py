"""A HAVING that holds a correlated subquery, evaluated over the grouped rows.

``SELECT g, sum(x) FROM t GROUP BY g HAVING sum(x) > (SELECT avg(y) FROM u WHERE u.g = t.g)``
compares each group with an aggregate over the rows of u with the group's key. The
decorrelation of engine/rewrite/decorrelate.py takes such subqueries in the SELECT list of an
aggregating block, so the block is split (:func:`split_having`): the grouped block keeps
FROM ... GROUP BY and computes its items and the HAVING condition as columns
(``__c0, __c1, ..., __keep``); the block around it keeps the groups whose ``__keep`` is
TRUE, with the original names, DISTINCT, ORDER BY, LIMIT and OFFSET::

    SELECT h.__c0 AS g, h.__c1 AS "sum(x)" FROM (
        SELECT g AS __c0, sum(x) AS __c1, sum(x) > (SELECT ...) AS __keep
        FROM t GROUP BY g) AS h
    WHERE h.__keep

HAVING filters groups exactly as a WHERE over the grouped rows does (SQL's definition of
HAVING), so the results are the same. An ORDER BY term that is not an output column
(a position, an alias, or an item's expression) is computed in the grouped block too.
"""

from __future__ import annotations

from sqlglot import exp

from eddies.engine.plan.window_split import named, output_name
from eddies.errors import UnsupportedQueryError, describe

#: The grouped block's column holding the HAVING condition.
KEEP_COLUMN = "__keep"


def split_having(select: exp.Select, alias: str) -> exp.Select:
    """The block around ``select``'s grouped part (named ``alias``) that filters it by its
    HAVING (see the module docstring); ``select`` is not changed. Raises
    UnsupportedQueryError for a ``*`` item, GROUP BY ALL (which DuckDB refuses here), or a
    DISTINCT block ordered by other terms."""
    items = list(select.expressions)
    for item in items:
        if item.is_star or isinstance(item.unalias(), exp.Star):
            raise UnsupportedQueryError(
                f"'*' in a block whose HAVING has a correlated subquery: {describe(item)}"
            )
    group = select.args.get("group")
    if group is not None and group.args.get("all"):
        raise UnsupportedQueryError(
            "a correlated subquery in HAVING with GROUP BY ALL is not supported (DuckDB "
            f"refuses it too; name the GROUP BY keys): {describe(select.args['having'])}"
        )
    inner = select.copy()
    for key in ("having", "order", "limit", "offset", "distinct"):
        inner.set(key, None)
    hidden = [named(item.unalias().copy(), f"__c{i}") for i, item in enumerate(items)]
    hidden.append(named(select.args["having"].this.copy(), KEEP_COLUMN))
    outer_items = [
        exp.alias_(exp.column(f"__c{i}", table=alias, quoted=True), output_name(item), quoted=True)
        for i, item in enumerate(items)
    ]
    order = select.args.get("order")
    outer_order = None
    if order is not None:
        outer_order = order.copy()
        for ordered in outer_order.expressions:
            column = _output_column(ordered.this, items, alias)
            if column is None:
                if select.args.get("distinct") is not None:
                    raise UnsupportedQueryError(
                        "ORDER BY a term that is not a selected column, in a SELECT DISTINCT "
                        f"whose HAVING has a correlated subquery: {describe(ordered)}"
                    )
                name = f"__o{len(hidden)}"
                hidden.append(named(ordered.this.copy(), name))
                column = exp.column(name, table=alias, quoted=True)
            ordered.set("this", column)
    inner.set("expressions", hidden)
    outer = exp.select(*outer_items).from_(
        exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias)))
    )
    outer.set("where", exp.Where(this=exp.column(KEEP_COLUMN, table=alias, quoted=True)))
    for key in ("distinct", "limit", "offset"):
        value = select.args.get(key)
        if value is not None:
            outer.set(key, value.copy())
    if outer_order is not None:
        outer.set("order", outer_order)
    return outer


def _output_column(
    term: exp.Expression, items: list[exp.Expression], alias: str
) -> exp.Column | None:
    """The grouped block's column an ORDER BY ``term`` names: a position, an output alias,
    or an item's own expression; None otherwise."""
    if isinstance(term, exp.Literal) and not term.is_string:
        k = int(term.this)
        if 1 <= k <= len(items):
            return exp.column(f"__c{k - 1}", table=alias, quoted=True)
        return None
    if isinstance(term, exp.Column) and not term.table:
        for i, item in enumerate(items):
            if isinstance(item, exp.Alias) and item.alias.lower() == term.name.lower():
                return exp.column(f"__c{i}", table=alias, quoted=True)
    text = term.sql(dialect="duckdb")
    for i, item in enumerate(items):
        if item.unalias().sql(dialect="duckdb") == text:
            return exp.column(f"__c{i}", table=alias, quoted=True)
    return None
