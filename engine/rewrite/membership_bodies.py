"""[NOT] IN / [NOT] EXISTS subqueries whose body is not a filter over its FROM.

The eddy answers ``x IN (q)`` and ``EXISTS (q)`` as semi-/anti-join steps, and
engine/rewrite/decorrelate.py's ``membership_counts`` as counts, both of which read ``q`` as *one
row per qualifying row of its FROM* (``sql_allowlist.is_filter_body``). Other bodies mean
something else, and are rewritten first (engine/execution/composite.py calls this module):

- **One row by construction.** A body that aggregates without GROUP BY (an aggregate in
  its SELECT list, or a HAVING: ``SELECT max(u.y) FROM u WHERE ...``) has exactly one
  row, even over no input rows (a COUNT of 0, a MAX of NULL). So ``EXISTS (q)`` is TRUE,
  and with ``HAVING h`` it is ``COALESCE((SELECT h FROM ... WHERE ...), FALSE)``: the one
  row survives iff ``h`` is TRUE; and ``x IN (q)`` is ``x = (q)`` — SQL's ``x = v1 OR
  ...`` over one value, NULLs included — with NOT IN its negation (with HAVING,
  ``COALESCE(h, FALSE) AND x = (q)``). The scalar subqueries this makes, correlated or
  not, are run by engine/rewrite/decorrelate.py and composite.py as any other.
- **Anything else, uncorrelated** (GROUP BY, HAVING, ORDER BY ... LIMIT, OFFSET,
  DISTINCT ON, a set operation, a window): composite.py runs the body as its own query;
  ``EXISTS`` becomes TRUE or FALSE by its row count, and ``x IN (q)`` a semi-join over the
  materialized rows (:func:`over_materialized`), NOT IN's NULL semantics included.
- **Grouped, correlated by equalities** (``EXISTS (SELECT .. FROM u WHERE u.k = t.k AND p
  GROUP BY G HAVING h)``): the groups of ``G`` over the rows with ``u.k = t.k`` are
  exactly the groups of ``G, u.k`` with that key, HAVING included, so the body becomes an
  uncorrelated grouped query ``D`` (``SELECT u.k AS __k0 [, e AS __v] FROM u WHERE p GROUP
  BY G, u.k HAVING h``), run first, and a filter over it, ``SELECT .. FROM D WHERE
  D.__k0 = t.k`` (:func:`grouped_form`); ``IS NOT DISTINCT FROM`` correlations likewise.
- **Anything else, correlated**: refused with UnsupportedQueryError naming the clause.

Source: SQL's definition of IN and EXISTS over a table expression; Kim (1982) and Ganski &
Wong (1987) for aggregates over an empty correlated group (the COUNT bug).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlglot import exp

from eddies.engine.frontend.allowlist import is_aggregate_only
from eddies.engine.frontend.parse import conjuncts_of
from eddies.engine.plan.window_split import named
from eddies.errors import UnsupportedQueryError, describe

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


#: Clauses a grouped correlated body may not have for :func:`grouped_form`.
_NOT_GROUPED_FORM = ("limit", "offset", "qualify", "with_", "windows")


@dataclass
class GroupedForm:
    """A correlated grouped body split for :func:`grouped_form`: ``derived`` (uncorrelated,
    to run first) and the outer sides of its correlation keys ``__k0, __k1, ...``, each
    with whether it is compared NULL-safely (IS NOT DISTINCT FROM)."""

    derived: exp.Select
    outer: list[tuple[exp.Expression, bool]]


def grouped_form(
    node: exp.Exists | exp.In, query: exp.Expression, outer_ids: Collection[int]
) -> GroupedForm | None:
    """The split of a GROUP BY body correlated only by WHERE equalities ``inner = outer``
    (or IS NOT DISTINCT FROM) — see the module docstring — or None when ``query`` is not
    of that shape. ``outer_ids``: ids of ``query``'s columns that read the outer row
    (decorrelate.outer_columns)."""
    if not isinstance(query, exp.Select):
        return None
    group = query.args.get("group")
    if group is None or group.args.get("all") or any(query.args.get(k) for k in _NOT_GROUPED_FORM):
        return None
    distinct = query.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        return None
    if query.find(exp.Window) is not None:
        return None
    where = query.args.get("where")
    conjuncts = conjuncts_of(where.this) if where is not None else []
    keys: list[int] = []
    covered: set[int] = set()
    for i, term in enumerate(conjuncts):
        if not any(id(c) in outer_ids for c in term.find_all(exp.Column)):
            continue
        if not isinstance(term, exp.EQ | exp.NullSafeEQ):
            return None
        sides = [_side(term.this, outer_ids), _side(term.expression, outer_ids)]
        if sorted(sides) != ["inner", "outer"]:
            return None
        keys.append(i)
        covered |= {id(c) for c in term.find_all(exp.Column)}
    if not keys or not set(outer_ids) <= covered:
        return None  # an outer column elsewhere (SELECT, HAVING, ON, ...): not this shape
    derived = query.copy()
    copied = conjuncts_of(derived.args["where"].this)
    outer: list[tuple[exp.Expression, bool]] = []
    items: list[exp.Expression] = []
    for n, i in enumerate(keys):
        term = copied[i]
        inner_first = _side(conjuncts[i].this, outer_ids) == "inner"
        inner, outer_side = (
            (term.this, term.expression) if inner_first else (term.expression, term.this)
        )
        outer.append((outer_side.copy(), isinstance(term, exp.NullSafeEQ)))
        items.append(named(inner.copy(), f"{KEY_COLUMN}{n}"))
        derived.args["group"].append("expressions", inner.copy())
    rest = [t.copy() for j, t in enumerate(copied) if j not in keys]
    derived.set("where", exp.Where(this=exp.and_(*rest)) if rest else None)
    if isinstance(node, exp.In):
        if len(query.expressions) != 1 or query.expressions[0].is_star:
            raise UnsupportedQueryError(
                f"IN (SELECT ...) needs exactly one column in the subquery: {describe(query)}"
            )
        items.insert(0, named(derived.expressions[0].unalias().copy(), VALUE_COLUMN))
    derived.set("expressions", items or [exp.Literal.number(1)])
    derived.set("order", None)
    derived.set("distinct", None)
    return GroupedForm(derived, outer)


#: The prefix of the correlation key columns of a grouped form's derived table.
KEY_COLUMN = "__k"


def _side(node: exp.Expression, outer_ids: Collection[int]) -> str:
    """ "outer", "inner" or "mixed" (or "none") by the columns ``node`` reads."""
    columns = [c for c in node.find_all(exp.Column) if not isinstance(c.this, exp.Star)]
    reads_outer = any(id(c) in outer_ids for c in columns)
    reads_inner = any(id(c) not in outer_ids for c in columns)
    if reads_outer and reads_inner:
        return "mixed"
    return "outer" if reads_outer else "inner" if reads_inner else "none"


def over_grouped(node: exp.Exists | exp.In, table: str, form: GroupedForm) -> None:
    """Point ``node``'s body at ``table`` (``form.derived``'s rows): ``SELECT table.__v
    (or 1) FROM table WHERE table.__k0 = outer0 AND ...``."""
    item = (
        exp.column(VALUE_COLUMN, table=table) if isinstance(node, exp.In) else exp.Literal.number(1)
    )
    terms = []
    for n, (outer, null_safe) in enumerate(form.outer):
        key = exp.column(f"{KEY_COLUMN}{n}", table=table)
        kind = exp.NullSafeEQ if null_safe else exp.EQ
        terms.append(kind(this=key, expression=outer.copy()))
    body = exp.select(item).from_(table).where(exp.and_(*terms))
    if isinstance(node, exp.In):
        node.args["query"].set("this", body)
    else:
        node.set("this", body)
