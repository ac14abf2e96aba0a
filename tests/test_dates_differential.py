"""Differential tests of date/time arithmetic (issue 14, item 1) against DuckDB: INTERVAL
constants added to and subtracted from DATEs and TIMESTAMPs (month-end clamping, leap days),
``date ± integer``, ``date - date``, and ``strptime`` / ``try_strptime``.

Hypothesis draws a small table (dates around month ends and leap days, timestamps, small
integers, strings that do and do not match the formats, NULLs) and one to three calls; each
query runs under several policies at batch sizes 1, 7 and the default and must equal
DuckDB's result as a bag of rows; a query DuckDB refuses must raise an EddiesError.
"""

from __future__ import annotations

import datetime as dt
import os

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_same_bag, duckdb_table, make_catalog

from eddies.engine import EddiesError, execute
from eddies.errors import SqlSyntaxError, UnsupportedQueryError

MAX_EXAMPLES = int(os.environ.get("EDDIES_DATE_EXAMPLES", "20"))
RUNS = (("static", None), ("lottery", 7), ("random", 1), ("rank", None), ("bandit", 7))

DATES = [
    dt.date(2024, 1, 31),
    dt.date(2024, 2, 29),
    dt.date(2023, 2, 28),
    dt.date(2023, 3, 31),
    dt.date(2000, 12, 31),
    dt.date(1999, 1, 1),
    dt.date(1969, 7, 20),
    dt.date(2024, 5, 15),
]
STAMPS = [
    dt.datetime(2024, 1, 31, 23, 59, 59, 999999),
    dt.datetime(2024, 2, 29, 0, 0),
    dt.datetime(2023, 10, 31, 12, 30, 15, 250000),
    dt.datetime(1970, 1, 1),
    dt.datetime(1969, 12, 31, 23, 0),
]


@st.composite
def date_string(draw) -> str:
    """Strings around the formats: padded or not, out-of-range parts, stray spaces."""
    year = draw(st.sampled_from(["2024", "1999", "24", "0999", "2023"]))
    month = draw(st.sampled_from(["01", "1", "02", "12", "13", "00", "Jan", "feb"]))
    day = draw(st.sampled_from(["05", "5", "29", "30", "31", "00"]))
    time = draw(st.sampled_from(["", " 10:11:12", " 1:2:3", " 23:59:59.5", " 24:00:00", "  7:05"]))
    lead = draw(st.sampled_from(["", " ", "x"]))
    return f"{lead}{year}-{month}-{day}{time}{draw(st.sampled_from(['', ' ', '!']))}"


def _maybe(values) -> st.SearchStrategy:
    return st.one_of(st.none(), st.sampled_from(values) if isinstance(values, list) else values)


ROW = st.tuples(
    _maybe(DATES),
    _maybe(DATES),
    _maybe(STAMPS),
    _maybe([-40, -1, 0, 1, 29, 365]),
    _maybe(date_string()),
)


def _table(rows: list[tuple]) -> pa.Table:
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in range(5)]
    return pa.table(
        {
            "d": pa.array(cols[0], pa.date32()),
            "e": pa.array(cols[1], pa.date32()),
            "ts": pa.array(cols[2], pa.timestamp("us")),
            "n": pa.array(cols[3], pa.int32()),
            "s": pa.array(cols[4], pa.string()),
        }
    )


TABLES = st.lists(ROW, min_size=0, max_size=10).map(_table)
INTERVALS = [
    "INTERVAL 3 DAY",
    "INTERVAL 1 MONTH",
    "INTERVAL '1 month'",
    "INTERVAL 13 MONTH",
    "INTERVAL 1 YEAR",
    "INTERVAL 2 QUARTER",
    "INTERVAL 1 WEEK",
    "INTERVAL '2 hours'",
    "INTERVAL 90 MINUTE",
    "INTERVAL '1.5' SECOND",
    "INTERVAL 1.5 DAY",
    "INTERVAL '1 month 2 days 3 hours'",
    "INTERVAL '-1 month'",
    "INTERVAL '1 year 2 months'",
    "INTERVAL 250 MILLISECOND",
]
FORMATS = [
    "'%Y-%m-%d'",
    "'%Y-%m-%d %H:%M:%S'",
    "'%Y-%m-%d %H:%M'",
    "'%Y-%m-%d %H:%M:%S.%f'",
    "'%y-%m-%d'",
    "'%Y-%b-%d'",
    "'%Y-%b-%d %H:%M:%S'",
    "'x%Y-%m-%d'",
]


@st.composite
def date_call(draw) -> str:
    x = draw(st.sampled_from(["d", "ts", "DATE '2024-01-31'", "TIMESTAMP '2024-03-31 10:00:00'"]))
    interval = draw(st.sampled_from(INTERVALS))
    return draw(
        st.sampled_from(
            [
                f"{x} + {interval}",
                f"{x} - {interval}",
                f"{interval} + {x}",
                f"d + {draw(st.sampled_from(['n', '1', '-30', '0']))}",
                f"{draw(st.sampled_from(['n', '7']))} + d",
                f"d - {draw(st.sampled_from(['n', '1', '365']))}",
                f"d - {draw(st.sampled_from(['e', 'd', 'DATE ' + repr('2000-02-29')]))}",
                f"(d + {interval}) > ts",
                f"try_strptime(s, {draw(st.sampled_from(FORMATS))})",
                f"strptime(s, {draw(st.sampled_from(FORMATS))})",
                f"date_diff('day', d, d + {interval})",
            ]
        )
    )


def _check(sql: str, table: pa.Table) -> None:
    tables = {"t": table}
    try:
        expected = duckdb_table(sql, tables)
    except duckdb.Error:
        with pytest.raises(EddiesError):
            execute(sql, make_catalog(tables), seed=0)
        return
    for policy, bs in RUNS:
        ours = execute(sql, make_catalog(tables), policy=policy, batch_size=bs, seed=0)
        assert_same_bag(ours, sql, tables, context=f"{policy} bs={bs}", expected=expected)


@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(table=TABLES, calls=st.lists(date_call(), min_size=1, max_size=3), where=st.booleans())
def test_date_arithmetic_matches_duckdb(table, calls, where):
    sql = "SELECT " + ", ".join(calls) + " FROM t"
    _check(sql + (f" WHERE {calls[0]} IS NOT NULL" if where else ""), table)


STRINGS = [
    "2024-01-05 10:11:12",
    " 2024-1-5  1:2:3 ",
    "2024-02-30 00:00:00",
    "2023-02-29 00:00:00",
    "2024-02-29 23:59:59",
    "2024-01-05 24:00:00",
    "2024-01-05T10:11:12",
    "12024-01-05 10:11:12",
    "024-01-05 10:11:12",
    "2024-01-05 10:11:12 x",
    "",
]


@pytest.mark.parametrize("text", STRINGS)
@pytest.mark.parametrize(
    "fmt", ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d", "%Y-%m-%d %H:%M:%S x"]
)
def test_strptime_pinned(text, fmt):
    table = _table([(None, None, None, None, text), (None, None, None, None, None)])
    _check(f"SELECT try_strptime(s, '{fmt}') FROM t", table)
    _check(f"SELECT strptime(s, '{fmt}') FROM t", table)


@pytest.mark.parametrize(
    ("sql", "value"),
    [
        ("DATE '2024-01-31' + INTERVAL 1 MONTH", dt.datetime(2024, 2, 29)),
        ("DATE '2023-01-31' + INTERVAL 1 MONTH", dt.datetime(2023, 2, 28)),
        ("DATE '2024-03-31' - INTERVAL 1 MONTH", dt.datetime(2024, 2, 29)),
        ("DATE '2024-02-29' + INTERVAL 1 YEAR", dt.datetime(2025, 2, 28)),
        ("TIMESTAMP '2024-01-31 10:30:00' - INTERVAL '2 hours'", dt.datetime(2024, 1, 31, 8, 30)),
        ("DATE '2024-03-01' - DATE '2024-02-01'", 29),
        ("DATE '2024-02-28' + 1", dt.date(2024, 2, 29)),
        ("strptime('5/Jan/24', '%d/%b/%y')", dt.datetime(2024, 1, 5)),
    ],
)
def test_pinned_values(sql, value):
    one = pa.table({"k": [1]})
    full = f"SELECT {sql} FROM t"
    assert duckdb_table(full, {"t": one}).column(0).to_pylist() == [value]
    assert execute(full, make_catalog({"t": one})).column(0).to_pylist() == [value]


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("SELECT INTERVAL 1 DAY FROM t", UnsupportedQueryError),
        ("SELECT ts - ts FROM t", UnsupportedQueryError),
        ("SELECT d + INTERVAL (n) DAY FROM t", UnsupportedQueryError),
        ("SELECT d + INTERVAL -1 DAY FROM t", SqlSyntaxError),
        ("SELECT strptime(s, '%I:%M %p') FROM t", UnsupportedQueryError),
        ("SELECT strptime(s, ['%Y', '%d']) FROM t", UnsupportedQueryError),
        ("SELECT d + CAST(n AS BIGINT) FROM t", EddiesError),
        ("SELECT ts + 1 FROM t", EddiesError),
        ("SELECT 1 - d FROM t", EddiesError),
    ],
)
def test_refused_forms(sql, error):
    table = _table([(DATES[0], DATES[1], STAMPS[0], 3, "2024-01-05")])
    with pytest.raises(error):
        execute(sql, make_catalog({"t": table}))
