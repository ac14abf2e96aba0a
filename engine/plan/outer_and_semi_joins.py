"""Plan outer joins and [NOT] IN / [NOT] EXISTS subqueries as JoinSteps.

The FROM clause is read left to right. The tables before the first outer join are the
*region*: their inner joins and WHERE conditions are routed freely by the eddy, as in
any query. From the first ``LEFT`` / ``RIGHT`` / ``FULL [OUTER] JOIN`` on, every join
(outer, or inner / comma / cross after an outer one) is a :class:`JoinStep`, and the
subqueries of WHERE become semi-/anti-join steps after the last FROM table, one alias
each (its row id is -1 in results). Each step *needs* a set of aliases (step_needs):
the steps whose conditions do not read each other's tables commute, and the eddy takes
them in the order its policy picks; RIGHT / FULL joins stay in their FROM place.

Conditions: a join's ON terms belong to its step (equalities between the aliases before
it and the step's table are hashed; the rest is the residual, evaluated per candidate
pair). A WHERE conjunct needs every step whose NULL padding could change it (where_needs):
the steps of the tables it reads, and any RIGHT / FULL join whose null-supplying side it
reads. A WHERE conjunct on the null-supplying side of an outer join is therefore never
pushed below it (no outer-to-inner rewriting is done, so no simplification can change
that). A WHERE equality between an inner step's table and earlier ones, or a WHERE term
over that table alone, joins the step's condition instead (where_into_steps), so that
the step hashes on it rather than making a cross product. What cannot be made exact is
refused with an UnsupportedQueryError.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pyarrow as pa
from sqlglot import exp

from eddies.engine.catalog import CatalogTable
from eddies.engine.expr.compile import compile_expr
from eddies.engine.frontend.parse import QueryBlock, conjuncts_of, has_distinct_list, subquery_of
from eddies.errors import (
    QueryTypeError,
    UnknownColumnError,
    UnknownTableError,
    UnsupportedQueryError,
    describe,
)
from eddies.modules.key_encoding import common_kind
from eddies.router.expressions import ColumnRef, Expr, Literal, check_types
from eddies.router.query_graph import AliasInfo, Edge, JoinStep, Predicate

#: SELECT arguments a subquery of [NOT] IN / [NOT] EXISTS may have.
_SUBQUERY_ARGS = {"expressions", "from_", "where", "distinct"}


@dataclass
class SubqueryRef:
    """A WHERE subquery: its conjunct, SELECT, and the alias its table gets."""

    node: exp.Expression
    select: exp.Select
    table: str
    name: str  # the name written in the subquery (table or alias), lower case
    negated: bool
    is_in: bool


def subquery_refs(block: QueryBlock) -> list[SubqueryRef]:
    """Shape-check each WHERE subquery (one table, WHERE, no grouping or LIMIT)."""
    refs = []
    for node in block.subqueries:
        select = subquery_of(node)
        assert select is not None
        negated = False
        inner = node
        while isinstance(inner, exp.Not | exp.Paren):
            negated ^= isinstance(inner, exp.Not)
            inner = inner.this
        for key, value in select.args.items():
            if value and key not in _SUBQUERY_ARGS:
                raise UnsupportedQueryError(
                    f"{key.rstrip('_').upper()} in a [NOT] IN / EXISTS subquery is not "
                    f"supported (one table with WHERE): {describe(select)}"
                )
        if has_distinct_list(select):
            raise UnsupportedQueryError(f"DISTINCT ON is not supported: {describe(select)}")
        source = select.args["from_"].this
        if not isinstance(source, exp.Table) or not isinstance(source.this, exp.Identifier):
            raise UnsupportedQueryError(
                f"a subquery reads one table: {describe(source)} is not supported"
            )
        if source.args.get("db") or source.args.get("catalog"):
            raise UnsupportedQueryError(f"qualified table name {describe(source)}")
        is_in = isinstance(inner, exp.In)
        if is_in and (len(select.expressions) != 1 or isinstance(select.expressions[0], exp.Star)):
            raise UnsupportedQueryError(
                f"IN (SELECT ...) needs exactly one column in the subquery: {describe(select)}"
            )
        refs.append(
            SubqueryRef(
                node, select, source.name.lower(), source.alias_or_name.lower(), negated, is_in
            )
        )
    return refs


def internal_name(name: str, taken: set[str]) -> str:
    """A name for a subquery's alias that no other alias has (shown in explain)."""
    candidate, i = name, 1
    while candidate in taken:
        i += 1
        candidate = f"{name}_{i}"
    taken.add(candidate)
    return candidate


class SubqueryScope:
    """Columns inside a subquery: its own table first, then the outer query's (a
    correlated reference). A column marked ``eddies_outer`` is the outer query's."""

    def __init__(self, outer, alias: AliasInfo, written: str, schema: pa.Schema) -> None:
        self.outer = outer
        self.functions = outer.functions
        self.alias = alias
        self.written = written
        self._columns = {f.name.lower(): f.name for f in schema}

    def resolve(self, column: exp.Column) -> ColumnRef:
        if column.meta.get("eddies_outer"):
            return self.outer.resolve(column)
        qualifier = column.table.lower() if column.table else ""
        name = column.name.lower()
        if qualifier in ("", self.written, self.alias.name) and name in self._columns:
            actual = self._columns[name]
            return ColumnRef((self.alias.index, actual), f"{self.alias.name}.{actual}")
        if qualifier in (self.written, self.alias.name):
            raise UnknownColumnError(
                f"table {self.alias.table!r} (as {self.written!r}) has no column {name!r}: "
                f"{describe(column)}"
            )
        return self.outer.resolve(column)


def _mask(expr: Expr) -> int:
    return sum({1 << k[0] for k in expr.column_keys() if isinstance(k, tuple)})


def _boolean(expr: Expr, types: dict, node: exp.Expression) -> None:
    result = check_types(expr, types, node)
    if result != pa.bool_() and result != pa.null():
        raise QueryTypeError(f"condition {describe(node)} is {result}, not boolean")


def _key(node: exp.EQ, scope, types: dict, alias: int, prefix: int) -> tuple | None:
    """(probe expression, stored expression, kind) when ``node`` equates an expression over
    the prefix with one over the step's table, in types the SteMs' key coding joins."""
    left = compile_expr(node.this, scope)
    right = compile_expr(node.expression, scope)
    lm, rm = _mask(left), _mask(right)
    if lm == 1 << alias and rm and not rm & ~prefix:
        left, right = right, left
    elif not (rm == 1 << alias and lm and not lm & ~prefix):
        return None
    lt, rt = check_types(left, types, node), check_types(right, types, node)
    if lt == pa.null() or rt == pa.null():
        return None
    try:
        return left, right, common_kind(lt, rt, node)
    except QueryTypeError:
        return None  # compared after DuckDB's casts, per pair, instead


def _condition(
    nodes: list[exp.Expression], scope, types: dict, alias: int, prefix: int
) -> tuple[tuple, Expr | None, Expr | None]:
    """Split a step's condition into hashed keys, a residual over the pairs and a filter
    over the step's table alone, applied once to its stored tuples (see JoinStep)."""
    keys = []
    rest: list[exp.Expression] = []
    own: list[exp.Expression] = []
    for node in nodes:
        expr = compile_expr(node, scope)
        _boolean(expr, types, node)
        if not _mask(expr) & ~(1 << alias):
            own.append(node)
            continue
        if isinstance(node, exp.EQ):
            key = _key(node, scope, types, alias, prefix)
            if key is not None:
                keys.append(key)
                continue
        rest.append(node)
    return tuple(keys), _and(rest, scope), _and(own, scope)


def _and(nodes: list[exp.Expression], scope) -> Expr | None:
    if not nodes:
        return None
    combined = nodes[0] if len(nodes) == 1 else exp.and_(*[n.copy() for n in nodes])
    return compile_expr(combined, scope)


def _outer_marked(node: exp.Expression, scope) -> exp.Expression:
    """``node`` with every column marked as the outer query's (see SubqueryScope)."""
    node = node.copy()
    for column in node.find_all(exp.Column):
        scope.resolve(column)  # unknown columns fail here, in the outer scope
        column.meta["eddies_outer"] = True
    return node


def lookup_steps(
    steps: list[JoinStep], predicates: list[Predicate], aliases: list[AliasInfo], tables: dict
) -> list[JoinStep]:
    """Steps whose table has no scan AM: if their hashed keys bind one of its index AMs
    (plain columns, all from one alias of the prefix), the step predicate gets that
    equi-join ``edge`` and the step is EOT-gated (``JoinStep.lookup``): each tuple first
    looks its keys up, and the step answers it once the lookups' EOTs are in the SteM
    (stems-2003 §2.1.4: an EOT held means every match is held). RIGHT / FULL joins need
    the whole table and stay refused (check_tables)."""
    out = []
    for step in steps:
        table = tables[aliases[step.alias].table]
        if table.scans or step.kind in ("right", "full") or not table.indexes:
            out.append(step)
            continue
        pairs = [
            (p.key, s.key, kind)
            for p, s, kind in step.keys
            if isinstance(p, ColumnRef) and isinstance(s, ColumnRef)
        ]
        edge = None
        for probe_alias in dict.fromkeys(p[0] for p, _, _ in pairs):
            mine = [(p[1], s[1], kind) for p, s, kind in pairs if p[0] == probe_alias]
            stored = {s for _, s, _ in mine}
            if any(set(am.on) <= stored for am in table.indexes):
                edge = Edge(
                    probe_alias,
                    tuple(p for p, _, _ in mine),
                    step.alias,
                    tuple(s for _, s, _ in mine),
                    tuple(k for _, _, k in mine),
                )
                break
        if edge is None:
            out.append(step)
            continue
        predicates[step.predicate] = replace(predicates[step.predicate], edge=edge)
        out.append(replace(step, lookup=True))
    return out


def check_tables(steps: list[JoinStep], aliases: list[AliasInfo], tables: dict) -> None:
    """Refuse step tables whose SteM can never be complete, and streams where no step
    can be exact (see docs/streaming.md)."""
    streams = [t for t, e in tables.items() if e.stream is not None]
    for step in steps:
        table: CatalogTable = tables[aliases[step.alias].table]
        name = aliases[step.alias].table
        if not table.scans and not step.lookup:
            what = (
                f"a {step.kind.upper()} JOIN needs its whole SteM (lookups never complete it)"
                if step.kind in ("right", "full")
                else "the join's equalities bind none of its index AMs (columns of one table)"
            )
            raise UnsupportedQueryError(f"table {name!r} has no scan access method, and {what}")
        if table.stream is not None:
            raise UnsupportedQueryError(
                f"table {name!r} is a stream: its SteM is never complete, so an outer join's "
                "NULL-supplying side, a join after an outer join, or a subquery cannot read "
                "it (put the stream first, before any outer join)"
            )
        if streams and step.kind in ("right", "full"):
            raise UnsupportedQueryError(
                f"a {step.kind.upper()} JOIN over the stream {streams[0]!r}: its unmatched "
                "tuples are known only when the stream ends"
            )
    unbuilt = [t for t, e in tables.items() if not e.built]
    if steps and unbuilt:
        raise UnsupportedQueryError(
            f"table {unbuilt[0]!r} is registered with build=False, which outer joins and "
            "subqueries do not support"
        )


def plan_steps(
    block: QueryBlock,
    scope,
    types: dict,
    aliases: list[AliasInfo],
    subqueries: list[SubqueryRef],
    schemas: dict[int, pa.Schema],
) -> tuple[int, list[exp.Expression], list[tuple[exp.Expression, Expr, int]], list[JoinStep]]:
    """(region size m, region conjuncts, delayed WHERE conjuncts with their needs,
    steps with their needs and without Done bits). ``aliases`` includes the subqueries'
    (after FROM's)."""
    n_from = len(block.tables)
    m = next((s.index for s in block.joins if s.side), n_from)
    moved = where_into_steps(block, scope, types, m)
    steps: list[JoinStep] = []
    for spec in block.joins:
        k = spec.index
        if k < m:
            continue
        kind = spec.side or "inner"
        if kind in ("right", "full") and spec.group > 0:
            raise UnsupportedQueryError(
                f"a {kind.upper()} JOIN after a comma in FROM is not supported (its "
                f"NULL-supplying side would be only part of FROM): {describe(spec.node)}"
            )
        prefix = (1 << k) - 1
        nodes = [*spec.on, *(block.conjuncts[i] for i in moved.get(k, ()))]
        keys, residual, own = _condition(nodes, scope, types, k, prefix)
        sql = spec.node.sql(dialect="duckdb")
        steps.append(JoinStep(k, kind, prefix, -1, sql, keys, residual, stored_filter=own))
    for j, ref in enumerate(subqueries):
        k = n_from + j
        prefix = (1 << k) - 1
        sub = SubqueryScope(scope, aliases[k], ref.name, schemas[k])
        where = ref.select.args.get("where")
        nodes = [c.copy() for c in conjuncts_of(where.this)] if where is not None else []
        for node in nodes:
            if subquery_of(node) is not None:
                raise UnsupportedQueryError(f"a nested subquery is not supported: {describe(node)}")
        notin = notin_key = None
        inner = ref.node
        while isinstance(inner, exp.Not | exp.Paren):
            inner = inner.this
        if ref.is_in:
            equality = exp.EQ(
                this=_outer_marked(inner.this, scope), expression=ref.select.expressions[0].copy()
            )
            if isinstance(equality.expression, exp.Alias):
                equality.set("expression", equality.expression.this)
            if ref.negated:
                notin = compile_expr(equality, sub)
                check_types(notin, types, equality)
                notin_key = _key(equality, sub, types, k, prefix)
            else:
                nodes.append(equality)
        kind = ("notin" if ref.is_in else "anti") if ref.negated else "semi"
        keys, residual, own = _condition(nodes, sub, types, k, prefix)
        sql = ref.node.sql(dialect="duckdb")
        steps.append(JoinStep(k, kind, prefix, -1, sql, keys, residual, notin, 0, own, notin_key))
    steps = step_needs(steps, (1 << m) - 1)
    # WHERE placement: a dependency set, not a position (see where_needs).
    region: list[exp.Expression] = []
    delayed: list[tuple[exp.Expression, Expr, int]] = []
    taken = {i for terms in moved.values() for i in terms}
    for i, node in enumerate(block.conjuncts):
        if i in taken:
            continue  # the hashed key or stored filter of an inner step
        if i >= block.n_where or not steps:
            region.append(node)
            continue
        expr = compile_expr(node, scope)
        needs = where_needs(_mask(expr) or 1, steps, (1 << m) - 1)
        if needs == (1 << m) - 1:
            region.append(node)
        else:
            delayed.append((node, expr, needs))
    return m, region, delayed, steps


def where_into_steps(block: QueryBlock, scope, types: dict, m: int) -> dict[int, list[int]]:
    """WHERE conjuncts that become part of an inner step's condition: step alias -> the
    indexes (into ``block.conjuncts``) of its new hashed keys and stored-table filters.

    An inner, comma or cross join after an outer one is a JoinStep; its equalities with
    earlier tables are usually written in WHERE (TPC-DS Q40, Q93: ``FROM a LEFT JOIN b
    ON ..., c WHERE c.k = a.k``). Left in WHERE, they are SMs after the step, which then
    makes the cross product. A WHERE conjunct ``t.x = e(prefix)`` (or one over ``t``
    alone) is equivalent as a term of ``t``'s inner step when ``t`` is the last alias it
    reads, for an inner join is a cross product filtered by its condition, and a filter
    commutes with each later LEFT, inner, semi- or anti-join step (they change no column
    of the tuples they keep, see where_needs); not with a later RIGHT / FULL step, whose
    flush NULL-pads ``t``, so none may follow. Source idea: pushing WHERE into inner
    joins (predicate move-around), as every optimizer does.
    """
    steps = {s.index: s for s in block.joins if s.index >= m}
    if not steps or any(s.side in ("right", "full") for s in steps.values()):
        return {}
    moved: dict[int, list[int]] = {}
    for i, node in enumerate(block.conjuncts[: block.n_where]):
        expr = compile_expr(node, scope)
        mask = _mask(expr)
        if not mask or expr.udf_calls():
            continue  # a step evaluates its terms synchronously
        k = mask.bit_length() - 1  # the last alias it reads
        spec = steps.get(k)
        if spec is None or spec.side:
            continue  # in the region, or an outer join's table: stays in WHERE
        own = mask == 1 << k
        if own or (
            isinstance(node, exp.EQ) and _key(node, scope, types, k, (1 << k) - 1) is not None
        ):
            moved.setdefault(k, []).append(i)
    return moved


def step_needs(steps: list[JoinStep], region: int) -> list[JoinStep]:
    """Each step with its ``needs``: the aliases a tuple must span to take it.

    Two steps commute when neither's condition reads the other's table and neither is a
    RIGHT / FULL join (the "l-asscom" rule of join reordering:
    ``(A op1_p1 B) op2_p2 C = (A op2_p2 C) op1_p1 B`` when p1 does not read C and p2 does
    not read B, for op1, op2 among inner, left outer, semi and anti joins: a LEFT step
    keeps every probe tuple and changes none of its columns, an inner step keeps or drops
    it by columns it reads, a semi-/anti-join or NOT IN keeps or drops it by columns it
    reads). So a step needs the region, every alias its condition reads (a table it reads
    is joined, or NULL-padded, first) — and, after a RIGHT / FULL join, that join: its
    flush pads every alias before it, so it needs all of them and every later step needs
    it (a barrier in its FROM place). FROM order is always one legal order (a condition
    reads only earlier aliases). ``needs`` is closed: it holds the needs of the steps in
    it. Source idea: the eddy may route among operators that commute (eddies-2000 §2.2,
    §3); Moerkotte & Neumann's reordering conflicts for outer joins.
    """
    out: list[JoinStep] = []
    after = 0  # every alias up to the last RIGHT / FULL step
    for step in steps:
        if step.barrier:
            needs = (1 << step.alias) - 1
            after = (1 << (step.alias + 1)) - 1
        else:
            needs = region | step.reads() | after
        for earlier in out:  # close it: a spanned step's own needs were spanned first
            if needs >> earlier.alias & 1:
                needs |= earlier.needs
        out.append(replace(step, needs=needs))
    return out


def where_needs(mask: int, steps: list[JoinStep], region: int) -> int:
    """The aliases a tuple must span before a WHERE conjunct reading ``mask`` may be
    evaluated on it: the region, what it reads, and every RIGHT / FULL step whose
    NULL-padded side it reads (with that step's own needs). A LEFT, inner, semi- or
    anti-join step changes no column of the tuples it keeps, so a filter commutes with
    every step it does not read; a table it reads is read after that table's step (a
    WHERE on the null-supplying side is never pushed below its outer join)."""
    needs = region | mask
    for s in steps:
        if s.barrier and mask & s.needs:
            needs |= s.needs | 1 << s.alias
    for s in steps:  # closed, as step needs are
        if needs >> s.alias & 1:
            needs |= s.needs
    return needs


def add_step_predicates(
    predicates: list[Predicate],
    delayed: list[tuple[exp.Expression, Expr, int]],
    steps: list[JoinStep],
    types: dict,
) -> list[JoinStep]:
    """Append the delayed WHERE conjuncts (SMs over their needs, see where_needs) and
    one Done bit per step; returns the steps with their bits and ``done_before``."""
    for node, expr, needs in delayed:
        _boolean(expr, types, node)
        predicates.append(
            Predicate(
                len(predicates),
                f"sm{len(predicates) + 1}",
                node.sql(dialect="duckdb"),
                expr,
                needs,
            )
        )
    placed = []
    for step in steps:
        index = len(predicates)
        predicates.append(
            Predicate(
                index,
                f"step{index + 1}",
                step.sql,
                step.residual or step.notin or _TRUE,
                step.needs | 1 << step.alias,
                step=True,
            )
        )
        placed.append(replace(step, predicate=index))
    return [
        replace(
            s,
            done_before=sum(p.bit for p in predicates if not p.alias_mask & ~s.needs),
        )
        for s in placed
    ]


def subquery_aliases(
    refs: list[SubqueryRef], aliases: list[AliasInfo], catalog, sources: dict
) -> None:
    """Add one alias per subquery table (unique names) to ``aliases`` and ``sources``."""
    taken = {a.name for a in aliases}
    for ref in refs:
        if not catalog.has_table(ref.table):
            raise UnknownTableError(
                f"unknown table {describe(ref.select.args['from_'].this)}; the catalog has "
                f"{sorted(catalog.tables)}"
            )
        aliases.append(AliasInfo(len(aliases), internal_name(ref.name, taken), ref.table))
        sources[ref.table] = catalog.table(ref.table)


_TRUE = Literal(pa.scalar(True), "TRUE")  # a step's Done-bit predicate (never evaluated)
