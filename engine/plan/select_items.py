"""The select list and what refers to it: ``*`` / ``t.*`` expanded (with DuckDB's EXCLUDE
and REPLACE), each item's output name, and ORDER BY / GROUP BY references to select items
by position (``ORDER BY 2``) or by alias.

Every function returns or takes items as ``(output name, expression)`` pairs and raises
UnknownColumnError or UnsupportedQueryError for what DuckDB also refuses.
"""

from __future__ import annotations

from sqlglot import exp

from eddies.engine.frontend.parse import QueryBlock
from eddies.engine.plan.column_scope import BaseScope, qualify
from eddies.engine.plan.window_split import output_name
from eddies.errors import UnknownColumnError, UnsupportedQueryError, describe


def select_items(block: QueryBlock, scope: BaseScope) -> list[tuple[str, exp.Expression]]:
    """The block's select list as ``(output name, expression)``, stars expanded. '*' is
    allowed only as a select item or in COUNT(*); an empty list (all EXCLUDEd) is refused."""
    items: list[tuple[str, exp.Expression]] = []
    for item in block.select:
        if isinstance(item, exp.Star):
            items += _star_items(item, None, scope)
        elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
            items += _star_items(item.this, item.table, scope)
        else:
            inner = item.this if isinstance(item, exp.Alias) else item
            if inner.find(exp.Star) and not isinstance(inner, exp.Count):
                for star in inner.find_all(exp.Star):
                    if not isinstance(star.parent, exp.Count):
                        raise UnsupportedQueryError(
                            f"'*' is only allowed as a select item or in COUNT(*): {describe(star)}"
                        )
            items.append((output_name(item), inner))
    if not items:
        raise UnsupportedQueryError(
            f"the select list is empty after EXCLUDE: {describe(block.select[0])}"
        )
    return items


def _star_items(
    star: exp.Star, qualifier: str | None, scope: BaseScope
) -> list[tuple[str, exp.Expression]]:
    """``*`` / ``t.*`` with DuckDB's EXCLUDE and REPLACE: an unqualified name matches every
    column of that name the star covers, ``t.c`` only t's; REPLACE puts the expression at
    the first matching column and drops the others; a name that matches nothing, or is
    listed twice, is an error (as in DuckDB)."""
    columns = scope.star(qualifier)
    if star._meta:  # errors about a column of * point at the *
        for column in columns:
            column.this.meta.update(star.meta)
    excluded: set[int] = set()
    seen: set[tuple[str, str]] = set()
    for entry in star.args.get("except_") or []:
        if not isinstance(entry, exp.Column) or isinstance(entry.this, exp.Star):
            raise UnsupportedQueryError(f"EXCLUDE takes column names: {describe(entry)}")
        key = ((entry.table or "").lower(), entry.name.lower())
        if key in seen:
            raise UnknownColumnError(f"{describe(entry)} is listed twice in EXCLUDE")
        seen.add(key)
        hits = [i for i, c in enumerate(columns) if _star_match(c, key)]
        if not hits:
            raise UnknownColumnError(
                f"EXCLUDE column {describe(entry)} is not among the columns of "
                f"{(qualifier + '.*') if qualifier else '*'}"
            )
        excluded.update(hits)
    replaced: dict[int, tuple[str, exp.Expression]] = {}
    dropped: set[int] = set()
    for entry in star.args.get("replace") or []:
        if not isinstance(entry, exp.Alias):
            raise UnsupportedQueryError(f"REPLACE takes 'expression AS column': {describe(entry)}")
        key = ("", entry.alias.lower())
        if key in seen:
            raise UnknownColumnError(
                f"column {entry.alias!r} is listed twice in EXCLUDE / REPLACE: {describe(entry)}"
            )
        seen.add(key)
        hits = [i for i, c in enumerate(columns) if _star_match(c, key) and i not in excluded]
        if not hits:
            raise UnknownColumnError(
                f"REPLACE column {entry.alias!r} is not among the columns of "
                f"{(qualifier + '.*') if qualifier else '*'}: {describe(entry)}"
            )
        replaced[hits[0]] = (entry.alias, entry.this)
        dropped.update(hits[1:])
    items: list[tuple[str, exp.Expression]] = []
    for i, column in enumerate(columns):
        if i in excluded or i in dropped:
            continue
        items.append(replaced.get(i, (column.name, column)))
    return items


def _star_match(column: exp.Column, key: tuple[str, str]) -> bool:
    qualifier, name = key
    return column.name.lower() == name and (not qualifier or column.table.lower() == qualifier)


def ordinal(node: exp.Expression, count: int, what: str) -> int | None:
    """The 0-based select item a number literal names in ``what`` (``"ORDER BY"``, ...),
    or None when ``node`` is no number; UnsupportedQueryError out of 1..``count``."""
    if isinstance(node, exp.Literal) and not node.is_string:
        position = int(node.this) if node.this.isdigit() else 0
        if not 1 <= position <= count:
            raise UnsupportedQueryError(f"{what} position {describe(node)} is out of range")
        return position - 1
    return None


def resolve_alias(
    node: exp.Expression,
    items: list[tuple[str, exp.Expression]],
    scope: BaseScope,
    prefer_alias: bool,
) -> exp.Expression:
    """An unqualified name that names a select item (and, for GROUP BY, no column).

    A name that several select items with different expressions carry is ambiguous and
    refused (DuckDB's choice among them is not documented and not consistent).
    """
    if isinstance(node, exp.Column) and not node.table:
        matches = [e for name, e in items if name.lower() == node.name.lower()]
        if matches:
            try:
                scope.resolve(node)
                is_column = True
            except UnknownColumnError as exc:
                if not prefer_alias and "ambiguous" in str(exc):
                    raise  # GROUP BY binds columns first: DuckDB refuses it too
                is_column = False
            if prefer_alias or not is_column:
                distinct = {qualify(m, scope) for m in matches}
                if len(distinct) > 1:
                    raise UnknownColumnError(
                        f"{describe(node)} is ambiguous: {len(matches)} select items are "
                        f"named {node.name!r}"
                    )
                return matches[0]
    return node
