"""Scalar expressions: compiled once from sqlglot, evaluated per batch with pyarrow.compute.

An :class:`Expr` evaluates over an *environment*: a mapping from column keys (``(alias,
column)`` for base columns, plain strings above the eddy) to equal-length pyarrow Arrays.
Every operator is one vectorized ``pyarrow.compute`` call; NULLs follow SQL three-valued
logic (Kleene AND/OR, NULL-propagating comparisons and arithmetic). Types are checked when
a query is planned by evaluating each expression on zero-length columns of the right
types, so ``'a' + 1`` fails before any data moves, naming the construct and its position.

UDF calls (:class:`UdfCall`) may be async or run off the trio thread; they are evaluated
first by :func:`evaluate_async`, which binds their results into the environment.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import trio

from eddies.engine.errors import ExpressionError, QueryTypeError, UdfError, describe

#: What pyarrow.compute (and the NumPy/Python code of our kernels) raises on bad values or
#: types; :meth:`Call.eval` turns them into an :class:`ExpressionError` naming the SQL.
KERNEL_ERRORS = (
    pa.ArrowInvalid,
    pa.ArrowNotImplementedError,
    pa.ArrowTypeError,
    OverflowError,
    ZeroDivisionError,
    TypeError,
    ValueError,
)

Env = Mapping[Any, pa.Array]


class Expr:
    """Base class. ``sql`` is the source text, used in error messages and column names."""

    sql: object = ""  # SQL text: a str, or rendered lazily by str()

    def eval(self, env: Env, n: int) -> pa.Array | pa.Scalar:  # pragma: no cover - abstract
        raise NotImplementedError

    def children(self) -> list[Expr]:
        return []

    def walk(self):
        yield self
        for child in self.children():
            yield from child.walk()

    def column_keys(self) -> set[Any]:
        return {e.key for e in self.walk() if isinstance(e, ColumnRef)}

    def udf_calls(self) -> list[UdfCall]:
        return [e for e in self.walk() if isinstance(e, UdfCall)]


@dataclass(eq=False)
class ColumnRef(Expr):
    key: Any
    sql: object = ""  # SQL text: a str, or rendered lazily by str()

    def eval(self, env: Env, n: int) -> pa.Array:
        return env[self.key]


@dataclass(eq=False)
class Literal(Expr):
    value: pa.Scalar
    sql: object = ""  # SQL text: a str, or rendered lazily by str()

    def eval(self, env: Env, n: int) -> pa.Scalar:
        return self.value


@dataclass(eq=False)
class Call(Expr):
    """A vectorized function of its arguments' values (arrays or scalars)."""

    fn: Callable[..., Any]
    args: list[Expr]
    sql: object = ""  # SQL text: a str, or rendered lazily by str()

    def eval(self, env: Env, n: int) -> pa.Array | pa.Scalar:
        values = [a.eval(env, n) for a in self.args]
        try:
            return self.fn(*values)
        except KERNEL_ERRORS as exc:
            # The one place a library error on an expression's values becomes ours: the
            # innermost failing Call names itself (an EddiesError passes outer ones).
            raise ExpressionError(f"evaluating {self.sql} failed: {_reason(exc)}") from exc

    def children(self) -> list[Expr]:
        return self.args


@dataclass
class FunctionSpec:
    """A registered Python function usable in SQL (see ``Catalog.add_function``).

    vectorized: fn(*pa.Array) -> array-like of length n; otherwise fn(*values) -> value,
    called per row. Sync functions run in a worker thread, async ones are awaited.
    """

    name: str
    fn: Callable[..., Any]
    vectorized: bool = True
    return_type: pa.DataType = field(default_factory=pa.bool_)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


@dataclass(eq=False)
class UdfCall(Expr):
    """A call of a registered function; its value is bound into the env under ``self``."""

    spec: FunctionSpec
    args: list[Expr]
    sql: object = ""  # SQL text: a str, or rendered lazily by str()

    def eval(self, env: Env, n: int) -> pa.Array:
        if self in env:
            return env[self]
        raise RuntimeError(f"UDF {self.sql} evaluated before its value was bound")

    def children(self) -> list[Expr]:
        return self.args

    def _to_array(self, result: Any, n: int) -> pa.Array:
        try:
            if isinstance(result, pa.ChunkedArray):
                result = result.combine_chunks()
            arr = result if isinstance(result, pa.Array) else pa.array(result)
            if arr.type != self.spec.return_type:
                arr = arr.cast(self.spec.return_type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise UdfError(
                f"function {self.spec.name!r} in {self.sql} returned a value that is not "
                f"an array of {self.spec.return_type}: {exc}"
            ) from exc
        if len(arr) != n:
            raise UdfError(
                f"function {self.spec.name!r} in {self.sql} returned {len(arr)} values for {n} rows"
            )
        return arr

    def compute_sync(self, args: list[Any], n: int) -> pa.Array:
        spec = self.spec
        try:
            if spec.vectorized:
                result = spec.fn(*args)
            else:
                columns = [_as_pylist(a, n) for a in args]
                result = (
                    [spec.fn(*row) for row in zip(*columns, strict=True)]
                    if columns
                    else [spec.fn() for _ in range(n)]
                )
        except Exception as exc:  # the user's function failed: name it
            raise UdfError(f"function {spec.name!r} failed in {self.sql}: {exc!r}") from exc
        return self._to_array(result, n)

    async def compute_async(self, args: list[Any], n: int) -> pa.Array:
        spec = self.spec
        try:
            if spec.vectorized:
                result = await spec.fn(*args)
            else:
                columns = [_as_pylist(a, n) for a in args]
                result = [await spec.fn(*row) for row in zip(*columns, strict=True)]
        except Exception as exc:
            raise UdfError(f"function {spec.name!r} failed in {self.sql}: {exc!r}") from exc
        return self._to_array(result, n)


def _reason(exc: BaseException) -> str:
    """The first line of a library error, without pyarrow's source-file prefixes."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.split(": ", 1)[1] if text.startswith("/") and ": " in text else text


def _as_pylist(value: Any, n: int) -> list[Any]:
    if isinstance(value, pa.Scalar):
        return [value.as_py()] * n
    return value.to_pylist()


def broadcast(value: pa.Array | pa.Scalar, n: int) -> pa.Array:
    """An Array of length n: arrays pass through, scalars are repeated (vectorized take)."""
    if isinstance(value, pa.ChunkedArray):
        return value.combine_chunks()
    if isinstance(value, pa.Array):
        return value
    return pa.array([value.as_py()], type=value.type).take(np.zeros(n, dtype=np.int32))


def evaluate(expr: Expr, env: Env, n: int) -> pa.Array:
    """Evaluate an expression without UDFs (or with their values already bound)."""
    return broadcast(expr.eval(env, n), n)


async def evaluate_async(expr: Expr, env: Env, n: int) -> pa.Array:
    """Evaluate with UDFs: each UDF call (innermost first) is computed, then bound into env.

    Sync UDFs run in a worker thread (``trio.to_thread``) so an expensive predicate does
    not stall the eddy, and are abandoned (left to finish unobserved) when the query is
    cancelled; async ones are awaited on the trio thread.
    """
    calls = expr.udf_calls()
    if calls:
        env = dict(env)
        for call in reversed(calls):  # post-order: arguments' UDFs first
            args = [a.eval(env, n) for a in call.args]
            if call.spec.is_async:
                env[call] = await call.compute_async(args, n)
            else:
                # A cancel (a deadline, SIGINT, LIMIT) must not wait for a slow function:
                # the thread is abandoned and its result dropped when it ends.
                env[call] = await trio.to_thread.run_sync(
                    call.compute_sync, args, n, abandon_on_cancel=True
                )
    return evaluate(expr, env, n)


def check_types(expr: Expr, types: Mapping[Any, pa.DataType], where: Any) -> pa.DataType:
    """Dry-run ``expr`` on zero-length columns; its result type, or QueryTypeError.

    ``where`` names the construct in the error: a string, or a sqlglot node that is only
    formatted (``describe``) if there is an error, since formatting costs ~0.1 ms a node.
    """
    env: dict[Any, pa.Array] = {
        key: pa.array([], type=types[key]) for key in expr.column_keys() if key in types
    }
    for call in reversed(expr.udf_calls()):
        env[call] = pa.array([], type=call.spec.return_type)
    try:
        return evaluate(expr, env, 0).type
    except ExpressionError as exc:
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        place = where if isinstance(where, str) else describe(where)
        raise QueryTypeError(f"type error in {place}: {_reason(cause)}") from exc
    except KERNEL_ERRORS as exc:
        place = where if isinstance(where, str) else describe(where)
        raise QueryTypeError(f"type error in {place}: {_reason(exc)}") from exc


def mask_of(values: pa.Array) -> np.ndarray:
    """WHERE semantics: a boolean NumPy mask where only TRUE keeps a row (NULL drops it)."""
    if values.type == pa.null():  # WHERE NULL: no row is TRUE
        return np.zeros(len(values), dtype=bool)
    if not pa.types.is_boolean(values.type):
        raise QueryTypeError(f"a predicate must be boolean, got {values.type}")
    if values.null_count:
        values = values.fill_null(False)
    return values.to_numpy(zero_copy_only=False)
