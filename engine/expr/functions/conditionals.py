"""Conditional functions: ``CASE``, ``IF``, ``COALESCE`` and ``NULLIF``, their results of
the operands' common type (:func:`~eddies.engine.expr.types.common_type`), as DuckDB.

CASE, IF and COALESCE compile to a :class:`~eddies.engine.expr.guarded.Guarded`: a branch
runs only over the rows that reach it, so a guard keeps an error (a division by zero)
away from the rows it excludes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.engine.expr.casts import unify
from eddies.engine.expr.guarded import Guarded, as_condition
from eddies.engine.expr.operators import BINARY
from eddies.engine.expr.registry import Site, register
from eddies.engine.expr.types import plain
from eddies.router.expressions import Expr


def _case(n_whens: int, has_default: bool) -> Callable[..., Any]:
    """The kernel of a CASE: ``n_whens`` (condition, result) pairs, then the default if
    ``has_default``; the results unified to their common type."""

    def fn(*values: Any) -> Any:
        conds = [pc.fill_null(as_condition(values[2 * i]), False) for i in range(n_whens)]
        results = [values[2 * i + 1] for i in range(n_whens)]
        default = values[-1] if has_default else pa.scalar(None)
        *results, default = unify([*results, default])
        n = max((len(v) for v in values if isinstance(v, pa.Array)), default=1)
        cond_arrays = [_broadcast_bool(c, n) for c in conds]
        struct = pa.StructArray.from_arrays(cond_arrays, names=[f"c{i}" for i in range(n_whens)])
        out = pc.case_when(struct, *results, default)
        if not any(isinstance(v, pa.Array | pa.ChunkedArray) for v in values):
            return out[0]  # all constants: a constant (one value per row would be wrong)
        return out

    return fn


def _broadcast_bool(c: Any, n: int) -> pa.Array:
    from eddies.router.expressions import broadcast

    if c.type == pa.null():
        c = pa.scalar(False)
    return broadcast(c, n)


def _coalesce(*values: Any) -> Any:
    return pc.coalesce(*unify(list(values)))


def _nullif(a: Any, b: Any) -> Any:
    """``nullif(a, b)``: compared in the common type, of ``a``'s type as DuckDB types it
    (``nullif(i16, 1e2)`` is a SMALLINT, not a DOUBLE; ``nullif('1', i)`` a VARCHAR) unless
    ``a`` is NULL."""
    a2, b2 = unify([a, b])
    keep = plain(a)
    if keep.type == pa.null():
        keep = a2
    return pc.if_else(pc.fill_null(BINARY[exp.EQ](a2, b2), False), pa.scalar(None, keep.type), keep)


@register(exp.Case)
def _compile_case(node: exp.Case, site: Site) -> Expr:
    """``CASE [operand] WHEN ... THEN ... [ELSE ...] END``; with an operand each WHEN is
    ``operand = value``."""
    args: list[Expr] = []
    operand = node.this
    for when in node.args.get("ifs") or []:
        cond = when.this if operand is None else exp.EQ(this=operand, expression=when.this)
        args += [site.compile(cond), site.compile(when.args["true"])]
    default = node.args.get("default")
    if default is not None:
        args.append(site.compile(default))
    n_whens = len(node.args.get("ifs") or [])
    return Guarded(site.call(_case(n_whens, default is not None), args), n_whens, site.sql)


@register(exp.If)
def _compile_if(node: exp.If, site: Site) -> Expr:
    """``IF(cond, then[, else])``: a CASE of one WHEN."""
    args = [site.compile(node.this), site.compile(node.args["true"])]
    if node.args.get("false") is not None:
        args.append(site.compile(node.args["false"]))
    return Guarded(site.call(_case(1, len(args) == 3), args), 1, site.sql)


@register(exp.Coalesce)
def _compile_coalesce(node: exp.Coalesce, site: Site) -> Expr:
    return Guarded(site.call(_coalesce, site.this_and_expressions()), None, site.sql)


@register(exp.Nullif)
def _compile_nullif(node: exp.Nullif, site: Site) -> Expr:
    return site.call(_nullif, [site.compile(node.this), site.compile(node.expression)])
