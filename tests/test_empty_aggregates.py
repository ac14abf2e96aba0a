"""Aggregates over no rows against DuckDB (issue 26, item 1).

A global aggregate over no rows is one row of NULLs (COUNT 0); a grouped one has no
groups. Either way its value must have the type the aggregate has over rows, so HAVING
and expressions over it compare with typed literals (``HAVING min(d) >= DATE '...'``
raised "no kernel matching (int64, date32)" before). Each aggregate runs over an empty
input (``WHERE false``, and a WHERE no row passes), global and grouped, with HAVING
comparing it against a literal of its type; the results equal DuckDB's, and the result
types equal those the same query has over rows (and DuckDB's, where eddies types the
aggregate as DuckDB does).
"""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from oracle import assert_same_bag, duckdb_table, make_catalog

from eddies.engine import execute

TABLES = {
    "t": pa.table(
        {
            "g": pa.array([1, 1, 2], pa.int64()),
            "i": pa.array([3, None, 5], pa.int32()),
            "x": pa.array([1.5, 2.5, None], pa.float64()),
            "m": pa.array(
                [decimal.Decimal("1.25"), None, decimal.Decimal("3.50")], pa.decimal128(10, 2)
            ),
            "s": pa.array(["a", "b", None], pa.string()),
            "b": pa.array([True, False, None], pa.bool_()),
            "d": pa.array([dt.date(2020, 1, 1), dt.date(2020, 1, 3), None], pa.date32()),
            "ts": pa.array(
                [dt.datetime(2020, 1, 1, 10), None, dt.datetime(2020, 1, 2, 0, 0, 1)],
                pa.timestamp("us"),
            ),
        }
    )
}

#: (aggregate, a literal of its type to compare it with in HAVING)
AGGREGATES = [
    ("count(*)", "0"),
    ("count(i)", "1"),
    ("count(DISTINCT s)", "1"),
    ("sum(i)", "1"),
    ("sum(x)", "1.5"),
    ("sum(m)", "CAST(1.25 AS DECIMAL(10, 2))"),
    ("sum(DISTINCT i)", "1"),
    ("avg(i)", "1.0"),
    ("avg(m)", "1.0"),
    ("avg(DISTINCT x)", "1.0"),
    ("min(i)", "1"),
    ("max(x)", "1.5"),
    ("min(m)", "CAST(1.25 AS DECIMAL(10, 2))"),
    ("max(s)", "'a'"),
    ("min(d)", "DATE '2020-01-02'"),
    ("max(d)", "DATE '2020-01-02'"),
    ("min(ts)", "TIMESTAMP '2020-01-01 12:00:00'"),
    ("max(ts)", "TIMESTAMP '2020-01-01 12:00:00'"),
    ("min(DISTINCT d)", "DATE '2020-01-02'"),
    ("min(b)", "true"),
    ("max(b)", "false"),
    ("any_value(d)", "DATE '2020-01-02'"),
    ("any_value(s)", "'a'"),
    ("any_value(m)", "CAST(1.25 AS DECIMAL(10, 2))"),
    ("bool_and(b)", "true"),
    ("bool_or(b)", "false"),
    ("string_agg(s, ',')", "'a'"),
    ("stddev_samp(x)", "1.0"),
    ("var_pop(i)", "1.0"),
    ("median(x)", "1.0"),
    ("quantile_cont(i, 0.5)", "1.0"),
    ("arg_min(d, i)", "DATE '2020-01-02'"),
    ("arg_max(s, x)", "'a'"),
]
EMPTY = ("false", "i > 100")


def _run(sql: str) -> tuple[pa.Table, pa.Table]:
    ours = execute(sql, make_catalog(TABLES))
    assert_same_bag(ours, sql, TABLES)
    return ours, duckdb_table(sql, TABLES)


def _types_agree(ours: pa.Table, sql_over_rows: str) -> None:
    """The empty result's types are those of the same query over rows."""
    over_rows = execute(sql_over_rows, make_catalog(TABLES))
    assert ours.schema.types == over_rows.schema.types, sql_over_rows


@pytest.mark.parametrize("where", EMPTY)
@pytest.mark.parametrize(("agg", "literal"), AGGREGATES)
def test_global_aggregate_over_no_rows(agg: str, literal: str, where: str) -> None:
    """One row; its value typed as over rows; HAVING against a typed literal and
    expressions over it work as in DuckDB."""
    sql = f"SELECT {agg}, {agg} IS NULL, coalesce({agg}, {literal}) FROM t WHERE {where}"
    ours, _ = _run(sql)
    _types_agree(ours, sql.replace(f"WHERE {where}", ""))
    for op in (">=", "<", "=", "<>"):
        _run(f"SELECT {agg} FROM t WHERE {where} HAVING {agg} {op} {literal}")
    _run(f"SELECT count(*) FROM t WHERE {where} HAVING {agg} IS NULL OR {agg} >= {literal}")


@pytest.mark.parametrize("where", EMPTY)
@pytest.mark.parametrize(("agg", "literal"), AGGREGATES)
def test_grouped_aggregate_over_no_rows(agg: str, literal: str, where: str) -> None:
    """No groups: no rows, typed as over rows, also under HAVING and ORDER BY."""
    sql = f"SELECT g, {agg}, coalesce({agg}, {literal}) FROM t WHERE {where} GROUP BY g"
    ours, _ = _run(sql)
    _types_agree(ours, sql.replace(f"WHERE {where}", ""))
    _run(
        f"SELECT g, {agg} FROM t WHERE {where} GROUP BY g HAVING {agg} >= {literal} ORDER BY {agg}"
    )


#: Aggregates whose type eddies gives as DuckDB does (SUM of integers is BIGINT in eddies,
#: HUGEINT in DuckDB; median/quantile of integers DOUBLE in both here).
SAME_TYPE_AS_DUCKDB = [a for a, _ in AGGREGATES if not a.startswith(("sum(i)", "sum(DISTINCT i)"))]


@pytest.mark.parametrize("agg", SAME_TYPE_AS_DUCKDB)
def test_empty_aggregate_types_match_duckdb(agg: str) -> None:
    sql = f"SELECT {agg} FROM t WHERE false"
    ours, theirs = _run(sql)
    assert ours.schema.types == theirs.schema.types, sql


def test_having_on_empty_input_q_shape() -> None:
    """The issue's query: no row qualifies, HAVING min(d) >= DATE '2020-01-02'."""
    sql = "SELECT min(d) FROM t WHERE false HAVING min(d) >= DATE '2020-01-02'"
    ours, _ = _run(sql)
    assert ours.num_rows == 0 and ours.schema.types == [pa.date32()]
