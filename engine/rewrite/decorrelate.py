"""Correlated scalar subqueries, rewritten into a grouped derived table and a LEFT JOIN.

``SELECT t.a, (SELECT max(u.y) FROM u WHERE u.k = t.k) FROM t`` asks, for each row of t,
an aggregate over the rows of u with that row's k. The classic decorrelation (Kim 1982,
with Ganski and Wong's fix of its COUNT bug; DuckDB's planner does the same) evaluates the
subquery once per *key* instead of once per row::

    SELECT t.a, __sq_1.__a0 FROM t
    LEFT JOIN (SELECT u.k AS __k0, max(u.y) AS __a0 FROM u GROUP BY u.k) AS __sq_1
           ON __sq_1.__k0 = t.k

engine/execution/composite.py runs the derived table as its own query, and the outer eddy joins it
as a LEFT JOIN step (engine/plan/outer_and_semi_joins.py): a row of t whose key has no group is
padded
with NULLs once the derived table's SteM is complete (stems-2003 §2.1.4). The rules:

- *Correlation*: when each conjunct of the subquery's WHERE that reads the outer row is
  ``inner = outer`` or ``inner IS NOT DISTINCT FROM outer`` (one side reads only the
  subquery's tables, the other only the outer row), the inner sides become the GROUP BY
  keys and the pairs the join's ON. A conjunct over the outer row alone (``t.x > 5``)
  joins the ON too (false: the subquery is over no rows). Any other correlation
  (``u.y < t.x``) goes through the domain of the outer values it reads (:func:`_domain`):
  the distinct values are joined into the subquery and it is grouped on them.
- *NULL keys*: ``u.k = t.k`` is never TRUE when either is NULL, so such a row meets no
  group and sees the subquery over no rows, as SQL says; ``IS NOT DISTINCT FROM`` matches
  the NULL group.
- *COUNT bug*: over no rows ``count`` is 0, not NULL, so a count in the subquery becomes
  ``coalesce(__sq.__aN, 0)`` (every other aggregate eddies runs is NULL over no rows). The
  rest of the select expression, and any outer column in it, is evaluated in the outer
  block over the aggregates' values, so ``(SELECT count(*) + 1 ...)`` is 1 for no rows.
- *No aggregate* (``(SELECT u.y FROM u WHERE u.k = t.k)``): the derived table keeps
  ``any_value`` of the value and ``count(*)`` per key, and the outer expression is
  ``__eddies_one_row(__n, value)``: NULL for no row, the value for one, and for more than
  one the EddiesError DuckDB 2.0 raises ("More than one row returned by a subquery used as
  an expression"), raised when the eddy evaluates that row: after every conjunct of the
  outer block that does not read the subquery (the LEFT JOIN step waits for them), as
  DuckDB pushes those below its SINGLE join. ``ORDER BY ... LIMIT n [OFFSET m]`` keeps
  rows m+1..m+n per key (``row_number()`` over the keys); ``DISTINCT`` is kept.

Refused with UnsupportedQueryError: a correlated subquery outside the SELECT list and
WHERE (engine/execution/composite.py first moves those of HAVING, ORDER BY and QUALIFY into a SELECT
list: engine/plan/having_split.py, engine/plan/window_split.py; ON stays refused), one with GROUP
BY, HAVING, QUALIFY, a window, WITH, a set operation or a nested subquery reading the
outermost row, outer columns inside its aggregates or its FROM, a string key compared
with a non-string, and one in the SELECT list of an aggregating block unless every outer
column it reads is a GROUP BY key (or the block has GROUP BY ALL, which groups by the
subquery's value).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from eddies.engine.expr.functions.scalar_subquery import ONE_ROW
from eddies.engine.frontend.allowlist import is_semi_join, membership_subquery
from eddies.engine.frontend.parse import conjuncts_of
from eddies.errors import UnsupportedQueryError, describe

#: Aggregates that are not NULL over no rows (the COUNT bug): eddies runs only count.
_ZERO_OVER_NO_ROWS = (exp.Count,)
#: Clauses of a correlated subquery the rewrite does not handle.
_REFUSED_ARGS = {
    "group": "GROUP BY",
    "having": "HAVING",
    "qualify": "QUALIFY",
    "with_": "WITH",
    "windows": "WINDOW",
}


_CLAUSE_NAMES = {
    "joins": "a JOIN's ON",
    "having": "HAVING",
    "order": "ORDER BY",
    "group": "GROUP BY",
    "qualify": "QUALIFY",
    "distinct": "DISTINCT ON",
}


def outer_columns(query: exp.Expression, tables: Any) -> list[exp.Column]:
    """The columns of ``query`` (a subquery) that read an enclosing query's row.

    A qualified column is the outer query's when its qualifier names none of the tables,
    aliases or CTEs inside ``query``; an unqualified one when no table of ``query`` has
    that column (``tables`` has ``has_table``/``table`` as a Catalog; with a table of
    unknown columns inside, a derived table say, an unqualified column counts as inner).
    """
    names = {t.alias_or_name.lower() for t in query.find_all(exp.Table)}
    names |= {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
    names |= {s.alias_or_name.lower() for s in query.find_all(exp.Subquery) if s.alias}
    known: set[str] | None = set()
    for table in query.find_all(exp.Table):
        if (
            known is not None
            and tables.has_table(table.name)
            and table.name.lower() not in {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
        ):
            known |= {f.name.lower() for f in tables.table(table.name).schema}
        else:
            known = None
    if any(isinstance(s.parent, exp.From | exp.Join) for s in query.find_all(exp.Subquery)):
        known = None
    selected = {
        e.alias.lower() for s in query.find_all(exp.Select) for e in s.expressions if e.alias
    }
    out = []
    for column in query.find_all(exp.Column):
        if isinstance(column.this, exp.Star):
            continue
        if column.table:
            if column.table.lower() not in names:
                out.append(column)
        elif known is not None and column.name.lower() not in known | selected:
            out.append(column)
    return out


def _reads(node: exp.Expression, outer: set[int]) -> tuple[bool, bool]:
    """(reads an outer column, reads an inner column) for ``node``."""
    columns = [c for c in node.find_all(exp.Column) if not isinstance(c.this, exp.Star)]
    return any(id(c) in outer for c in columns), any(id(c) not in outer for c in columns)


def _clause(node: exp.Expression, select: exp.Select) -> str:
    """The argument of ``select`` that holds ``node`` (``expressions``, ``where``, ...)."""
    while node.parent is not select:
        node = node.parent
    return node.arg_key


def _refuse(what: str, node: exp.Expression) -> UnsupportedQueryError:
    return UnsupportedQueryError(f"a correlated scalar subquery {what}: {describe(node)}")


def _within(node: exp.Expression, kind: type, top: exp.Expression) -> bool:
    """Whether an ancestor of ``node`` below ``top`` is a ``kind``."""
    node = node.parent
    while node is not None and node is not top:
        if isinstance(node, kind):
            return True
        node = node.parent
    return False


def _aggregates(value: exp.Expression) -> list[exp.Expression]:
    """The outermost aggregate calls of ``value`` (with their FILTER / IGNORE NULLS)."""
    found = []
    for agg in value.find_all(exp.AggFunc):
        if _within(agg, exp.Window | exp.AggFunc, value.parent):
            continue
        while isinstance(agg.parent, exp.Filter | exp.IgnoreNulls):
            agg = agg.parent
        found.append(agg)
    return found


def _maximal(value: exp.Expression, outer: set[int]) -> list[exp.Expression]:
    """The largest subtrees of ``value`` that read inner columns and no outer one."""
    found: list[exp.Expression] = []
    stack = [value]
    while stack:
        node = stack.pop()
        reads_outer, reads_inner = _reads(node, outer)
        if reads_inner and not reads_outer:
            found.append(node)
        elif reads_inner:
            stack.extend(node.iter_expressions())
    return found


def _aggregating(select: exp.Select) -> bool:
    if select.args.get("group") is not None or select.args.get("having") is not None:
        return True
    return any(
        agg.find_ancestor(exp.Window) is None and agg.parent_select is select
        for item in select.expressions
        for agg in item.find_all(exp.AggFunc)
    )


@dataclass
class Correlation:
    """One rewritten subquery: the derived table's alias and, for its key column
    ``__k{i}``, the outer expression it is compared with (composite.py checks types)."""

    alias: str
    outer_keys: list[exp.Expression]
    join: exp.Join


def decorrelate(select: exp.Select, tables: Any, fresh: Callable[[str], str]) -> list[Correlation]:
    """Rewrite every correlated scalar subquery of ``select``'s own SELECT list and WHERE
    in place (see the module docstring): each adds a derived table, LEFT JOINed (or CROSS
    JOINed, without correlation keys) after the block's FROM. ``fresh(prefix)`` gives
    unique names. Raises UnsupportedQueryError for the shapes the docstring refuses."""
    done = []
    # The output columns keep their text's names (DuckDB names them so too).
    names = [
        None if isinstance(e, exp.Alias) else e.sql(dialect="duckdb") for e in select.expressions
    ]
    renamed: set[int] = set()
    for sub in list(select.find_all(exp.Subquery)):
        if sub.parent_select is not select or isinstance(sub.parent, exp.In | exp.From | exp.Join):
            continue
        outer = outer_columns(sub.this, tables)
        if not outer:
            continue
        if _clause(sub, select) == "expressions":
            top = sub
            while top.parent is not select:
                top = top.parent
            renamed.add(top.index)
        done.append(_rewrite(select, sub, outer, tables, fresh))
    for index in sorted(renamed):
        item, name = select.expressions[index], names[index]
        if name is not None:
            item.replace(exp.alias_(item.copy(), name, quoted=True))
    if done:
        _hide_from_stars(select, done)
    return done


def _hide_from_stars(select: exp.Select, done: list[Correlation]) -> None:
    """``SELECT *`` must not show the derived tables' columns: each bare ``*`` EXCLUDEs
    them, qualified (``* EXCLUDE (__sq_1.__k0, ...)``, select_items._star_items)."""
    hidden = [
        exp.column(item.alias_or_name, table=c.alias)
        for c in done
        for item in c.join.this.this.expressions
    ]
    for item in select.expressions:
        if isinstance(item, exp.Star):
            item.set("except_", [*(item.args.get("except_") or []), *(h.copy() for h in hidden)])


def string_mismatch(key: pa.DataType, outer: pa.DataType) -> bool:
    """Whether a key of type ``key`` compared with an outer value of type ``outer`` is a
    string against a non-string: DuckDB casts the string, so two distinct keys ('1', '01')
    could equal one outer value and the grouped table would match it twice."""
    stringy = (pa.types.is_string, pa.types.is_large_string)
    key_text = any(f(key) for f in stringy)
    outer_text = any(f(outer) for f in stringy)
    return key_text != outer_text and pa.null() not in (key, outer)


def _rewrite(
    select: exp.Select,
    sub: exp.Subquery,
    outer_list: list[exp.Column],
    tables: Any,
    fresh: Callable[[str], str],
) -> Correlation:
    """Replace the correlated scalar subquery ``sub`` of ``select`` by the value of a
    derived table joined to the block (the module docstring's rules); the Correlation
    made. UnsupportedQueryError for a shape the docstring refuses."""
    place = _clause(sub, select)
    query = _checked_subquery(sub, place, outer_list)
    outer = {id(c) for c in outer_list}
    keep, on_only, correlated = _split_where(query, outer)
    joins = [j.copy() for j in query.args.get("joins") or []]
    pairs = [_key_pair(c, outer) for c in correlated]
    if all(p is not None for p in pairs):
        keys = [p for p in pairs if p is not None]
    else:  # not only equalities: correlate through the outer values' domain
        keys = _domain(select, correlated, outer, keep, joins, fresh)

    alias = fresh("sq")
    value = query.expressions[0].unalias()  # rewritten in place: the subquery is replaced below
    derived = exp.Select()
    derived.set("from_", query.args["from_"].copy())
    derived.set("joins", joins)
    if keep:
        derived = derived.where(exp.and_(*[c.copy() for c in keep]), copy=False)
    key_items = [exp.alias_(inner.copy(), f"__k{i}") for i, (inner, _, _) in enumerate(keys)]
    aggregates = _aggregates(value)
    if aggregates:
        derived, replacement_value = _aggregated(
            query, derived, key_items, value, aggregates, outer, alias, sub
        )
    else:
        derived, replacement_value = _single_row(query, derived, key_items, value, outer, alias)

    join = _join(derived, alias, keys, on_only)
    per_row = _within(sub, exp.AggFunc | exp.Filter, select)  # an aggregate's argument
    if place == "expressions" and _aggregating(select) and not per_row:
        _group_by_keys(select, sub, outer_list, replacement_value, alias)
    sub.replace(exp.paren(replacement_value, copy=False))
    select.append("joins", join)
    return Correlation(alias, [outer_side for _, outer_side, _ in keys], join)


def _checked_subquery(sub: exp.Subquery, place: str, outer_list: list[exp.Column]) -> exp.Select:
    """``sub``'s SELECT, once its place in the block (``place``, :func:`_clause`) and its
    shape are ones the rewrite takes; else the UnsupportedQueryError naming what is not."""
    if place not in ("expressions", "where"):
        where = _CLAUSE_NAMES.get(place, place.rstrip("_").upper())
        raise _refuse(f"in {where} is not supported (only in the SELECT list and WHERE)", sub)
    query = sub.this
    if not isinstance(query, exp.Select):
        raise _refuse("must be one SELECT (a set operation is not supported)", sub)
    for key, what in _REFUSED_ARGS.items():
        if query.args.get(key):
            raise _refuse(f"with {what} is not supported", sub)
    distinct = query.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        raise _refuse("with DISTINCT ON is not supported", sub)
    if len(query.expressions) != 1 or query.expressions[0].is_star:
        raise UnsupportedQueryError(
            f"a scalar subquery must return one column, this one returns "
            f"{len(query.expressions)}: {describe(sub)}"
        )
    if any(c.find_ancestor(exp.Select) is not query for c in outer_list):
        raise _refuse("whose nested subquery reads the outer query is not supported", sub)
    if query.expressions[0].find(exp.Select) is not None:
        raise _refuse("with a subquery in its SELECT list is not supported", sub)
    if any(w.parent_select is query for w in query.find_all(exp.Window)):
        raise _refuse("with a window function is not supported", sub)
    outer = {id(c) for c in outer_list}
    for key in ("from_", "joins"):
        value = query.args.get(key)
        for part in value if isinstance(value, list) else [value] if value else []:
            if _reads(part, outer)[0]:
                raise _refuse("reading the outer query in its FROM or ON is not supported", part)
    return query


def _split_where(
    query: exp.Select, outer: set[int]
) -> tuple[list[exp.Expression], list[exp.Expression], list[exp.Expression]]:
    """``query``'s WHERE conjuncts as (uncorrelated: they stay, over the outer row only:
    they go to the join's ON, correlated: they become keys)."""
    where = query.args.get("where")
    keep: list[exp.Expression] = []
    on_only: list[exp.Expression] = []
    correlated: list[exp.Expression] = []
    for conjunct in conjuncts_of(where.this) if where is not None else []:
        reads_outer, reads_inner = _reads(conjunct, outer)
        if not reads_outer:
            keep.append(conjunct)
        elif not reads_inner:
            on_only.append(conjunct)
        else:
            correlated.append(conjunct)
    return keep, on_only, correlated


def _aggregated(
    query: exp.Select,
    derived: exp.Select,
    key_items: list[exp.Expression],
    value: exp.Expression,
    aggregates: list[exp.Expression],
    outer: set[int],
    alias: str,
    sub: exp.Subquery,
) -> tuple[exp.Select, exp.Expression]:
    """The derived table and outer expression for a subquery with aggregates: one row
    per key, each aggregate as ``__a<j>`` (a count read as ``coalesce(__a<j>, 0)``: the
    COUNT bug), the rest of ``value`` evaluated in the outer block."""
    if any(query.args.get(k) for k in ("order", "limit", "offset", "distinct")):
        raise _refuse(
            "with an aggregate and ORDER BY, LIMIT, OFFSET or DISTINCT is not supported", sub
        )
    items = list(key_items)
    for j, agg in enumerate(aggregates):
        if _reads(agg, outer)[0]:
            raise _refuse("with an outer column inside an aggregate is not supported", agg)
        items.append(exp.alias_(agg.copy(), f"__a{j}"))
        column = exp.column(f"__a{j}", table=alias)
        inner_agg = agg
        while isinstance(inner_agg, exp.Filter | exp.IgnoreNulls):
            inner_agg = inner_agg.this
        replacement: exp.Expression = column
        if isinstance(inner_agg, _ZERO_OVER_NO_ROWS):
            replacement = exp.func("coalesce", column, exp.Literal.number(0))
        if agg is value:
            value = replacement
        else:
            agg.replace(replacement)
    for column in value.find_all(exp.Column):
        if id(column) not in outer and column.table != alias:
            raise _refuse(f"reads {column.sql(dialect='duckdb')} outside an aggregate", sub)
    derived.set("expressions", items)
    if key_items:
        derived.set("group", exp.Group(expressions=[k.this.copy() for k in key_items]))
    return derived, value


def _join(
    derived: exp.Select,
    alias: str,
    keys: list[tuple[exp.Expression, exp.Expression, type]],
    on_only: list[exp.Expression],
) -> exp.Join:
    """``derived`` as ``alias``, LEFT JOINed on its keys ``__k<i>`` and the conjuncts over
    the outer row only; CROSS JOINed when there are none."""
    table = exp.Subquery(this=derived, alias=exp.TableAlias(this=exp.to_identifier(alias)))
    conditions = [
        kind(this=exp.column(f"__k{i}", table=alias), expression=outer_side.copy())
        for i, (_, outer_side, kind) in enumerate(keys)
    ] + [c.copy() for c in on_only]
    if conditions:
        return exp.Join(this=table, side="LEFT", on=exp.and_(*conditions))
    return exp.Join(this=table, kind="CROSS")


#: Operators whose result is NULL when an operand is NULL (a WHERE term of them drops it).
_STRICT = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Add, exp.Sub, exp.Mul)
_STRICT += (exp.Div, exp.Mod, exp.Neg, exp.Paren, exp.Cast)


def _domain(
    select: exp.Select,
    correlated: list[exp.Expression],
    outer: set[int],
    keep: list[exp.Expression],
    joins: list[exp.Expression],
    fresh: Callable[[str], str],
) -> list[tuple[exp.Expression, exp.Expression, type]]:
    """Correlation by any condition (``u.y < t.x``), through the *domain* of the outer
    values it reads (magic decorrelation, as DuckDB's dependent-join flattening): the
    distinct values ``(SELECT DISTINCT t.x AS __d0 FROM <the block's FROM>)`` are CROSS
    JOINed into the subquery (appended to ``joins``), the correlated terms read them
    instead of the outer row (appended to ``keep``), and the derived table is grouped on
    them. Returns the keys: each domain column against its outer column, ``=`` where a
    term is NULL whenever that column is (a NULL value then has no rows, as in SQL), and
    ``IS NOT DISTINCT FROM`` otherwise (the NULL value's group is its own)."""
    columns: dict[str, exp.Column] = {}
    for conjunct in correlated:
        for column in conjunct.find_all(exp.Column):
            if id(column) in outer:
                columns.setdefault(column.sql(dialect="duckdb"), column)
    domain_alias = fresh("domain")
    domain = exp.Select(
        expressions=[exp.alias_(c.copy(), f"__d{i}") for i, c in enumerate(columns.values())],
        distinct=exp.Distinct(),
    )
    domain.set("from_", select.args["from_"].copy())
    domain.set(
        "joins",
        [j.copy() for j in select.args.get("joins") or [] if not _added(j)],
    )
    index = {text: i for i, text in enumerate(columns)}
    strict: set[int] = set()
    for conjunct in correlated:
        copy = conjunct.copy()
        for column in list(copy.find_all(exp.Column)):
            text = column.sql(dialect="duckdb")
            original = next(
                (
                    c
                    for c in conjunct.find_all(exp.Column)
                    if id(c) in outer and c.sql(dialect="duckdb") == text
                ),
                None,
            )
            if original is None:
                continue
            if _strict_in(column, copy):
                strict.add(index[text])
            column.replace(exp.column(f"__d{index[text]}", table=domain_alias))
        keep.append(copy)
    joins.append(
        exp.Join(
            this=exp.Subquery(
                this=domain, alias=exp.TableAlias(this=exp.to_identifier(domain_alias))
            ),
            kind="CROSS",
        )
    )
    return [
        (
            exp.column(f"__d{i}", table=domain_alias),
            column.copy(),
            exp.EQ if i in strict else exp.NullSafeEQ,
        )
        for i, column in enumerate(columns.values())
    ]


def _strict_in(node: exp.Expression, top: exp.Expression) -> bool:
    """Whether ``top`` is NULL whenever ``node`` is: only strict operators between them."""
    while node is not top:
        node = node.parent
        if not isinstance(node, _STRICT):
            return False
    return True


def _added(join: exp.Expression) -> bool:
    """A LEFT JOIN this module added for an earlier subquery of the block."""
    table = join.this
    return isinstance(table, exp.Subquery) and table.alias_or_name.startswith("__sq_")


def _key_pair(
    conjunct: exp.Expression, outer: set[int]
) -> tuple[exp.Expression, exp.Expression, type] | None:
    """(inner side, outer side, EQ or NullSafeEQ) for an equality between an expression
    over the subquery's tables and one over the outer row; else None."""
    if not isinstance(conjunct, exp.EQ | exp.NullSafeEQ):
        return None
    left, right = conjunct.this, conjunct.expression
    lo, li = _reads(left, outer)
    ro, ri = _reads(right, outer)
    if li and not lo and ro and not ri:
        return left, right, type(conjunct)
    if ri and not ro and lo and not li:
        return right, left, type(conjunct)
    return None


def _single_row(
    query: exp.Select,
    derived: exp.Select,
    key_items: list[exp.Expression],
    value: exp.Expression,
    outer: set[int],
    alias: str,
) -> tuple[exp.Select, exp.Expression]:
    """The derived table and outer expression for a subquery without aggregate: its rows'
    values per key (at most ``LIMIT`` of them), ``any_value`` of each and ``count(*)``."""
    parts = _maximal(value, outer)
    inner_items = list(key_items) + [exp.alias_(p.copy(), f"__v{j}") for j, p in enumerate(parts)]
    limit, offset = query.args.get("limit"), query.args.get("offset")
    distinct = query.args.get("distinct")
    order = query.args.get("order")
    bounds: list[exp.Expression] = []
    if limit is not None or offset is not None:
        if distinct is not None:
            raise _refuse("with DISTINCT and LIMIT or OFFSET is not supported", query)
        first = _count(offset, "OFFSET") if offset is not None else 0
        window = exp.Window(
            this=exp.RowNumber(),
            partition_by=[k.this.copy() for k in key_items],
            order=order.copy() if order is not None else None,
        )
        inner_items.append(exp.alias_(window, "__rn"))
        rn = exp.column("__rn", table="__s")
        bounds.append(exp.GT(this=rn, expression=exp.Literal.number(first)))
        if limit is not None:
            last = first + _count(limit, "LIMIT")
            bounds.append(exp.LTE(this=rn, expression=exp.Literal.number(last)))
    derived.set("expressions", inner_items)
    if distinct is not None:
        derived.set("distinct", exp.Distinct())
    grouped = exp.select(
        *[exp.column(f"__k{i}", table="__s") for i in range(len(key_items))],
        *[
            exp.alias_(exp.AnyValue(this=exp.column(f"__v{j}", table="__s")), f"__a{j}")
            for j in range(len(parts))
        ],
        exp.alias_(exp.Count(this=exp.Star()), "__n"),
    ).from_(exp.Subquery(this=derived, alias=exp.TableAlias(this=exp.to_identifier("__s"))))
    if bounds:
        grouped = grouped.where(exp.and_(*bounds), copy=False)
    if key_items:
        grouped.set(
            "group",
            exp.Group(
                expressions=[exp.column(f"__k{i}", table="__s") for i in range(len(key_items))]
            ),
        )
    for j, part in enumerate(parts):
        column = exp.column(f"__a{j}", table=alias)
        if part is value:
            value = column
        else:
            part.replace(column)
    return grouped, exp.func(ONE_ROW, exp.column("__n", table=alias), value)


def _count(clause: exp.Expression, what: str) -> int:
    node = clause.args.get("expression") if isinstance(clause, exp.Limit | exp.Offset) else clause
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        return int(node.this)
    raise UnsupportedQueryError(
        f"{what} must be a non-negative integer literal: {describe(clause)}"
    )


def _group_by_keys(
    select: exp.Select,
    sub: exp.Subquery,
    outer_list: list[exp.Column],
    value: exp.Expression,
    alias: str,
) -> None:
    """In an aggregating block, group by the derived table's columns too: they depend on
    the outer columns the subquery reads, which must all be GROUP BY keys (DuckDB). Under
    GROUP BY ALL the rewritten item is a key itself (composite._group_by_all), as the
    subquery is in DuckDB."""
    group = select.args.get("group")
    if group is not None and group.args.get("all"):
        return
    if group is None:
        raise _refuse(
            "in the SELECT list of an aggregating block needs a GROUP BY of the outer "
            "columns it reads",
            sub,
        )
    grouped = {e.sql(dialect="duckdb").lower() for e in group.expressions}
    for column in outer_list:
        if column.sql(dialect="duckdb").lower() not in grouped:
            raise _refuse(f"reads {column.sql(dialect='duckdb')}, which is not a GROUP BY key", sub)
    seen = set()
    for column in value.find_all(exp.Column):
        if column.table == alias and column.name not in seen:
            seen.add(column.name)
            group.append("expressions", column.copy())


# ------------------------------------------------- IN / EXISTS outside WHERE conjuncts
#: SELECT arguments of a subquery the counting rewrite takes (DISTINCT changes no answer).
_FLAT_ARGS = {"expressions", "from_", "joins", "where", "distinct"}


def membership_counts(select: exp.Select, tables: Any) -> None:
    """Rewrite each ``[NOT] EXISTS (q)`` / ``x [NOT] IN (q)`` of ``select``'s own SELECT
    list and WHERE that the eddy does not take as a semi-/anti-join step (one not a
    top-level WHERE term — under OR, in CASE, in the SELECT list — or whose subquery
    joins tables or nests a subquery: sql_allowlist.is_semi_join) into scalar counting
    subqueries, which :func:`decorrelate` (correlated) or composite.py (uncorrelated) run:

    - ``EXISTS (SELECT .. FROM f WHERE c)`` is ``(SELECT count(*) FROM f WHERE c) > 0``;
    - ``x IN (SELECT y FROM f WHERE c)`` is SQL's three-valued ``x = y1 OR x = y2 ...``:
      TRUE if ``(SELECT count(*) FROM f WHERE c AND y = x) > 0``, else NULL if ``x`` is
      NULL and the subquery has rows, or one of its ``y`` is NULL; else FALSE (the
      equality ``y = x`` is one more correlation key).

    ``x``'s unqualified columns are qualified with the outer table that has them, so they
    stay the outer query's inside the subquery. Raises UnsupportedQueryError for a
    subquery with GROUP BY, HAVING, LIMIT, ORDER BY, a set operation or WITH.
    """
    for node in list(select.find_all(exp.Exists, exp.In)):
        query = membership_subquery(node)
        if query is None or node.parent_select is not select or is_semi_join(node):
            continue
        what = "EXISTS (a subquery)" if isinstance(node, exp.Exists) else "IN (subquery)"
        if not isinstance(query, exp.Select):
            raise UnsupportedQueryError(
                f"{what} over a set operation is not supported here: {describe(node)}"
            )
        for key, value in query.args.items():
            if value and key not in _FLAT_ARGS:
                raise UnsupportedQueryError(
                    f"{what} with {key.rstrip('_').upper()} is not supported here (a [NOT] "
                    "IN / EXISTS subquery outside a top-level WHERE term, or joining "
                    "tables, is counted, and may have no GROUP BY, HAVING, ORDER BY or "
                    f"LIMIT): {describe(node)}"
                )
        distinct = query.args.get("distinct")
        if distinct is not None and distinct.args.get("on") is not None:
            raise UnsupportedQueryError(f"DISTINCT ON in {what} is not supported: {describe(node)}")
        if isinstance(node, exp.Exists):
            node.replace(exp.paren(_more_than_none(query)))
            continue
        if len(query.expressions) != 1 or query.expressions[0].is_star:
            raise UnsupportedQueryError(
                f"IN (SELECT ...) needs exactly one column in the subquery: {describe(query)}"
            )
        y = query.expressions[0].unalias()
        x = _qualified(node.this, select, tables)
        found = _more_than_none(query, exp.EQ(this=y.copy(), expression=x.copy()))
        has_rows = exp.and_(exp.Is(this=x.copy(), expression=exp.Null()), _more_than_none(query))
        null_y = _more_than_none(query, exp.Is(this=y.copy(), expression=exp.Null()))
        three_valued = exp.Case(
            ifs=[
                exp.If(this=found, true=exp.true()),
                exp.If(this=exp.or_(has_rows, null_y), true=exp.Null()),
            ],
            default=exp.false(),
        )
        node.replace(exp.paren(three_valued))


def _more_than_none(query: exp.Select, condition: exp.Expression | None = None) -> exp.GT:
    """``(SELECT count(*) FROM query's FROM WHERE query's WHERE [AND condition]) > 0``."""
    counted = exp.Select(expressions=[exp.Count(this=exp.Star())])
    counted.set("from_", query.args["from_"].copy())
    counted.set("joins", [j.copy() for j in query.args.get("joins") or []])
    where = query.args.get("where")
    terms = [where.this.copy()] if where is not None else []
    if condition is not None:
        terms.append(condition)
    if terms:
        counted = counted.where(exp.and_(*terms), copy=False)
    return exp.GT(this=exp.Subquery(this=counted), expression=exp.Literal.number(0))


def _qualified(x: exp.Expression, select: exp.Select, tables: Any) -> exp.Expression:
    """``x`` with each unqualified column qualified by the one FROM table of ``select``
    that has it (left as written when none or several do: the eddy names the problem)."""
    x = x.copy()
    items = [select.args.get("from_"), *(select.args.get("joins") or [])]
    owners = []
    for item in items:
        table = item.this if item is not None else None
        if isinstance(table, exp.Table) and tables.has_table(table.name):
            names = {f.name.lower() for f in tables.table(table.name).schema}
            owners.append((table.alias_or_name, names))
    for column in list(x.find_all(exp.Column)):
        if column.table or isinstance(column.this, exp.Star):
            continue
        having = [alias for alias, names in owners if column.name.lower() in names]
        if len(having) == 1:
            column.set("table", exp.to_identifier(having[0]))
    return x
