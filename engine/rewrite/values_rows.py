"""``VALUES (1, 'a'), (2, 'b')``: rows written in the query, as a UNION ALL of one-row
SELECTs.

``(VALUES (1, 'a'), (2, 'b')) AS v(a, b)`` is the table ``SELECT 1 AS a, 'a' AS b UNION
ALL SELECT 2, 'b'`` (columns ``col0, col1, ...`` without a column list, as DuckDB names
them); ``x IN (VALUES (1), (2))`` is ``x IN (SELECT 1 UNION ALL SELECT 2)``. The set
operation's type unification gives the columns one type each, as VALUES does, and the
SELECTs without FROM read one row (engine/execution/composite.py). Rows of different lengths are a
SqlSyntaxError, as in DuckDB.
"""

from __future__ import annotations

from functools import reduce

from sqlglot import exp

from eddies.engine.plan.window_split import named
from eddies.errors import SqlSyntaxError, describe


def values_as_selects(node: exp.Expression) -> exp.Expression:
    """``node`` with every VALUES list replaced by its UNION ALL (module docstring)."""
    if isinstance(node, exp.Values):  # the whole statement
        node = exp.Subquery(this=node)
        return values_as_selects(node).this
    for values in list(node.find_all(exp.Values)):
        union = _union_of_rows(values)
        alias = values.args.get("alias")
        parent = values.parent
        if isinstance(parent, exp.In) and values.arg_key == "expressions":
            parent.set("expressions", None)
            parent.set("query", exp.Subquery(this=union))
        elif alias is not None:
            table_alias = exp.TableAlias(this=alias.this.copy()) if alias.this else None
            values.replace(exp.Subquery(this=union, alias=table_alias))
        elif isinstance(parent, exp.From | exp.Join):
            values.replace(
                exp.Subquery(this=union, alias=exp.TableAlias(this=exp.to_identifier("valueslist")))
            )
        else:
            values.replace(union)
    return node


def _union_of_rows(values: exp.Values) -> exp.Expression:
    rows = [row.expressions if isinstance(row, exp.Tuple) else [row] for row in values.expressions]
    width = len(rows[0])
    if any(len(row) != width for row in rows):
        raise SqlSyntaxError(f"VALUES lists must all be the same length: {describe(values)}")
    alias = values.args.get("alias")
    columns = [c.name for c in alias.columns] if alias is not None and alias.columns else []
    if len(columns) > width:
        raise SqlSyntaxError(
            f"VALUES has {width} columns but its alias names {len(columns)}: {describe(values)}"
        )
    names = columns + [f"col{i}" for i in range(len(columns), width)]  # as DuckDB names them
    selects = [
        exp.select(*[named(value.copy(), names[i]) for i, value in enumerate(row)]) for row in rows
    ]
    return reduce(lambda a, b: exp.union(a, b, distinct=False), selects)
