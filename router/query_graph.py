"""The query as the eddy sees it: aliases, predicates with Done bits, and join edges.

Planning (``eddies.engine.plan.planner``) builds one :class:`QueryGraph`; the routing table,
the constraint checker and the modules read it. Every predicate owns one Done bit
(eddies-2000 §3). An equi-join *edge* groups the equality conjuncts between one pair of
aliases (a multi-column key); it can be evaluated two ways: as a SteM probe key when a
tuple spanning one side probes the other side's SteM, or, when a tuple already spans both
sides through other edges (cyclic queries), as an SM over composite tuples.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from eddies.router.expressions import Expr


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
    sql: object  # its SQL text: a str, or rendered lazily by str()
    expr: Expr
    alias_mask: int
    edge: Edge | None = None
    step: bool = False  # the Done bit of a JoinStep, set by its module (not an SM)

    @property
    def bit(self) -> int:
        return 1 << self.index


class AccessKind(enum.Enum):
    """How an AM reaches its table: a scan delivers every row, an index looks rows up."""

    SCAN = "scan"
    INDEX = "index"


@dataclass(frozen=True)
class AccessInfo:
    """One access method (AM) of a table: a scan, or an index lookup by ``on`` columns.

    ``id`` numbers the query's AMs (scans and indexes together) from 0.
    """

    id: int
    name: str
    table: str
    kind: AccessKind
    on: tuple[str, ...] = ()
    max_concurrency: int = 1  # index AMs: lookups in flight at once


#: JoinStep kinds: outer joins, inner joins placed after one, and subquery semi/anti-joins.
STEP_KINDS = ("inner", "left", "right", "full", "semi", "anti", "notin")


@dataclass(frozen=True)
class JoinStep:
    """A join the eddy does only against a *complete* SteM: an outer join (``left``,
    ``right``, ``full``), an inner join after one (``inner``), or the semi-/anti-join of a
    ``[NOT] EXISTS`` / ``[NOT] IN`` subquery (``semi``, ``anti``, ``notin``).

    ``needs``: the aliases a tuple must span to take the step — the region, every alias
    its condition reads, and the tables of the steps it must follow (see
    ``engine/plan/outer_and_semi_joins.py: step_needs``). Steps whose ``needs`` a tuple spans may
    be taken
    in any order the policy picks; a ``right`` / ``full`` step needs every alias before it,
    and every later step needs it (a barrier), so ``needs`` is then its whole FROM prefix,
    the side its flush pads. ``alias`` is the step's table (its bit joins the span;
    a semi-/anti-join puts row id -1 there). ``keys``: (probe-side expression over
    ``needs``, stored-side expression over ``alias``, key_encoding kind) equalities hashed
    on; ``residual``: the rest of the condition, over needs and alias (None: TRUE).
    ``notin``: for NOT IN, the equality ``probe = subquery column``, evaluated per pair
    with SQL's three-valued logic; ``notin_key``: the same as a hashable key, when it is
    one. ``stored_filter``: the condition's terms over ``alias`` alone, applied once to
    the stored tuples (a tuple failing them matches nothing). ``predicate``: the index of
    the step's Done bit; ``done_before``: the Done bits of every predicate over ``needs``
    (what a NULL-padded tuple of a RIGHT or FULL join carries, its null-supplying side's
    conditions being vacuous).
    Source idea: stems-2003 §3.4 (ProbeCompletion) and §2.1.3 (EOT): a probe of a complete
    SteM has every match it will ever have, so "no match" is final.
    """

    alias: int
    kind: str
    needs: int
    predicate: int
    sql: str
    keys: tuple = ()
    residual: Expr | None = None
    notin: Expr | None = None
    done_before: int = 0
    stored_filter: Expr | None = None
    notin_key: tuple | None = None
    # The table has no scan AM: tuples first look their keys up in its index AMs (the step
    # predicate's ``edge`` binds them), and the step answers those whose EOTs are held.
    lookup: bool = False

    @property
    def barrier(self) -> bool:
        """RIGHT / FULL: taken in its FROM place (its flush pads the whole prefix)."""
        return self.kind in ("right", "full")

    def reads(self) -> int:
        """The aliases other than its own that the step's condition reads (its hashed
        keys' probe sides, residual and NOT IN equality; the stored filter reads only
        ``alias``)."""
        exprs = [k[0] for k in self.keys] + [self.residual, self.notin]
        if self.notin_key is not None:
            exprs.append(self.notin_key[0])
        mask = 0
        for e in exprs:
            for key in e.column_keys() if e is not None else ():
                if isinstance(key, tuple):
                    mask |= 1 << key[0]
        return mask & ~(1 << self.alias)


@dataclass
class QueryGraph:
    """Aliases, predicates, AMs and the tables with SteMs; shared by router and modules."""

    aliases: list[AliasInfo]
    predicates: list[Predicate]
    stem_tables: list[str] = field(default_factory=list)
    access: list[AccessInfo] = field(default_factory=list)
    unbuilt: set[str] = field(default_factory=set)  # relaxed BuildFirst (§3.5)
    # Completion-gated joins (outer joins, subqueries), in order; ``region``: the aliases
    # before the first of them, among which the eddy routes freely (all when none).
    steps: list[JoinStep] = field(default_factory=list)
    region: int = -1

    @property
    def region_mask(self) -> int:
        return self.all_aliases if self.region < 0 else self.region

    def step_of(self, alias: int) -> JoinStep | None:
        return next((s for s in self.steps if s.alias == alias), None)

    def scans_of(self, table: str) -> list[AccessInfo]:
        return [a for a in self.access if a.table == table and a.kind is AccessKind.SCAN]

    def indexes_of(self, table: str) -> list[AccessInfo]:
        return [a for a in self.access if a.table == table and a.kind is AccessKind.INDEX]

    def has_scan(self, table: str) -> bool:
        return any(a.table == table and a.kind is AccessKind.SCAN for a in self.access)

    def has_index(self, table: str) -> bool:
        return any(a.table == table and a.kind is AccessKind.INDEX for a in self.access)

    def deduplicates(self, table: str) -> bool:
        """Several AMs: a row may arrive twice and is removed at the build (§3.2)."""
        return sum(a.table == table for a in self.access) > 1

    def strict_build_first(self, table: str) -> bool:
        """BuildFirst without exception (Table 2: the table has several AMs or an index AM;
        also when another table is never built, so that a SteM knows when it is complete:
        every row its scan delivered has been built)."""
        return self.deduplicates(table) or self.has_index(table) or bool(self.unbuilt)

    def bindable(self, edge: Edge, alias: int) -> list[AccessInfo]:
        """Index AMs of ``alias``'s table whose bind columns ``edge`` fully binds."""
        cols = set(edge.side(alias))
        table = self.aliases[alias].table
        return [a for a in self.indexes_of(table) if set(a.on) <= cols]

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
