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


def line_col(sql: str, offset: int) -> tuple[int, int]:
    """1-based line and column of character ``offset`` in ``sql``."""
    offset = max(0, min(offset, len(sql)))
    line = sql.count("\n", 0, offset) + 1
    return line, offset - (sql.rfind("\n", 0, offset) + 1) + 1


def _start_of(node: Any) -> tuple[int, int, int] | None:
    """(offset, line, column) where the earliest token recorded under ``node`` starts.

    sqlglot records token positions in ``meta`` on identifiers, literals, stars and
    function names only (``col`` is the token's last column), so the earliest such leaf is
    the construct's start, or near it. The walk is sqlglot's iterative BFS.
    """
    best = None
    for sub in node.walk():
        meta = getattr(sub, "_meta", None) or {}
        if "line" in meta and "col" in meta:
            start = int(meta.get("start", 0))
            col = int(meta["col"]) - (int(meta.get("end", start)) - start)
            if best is None or start < best[0]:
                best = (start, int(meta["line"]), max(col, 1))
    return best


def position_of(node: Any) -> tuple[int, int] | None:
    """Line and column (1-based) where a sqlglot node starts in the SQL text.

    A node with no recorded token under it (``NULL``, a bare keyword construct) takes the
    position of its nearest ancestor that has one.
    """
    while node is not None:
        found = _start_of(node) if hasattr(node, "walk") else None
        if found is not None:
            return found[1], found[2]
        node = getattr(node, "parent", None)
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
