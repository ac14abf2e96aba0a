"""Quantified comparisons, ``x op ANY (subquery)`` and ``x op ALL (subquery)``, rewritten
into forms the engine runs: IN / NOT IN, or scalar aggregate subqueries.

``= ANY`` is ``IN`` and ``<> ALL`` is ``NOT IN`` (SQL defines them so, NULLs included). The
ordered comparisons reduce to the body's extreme value, with SQL's three-valued logic kept
by counting the rows and the NULLs:

    x > ANY (q)   CASE WHEN count(q) = 0 THEN FALSE
                       WHEN x > min(q) THEN TRUE
                       WHEN x IS NULL OR nulls(q) > 0 THEN NULL ELSE FALSE END
    x > ALL (q)   CASE WHEN count(q) = 0 THEN TRUE
                       WHEN NOT (x > max(q)) THEN FALSE
                       WHEN x IS NULL OR nulls(q) > 0 THEN NULL ELSE TRUE END

(``<``, ``<=`` swap min and max; ``= ALL`` and ``<> ANY`` compare with both.) Each count
and extreme is a scalar subquery over the body's FROM and WHERE, so a correlated body is
decorrelated like any correlated scalar aggregate (engine/rewrite/decorrelate.py). A body that
groups, limits or combines queries is read as a derived table (uncorrelated only).
A shape this module does not rewrite stays as it is and is refused by the allow-list.
"""

from __future__ import annotations

from sqlglot import exp

_ORDERED = (exp.GT, exp.GTE, exp.LT, exp.LTE)
_COMPARISONS = (exp.EQ, exp.NEQ, *_ORDERED)
#: Clauses after which the body's rows are not its FROM/WHERE rows: read it as a table.
_RESHAPING = ("group", "having", "limit", "offset", "qualify", "windows")


def rewrite_quantified(root: exp.Expression) -> exp.Expression:
    """Replace, in place, each ``x op ANY/SOME/ALL (SELECT y ...)`` of ``root`` (``op`` one
    of = <> < <= > >=, the body one SELECT or set operation of one column); returns
    ``root``."""
    for node in list(root.find_all(exp.Any, exp.All)):
        comparison = node.parent
        if not isinstance(comparison, _COMPARISONS) or comparison.expression is not node:
            continue
        body = node.this.this if isinstance(node.this, exp.Subquery) else node.this
        if not isinstance(body, exp.Query) or len(body.selects) != 1 or body.selects[0].is_star:
            continue
        replacement = _rewritten(type(comparison), isinstance(node, exp.All), comparison.this, body)
        comparison.replace(replacement)
    return root


def _rewritten(op: type, every: bool, x: exp.Expression, body: exp.Query) -> exp.Expression:
    if op is exp.EQ and not every:
        return exp.In(this=x.copy(), query=exp.Subquery(this=body.copy()))
    if op is exp.NEQ and every:
        return exp.Not(this=exp.In(this=x.copy(), query=exp.Subquery(this=body.copy())))
    source, y = _flat(body)
    count = _scalar(source, exp.Count(this=exp.Star()))
    nulls = _scalar(
        source, exp.Sub(this=exp.Count(this=exp.Star()), expression=exp.Count(this=y.copy()))
    )
    lowest = _scalar(source, exp.Min(this=y.copy()))
    highest = _scalar(source, exp.Max(this=y.copy()))
    if op in _ORDERED:
        # x > ANY: x above the lowest; x > ALL: x above the highest (< and <= mirrored)
        upward = op in (exp.GT, exp.GTE)
        extreme = (lowest if upward else highest) if not every else (highest if upward else lowest)
        decisive = op(this=x.copy(), expression=extreme)
        if every:  # a row that fails the comparison decides ALL
            decisive = exp.Not(this=exp.paren(decisive))
    else:  # = ALL fails, <> ANY holds, where x differs from either extreme
        decisive = exp.or_(
            exp.NEQ(this=x.copy(), expression=lowest),
            exp.NEQ(this=x.copy(), expression=highest),
        )
    empty_answer, decisive_answer = (
        (exp.true(), exp.false()) if every else (exp.false(), exp.true())
    )
    unknown = exp.or_(
        exp.Is(this=x.copy(), expression=exp.Null()),
        exp.GT(this=nulls, expression=exp.Literal.number(0)),
    )
    return exp.paren(
        exp.Case(
            ifs=[
                exp.If(
                    this=exp.EQ(this=count, expression=exp.Literal.number(0)), true=empty_answer
                ),
                exp.If(this=decisive, true=decisive_answer),
                exp.If(this=unknown, true=exp.Null()),
            ],
            default=empty_answer,
        )
    )


def _flat(body: exp.Query) -> tuple[exp.Select, exp.Expression]:
    """A SELECT whose FROM and WHERE give the body's rows, and the body's value in it."""
    if isinstance(body, exp.Select) and not any(body.args.get(k) for k in _RESHAPING):
        source = body.copy()
        source.set("distinct", None)  # counts of rows and NULLs: decisions do not change
        source.set("order", None)
        return source, body.selects[0].unalias()
    inner = body.copy()
    leftmost = inner
    while not isinstance(leftmost, exp.Select):  # a set operation names its columns so
        leftmost = leftmost.this
    leftmost.set("expressions", [exp.alias_(leftmost.selects[0].unalias(), "__v")])
    derived = exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("__q")))
    return exp.select("*").from_(derived), exp.column("__v", table="__q")


def _scalar(source: exp.Select, value: exp.Expression) -> exp.Subquery:
    select = source.copy()
    select.set("expressions", [value])
    return exp.Subquery(this=select)
