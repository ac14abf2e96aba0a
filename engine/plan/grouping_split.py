"""Split a SELECT block with ROLLUP / CUBE / GROUPING SETS between the eddy and DuckDB.

``GROUP BY ROLLUP (a, b)`` is several groupings of one input: (a, b), (a), (). The eddy
runs the block's FROM and WHERE (joins, selections, the adaptive part) and computes every
input column the rest reads as a helper column (``__h0``, ...), as engine/plan/window_split.py
does for windows, and registered Python functions whole, since only the eddy can call
them. DuckDB then runs the grouping sets, the aggregates, ``grouping()`` /
``grouping_id()``, HAVING, windows, QUALIFY, DISTINCT [ON], ORDER BY and LIMIT over the
eddy's output, the table ``__base`` (engine/above/duckdb_runtime.py): the block's own text
with its input columns replaced by helpers. A grouping key and the select item that
repeats it become the same helper, so DuckDB matches them, and ``grouping(k)`` sees a
grouping column, as it must. A block that only calls ``grouping()`` over a plain GROUP BY
takes the same path.

Names resolve as in DuckDB: in GROUP BY an input column wins over a select alias
(``a AS b ... GROUP BY b`` groups by the input ``b``); in HAVING an input column wins when
it is a grouping key, else the alias; in ORDER BY, QUALIFY and DISTINCT ON the alias wins.
A name kept as an alias stays a bare name in DuckDB's query, where the select items carry
the block's output names.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from sqlglot import exp

from eddies.engine.frontend.allowlist import is_all
from eddies.engine.plan.window_split import BASE, Hoister, output_name
from eddies.errors import UnsupportedQueryError, describe

#: The GROUP BY constructs that are several groupings at once.
GROUPING_SETS = (exp.Rollup, exp.Cube, exp.GroupingSets)
#: The functions that tell the groupings apart.
GROUPING_CALLS = (exp.Grouping, exp.GroupingId)
#: Nodes that may hold a grouping key directly (``GROUPING SETS ((a, b), a)``).
_KEY_HOLDERS = (exp.Group, exp.Paren, exp.Tuple, *GROUPING_SETS)
#: Clauses DuckDB evaluates above the eddy, and how a bare name in each resolves.
_ALIAS_FIRST = ("qualify", "order", "distinct")


def needs_grouping_sets(select: exp.Select) -> bool:
    """Whether ``select`` groups by ROLLUP / CUBE / GROUPING SETS or calls ``grouping()``
    / ``grouping_id()`` of its own (the blocks :func:`split_grouping_block` splits)."""
    group = select.args.get("group")
    if group is not None and any(isinstance(e, GROUPING_SETS) for e in group.expressions):
        return True
    return any(g.parent_select is select for g in select.find_all(*GROUPING_CALLS))


@dataclass
class GroupingSplit:
    """A block split by :func:`split_grouping_block`: ``inner`` is the eddy's block (its
    select list the helper columns ``__h0``, ...), ``outer`` DuckDB's query over its output,
    read as the table :data:`BASE`."""

    inner: exp.Select
    outer: exp.Select


class _Columns:
    """How one block's column references become helper columns (one per input column)."""

    def __init__(self, select: exp.Select, hoister: Hoister) -> None:
        self.hoister = hoister
        qualifiers: dict[str, set[str]] = {}
        for column in select.find_all(exp.Column):
            if column.parent_select is select and column.table:
                qualifiers.setdefault(column.name.lower(), set()).add(column.table.lower())
        # ``t.a`` and ``a`` are one helper when ``a`` is read under one qualifier only (were
        # it ambiguous, the eddy says so); DuckDB must see a key and its select item alike.
        self._by_name = {name for name, tables in qualifiers.items() if len(tables) == 1}

    def key(self, column: exp.Column) -> str:
        name = column.name.lower()
        if not column.table or name in self._by_name:
            return name
        return f"{column.table.lower()}.{name}"


def _rewrite(
    node: exp.Expression, columns: _Columns, keep: Callable[[exp.Column], bool]
) -> exp.Expression:
    """``node`` for DuckDB: each input column (and each registered function call) replaced
    by its helper column; a column ``keep`` says is a select alias stays a bare name."""
    hoister = columns.hoister

    def replace(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
            return n if keep(n) else hoister.hoist(n, columns.key(n))
        if isinstance(n, exp.Anonymous) and n.name.lower() in hoister.functions:
            inner = n.find(exp.AggFunc, exp.Window, *GROUPING_CALLS)
            if inner is not None:
                raise UnsupportedQueryError(
                    "a registered function over an aggregate, grouping() or window result "
                    "in a GROUP BY ROLLUP / CUBE / GROUPING SETS block is not supported (it "
                    f"runs in the eddy, below the grouping): {describe(n)}"
                )
            return hoister.hoist(n)
        if isinstance(n, exp.Subquery | exp.Exists):
            raise UnsupportedQueryError(
                "a subquery outside WHERE in a GROUP BY ROLLUP / CUBE / GROUPING SETS block "
                f"is not supported: {describe(n)}"
            )
        return n

    return node.copy().transform(replace, copy=False)


def _group_key_names(group: exp.Group | None) -> set[str]:
    """Lower-case names of the bare columns that are grouping keys of ``group``."""
    if group is None:
        return set()
    return {
        c.name.lower()
        for c in group.find_all(exp.Column)
        if isinstance(c.parent, _KEY_HOLDERS) and not c.table
    }


def _resolvers(
    select: exp.Select, inputs: Collection[str] | None
) -> dict[str, Callable[[exp.Column], bool]]:
    """Per clause, whether a column reference there is a select alias (module docstring).

    ``inputs``: lower-case names of the block's input columns, None when not all known
    (a name is then taken for an input column wherever that may win)."""
    aliases = {
        output_name(i).lower()
        for i in select.expressions
        if isinstance(i, exp.Alias) or not isinstance(i, exp.Column)
    }
    keys = _group_key_names(select.args.get("group"))

    def bare_alias(c: exp.Column) -> bool:
        return not c.table and c.name.lower() in aliases

    def not_input(c: exp.Column) -> bool:
        return inputs is not None and c.name.lower() not in inputs

    return {
        "expressions": lambda c: False,
        "group": lambda c: bare_alias(c) and not_input(c),
        "having": lambda c: bare_alias(c) and (not_input(c) or c.name.lower() not in keys),
        **dict.fromkeys(_ALIAS_FIRST, bare_alias),
    }


def split_grouping_block(
    select: exp.Select, functions: Collection[str], inputs: Collection[str] | None
) -> GroupingSplit:
    """Split ``select`` (a block :func:`needs_grouping_sets`) into the eddy's part and
    DuckDB's (module docstring).

    ``functions``: lower-case names of registered Python functions; ``inputs``: lower-case
    names of the columns of the block's FROM (None when some are unknown). Raises
    UnsupportedQueryError for a ``*`` item, a subquery outside WHERE, or a registered
    function over an aggregate or grouping result.
    """
    for item in select.expressions:
        if item.is_star:
            raise UnsupportedQueryError(
                f"'*' in a GROUP BY ROLLUP / CUBE / GROUPING SETS block is not supported: "
                f"{describe(item)}"
            )
    columns = _Columns(select, Hoister({name.lower() for name in functions}))
    keep = _resolvers(select, inputs)
    outer = exp.Select(
        expressions=[
            exp.alias_(
                _rewrite(i.unalias(), columns, keep["expressions"]), output_name(i), quoted=True
            )
            for i in select.expressions
        ]
    ).from_(BASE)
    for key in ("group", "having", "qualify", "order", "distinct"):
        clause = select.args.get(key)
        if clause is not None:
            outer.set(key, _rewrite_clause(clause, columns, keep[key]))
    for key in ("limit", "offset"):
        if select.args.get(key) is not None:
            outer.set(key, select.args[key].copy())
    inner = select.copy()
    for key in ("group", "having", "qualify", "order", "limit", "offset", "distinct"):
        inner.set(key, None)
    hoisted = columns.hoister.items or [exp.alias_(exp.Literal.number(1), "__h0", quoted=True)]
    inner.set("expressions", hoisted)
    return GroupingSplit(inner, outer)


def _rewrite_clause(
    clause: exp.Expression, columns: _Columns, keep: Callable[[exp.Column], bool]
) -> exp.Expression:
    """A clause for DuckDB; ORDER BY ALL and positions stay as written."""
    if not isinstance(clause, exp.Order):
        return _rewrite(clause, columns, keep)
    items = []
    for ordered in clause.expressions:
        new = ordered.copy()
        term = ordered.this
        if not is_all(term) and not (isinstance(term, exp.Literal) and not term.is_string):
            new.set("this", _rewrite(term, columns, keep))
        items.append(new)
    return exp.Order(expressions=items)
