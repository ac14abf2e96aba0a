"""JOIN ... USING and NATURAL JOIN as equalities and merged columns; ON clause scope.

As DuckDB does, ``t JOIN u USING (a)`` is ``t.a = u.a`` with u's ``a`` merged into t's:
unqualified, the two are one column, and ``SELECT *`` shows it once
(:attr:`BaseScope.merged`). The equalities join the WHERE conjuncts, which the planner
classifies into join edges and SMs (stems-2003 §2.2); from the first outer join on, they
go to the join's ON terms instead, a JoinStep's condition
(``engine/plan/outer_and_semi_joins.py``).
"""

from __future__ import annotations

from sqlglot import exp

from eddies.engine.frontend.parse import JoinSpec, QueryBlock
from eddies.engine.plan.column_scope import BaseScope
from eddies.errors import UnknownColumnError, describe


def plan_joins(block: QueryBlock, scope: BaseScope) -> None:
    """Resolve JOIN ... USING and NATURAL JOIN into equalities (added to
    ``block.conjuncts``) and merged columns (``scope.merged``), as DuckDB does; check that
    each ON clause names only tables joined so far. Raises UnknownColumnError. From the
    first outer join on, the equalities go to the join's ON terms instead."""
    first_outer = next((s.index for s in block.joins if s.side), len(block.tables))
    for spec in block.joins:
        if spec.kind == "on":
            _check_on_clause(spec, scope)
        elif spec.kind in ("using", "natural"):
            for equality in _using_equalities(spec, scope):
                if spec.index >= first_outer:  # a JoinStep's condition
                    spec.on.append(equality)
                else:
                    block.conjuncts.append(equality)


def _check_on_clause(spec: JoinSpec, scope: BaseScope) -> None:
    """An ON clause may read only the tables joined up to its own."""
    right = spec.index
    for node in spec.on:
        for column in node.find_all(exp.Column):
            if isinstance(column.this, exp.Star):
                continue
            alias = scope.resolve(column).key[0]
            if alias > right:
                raise UnknownColumnError(
                    f"the ON clause of the join with {scope.aliases[right].name!r} "
                    f"refers to {scope.aliases[alias].name!r}, which is joined later: "
                    f"{describe(column)}"
                )


def _join_column_names(
    spec: JoinSpec, scope: BaseScope
) -> tuple[list[str], dict[str, exp.Identifier]]:
    """The (lower-case) names a USING list or NATURAL JOIN joins on, and the USING
    identifiers by name (errors point at them)."""
    if spec.kind == "using":
        names = list(dict.fromkeys(ident.name.lower() for ident in spec.using))
        return names, {ident.name.lower(): ident for ident in spec.using}
    visible = {
        name
        for a in range(spec.group, spec.index)
        for name, actual in scope.column_names(a).items()
        if (a, actual) not in scope.merged
    }
    names = [name for name in scope.column_names(spec.index) if name in visible]
    if not names:
        raise UnknownColumnError(
            f"NATURAL JOIN {describe(spec.node.this)}: no column name is common to "
            "both sides (DuckDB refuses it too)"
        )
    return names, {}


def _using_equalities(spec: JoinSpec, scope: BaseScope) -> list[exp.EQ]:
    """Per join column, merge the right side's copy into the left side's and return the
    equality ``left.c = right.c``."""
    right = spec.index
    left = range(spec.group, right)
    right_cols = scope.column_names(right)
    names, places = _join_column_names(spec, scope)
    equalities = []
    for name in names:
        where = describe(places.get(name, spec.node.this))
        if name not in right_cols:
            raise UnknownColumnError(
                f"USING column {name!r} is not a column of "
                f"{scope.aliases[right].name!r} (the right side): {where}"
            )
        found = list(
            dict.fromkeys(
                scope.canonical((a, scope.column_names(a)[name]))
                for a in left
                if name in scope.column_names(a)
            )
        )
        if not found:
            raise UnknownColumnError(
                f"USING column {name!r} is not a column of the left side of the join: {where}"
            )
        if len(found) > 1:
            raise UnknownColumnError(
                f"USING column {name!r} is ambiguous on the left side of the join (in "
                f"{', '.join(scope.aliases[k[0]].name for k in found)}): {where}"
            )
        target = found[0]
        key = (right, right_cols[name])
        scope.merged[key] = target
        equality = exp.EQ(
            this=exp.column(target[1], table=scope.aliases[target[0]].name, quoted=True),
            expression=exp.column(key[1], table=scope.aliases[right].name, quoted=True),
        )
        ident = places.get(name)
        if ident is not None:  # errors about the equality point at the USING column
            for column in equality.find_all(exp.Identifier):
                column.meta.update(ident.meta)
        equalities.append(equality)
    return equalities
