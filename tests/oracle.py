"""The DuckDB oracle of the test suite: run SQL in eddies and in DuckDB, compare.

Results are compared as bags (multisets) of row tuples, positionally (column names are
ignored). Values are normalized first so that equal results compare equal across the two
engines: floats are rounded to 9 significant digits, integral floats equal ints, NaN equals
NaN, decimals and HUGEINTs become numbers, timestamps become naive UTC datetimes.

Helpers (import them with ``from oracle import ...``; ``tests/`` is on pytest's
``pythonpath``):

- ``duckdb_table(sql, tables)``: DuckDB's answer as a pa.Table.
- ``assert_same_bag(ours, sql, tables)``: bag comparison against DuckDB.
- ``assert_same_ordered(ours, sql, tables, keys)``: bag comparison plus the order of the
  sort-key columns (positions in the output); ties may come in any order.
- ``make_catalog(tables)``, ``run_eddies(sql, tables, **kw)``: build a Catalog and execute.
- ``check_all(sql, tables, ...)``: execute under several policies / batch sizes and compare
  every run with DuckDB.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import duckdb
import pyarrow as pa
import trio
import trio.testing

from eddies.engine import POLICIES, Catalog, EddiesError, execute, open_query

SIG_DIGITS = 9
_NAN = ("<NaN>",)  # hashable stand-in so that NaN == NaN inside a Counter
_UTC = dt.UTC


# ---------------------------------------------------------------------------------------
# value normalization
def _norm_number(x: int | float) -> Any:
    if isinstance(x, float):
        if math.isnan(x):
            return _NAN
        if math.isinf(x):
            return x
        r = float(f"{x:.{SIG_DIGITS}g}")
        if r.is_integer():
            return int(r)
        return r
    # python int (incl. HUGEINT results): round large values like floats, keep exact otherwise
    if abs(x) < 10**SIG_DIGITS:
        return x
    return int(float(f"{x:.{SIG_DIGITS}g}"))


def normalize_value(v: Any) -> Any:
    """Canonical, hashable form of one result value (see module docstring)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return _norm_number(v)
    if isinstance(v, decimal.Decimal):
        if v.is_nan():
            return _NAN
        if v == v.to_integral_value():
            return _norm_number(int(v))
        return _norm_number(float(v))
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(_UTC).replace(tzinfo=None)
        return v
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v)
    if isinstance(v, list | tuple):
        return tuple(normalize_value(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, normalize_value(x)) for k, x in v.items()))
    return v


def _sort_key(v: Any) -> tuple:
    """A total order over normalized values, for readable diffs only."""
    if v is None:
        return (0, "")
    if v is _NAN or v == _NAN:
        return (1, "")
    if isinstance(v, int | float):
        return (2, v)
    return (3, repr(v))


def table_rows(t: pa.Table | pa.RecordBatch) -> list[tuple]:
    """Rows of an Arrow table as normalized tuples, positional (names ignored)."""
    cols = [col.to_pylist() for col in t.columns]
    n = t.num_rows
    return [tuple(normalize_value(c[i]) for c in cols) for i in range(n)]


def bag(rows: Iterable[tuple]) -> Counter:
    return Counter(rows)


# ---------------------------------------------------------------------------------------
# DuckDB side
def duckdb_table(sql: str, tables: Mapping[str, Any]) -> pa.Table:
    """Run ``sql`` in a fresh in-memory DuckDB with ``tables`` registered under their names."""
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone='UTC'")
        for name, data in tables.items():
            con.register(name, data)
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def duckdb_rows(sql: str, tables: Mapping[str, Any]) -> list[tuple]:
    return table_rows(duckdb_table(sql, tables))


# ---------------------------------------------------------------------------------------
# comparison
class ResultMismatch(AssertionError):
    """eddies' result differs from DuckDB's (an AssertionError, so hypothesis notes show)."""


def _fmt_rows(rows: Iterable[tuple], limit: int = 25) -> str:
    rows = sorted(rows, key=lambda r: tuple(_sort_key(v) for v in r))
    lines = [f"    {r!r}" for r in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"    ... {len(rows) - limit} more")
    return "\n".join(lines) if lines else "    (none)"


def _bag_diff_message(ours: list[tuple], theirs: list[tuple], sql: str, context: str) -> str:
    b_ours, b_theirs = bag(ours), bag(theirs)
    only_ours = list((b_ours - b_theirs).elements())
    only_theirs = list((b_theirs - b_ours).elements())
    return (
        f"result differs from DuckDB{(' [' + context + ']') if context else ''}\n"
        f"SQL: {sql}\n"
        f"rows: eddies={len(ours)} duckdb={len(theirs)}\n"
        f"  rows only in eddies ({len(only_ours)}):\n{_fmt_rows(only_ours)}\n"
        f"  rows only in DuckDB ({len(only_theirs)}):\n{_fmt_rows(only_theirs)}"
    )


def assert_bags_equal(ours: list[tuple], theirs: list[tuple], sql: str = "", context: str = ""):
    if bag(ours) != bag(theirs):
        raise ResultMismatch(_bag_diff_message(ours, theirs, sql, context))


def _check_width(ours: pa.Table, expected: pa.Table, sql: str, context: str) -> None:
    if ours.num_columns != expected.num_columns:
        raise ResultMismatch(
            f"column count differs from DuckDB{(' [' + context + ']') if context else ''}: "
            f"eddies {ours.column_names} vs duckdb {expected.column_names}\nSQL: {sql}"
        )


def assert_same_bag(
    ours: pa.Table,
    sql: str,
    tables: Mapping[str, Any],
    *,
    context: str = "",
    expected: pa.Table | None = None,
) -> None:
    """Assert ``ours`` equals DuckDB's result for ``sql`` over ``tables`` as a bag of rows."""
    assert isinstance(ours, pa.Table), f"expected a pa.Table, got {type(ours)!r}"
    if expected is None:
        expected = duckdb_table(sql, tables)
    _check_width(ours, expected, sql, context)
    assert_bags_equal(table_rows(ours), table_rows(expected), sql, context)


def assert_same_ordered(
    ours: pa.Table,
    sql: str,
    tables: Mapping[str, Any],
    keys: Sequence[int],
    *,
    check_bag: bool = True,
    context: str = "",
    expected: pa.Table | None = None,
) -> None:
    """Assert ``ours`` matches DuckDB for an ORDER BY query.

    ``keys`` are output column positions of the ORDER BY keys. The sequence of key tuples
    must equal DuckDB's exactly (rows that tie on the keys may come in any order); with
    ``check_bag`` the whole rows must also be equal as a bag (turn it off only when a LIMIT
    cuts through a group of ties, where either engine may pick different rows).
    """
    assert isinstance(ours, pa.Table), f"expected a pa.Table, got {type(ours)!r}"
    if expected is None:
        expected = duckdb_table(sql, tables)
    _check_width(ours, expected, sql, context)
    ours_rows, exp_rows = table_rows(ours), table_rows(expected)
    if check_bag:
        assert_bags_equal(ours_rows, exp_rows, sql, context)
    ours_keys = [tuple(r[k] for k in keys) for r in ours_rows]
    exp_keys = [tuple(r[k] for k in keys) for r in exp_rows]
    if ours_keys != exp_keys:
        first = next(
            (i for i, (a, b) in enumerate(zip(ours_keys, exp_keys, strict=False)) if a != b),
            min(len(ours_keys), len(exp_keys)),
        )
        raise ResultMismatch(
            f"sort order differs from DuckDB{(' [' + context + ']') if context else ''}\n"
            f"SQL: {sql}\nfirst difference at row {first}\n"
            f"  eddies keys: {ours_keys[max(0, first - 3) : first + 5]}\n"
            f"  duckdb keys: {exp_keys[max(0, first - 3) : first + 5]}\n"
            f"  lengths: eddies={len(ours_keys)} duckdb={len(exp_keys)}"
        )


# ---------------------------------------------------------------------------------------
# eddies side
def chain_tables(n: int = 60, seed: int = 4) -> dict[str, pa.Table]:
    """Tables r(a, x), s(a, b), t(b, c), u(c, y) of ``n`` rows each for a chain join
    r.a = s.a, s.b = t.b, t.c = u.c: integer keys with duplicates and ~5% NULLs."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def col(k: int) -> pa.Array:
        return pa.array([None if rng.random() < 0.05 else int(rng.integers(k)) for _ in range(n)])

    return {
        "r": pa.table({"a": col(40), "x": col(50)}),
        "s": pa.table({"a": col(40), "b": col(40)}),
        "t": pa.table({"b": col(40), "c": col(40)}),
        "u": pa.table({"c": col(40), "y": col(50)}),
    }


def make_catalog(tables: Mapping[str, Any], **add_kwargs: Any) -> Catalog:
    cat = Catalog()
    for name, data in tables.items():
        cat.add_table(name, data, **add_kwargs)
    return cat


def run_eddies(sql: str, tables: Mapping[str, Any], **kwargs: Any) -> pa.Table:
    return execute(sql, make_catalog(tables), **kwargs)


def check_all(
    sql: str,
    tables: Mapping[str, Any],
    *,
    policies: Sequence[str] = POLICIES,
    batch_sizes: Sequence[int | None] = (None, 1),
    ordered_keys: Sequence[int] | None = None,
    check_bag: bool = True,
    debug_per_tuple: bool = True,
    seed: int | None = 0,
    catalog: Catalog | None = None,
    errors_too: bool = False,
) -> pa.Table | None:
    """Run ``sql`` under each policy and batch size and compare every result with DuckDB.

    ``debug=True`` is used for the ``batch_size=1`` runs when ``debug_per_tuple``.
    Returns DuckDB's result. With ``errors_too``, a query DuckDB refuses must raise an
    EddiesError under every policy (and None is returned).
    """
    cat = catalog if catalog is not None else make_catalog(tables)
    try:
        expected = duckdb_table(sql, tables)
    except duckdb.Error:
        if not errors_too:
            raise
        answered = []
        for policy in policies:
            try:
                execute(sql, cat, policy=policy, seed=seed)
            except EddiesError:
                continue
            answered.append(policy)
        assert not answered, f"DuckDB refuses {sql!r}; eddies answered under {answered}"
        return None
    for policy in policies:
        for bs in batch_sizes:
            debug = bool(debug_per_tuple and bs == 1)
            ctx = f"policy={policy} batch_size={bs} debug={debug}"
            ours = execute(sql, cat, policy=policy, batch_size=bs, debug=debug, seed=seed)
            if ordered_keys is None:
                assert_same_bag(ours, sql, tables, context=ctx, expected=expected)
            else:
                assert_same_ordered(
                    ours,
                    sql,
                    tables,
                    ordered_keys,
                    check_bag=check_bag,
                    context=ctx,
                    expected=expected,
                )
    return expected


def run_virtual(sql: str, cat: Catalog, **options: Any) -> tuple[pa.Table, Any]:
    """(result table, RunStats) of ``sql`` run on trio's MockClock: a scan's ``delay`` and
    ``rate`` pass in virtual time, only while every task waits, so what a test counts does
    not depend on how loaded the machine is."""
    got: dict = {}

    async def main() -> None:
        async with open_query(sql, cat, **options) as results:
            got["batches"] = [batch async for batch in results]
        got["stats"], got["schema"] = results.stats, results.schema

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return pa.Table.from_batches(got["batches"], schema=got["schema"]), got["stats"]
