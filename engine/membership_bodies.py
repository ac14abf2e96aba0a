"""[NOT] IN / [NOT] EXISTS subqueries whose body is not a filter over its FROM.

The eddy answers ``x IN (q)`` and ``EXISTS (q)`` as semi-/anti-join steps, and
engine/decorrelate.py's ``membership_counts`` as counts, both of which read ``q`` as *one
row per qualifying row of its FROM* (``sql_allowlist.is_filter_body``). Other bodies mean
something else, and are rewritten first (engine/composite.py calls this module):

- **One row by construction.** A body that aggregates without GROUP BY (an aggregate in
  its SELECT list, or a HAVING: ``SELECT max(u.y) FROM u WHERE ...``) has exactly one
  row, even over no input rows (a COUNT of 0, a MAX of NULL). So ``EXISTS (q)`` is TRUE,
  and with ``HAVING h`` it is ``COALESCE((SELECT h FROM ... WHERE ...), FALSE)``: the one
  row survives iff ``h`` is TRUE; and ``x IN (q)`` is ``x = (q)`` — SQL's ``x = v1 OR
  ...`` over one value, NULLs included — with NOT IN its negation (with HAVING,
  ``COALESCE(h, FALSE) AND x = (q)``). The scalar subqueries this makes, correlated or
  not, are run by engine/decorrelate.py and composite.py as any other.
- **Anything else, uncorrelated** (GROUP BY, HAVING, ORDER BY ... LIMIT, OFFSET,
  DISTINCT ON, a set operation, a window): composite.py runs the body as its own query;
  ``EXISTS`` becomes TRUE or FALSE by its row count, and ``x IN (q)`` a semi-join over the
  materialized rows (:func:`over_materialized`), NOT IN's NULL semantics included.
- **Anything else, correlated**: refused with UnsupportedQueryError naming the clause.

Source: SQL's definition of IN and EXISTS over a table expression; Kim (1982) and Ganski &
Wong (1987) for aggregates over an empty correlated group (the COUNT bug).
"""

from __future__ import annotations

from sqlglot import exp

from eddies.engine.errors import UnsupportedQueryError, describe
from eddies.engine.sql_allowlist import is_aggregate_only

#: Clauses of a one-row body that change how many rows it has (then it is materialized).
_ROW_COUNT_ARGS = ("limit", "offset", "qualify")

#: The column name a materialized IN body's one column gets.
VALUE_COLUMN = "__v"


def one_row_form(node: exp.Exists | exp.In, query: exp.Expression) -> exp.Expression | None:
    """The expression ``node`` equals when its body ``query`` has exactly one row by
    construction (see the module docstring), or None when this rewrite does not apply
    (the body may have several rows, or none for another reason than HAVING)."""
    if not is_aggregate_only(query):
        return None
    assert isinstance(query, exp.Select)
    if any(query.args.get(key) for key in _ROW_COUNT_ARGS):
        return None
    having = query.args.get("having")
    survives = None  # COALESCE((SELECT h ...), FALSE): whether the one row passes HAVING
    if having is not None:
        if having.this.find(exp.AggFunc) is None:
            return None  # over the outer row and constants only: materialized or refused
        survives = exp.func(
            "COALESCE", exp.Subquery(this=_one_value(query, having.this)), exp.false()
        )
    if isinstance(node, exp.Exists):
        return exp.true() if survives is None else survives
    if len(query.expressions) != 1 or query.expressions[0].is_star:
        raise UnsupportedQueryError(
            f"IN (SELECT ...) needs exactly one column in the subquery: {describe(query)}"
        )
    value = exp.Subquery(this=_one_value(query, query.expressions[0].unalias()))
    equal = exp.EQ(this=node.this.copy(), expression=value)
    return exp.paren(equal if survives is None else exp.and_(survives, equal))


def _one_value(query: exp.Select, item: exp.Expression) -> exp.Select:
    """``query`` (one group, no GROUP BY) with ``item`` as its only SELECT item and
    without HAVING or ORDER BY: a scalar subquery over the same rows."""
    scalar = query.copy()
    scalar.set("having", None)
    scalar.set("order", None)
    scalar.set("expressions", [item.copy()])
    return scalar


def over_materialized(node: exp.In, table: str) -> None:
    """Point ``x IN (q)`` at ``table``, the materialized rows of ``q`` with their one
    column named :data:`VALUE_COLUMN`: ``x IN (SELECT table.__v FROM table)``."""
    body = exp.select(exp.column(VALUE_COLUMN, table=table)).from_(table)
    node.args["query"].set("this", body)


def clauses(query: exp.Expression) -> str:
    """The clauses that make ``query`` more than a filter, for messages."""
    if not isinstance(query, exp.Select):
        return "a set operation"
    names = {
        "group": "GROUP BY",
        "having": "HAVING",
        "order": "ORDER BY",
        "limit": "LIMIT",
        "offset": "OFFSET",
        "qualify": "QUALIFY",
        "with_": "WITH",
    }
    found = [name for key, name in names.items() if query.args.get(key)]
    if is_aggregate_only(query):
        found.insert(0, "an aggregate")
    distinct = query.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        found.append("DISTINCT ON")
    if query.find(exp.Window):
        found.append("a window function")
    return ", ".join(found) or "this shape"
