"""Equi-joins hidden in an OR of ANDs: factor the common conjuncts out, and derive the
single-table filters each branch implies.

TPC-H Q19 and TPC-DS Q13/Q48 write their join conditions inside every branch of a
disjunction, ``(p_partkey = l_partkey AND p_brand = 'Brand#12' AND ...) OR
(p_partkey = l_partkey AND p_brand = 'Brand#23' AND ...)``. Planned as written, the whole
OR is one SM over both tables and the SteMs have no key: the eddy builds the cross
product. PostgreSQL (``pull_ors``/``process_duplicate_ors`` in its prep/prepqual.c) and
DuckDB (its distributivity rule, and the filters it derives from ORs) do two things, and
so does this module:

1. :func:`factor_ors`, a rule of ``rewrite.RULES`` (``Stage.CHECKED``): the conjuncts
   every branch has are taken out, ``(A AND B) OR (A AND C)`` → ``A AND (B OR C)``, and a
   branch left empty makes the OR its common part alone (absorption: ``A OR (A AND B)``
   → ``A``). Conjuncts compare as sqlglot trees, an equality or inequality with its sides
   in either order. *Why it is exact:* SQL's three-valued AND/OR (Kleene's, with
   FALSE < NULL < TRUE as min and max) is a distributive lattice, where distributivity
   and absorption hold for every truth value, NULL included: the rewritten condition has
   the value of the original on every row, so it is valid wherever a condition stands
   (WHERE, every JOIN's ON, HAVING), outer joins included. Only a conjunct whose value
   may differ between two evaluations is never factored: ``random()``, ``uuid()``, a
   registered Python function (an ``Anonymous`` call) and any subquery.
2. :func:`implied_filters`, called by the planner (engine/plan/query_graph_build.py) on
   the inner-join region's conjuncts once their columns resolve to FROM aliases (this
   needs the catalog, which the pure rules do not read): for an OR whose every branch has
   conjuncts over one same alias ``t``, the filter ``(branch1_t OR branch2_t ...)`` is
   added, the OR itself kept. The OR TRUE means some branch TRUE, so that branch's
   ``t``-part TRUE and the filter TRUE: as a conjunct of a filter, which keeps a row only
   when it is TRUE, it removes no row the OR keeps, and lets the eddy drop ``t``'s tuples
   before they are built into a SteM or probe one. Only the inner-join region's conjuncts
   are used (WHERE, and the ON of inner joins before any outer join): an outer join's ON
   or a condition the planner delays past a join step is not a filter of one table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sqlglot import exp

#: Calls whose two evaluations may differ, and subqueries: never factored or derived.
_UNSTABLE = (exp.Rand, exp.Uuid, exp.Anonymous, exp.Subquery, exp.Exists, exp.Select)

#: Comparisons whose sides may be written in either order.
_SYMMETRIC = (exp.EQ, exp.NEQ, exp.NullSafeEQ, exp.NullSafeNEQ)


def factor_ors(tree: exp.Expression) -> exp.Expression:
    """``tree`` with the common conjuncts of every OR in every SELECT's WHERE, JOIN ... ON
    and HAVING factored out (module docstring, 1.), in place; subqueries' SELECTs too.
    Returns ``tree``. Raises nothing."""
    for select in list(tree.find_all(exp.Select)):
        for key in ("where", "having"):
            clause = select.args.get(key)
            if clause is not None and clause.this is not None:
                _replace(clause, "this", clause.this)
        for join in select.args.get("joins") or []:
            on = join.args.get("on")
            if on is not None:
                _replace(join, "on", on)
    return tree


def implied_filters(
    conjuncts: Iterable[exp.Expression], alias_of: Callable[[exp.Column], int | None]
) -> list[exp.Expression]:
    """The single-alias filters the ORs among ``conjuncts`` imply (module docstring, 2.),
    new trees, at most one per OR and alias. ``alias_of``: the FROM alias a column reads
    (its index), None when unknown (a conjunct with such a column is not used). An OR over
    one alias only implies nothing new. Raises nothing ``alias_of`` does not."""
    derived: list[exp.Expression] = []
    for conjunct in conjuncts:
        node = _unparen(conjunct)
        if not isinstance(node, exp.Or):
            continue
        per_branch: list[dict[int, list[exp.Expression]]] = []
        everywhere: set[int] | None = None
        for branch in _flatten(node, exp.Or):
            parts: dict[int, list[exp.Expression]] = {}
            for part in _flatten(branch, exp.And):
                alias = _single_alias(part, alias_of)
                if alias is not None:
                    parts.setdefault(alias, []).append(part)
            per_branch.append(parts)
            everywhere = set(parts) if everywhere is None else everywhere & set(parts)
            if not everywhere:
                break
        if not everywhere or (len(everywhere) == 1 and _single_alias(node, alias_of) is not None):
            continue  # the OR is a filter of one alias already
        for alias in sorted(everywhere):
            branches = [_paren(exp.and_(*(c.copy() for c in p[alias]))) for p in per_branch]
            derived.append(exp.or_(*branches, copy=False))
    return derived


def _replace(parent: exp.Expression, key: str, condition: exp.Expression) -> None:
    new, changed = _factor(condition)
    if changed:
        parent.set(key, new)


def _factor(node: exp.Expression) -> tuple[exp.Expression, bool]:
    """``node`` with its ORs factored, through AND, OR, NOT and parentheses only (a
    condition inside a CASE or a function call is left as written); and whether anything
    changed (the user's tree is kept as it was otherwise)."""
    if isinstance(node, exp.Paren | exp.Not):
        inner, changed = _factor(node.this)
        if changed:
            node.set("this", inner)
        return node, changed
    if isinstance(node, exp.And):
        parts = [_factor(p) for p in _flatten(node, exp.And)]
        if not any(changed for _, changed in parts):
            return node, False
        return exp.and_(*(_paren(p) for p, _ in parts), copy=False), True
    if not isinstance(node, exp.Or):
        return node, False
    branches = [_factor(b) for b in _flatten(node, exp.Or)]
    changed = any(c for _, c in branches)
    conjuncts = [_flatten(b, exp.And) for b, _ in branches]
    common = _common(conjuncts)
    if not common:
        if not changed:
            return node, False
        return exp.or_(*(_paren(b) for b, _ in branches), copy=False), True
    rests = [[c for c in cs if _key(c) not in common] for cs in conjuncts]
    taken = [c for c in conjuncts[0] if _key(c) in common]
    kept = list({_key(c): c for c in taken}.values())  # a conjunct written twice once
    if any(not rest for rest in rests):  # a branch is the common part: absorption
        return exp.and_(*(_paren(c) for c in kept), copy=False), True
    rest = exp.or_(*(_paren(exp.and_(*map(_paren, r), copy=False)) for r in rests), copy=False)
    return exp.and_(*(_paren(c) for c in kept), exp.paren(rest, copy=False), copy=False), True


def _common(conjuncts: list[list[exp.Expression]]) -> set[str]:
    """The keys of the stable conjuncts every branch has."""
    common: set[str] | None = None
    for cs in conjuncts:
        keys = {_key(c) for c in cs if not c.find(*_UNSTABLE)}
        common = keys if common is None else common & keys
        if not common:
            break  # the usual case, found at the second branch
    return common or set()


def _key(node: exp.Expression) -> str:
    """A conjunct's identity: its SQL, a symmetric comparison's sides in sorted order."""
    node = _unparen(node)
    if isinstance(node, _SYMMETRIC):
        sides = sorted(_key(side) for side in (node.this, node.expression))
        return f"{type(node).__name__}({sides[0]}, {sides[1]})"
    return node.sql(dialect="duckdb")


def _single_alias(node: exp.Expression, alias_of: Callable[[exp.Column], int | None]) -> int | None:
    """The one alias all of ``node``'s columns read; None for none, several, an unknown
    column, or an unstable call (``_UNSTABLE``)."""
    if node.find(*_UNSTABLE):
        return None
    aliases = {alias_of(c) for c in node.find_all(exp.Column)}
    if len(aliases) != 1 or None in aliases:
        return None
    return aliases.pop()


def _flatten(node: exp.Expression, kind: type[exp.Connector]) -> list[exp.Expression]:
    """The operands of a chain of ``kind`` (AND or OR), through parentheses."""
    out: list[exp.Expression] = []
    stack = [node]
    while stack:  # not recursive: a chain of 5,000 terms is a tree 5,000 deep
        node = _unparen(stack.pop())
        if isinstance(node, kind):
            stack += [node.expression, node.this]
        else:
            out.append(node)
    return out


def _unparen(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _paren(node: exp.Expression) -> exp.Expression:
    """``node``, parenthesised when it is an AND or OR chain (so it stays one operand)."""
    return exp.paren(node, copy=False) if isinstance(node, exp.Connector) else node
