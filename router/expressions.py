"""Scalar expressions: compiled once from sqlglot, evaluated per batch with pyarrow.compute.

An :class:`Expr` evaluates over an *environment*: a mapping from column keys (``(alias,
column)`` for base columns, plain strings above the eddy) to equal-length pyarrow Arrays.
Every operator is one vectorized ``pyarrow.compute`` call; NULLs follow SQL three-valued
logic (Kleene AND/OR, NULL-propagating comparisons and arithmetic). Types are checked when
a query is planned by evaluating each expression on zero-length columns of the right
types, so ``'a' + 1`` fails before any data moves, naming the construct and its position.

UDF calls (:class:`UdfCall`) may be async or run off the trio thread; they are evaluated
first by :func:`evaluate_async`, which binds their results into the environment. A query's
calls of one function share a concurrency limit, a cache and stats
(:mod:`eddies.router.udf_calls`).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from eddies.errors import ExpressionError, QueryTypeError, UdfError, describe
from eddies.router.udf_calls import FunctionCalls, UdfStats

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
            out = self.fn(*values)
        except KERNEL_ERRORS as exc:
            # The one place a library error on an expression's values becomes ours: the
            # innermost failing Call names itself (an EddiesError passes outer ones).
            raise ExpressionError(f"evaluating {self.sql} failed: {_reason(exc)}") from exc
        if isinstance(out, pa.Array | pa.ChunkedArray) and len(out) != n:
            # A kernel that drops or adds rows would lose them silently downstream (seen:
            # binary_join_element_wise skipping all-NULL rows): fail loudly instead.
            raise ExpressionError(f"evaluating {self.sql} gave {len(out)} values for {n} rows")
        return out

    def children(self) -> list[Expr]:
        return self.args


#: Calls of a per-row ``async def`` function in flight at once, per query, unless told
#: otherwise.
DEFAULT_ASYNC_CONCURRENCY = 32
#: Worker threads a per-row sync function runs on at once, per query, unless told otherwise.
DEFAULT_THREADS = 4
#: Batch calls of a vectorized function in flight at once, unless told otherwise: one, as
#: the paper's single-threaded SMs. A batch call is CPU work more often than a wait, and an
#: SM that takes one batch at a time lets its queue fill, which is the back-pressure the
#: naive and lottery policies learn cost from (eddies-2000 §4.2). Latency-bound vectorized
#: functions (a remote batch endpoint) opt in with ``max_concurrency``.
DEFAULT_VECTORIZED_CONCURRENCY = 1
#: Seconds before a failed call's first retry; doubled for each further one.
DEFAULT_UDF_BACKOFF = 0.05


@dataclass
class FunctionSpec:
    """A registered Python function usable in SQL (see ``Catalog.add_function``).

    vectorized: fn(*pa.Array) -> array-like of length n; otherwise fn(*values) -> value,
    called per row. Sync functions run in worker threads, async ones are awaited.
    max_concurrency: calls in flight (async) or worker threads (sync) per query (default
    32 / 4 for per-row functions, 1 batch call for vectorized ones); timeout:
    seconds per attempt (None: no limit); retries: further attempts of a failed call,
    ``backoff * 2**k`` seconds apart; cache: a per-row function is called once per distinct
    argument tuple per query (False: once per row). ``calls`` is the query's
    :class:`~eddies.router.udf_calls.FunctionCalls` (see :meth:`for_query`).
    """

    name: str
    fn: Callable[..., Any]
    vectorized: bool = True
    return_type: pa.DataType = field(default_factory=pa.bool_)
    max_concurrency: int | None = None
    timeout: float | None = None
    retries: int = 0
    backoff: float = DEFAULT_UDF_BACKOFF
    cache: bool = True
    calls: FunctionCalls | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_concurrency is None:
            if self.vectorized:
                self.max_concurrency = DEFAULT_VECTORIZED_CONCURRENCY
            else:
                self.max_concurrency = (
                    DEFAULT_ASYNC_CONCURRENCY if self.is_async else DEFAULT_THREADS
                )

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def for_query(self, registry: dict[str, UdfStats] | None = None) -> FunctionSpec:
        """A copy with a fresh table of calls: its concurrency limit, cache and stats are
        one query's (``registry`` collects the stats of functions the query calls)."""
        spec = dataclasses.replace(self, calls=None)
        spec.calls = FunctionCalls(spec, registry)
        return spec

    def __getstate__(self) -> dict:  # the table of calls holds trio objects
        return {**self.__dict__, "calls": None}


def _kind(t: pa.DataType) -> str:
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        return "datetime"
    return str(t)


def castable_result(actual: pa.DataType, declared: pa.DataType) -> bool:
    """Whether a UDF's result of type ``actual`` may be cast to its declared return type:
    only within a kind (numbers, strings, dates/timestamps, booleans) or from all-NULL.
    A cast across kinds would be a silent wrong answer (ints to booleans are "nonzero")."""
    return pa.types.is_null(actual) or _kind(actual) == _kind(declared)


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
                if not castable_result(arr.type, self.spec.return_type):
                    raise UdfError(
                        f"function {self.spec.name!r} in {self.sql} returned {arr.type} "
                        f"values, not {self.spec.return_type}; register it with "
                        f"return_type=pa.{arr.type}() (a function registered without "
                        "return_type is a predicate returning booleans)"
                    )
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

    async def compute(self, args: list[Any], n: int) -> pa.Array:
        """The call's values for ``n`` rows (``args``: arrays or scalars), through the
        query's table of calls: concurrent, de-duplicated, timed out and retried (see
        :mod:`eddies.router.udf_calls`). Raises UdfError."""
        calls = self.spec.calls or FunctionCalls(self.spec)  # outside a planned query
        if self.spec.vectorized:
            result = await calls.call_vectorized(args, self.sql)
        else:
            columns = [_as_pylist(a, n) for a in args]
            result = await calls.call_per_row(columns, n, self.sql)
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
    try:
        return pa.repeat(value, n)  # ~3 µs; the take below costs ~25 µs a batch
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):  # types repeat lacks
        return pa.array([value.as_py()], type=value.type).take(np.zeros(n, dtype=np.int32))


def evaluate(expr: Expr, env: Env, n: int) -> pa.Array:
    """Evaluate an expression without UDFs (or with their values already bound)."""
    return broadcast(expr.eval(env, n), n)


async def evaluate_async(expr: Expr, env: Env, n: int) -> pa.Array:
    """Evaluate with UDFs: each UDF call (innermost first) is computed, then bound into env.

    Sync UDFs run in worker threads so an expensive predicate does not stall the eddy,
    and are abandoned (left to finish unobserved) when the query is cancelled; async ones
    are awaited on the trio thread, a per-row one many calls at once.
    """
    calls = expr.udf_calls()
    if calls:
        env = dict(env)
        for call in reversed(calls):  # post-order: arguments' UDFs first
            args = [a.eval(env, n) for a in call.args]
            env[call] = await call.compute(args, n)
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
