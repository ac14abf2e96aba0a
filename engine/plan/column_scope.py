"""Column scopes: how a column reference of the query names a column of the plan.

Below the aggregation (:class:`BaseScope`), a column resolves against the FROM aliases to
an ``(alias index, column name)`` key, DuckDB's rules for unqualified, ambiguous and
``JOIN ... USING`` merged columns included; above it (:class:`AggregateScope`), only the
group keys ``__g<i>`` and aggregates ``__a<j>`` exist. :func:`qualify` writes every column
of an expression as ``alias.column``, so equal expressions compare equal.
"""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from eddies.errors import UnknownColumnError, describe
from eddies.router.expressions import ColumnRef, FunctionSpec
from eddies.router.query_graph import AliasInfo


class BaseScope:
    """Resolves column references against the FROM aliases to ``(alias, column)`` keys."""

    def __init__(
        self, aliases: list[AliasInfo], schemas: list[pa.Schema], functions: dict[str, FunctionSpec]
    ) -> None:
        self.aliases = aliases
        self.schemas = schemas
        self.functions = functions
        self._by_alias = {a.name: a for a in aliases}
        self._columns = [{f.name.lower(): f.name for f in s} for s in schemas]
        # JOIN ... USING / NATURAL JOIN: the right side's copy of a join column -> the
        # column it was merged into. Unqualified, the two are one column (DuckDB), and
        # ``SELECT *`` shows it once; ``alias.column`` still names either copy.
        self.merged: dict[tuple[int, str], tuple[int, str]] = {}

    def canonical(self, key: tuple[int, str]) -> tuple[int, str]:
        """The column a (possibly merged) column key stands for."""
        while key in self.merged:
            key = self.merged[key]
        return key

    def column_names(self, alias: int) -> dict[str, str]:
        """The columns of the alias at index ``alias``: lower-case name -> its name."""
        return self._columns[alias]

    def types(self) -> dict[tuple[int, str], pa.DataType]:
        """Every column's Arrow type, by ``(alias index, column name)``."""
        return {(a.index, f.name): f.type for a in self.aliases for f in self.schemas[a.index]}

    def resolve(self, column: exp.Column) -> ColumnRef:
        """The column ``column`` names (a merged USING column: the one it was merged
        into). Raises UnknownColumnError for an unknown alias or column, or an
        unqualified name more than one alias has."""
        name = column.name.lower()
        qualifier = column.table.lower() if column.table else ""
        if qualifier:
            alias = self._by_alias.get(qualifier)
            if alias is None:
                raise UnknownColumnError(
                    f"unknown table or alias {qualifier!r} in {describe(column)}; "
                    f"the query has {sorted(self._by_alias)}"
                )
            actual = self._columns[alias.index].get(name)
            if actual is None:
                raise UnknownColumnError(
                    f"table {alias.table!r} (as {alias.name!r}) has no column {name!r}: "
                    f"{describe(column)}"
                )
            return ColumnRef((alias.index, actual), f"{alias.name}.{actual}")
        found = list(
            dict.fromkeys(
                self.canonical((a.index, self._columns[a.index][name]))
                for a in self.aliases
                if name in self._columns[a.index]
            )
        )
        if not found:
            raise UnknownColumnError(f"unknown column {describe(column)}")
        if len(found) > 1:
            raise UnknownColumnError(
                f"column reference {describe(column)} is ambiguous: it is in "
                f"{', '.join(self.aliases[k[0]].name for k in found)}"
            )
        key = found[0]
        return ColumnRef(key, f"{self.aliases[key[0]].name}.{key[1]}")

    def star(self, qualifier: str | None) -> list[exp.Column]:
        """The columns ``*`` (``qualifier`` None: merged copies shown once) or
        ``qualifier.*`` covers, as qualified column nodes. UnknownColumnError for an
        unknown qualifier."""
        aliases = self.aliases
        if qualifier:
            alias = self._by_alias.get(qualifier.lower())
            if alias is None:
                raise UnknownColumnError(f"unknown table or alias {qualifier!r} in {qualifier}.*")
            aliases = [alias]
        return [
            exp.column(f.name, table=a.name, quoted=True)
            for a in aliases
            for f in self.schemas[a.index]
            if qualifier or (a.index, f.name) not in self.merged
        ]


class AggregateScope:
    """Above an aggregation only group keys (``__g<i>``) and aggregates (``__a<j>``) exist."""

    def __init__(self, functions: dict[str, FunctionSpec]) -> None:
        self.functions = functions

    def resolve(self, column: exp.Column) -> ColumnRef:
        """A group key or aggregate column; UnknownColumnError for any other column."""
        if column.name.startswith("__g") or column.name.startswith("__a"):
            return ColumnRef(column.name, column.name)
        raise UnknownColumnError(
            f"column {describe(column)} must appear in GROUP BY or be used in an aggregate"
        )


def qualify(node: exp.Expression, scope: BaseScope) -> exp.Expression:
    """Rewrite every column as ``alias.column`` so equal expressions compare equal."""

    def fix(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
            ref = scope.resolve(n)
            alias = scope.aliases[ref.key[0]].name
            column = exp.column(ref.key[1], table=alias, quoted=True)
            if n.this._meta:  # keep the source position for error messages
                column.this.meta.update(n.this.meta)
            return column
        return n

    return node.transform(fix)
