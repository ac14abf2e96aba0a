"""The catalog: the tables and Python functions a query can name."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from eddies.engine.errors import DataSourceError, EddiesError, UdfError
from eddies.engine.expressions import FunctionSpec
from eddies.sources.arrow_source import TableSource, make_source

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Catalog:
    """Named tables (scanned by scan AMs) and functions (usable as SQL predicates).

    Example::

        cat = Catalog()
        cat.add_table("flights", "flights.parquet")
        cat.add_function("is_long", lambda d: pc.greater(d, 2000))
    """

    def __init__(self) -> None:
        self._tables: dict[str, TableSource] = {}
        self._functions: dict[str, FunctionSpec] = {}

    def add_table(
        self,
        name: str,
        data: Any,
        *,
        batch_size: int | None = None,
        rate: float | None = None,
        delay: float = 0.0,
    ) -> None:
        """Register ``data`` as table ``name`` (case-insensitive).

        data: pyarrow Table or RecordBatchReader (scanned once), pandas DataFrame, or a
        path to a Parquet or CSV file. batch_size: rows per scan batch (default: the
        query's); rate: rows/second the scan AM delivers (None: as fast as it can); delay:
        seconds before its first batch. Raises DataSourceError for unusable data.
        """
        key = _check_name(name, "table", DataSourceError)
        self._tables[key] = make_source(key, data, batch_size=batch_size, rate=rate, delay=delay)

    def add_function(
        self,
        name: str,
        fn: Callable[..., Any],
        *,
        vectorized: bool = True,
        return_type: pa.DataType | None = None,
    ) -> None:
        """Register a Python function callable from SQL, typically an expensive predicate.

        vectorized=True: ``fn(*pyarrow.Array) -> array-like`` of the batch's length;
        vectorized=False: ``fn(*values) -> value``, called per row. ``async def`` functions
        are awaited on the trio thread; plain functions run in a worker thread, so a slow
        one never stalls the eddy. return_type defaults to boolean (a predicate).
        """
        key = _check_name(name, "function", UdfError)
        if not callable(fn):
            raise UdfError(f"function {name!r}: {fn!r} is not callable")
        self._functions[key] = FunctionSpec(key, fn, vectorized, return_type or pa.bool_())

    def table(self, name: str) -> TableSource:
        return self._tables[name.lower()]

    def has_table(self, name: str) -> bool:
        return name.lower() in self._tables

    @property
    def tables(self) -> list[str]:
        return list(self._tables)

    @property
    def functions(self) -> dict[str, FunctionSpec]:
        return dict(self._functions)


def _check_name(name: str, what: str, error: type[EddiesError]) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise error(f"{what} name {name!r} is not a plain SQL identifier")
    return name.lower()
