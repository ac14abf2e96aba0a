"""Split a SELECT block with window functions between the eddy and DuckDB above it.

The eddy keeps the block's FROM, WHERE, GROUP BY and HAVING; every expression the
operators above read — a window function's arguments, its PARTITION BY and ORDER BY keys,
the columns and aggregates around it, the QUALIFY, DISTINCT ON and ORDER BY terms — is
*hoisted* into the eddy's select list as a helper column (``__h0``, ``__h1``, ...), so
registered Python functions and the eddy's own expression semantics still apply to them.
What remains above (window calls over helper columns, QUALIFY, DISTINCT [ON], ORDER BY,
LIMIT/OFFSET) is a DuckDB query over the eddy's output, the table ``__base``
(engine/above/duckdb_runtime.py runs it). The PostgreSQL eddy (eddies-in-postgresql §2.1.4)
likewise keeps
ordinary operators above the eddy's select-project-join block.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from eddies.engine.frontend.allowlist import WINDOW_FUNCTIONS, is_all
from eddies.errors import UnsupportedQueryError, describe

#: The name of the eddy's output in the DuckDB query above it.
BASE = "__base"


def needs_above(select: exp.Select) -> bool:
    """Whether ``select`` has a window function, QUALIFY, DISTINCT ON or ORDER BY ALL of
    its own (the operators that run above the eddy)."""
    distinct = select.args.get("distinct")
    order = select.args.get("order")
    return (
        any(w.parent_select is select for w in select.find_all(exp.Window))
        or select.args.get("qualify") is not None
        or (distinct is not None and distinct.args.get("on") is not None)
        or (order is not None and any(is_all(o.this) for o in order.expressions))
        or (order is not None and any(o.find(exp.Window) for o in order.expressions))
    )


class Hoister:
    """The eddy's part of a block whose top runs in DuckDB: hoisted expressions.

    ``items`` are the eddy's SELECT items (``expr AS "__h0"``, ...); :meth:`hoist` adds one
    per distinct expression and returns the helper column that names it above.
    ``functions``: lower-case names of registered Python functions (they run in the eddy).
    """

    def __init__(self, functions: set[str]) -> None:
        self.functions = functions  # registered Python functions: evaluated in the eddy
        self.items: list[exp.Expression] = []
        self._names: dict[str, exp.Column] = {}

    def hoist(self, node: exp.Expression, key: str | None = None) -> exp.Column:
        """The helper column computing ``node`` in the eddy (one per ``key``, by default
        ``node``'s SQL text: the same expression twice is hoisted once)."""
        key = node.sql(dialect="duckdb") if key is None else key
        column = self._names.get(key)
        if column is None:
            name = f"__h{len(self.items)}"
            self.items.append(named(node.copy(), name))
            column = self._names[key] = exp.column(name, quoted=True)
        return column.copy()


def _reads_input(node: exp.Expression) -> bool:
    return any(isinstance(n, exp.Column | exp.AggFunc | exp.Anonymous) for n in node.walk())


def _is_alias(node: exp.Expression, aliases: set[str]) -> bool:
    return isinstance(node, exp.Column) and not node.table and node.name.lower() in aliases


def _rewrite(node: exp.Expression, split: Hoister, aliases: set[str]) -> exp.Expression:
    """``node`` for DuckDB: windows kept, everything they and the rest read hoisted into
    the eddy's part; a bare name in ``aliases`` stays (an output column of the block)."""
    if _is_alias(node, aliases):
        return node.copy()
    if node.find(exp.Window) is None and not any(_is_alias(n, aliases) for n in node.walk()):
        return split.hoist(node) if _reads_input(node) else node.copy()
    if isinstance(node, exp.Window):
        return _rewrite_window(node, split)
    if isinstance(node, exp.Anonymous) and node.name.lower() in split.functions:
        raise UnsupportedQueryError(
            f"a registered function applied to a window function's result is not supported "
            f"(it runs in the eddy, below the window): {describe(node)}"
        )
    out = node.copy()
    for key, value in node.args.items():
        if isinstance(value, exp.Expression):
            out.set(key, _rewrite(value, split, aliases))
        elif isinstance(value, list):
            out.set(
                key,
                [
                    _rewrite(v, split, aliases) if isinstance(v, exp.Expression) else v
                    for v in value
                ],
            )
    return out


def _rewrite_window(window: exp.Window, split: Hoister) -> exp.Window:
    call = window.this
    ignore_nulls = isinstance(call, exp.IgnoreNulls)
    if ignore_nulls:
        call = call.this
    if not isinstance(call, WINDOW_FUNCTIONS):
        name = call.sql_name().lower() if isinstance(call, exp.Func) else call.sql()
        raise UnsupportedQueryError(
            f"{name} as a window function is not supported: {describe(window)}"
        )
    if call.find(exp.Distinct) is not None or window.find(exp.Filter) is not None:
        raise UnsupportedQueryError(
            f"DISTINCT or FILTER in a window aggregate is not supported: {describe(window)}"
        )
    if any(n.find(exp.Window) for n in window.iter_expressions() if n is not window):
        raise UnsupportedQueryError(
            f"a window function inside a window function: {describe(window)}"
        )
    new_call = call.copy()
    for key, value in call.args.items():
        if isinstance(value, exp.Expression) and not isinstance(value, exp.Star):
            new_call.set(key, split.hoist(value) if _reads_input(value) else value.copy())
    out = window.copy()
    out.set("this", exp.IgnoreNulls(this=new_call) if ignore_nulls else new_call)
    out.set(
        "partition_by",
        [
            split.hoist(p) if _reads_input(p) else p.copy()
            for p in window.args.get("partition_by") or []
        ],
    )
    order = window.args.get("order")
    if order is not None:
        new_order = order.copy()
        new_order.set("expressions", [_hoist_ordered(o, split) for o in order.expressions])
        out.set("order", new_order)
    return out


def _hoist_ordered(ordered: exp.Ordered, split: Hoister) -> exp.Ordered:
    out = ordered.copy()
    if _reads_input(ordered.this):
        out.set("this", split.hoist(ordered.this))
    return out


def named(node: exp.Expression, name: str) -> exp.Alias:
    """``node AS "name"`` as a SELECT item (sqlglot's ``alias_`` would name a subquery
    itself, ``(SELECT ...) AS name``, which is no SELECT item alias)."""
    return exp.Alias(this=node, alias=exp.to_identifier(name, quoted=True))


def output_name(item: exp.Expression) -> str:
    """The result column name of a SELECT item (its alias, column name, or SQL text)."""
    if isinstance(item, exp.Alias):
        return item.alias
    if isinstance(item, exp.Column):
        return item.name
    return item.sql(dialect="duckdb")


def _find_windows(select: exp.Select, key: str) -> list[exp.Window]:
    value = select.args.get(key)
    nodes = value if isinstance(value, list) else [value] if value is not None else []
    return [w for n in nodes for w in n.find_all(exp.Window)]


@dataclass
class WindowSplit:
    """A block split by :func:`split_window_block`.

    ``inner``: the eddy's block (a star item first, if any, then ``hoisted`` helper
    columns); the rest is what DuckDB does above it (:meth:`above`).
    """

    inner: exp.Select
    hoisted: int
    items: list[exp.Expression | None]  # None: the star's columns
    distinct: exp.Distinct | None
    qualify: exp.Expression | None
    order: exp.Order | None
    limit: exp.Expression | None
    offset: exp.Expression | None

    def above(self, table: pa.Table) -> tuple[pa.Table, exp.Select]:
        """The eddy's result ``table`` renamed for DuckDB (positional names: a star may
        repeat a name) and the query to run over it as :data:`BASE`."""
        width = table.num_columns - self.hoisted
        names = [f"__c{i}" for i in range(width)] + [f"__h{i}" for i in range(self.hoisted)]
        star_names = table.column_names[:width]
        items: list[exp.Expression] = []
        for item in self.items:
            if item is None:
                items += [
                    exp.alias_(exp.column(f"__c{i}", quoted=True), n, quoted=True)
                    for i, n in enumerate(star_names)
                ]
            else:
                items.append(item)
        outer = exp.Select(expressions=items).from_(BASE)
        for key, value in (
            ("distinct", self.distinct),
            ("qualify", exp.Qualify(this=self.qualify) if self.qualify is not None else None),
            ("order", self.order),
            ("limit", self.limit),
            ("offset", self.offset),
        ):
            if value is not None:
                outer.set(key, value)
        return table.rename_columns(names), outer


def split_window_block(select: exp.Select, functions: Collection[str]) -> WindowSplit:
    """Split ``select`` (a block :func:`needs_above`) into the eddy's part and DuckDB's.

    ``functions``: lower-case names of registered Python functions (they must run in the
    eddy). Raises UnsupportedQueryError for a window where DuckDB allows none (WHERE,
    GROUP BY, HAVING), QUALIFY without a window, a window function outside the supported
    set, or more than one ``*`` item.
    """
    for key in ("where", "group", "having"):
        clause = select.args.get(key)
        if clause is not None and clause.find(exp.Window) is not None:
            raise UnsupportedQueryError(
                f"window functions are not allowed in {key.upper()}: {describe(clause)}"
            )
    windows = [w for key in ("expressions", "qualify", "order") for w in _find_windows(select, key)]
    if select.args.get("qualify") is not None and not windows:
        raise UnsupportedQueryError(
            "QUALIFY needs a window function in the SELECT list or in QUALIFY (as in "
            f"DuckDB): {describe(select.args['qualify'])}"
        )
    split = Hoister({name.lower() for name in functions})
    stars = [i for i in select.expressions if i.is_star]
    if len(stars) > 1:
        raise UnsupportedQueryError(
            "more than one * item together with window functions is not supported: "
            f"{describe(stars[1])}"
        )
    aliases = {output_name(i).lower() for i in select.expressions if not i.is_star}
    outer_items: list[exp.Expression | None] = []
    for item in select.expressions:
        if item.is_star:
            outer_items.append(None)  # the star's columns, known once the eddy ran
            continue
        name = output_name(item)
        body = _rewrite(item.unalias(), split, set())
        outer_items.append(exp.alias_(body, name, quoted=True))
    distinct = select.args.get("distinct")
    outer_distinct = None
    if distinct is not None:
        on = distinct.args.get("on")
        if on is not None:
            on = exp.Tuple(expressions=[_rewrite(e, split, aliases) for e in on.expressions])
        outer_distinct = exp.Distinct(on=on)
    qualify = select.args.get("qualify")
    outer_qualify = _rewrite(qualify.this, split, aliases) if qualify is not None else None
    order = select.args.get("order")
    outer_order = None
    if order is not None:
        items = []
        for o in order.expressions:
            new = o.copy()
            if not is_all(o.this) and not (
                isinstance(o.this, exp.Literal) and not o.this.is_string
            ):
                new.set("this", _rewrite(o.this, split, aliases))
            items.append(new)
        outer_order = exp.Order(expressions=items)

    inner = select.copy()
    for key in ("qualify", "order", "limit", "offset", "distinct"):
        inner.set(key, None)
    star_items = [s.copy() for s in stars]
    hoisted = list(split.items) or (
        [] if star_items else [exp.alias_(exp.Literal.number(1), "__h0", quoted=True)]
    )
    inner.set("expressions", star_items + hoisted)
    return WindowSplit(
        inner,
        len(hoisted),
        outer_items,
        outer_distinct,
        outer_qualify,
        outer_order,
        select.args["limit"].copy() if select.args.get("limit") is not None else None,
        select.args["offset"].copy() if select.args.get("offset") is not None else None,
    )
