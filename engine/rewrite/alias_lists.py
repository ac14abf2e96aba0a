"""Column alias lists on derived tables and CTEs: ``FROM (SELECT ...) AS d (c1, c2)`` and
``WITH t (c1, c2) AS (SELECT ...)`` (TPC-H Q13 and Q15 write them).

DuckDB's rule (2.0): the names rename the subquery's first output columns, in order;
fewer names than columns leave the other columns their own names; more names than
columns is an error (``table "d" has 2 columns available but 3 columns specified``).
DuckDB 2.0 drops the extra names of a CTE without a word; eddies refuses them there too,
as DuckDB does on a derived table and PostgreSQL on both, rather than guess.

Two places apply it. sqlglot's ``merge_subqueries`` (engine/rewrite/subquery_merge.py)
reads the names when it merges a subquery into its reader, but silently drops extra
ones, so :func:`check_widths` runs first, and a list over a body whose width is unknown
before it runs (a ``*``) keeps that body unmerged (:func:`has_unsized_list`).
engine/execution/composite.py renames a materialized result with :func:`renamed`.
"""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from eddies.errors import UnsupportedQueryError, describe

_SET_OPS = (exp.Union, exp.Intersect, exp.Except)


def alias_names(node: exp.Expression) -> list[str]:
    """The column names ``node`` (a derived table's Subquery or a CTE) gives its body's
    columns; [] without a list."""
    alias = node.args.get("alias")
    if not isinstance(alias, exp.TableAlias):
        return []
    return [c.name for c in alias.columns]


def _aliased(root: exp.Expression) -> list[exp.Expression]:
    """The derived tables and CTEs of ``root`` that carry a column alias list."""
    return [
        n
        for n in root.find_all(exp.Subquery, exp.CTE)
        if alias_names(n) and (isinstance(n, exp.CTE) or isinstance(n.parent, exp.From | exp.Join))
    ]


def static_width(query: exp.Expression) -> int | None:
    """The number of output columns of ``query`` known from its text (a SELECT without
    ``*``, or a set operation's left-most such SELECT), else None."""
    while isinstance(query, (exp.Subquery, *_SET_OPS)):
        query = query.this
    if not isinstance(query, exp.Select) or any(i.is_star for i in query.expressions):
        return None
    return len(query.expressions)


def _too_many(node: exp.Expression, available: int) -> UnsupportedQueryError:
    what = "the CTE" if isinstance(node, exp.CTE) else "the derived table"
    return UnsupportedQueryError(
        f"{what} {node.alias_or_name!r} has {available} columns available but "
        f"{len(alias_names(node))} columns specified: {describe(node.args['alias'])}"
    )


def check_widths(root: exp.Expression) -> None:
    """Raise UnsupportedQueryError for a column alias list in ``root`` naming more
    columns than its body's text has (as DuckDB does)."""
    for node in _aliased(root):
        width = static_width(node.this)
        if width is not None and len(alias_names(node)) > width:
            raise _too_many(node, width)


def has_unsized_list(root: exp.Expression) -> bool:
    """Whether a column alias list in ``root`` stands over a body whose width is known only
    once it runs (sqlglot would merge it dropping extra names unchecked)."""
    return any(static_width(node.this) is None for node in _aliased(root))


def renamed(table: pa.Table, node: exp.Expression) -> pa.Table:
    """``table`` (the result of ``node``'s body) with its first columns renamed as
    ``node``'s column alias list says; UnsupportedQueryError when the list is longer."""
    names = alias_names(node)
    if not names:
        return table
    if len(names) > table.num_columns:
        raise _too_many(node, table.num_columns)
    return table.rename_columns(names + table.column_names[len(names) :])
