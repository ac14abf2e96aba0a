"""Table aliases a subquery shares with an enclosing query get names of their own.

SQL resolves ``t.b`` to the nearest enclosing FROM that has a ``t``: in

    SELECT a FROM t WHERE a IN (SELECT u.a FROM u JOIN t ON u.a = t.b)

``t.b`` is the subquery's own ``t``. The engine's rewrites (decorrelation, counted
subqueries, derived statements) move subquery parts next to the outer query's, where the
two ``t`` were one name: a correlated reference was taken for a local one or the reverse,
which answered wrongly (every row of ``t`` for the query above) or failed with an unknown
alias. Renaming every shadowing alias once, right after parsing, makes each name mean one
table in the whole statement, so no later rewrite has to know SQL's scoping rule.

Only qualified columns change: an unqualified column resolves by column name, which a new
alias does not change. A column that a deeper subquery qualifies with the old name follows
the rename exactly when the renamed table is the nearest one of that name.
"""

from __future__ import annotations

import itertools

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, build_scope


def unshadow(root: exp.Expression) -> exp.Expression:
    """Rename, in place, each table alias of a subquery, derived table or CTE body that an
    enclosing query's FROM also uses; returns ``root``. New names are ``<alias>_<n>``,
    unused anywhere in the statement. A statement sqlglot cannot scope (a duplicate alias,
    say) is left as it is: the later checks name its problem."""
    try:
        plan = _plan(root)
    except Exception:  # sqlglot's scoping refuses some statements: nothing to rename then
        return root
    for table, new in plan.tables:
        table.set("alias", exp.TableAlias(this=exp.to_identifier(new)))
    for column, new in plan.columns:
        column.set("table", exp.to_identifier(new))
    return root


class _Plan:
    def __init__(self) -> None:
        self.tables: list[tuple[exp.Table, str]] = []
        self.columns: list[tuple[exp.Column, str]] = []


def _plan(root: exp.Expression) -> _Plan:
    """What to rename, found before anything changes (sqlglot may raise midway)."""
    plan = _Plan()
    top = build_scope(root)
    if top is None:
        return plan
    taken = {t.alias_or_name.lower() for t in root.find_all(exp.Table)}
    taken |= {t.name.lower() for t in root.find_all(exp.Table)}
    counter = itertools.count(2)
    renames: dict[int, dict[str, str]] = {}  # id(scope) -> old name -> new name
    scopes = list(top.traverse())
    for scope in reversed(scopes):  # traverse() yields children first: go top-down
        outer = _enclosing_names(scope)
        mapping: dict[str, str] = {}
        for name, source in scope.selected_sources.items():
            node = source[0] if isinstance(source, tuple) else source
            if name.lower() not in outer or not isinstance(node, exp.Table):
                continue
            new = _fresh(name, taken, counter)
            plan.tables.append((node, new))
            mapping[name.lower()] = new
        renames[id(scope)] = mapping
    for scope in scopes:
        for column in scope.columns:
            qualifier = column.table
            if not qualifier:
                continue
            owner = _owner(scope, qualifier.lower())
            new = renames.get(id(owner), {}).get(qualifier.lower()) if owner else None
            if new is not None:
                plan.columns.append((column, new))
    return plan


def _enclosing_names(scope: Scope) -> set[str]:
    """Lower-case source names of every scope enclosing ``scope``."""
    names: set[str] = set()
    parent = scope.parent
    while parent is not None:
        names |= {n.lower() for n in parent.selected_sources}
        parent = parent.parent
    return names


def _owner(scope: Scope, name: str) -> Scope | None:
    """The nearest scope, from ``scope`` outwards, whose FROM defines ``name``."""
    current: Scope | None = scope
    while current is not None:
        if name in {n.lower() for n in current.selected_sources}:
            return current
        current = current.parent
    return None


def _fresh(name: str, taken: set[str], counter: itertools.count) -> str:
    while True:
        candidate = f"{name}_{next(counter)}"
        if candidate.lower() not in taken:
            taken.add(candidate.lower())
            return candidate
