"""Expressions evaluated as DuckDB evaluates them, so that an error on a row DuckDB never
computes does not surface: :class:`Guarded` (CASE and COALESCE run a branch only over the
rows that reach it) and :class:`NullFolded` (an operation with a NULL constant operand is
NULL, as DuckDB's optimizer folds it before running).

Both run the plain vectorized call first, the common case, and fall back only when it
raises an :class:`~eddies.errors.ExpressionError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddies.engine.expr.casts import cast_to, unify
from eddies.engine.expr.types import plain
from eddies.errors import ExpressionError
from eddies.router.expressions import KERNEL_ERRORS, Call, Env, Expr, Literal


def as_condition(v: Any) -> Any:
    """A CASE condition: NULL-typed (``WHEN NULL``, a key column of no rows) as BOOLEAN."""
    v = plain(v)
    return cast_to(v, pa.bool_()) if v.type == pa.null() else v


@dataclass(eq=False)
class Guarded(Expr):
    """CASE (``n_whens`` WHENs) or COALESCE (``n_whens`` None) evaluated as DuckDB does: a
    branch only over the rows that reach it, so ``CASE WHEN x <> 0 THEN 10 // x END`` and
    ``coalesce(a, 10 // x)`` do not fail on the rows the guard keeps away.

    ``eager`` (one vectorized call over every row, the common case) runs first; only when it
    raises an :class:`ExpressionError` is the expression evaluated branch by branch over
    the rows still undecided, and an error there is a real one. The result has the type
    the eager call gives (its operands unified as DuckDB does).
    """

    eager: Call
    n_whens: int | None
    sql: object = ""

    def eval(self, env: Env, n: int) -> Any:
        try:
            return self.eager.eval(env, n)
        except ExpressionError:
            if n == 0:  # a type error: no row to keep away
                raise
        pieces = self._case(env, n) if self.n_whens is not None else self._coalesce(env, n)
        try:
            return _assemble(pieces, n)
        except KERNEL_ERRORS as exc:
            raise ExpressionError(f"evaluating {self.sql} failed: {exc}") from exc

    def children(self) -> list[Expr]:
        return self.eager.args

    def _case(self, env: Env, n: int) -> list[tuple[np.ndarray, Any]]:
        args = self.eager.args
        rows = np.arange(n)
        pieces: list[tuple[np.ndarray, Any]] = []
        for i in range(self.n_whens or 0):
            cond = as_condition(args[2 * i].eval(_rows_of(env, rows, args[2 * i]), len(rows)))
            keep = _mask(pc.fill_null(cond, False), len(rows))
            taken = rows[keep]
            then = args[2 * i + 1]
            pieces.append((taken, then.eval(_rows_of(env, taken, then), len(taken))))
            rows = rows[~keep]
        if len(args) % 2:  # ELSE
            pieces.append((rows, args[-1].eval(_rows_of(env, rows, args[-1]), len(rows))))
        else:
            pieces.append((rows, pa.scalar(None)))
        return pieces

    def _coalesce(self, env: Env, n: int) -> list[tuple[np.ndarray, Any]]:
        args = self.eager.args
        rows = np.arange(n)
        pieces: list[tuple[np.ndarray, Any]] = []
        for i, arg in enumerate(args):  # every argument, on no rows once all are set: types
            value = plain(arg.eval(_rows_of(env, rows, arg), len(rows)))
            if i == len(args) - 1:
                set_ = np.ones(len(rows), dtype=bool)
            elif isinstance(value, pa.Scalar):
                set_ = np.full(len(rows), value.is_valid)
            else:
                set_ = _mask(pc.is_valid(value), len(rows))
            kept = value if isinstance(value, pa.Scalar) else value.filter(pa.array(set_))
            pieces.append((rows[set_], kept))
            rows = rows[~set_]
        return pieces


def is_null_constant(expr: Expr) -> bool:
    """A NULL constant: a NULL literal, or an operation folded to NULL."""
    return isinstance(expr, NullFolded) or (isinstance(expr, Literal) and not expr.value.is_valid)


@dataclass(eq=False)
class NullFolded(Expr):
    """An operation with a NULL constant operand (``(10 // x) + NULL``, ``s LIKE NULL``,
    ``round(x, NULL)``): NULL on every row, as DuckDB's optimizer folds it before running,
    so an error in the other operand (a division by zero) never surfaces. The call runs as
    usual (its type, and the common case); only if it raises are NULLs of its type given.
    """

    call: Call
    sql: object = ""

    def eval(self, env: Env, n: int) -> Any:
        try:
            return self.call.eval(env, n)
        except ExpressionError:
            if n == 0:  # a type error
                raise
            empty = _rows_of(env, np.zeros(0, dtype=np.int64), self.call)
            return pa.nulls(n, plain(self.call.eval(empty, 0)).type)

    def children(self) -> list[Expr]:
        return [self.call]


def _rows_of(env: Env, rows: np.ndarray, expr: Expr) -> dict[Any, Any]:
    """The part of ``env`` that ``expr`` reads, at ``rows`` (positions)."""
    keys = [*expr.column_keys(), *expr.udf_calls()]
    return {k: env[k].take(rows) for k in keys if k in env}


def _mask(values: Any, n: int) -> np.ndarray:
    if isinstance(values, pa.Scalar):
        return np.full(n, bool(values.as_py()))
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=bool)


def _assemble(pieces: list[tuple[np.ndarray, Any]], n: int) -> pa.Array:
    """One array of ``n`` values from (positions, values) pieces covering every row once:
    the values unified as the eager call unifies them, then put back in row order."""
    from eddies.router.expressions import broadcast

    values = unify([v for _, v in pieces])
    arrays = [broadcast(v, len(rows)) for (rows, _), v in zip(pieces, values, strict=True)]
    positions = np.concatenate([rows for rows, _ in pieces])
    merged = pa.concat_arrays(arrays)
    order = np.empty(n, dtype=np.int64)
    order[positions] = np.arange(n)
    return merged.take(pa.array(order))
