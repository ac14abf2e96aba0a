"""The one error family users see.

Every failure that is the user's to fix (bad SQL, an unknown table or column, a type
mismatch, unusable input data) raises a subclass of :class:`EddiesError` whose message
names the construct and, where the SQL text gives one, its line and column.
"""

from __future__ import annotations

from typing import Any


class EddiesError(Exception):
    """Base class of all errors raised by eddies for bad input or unsupported queries."""


class SqlSyntaxError(EddiesError):
    """The SQL text does not parse."""


class UnsupportedQueryError(EddiesError):
    """The query parses but uses a construct eddies does not run (e.g. an outer join)."""


class UnknownTableError(EddiesError):
    """The query names a table that is not in the catalog."""


class UnknownColumnError(EddiesError):
    """A column reference matches no column, or matches several (ambiguous)."""


class QueryTypeError(EddiesError):
    """An expression applies an operation to values of the wrong type."""


class ExpressionError(QueryTypeError):
    """Evaluating an expression failed on the data: an arithmetic overflow, a value that
    cannot be cast (``CAST('y' AS INTEGER)``), a division by zero in ``%`` or ``//``. As in
    DuckDB (Out of Range / Conversion / Invalid Input errors), the query fails; the message
    names the expression."""


class DataSourceError(EddiesError):
    """A table's data cannot be read or has the wrong shape."""


class UdfError(EddiesError):
    """A registered Python function failed or returned a result of the wrong shape."""


def position_of(node: Any) -> tuple[int, int] | None:
    """Line and column (1-based) of the first identifier or literal under a sqlglot node.

    sqlglot records token positions in ``meta`` on identifiers and literals only, so the
    first such leaf in a pre-order walk is the construct's start, or near it.
    """
    if node is None:
        return None
    for sub in node.walk():
        meta = getattr(sub, "_meta", None) or {}
        if "line" in meta and "col" in meta:
            return int(meta["line"]), int(meta["col"])
    return None


def describe(node: Any) -> str:
    """``'<sql>' at line L, column C`` for a sqlglot node (position left out if unknown)."""
    text = node.sql(dialect="duckdb") if hasattr(node, "sql") else str(node)
    if len(text) > 80:
        text = text[:77] + "..."
    pos = position_of(node)
    return f"'{text}'" + (f" at line {pos[0]}, column {pos[1]}" if pos else "")


def find_error(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``exc`` itself if it is a ``kind``, else the first ``kind`` inside it when it is an
    exception group (trio nurseries raise groups), else None."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = find_error(inner, kind)
            if found is not None:
                return found
    return None
