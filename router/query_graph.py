"""The query as the eddy sees it: aliases, predicates with Done bits, and join edges.

Planning (``eddies.engine.planner``) builds one :class:`QueryGraph`; the routing table,
the constraint checker and the modules read it. Every predicate owns one Done bit
(eddies-2000 §3). An equi-join *edge* groups the equality conjuncts between one pair of
aliases (a multi-column key); it can be evaluated two ways: as a SteM probe key when a
tuple spanning one side probes the other side's SteM, or, when a tuple already spans both
sides through other edges (cyclic queries), as an SM over composite tuples.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eddies.engine.expressions import Expr


@dataclass(frozen=True)
class AliasInfo:
    """One FROM-clause entry: ``index`` is its bit in a signature's span."""

    index: int
    name: str
    table: str


@dataclass(frozen=True)
class Edge:
    """Equality of ``left_columns`` of alias ``left`` with ``right_columns`` of ``right``."""

    left: int
    left_columns: tuple[str, ...]
    right: int
    right_columns: tuple[str, ...]
    kinds: tuple[str, ...]  # key_encoding kind per column pair

    def side(self, alias: int) -> tuple[str, ...]:
        return self.left_columns if alias == self.left else self.right_columns

    def other(self, alias: int) -> int:
        return self.right if alias == self.left else self.left


@dataclass(frozen=True)
class Predicate:
    """A WHERE conjunct (or a group of them, for an edge) with its Done bit.

    ``alias_mask`` is the set of aliases it reads; ``edge`` is set for equi-joins.
    """

    index: int
    name: str
    sql: str
    expr: Expr
    alias_mask: int
    edge: Edge | None = None

    @property
    def bit(self) -> int:
        return 1 << self.index


@dataclass
class QueryGraph:
    """Aliases, predicates and the tables with SteMs; shared by router and modules."""

    aliases: list[AliasInfo]
    predicates: list[Predicate]
    stem_tables: list[str] = field(default_factory=list)

    @property
    def all_aliases(self) -> int:
        return (1 << len(self.aliases)) - 1

    @property
    def all_predicates(self) -> int:
        return (1 << len(self.predicates)) - 1

    def aliases_of(self, table: str) -> list[int]:
        return [a.index for a in self.aliases if a.table == table]

    def alias_names(self, mask: int) -> tuple[str, ...]:
        return tuple(a.name for a in self.aliases if mask >> a.index & 1)

    def predicate_names(self, mask: int) -> tuple[str, ...]:
        return tuple(p.name for p in self.predicates if mask >> p.index & 1)
