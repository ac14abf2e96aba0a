"""Compile sqlglot scalar expressions into :mod:`eddies.router.expressions` trees.

Semantics follow DuckDB, our test oracle: ``/`` is floating-point division, division or
modulo by zero gives NULL, ``IN`` with a NULL in the list is NULL when nothing matches,
integer arithmetic overflows raise, CAST of a float to an integer rounds.
A :class:`Scope` resolves column references and function names; anything it cannot resolve
or that eddies does not implement raises an :class:`EddiesError` naming the construct.

This module is the dispatcher: it compiles the leaves (columns, literals) itself and
looks every operator and built-in function up in :mod:`eddies.engine.expr.registry`,
where the family modules (:data:`FAMILIES`) register them; a name the registry does not
hold may be a Python function of the scope (``Catalog.add_function``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import pyarrow as pa
from sqlglot import exp

from eddies.engine.expr import arithmetic, casts, operators
from eddies.engine.expr.functions import (
    conditionals,
    dates,
    event_time,
    numbers,
    scalar_subquery,
    strings,
)
from eddies.engine.expr.operators import not_
from eddies.engine.expr.registry import Site, lookup
from eddies.engine.expr.types import number_literal
from eddies.errors import UnsupportedQueryError, describe
from eddies.router.expressions import Call, ColumnRef, Expr, FunctionSpec, Literal, UdfCall

#: The modules whose operators and functions the registry holds: each registers its own
#: when imported, so importing them here makes the registry whole.
FAMILIES = (
    operators,
    arithmetic,
    casts,
    conditionals,
    strings,
    numbers,
    dates,
    event_time,
    scalar_subquery,
)


class Scope(Protocol):
    """Resolves names while compiling."""

    functions: Mapping[str, FunctionSpec]

    def resolve(self, column: exp.Column) -> ColumnRef: ...


class LazySql:
    """A node's SQL text, rendered only when shown (an error message, explain): rendering
    every node of every expression eagerly made planning quadratic in the expression's
    size (~0.2 ms a predicate)."""

    __slots__ = ("node",)

    def __init__(self, node: exp.Expression) -> None:
        self.node = node

    def __str__(self) -> str:
        return self.node.sql(dialect="duckdb")

    def __repr__(self) -> str:
        return repr(str(self))

    __format__ = lambda self, spec: format(str(self), spec)  # noqa: E731


def compile_expr(node: exp.Expression, scope: Scope) -> Expr:
    """Compile one sqlglot scalar expression; aggregates are the caller's to replace first.

    UnsupportedQueryError names a construct eddies does not implement; a column the scope
    cannot resolve raises the scope's error."""
    expr = _compile(node, scope)
    if node.args.get("negate"):  # sqlglot marks NOT LIKE / NOT IN / ... with a flag
        return Call(not_, [expr], LazySql(node))
    return expr


def _compile(node: exp.Expression, scope: Scope) -> Expr:
    """One node: a leaf, a registered operator or function, or a function of the scope."""
    sql = LazySql(node)
    if isinstance(node, exp.Paren):
        return compile_expr(node.this, scope)
    if isinstance(node, exp.Column):
        if isinstance(node.this, exp.Star):
            raise UnsupportedQueryError(f"{describe(node)}: '*' is only allowed in SELECT")
        return scope.resolve(node)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return Literal(pa.scalar(node.this, pa.string()), sql)
        return Literal(number_literal(node.this), sql)
    if isinstance(node, exp.Boolean):
        return Literal(pa.scalar(bool(node.this), pa.bool_()), sql)
    if isinstance(node, exp.Null):
        return Literal(pa.scalar(None), sql)
    site = Site(node, sql, lambda n: compile_expr(n, scope))
    if isinstance(node, exp.Anonymous) and str(node.this).lower() in scope.functions:
        return UdfCall(scope.functions[str(node.this).lower()], site.arguments(), sql)
    compiler = lookup(node)
    if compiler is not None:
        return compiler(node, site)
    return _not_built_in(node, site, scope)


def _not_built_in(node: exp.Expression, site: Site, scope: Scope) -> Expr:
    """A node the registry does not hold: a function of the scope, or an error naming it."""
    if isinstance(node, exp.Anonymous):
        raise UnsupportedQueryError(
            f"unknown function {describe(node)}; register Python functions with "
            "Catalog.add_function"
        )
    if isinstance(node, exp.AggFunc):
        raise UnsupportedQueryError(f"aggregate {describe(node)} is not allowed here")
    if isinstance(node, exp.Window):
        raise UnsupportedQueryError(f"window function {describe(node)} is not supported")
    if isinstance(node, exp.Subquery | exp.Select | exp.Exists):
        raise UnsupportedQueryError(f"subquery {describe(node)} is not supported")
    if isinstance(node, exp.Func):
        name = node.sql_name().lower() if hasattr(node, "sql_name") else type(node).__name__
        if name in scope.functions:
            operands = [site.compile(a) for a in node.iter_expressions()]
            return UdfCall(scope.functions[name], operands, site.sql)
        raise UnsupportedQueryError(f"function {describe(node)} is not supported")
    raise UnsupportedQueryError(f"expression {describe(node)} is not supported")
