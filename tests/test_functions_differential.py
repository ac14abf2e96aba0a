"""Differential tests of the built-in scalar functions (issue 14, item 1) against DuckDB.

Families: strings, regular expressions, numbers (with IS [NOT] DISTINCT FROM and ifnull),
dates and timestamps (extract/date_part, year() and friends, date_trunc, date_diff,
strftime, make_date).

Hypothesis draws a small table (strings with unicode, empties, separators, duplicates and
NULLs; integers and doubles with negatives, zero, -0.0, NaN and NULLs) and one to three
calls, per family, with drawn constant parameters (negative positions, zero, widths past
the string, empty patterns) or column parameters. Each query runs under two policies at
batch sizes 7 and the default and must equal DuckDB's result as a bag of rows; a call
DuckDB refuses must raise an EddiesError. Pinned cases name the edge cases one by one.
"""

from __future__ import annotations

import datetime as dt
import os
import re

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import check_all, duckdb_table, make_catalog

from eddies.engine import EddiesError, execute
from eddies.errors import UnsupportedQueryError

MAX_EXAMPLES = int(os.environ.get("EDDIES_FUNC_EXAMPLES", "15"))
POLICIES = ("static", "lottery", "hybrid")  # hybrid: the default
BATCH_SIZES = (None, 7)

STRINGS = ["", "a", "hello", "héllo wörld", "a,b,,c", "aXbXc", "  pad  ", "abab", "ÄÖü", "x"]


def _table(rows: list[tuple]) -> pa.Table:
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in range(5)]
    return pa.table(
        {
            "s": pa.array(cols[0], pa.large_string()),
            "c": pa.array(cols[1], pa.string()).dictionary_encode(),
            "k": pa.array(cols[2], pa.int64()),
            "n": pa.array(cols[3], pa.int32()),
            "f": pa.array(cols[4], pa.float64()),
        }
    )


def _maybe(values: list) -> st.SearchStrategy:
    return st.one_of(st.none(), st.sampled_from(values))


ROW = st.tuples(
    _maybe(STRINGS),
    _maybe(["p", "q,r", "", "ñ"]),
    _maybe([-7, -2, -1, 0, 1, 2, 3, 10]),
    _maybe([-3, 0, 1, 2, 5]),
    _maybe([-2.5, -0.0, 0.0, 0.5, 1.0, 2.0, 100.0, float("nan"), 1e-3]),
)
TABLES = st.lists(ROW, min_size=0, max_size=12).map(_table)

POS = st.integers(-8, 8)
LIT = st.sampled_from(["''", "'a'", "'l'", "','", "'X'", "'ab'", "'ö'", "' '", "NULL"])
TEXT = st.sampled_from(["s", "c", "'héllo'", "NULL", "s || c"])


@st.composite
def string_call(draw) -> str:
    s = draw(TEXT)
    p, q = draw(POS), draw(POS)
    lit, lit2 = draw(LIT), draw(LIT)
    return draw(
        st.sampled_from(
            [
                f"substr({s}, {p})",
                f"substring({s}, {p}, {q})",
                f"substr({s}, k, {q})",
                f"trim({s})",
                f"ltrim({s}, {lit})",
                f"rtrim({s}, {lit})",
                f"trim({s}, {lit})",
                f"concat({s}, k, {lit}, f)",
                f"concat_ws({lit}, {s}, c, n)",
                f"replace({s}, {lit}, {lit2})",
                f"left({s}, {p})",
                f"right({s}, {p})",
                f"right({s}, n)",
                f"lpad({s}, {abs(p)}, {lit})",
                f"rpad({s}, {abs(p)}, {lit})",
                f"split_part({s}, {lit}, {p})",
                f"split_part({s}, c, {p})",
                f"strpos({s}, {lit})",
                f"instr({s}, c)",
                f"starts_with({s}, {lit})",
                f"contains({s}, {lit})",
                f"length(substr({s}, {p}, {q}))",
            ]
        )
    )


REGEX = st.sampled_from(["'l+'", "'^h'", "'[aeiou]'", "'(a)(b)?'", "'b$'", "'.'", "'ö|X'"])


@st.composite
def regex_call(draw) -> str:
    s, r = draw(TEXT), draw(REGEX)
    flags = draw(st.sampled_from(["", ", 'i'", ", 'c'", ", 'g'", ", 'gi'", ", 'ic'", ", 's'"]))
    group = draw(st.integers(0, 3))
    reps = ["'_'", "''", "'\\0\\0'"]
    if r == "'(a)(b)?'":  # a group reference to a group the pattern lacks is an error
        reps += ["'<\\1>'", "'\\2\\1'"]
    rep = draw(st.sampled_from(reps))
    return draw(
        st.sampled_from(
            [
                f"regexp_matches({s}, {r}{flags})",  # 'g' is an error there
                f"regexp_replace({s}, {r}, {rep}{flags})",
                f"regexp_extract({s}, {r}, {group})",
                f"regexp_extract({s}, {r})",
            ]
        )
    )


NUM = st.sampled_from(["k", "n", "f", "2", "-1.5", "0", "NULL", "k + n"])


@st.composite
def number_call(draw) -> str:
    a, b, c = draw(NUM), draw(NUM), draw(NUM)
    return draw(
        st.sampled_from(
            [
                f"power({a}, {b})",
                f"pow({a}, 2)",
                f"log10({a})",
                f"log({a})",
                f"exp({a})",
                f"sign({a})",
                f"abs({a})",
                f"mod({a}, 3)",
                f"greatest({a}, {b}, {c})",
                f"least({a}, {b})",
                "greatest(s, c)",
                "least(s, 'b', c)",
                f"{a} IS DISTINCT FROM {b}",
                f"{a} IS NOT DISTINCT FROM {b}",
                "s IS DISTINCT FROM c",
                f"ifnull({a}, {b})",
                "ifnull(s, c)",
            ]
        )
    )


DATES = [dt.date(2024, 2, 29), dt.date(1969, 12, 31), dt.date(2020, 1, 5), dt.date(2021, 1, 3)]
STAMPS = [
    dt.datetime(2020, 1, 5, 12, 34, 56, 789012),
    dt.datetime(1969, 12, 31, 23, 59, 59, 500000),  # before the epoch, sub-second
    dt.datetime(2024, 12, 30, 0, 0, 0, 3),  # ISO week 1 of 2025
    dt.datetime(2021, 1, 3, 23, 0),  # ISO week 53 of 2020
    dt.datetime(2000, 2, 29, 6, 7, 8),
]


def _date_table(rows: list[tuple]) -> pa.Table:
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in range(4)]
    return pa.table(
        {
            "d": pa.array(cols[0], pa.date32()),
            "ts": pa.array(cols[1], pa.timestamp("us")),
            "tz": pa.array(cols[2], pa.timestamp("us", tz="UTC")),
            "y": pa.array(cols[3], pa.int64()),
        }
    )


DATE_TABLES = st.lists(
    st.tuples(_maybe(DATES), _maybe(STAMPS), _maybe(STAMPS), _maybe([1999, 2020, 2024])),
    max_size=10,
).map(_date_table)
PARTS = [
    "year", "quarter", "month", "day", "hour", "minute", "second", "millisecond",
    "microsecond", "dow", "isodow", "doy", "week", "isoyear", "epoch",
]  # fmt: skip
UNITS = [
    "year", "quarter", "month", "week", "day", "hour", "minute", "second", "millisecond",
    "microsecond",
]  # fmt: skip
FUNCS = ["year", "month", "day", "hour", "minute", "second", "dayofweek", "dayofyear"]
FUNCS += ["quarter", "week", "isodow", "dayofmonth", "millisecond", "microsecond", "epoch"]
FORMATS = ["'%Y-%m-%d'", "'%H:%M:%S.%f'", "'%a %A %b %B %j %p %I %y %%'", "'%d/%m %S'"]


@st.composite
def date_call(draw) -> str:
    x, x2 = draw(st.sampled_from(["d", "ts", "tz"])), draw(st.sampled_from(["d", "ts"]))
    part, unit = draw(st.sampled_from(PARTS)), draw(st.sampled_from(UNITS))
    return draw(
        st.sampled_from(
            [
                f"extract({part} FROM {x})",
                f"date_part('{part}', {x})",
                f"{draw(st.sampled_from(FUNCS))}({x})",
                f"date_trunc('{unit}', {x})",
                f"date_diff('{unit}', {x}, {x2})",
                f"datediff('{unit}', {x2}, {x})",
                f"strftime({x}, {draw(st.sampled_from(FORMATS))})",
                f"make_date(y, {draw(st.integers(1, 12))}, {draw(st.integers(1, 28))})",
            ]
        )
    )


def _check(sql: str, table: pa.Table) -> None:
    """``sql`` over ``t`` in DuckDB and in eddies (POLICIES × BATCH_SIZES); a query DuckDB
    refuses must be refused too."""
    check_all(
        sql,
        {"t": table},
        policies=POLICIES,
        batch_sizes=BATCH_SIZES,
        debug_per_tuple=False,
        errors_too=True,
    )


def _select(calls: list[str], where: bool) -> str:
    sql = "SELECT " + ", ".join(calls) + " FROM t"
    return sql + (f" WHERE {calls[0]} IS NOT NULL" if where else "")


_SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_SETTINGS
@given(TABLES, st.lists(string_call(), min_size=1, max_size=3), st.booleans())
def test_string_functions_match_duckdb(table, calls, where):
    _check(_select(calls, where), table)


@_SETTINGS
@given(TABLES, st.lists(regex_call(), min_size=1, max_size=3), st.booleans())
def test_regex_functions_match_duckdb(table, calls, where):
    _check(_select(calls, where), table)


@_SETTINGS
@given(TABLES, st.lists(number_call(), min_size=1, max_size=3), st.booleans())
def test_number_functions_match_duckdb(table, calls, where):
    _check(_select(calls, where), table)


@_SETTINGS
@given(DATE_TABLES, st.lists(date_call(), min_size=1, max_size=3), st.booleans())
def test_date_functions_match_duckdb(table, calls, where):
    _check(_select(calls, where), table)


EDGE = _table(
    [
        ("hello", "p", 1, 0, 1.5),
        ("", "", -2, -3, -0.0),
        (None, None, None, None, None),
        ("héllo wörld", "ñ", 3, 5, float("nan")),
        ("a,b,,c", "q,r", 0, 1, 0.0),
        ("abab", "p", 10, 2, -2.5),
        ("abab", "p", 10, 2, -2.5),  # a duplicate row
    ]
)

PINNED = [
    "substr(s, 0, 2)",  # position 0 counts as before the first character
    "substr(s, -2)",  # negative: from the end
    "substr(s, -20, 22)",  # clipped at both ends
    "substr(s, 3, -2)",  # negative length: the characters before the start
    "substr(s, -2, -3)",
    "substr(s, k, n)",  # column parameters, NULL among them
    "left(s, -1)",
    "right(s, -1)",
    "right(s, 0)",
    "lpad(s, 7, 'é')",  # unicode fill, strings cut to the width
    "repeat(s, k)",  # column counts, negative and NULL among them
    "repeat(s, 2), repeat(s, NULL), repeat(c, 0), repeat(c, n)",
    "reverse(s), reverse(c), reverse(NULL)",
    "rpad(s, 3, 'xyz')",
    "split_part(s, ',', -1)",
    "split_part(s, ',', 0)",
    "split_part(s, 'ab', -1)",  # a multi-character delimiter from the end
    "split_part(s, '', 2)",  # an empty delimiter splits into characters
    "strpos(s, 'ö')",  # a character position, not a byte offset
    "strpos(s, '')",
    "replace(s, '', 'x')",  # an empty pattern changes nothing
    "concat(NULL, s, NULL)",  # NULLs skipped
    "concat_ws(NULL, s)",  # a NULL separator gives NULL
    "concat_ws(',', s, NULL, c)",
    "trim(s, '')",
    "regexp_extract(s, '(b)', 3)",  # a group the pattern lacks: ''
    "regexp_extract(s, 'z')",  # no match: ''
    "regexp_replace(s, '', '-', 'g')",
    "regexp_matches(s, 'L', 'i')",
    "greatest(f, 1.0)",  # NaN is above every number
    "least(f, 1.0)",
    "greatest(k, NULL, n)",  # NULLs ignored
    "least(NULL, NULL)",
    "sign(f)",  # NaN and -0.0 give 0
    "power(0, -1)",
    "power(-8, 1.0 / 3)",
    "log10(f)",
    "log(2, k)",
    "exp(f)",
    "f IS NOT DISTINCT FROM f",  # NaN is not distinct from NaN
    "k IS DISTINCT FROM n",
    "NULL IS DISTINCT FROM NULL",
    "ifnull(s, c)",
]


@pytest.mark.parametrize("call", PINNED)
def test_pinned_function_edge_cases(call):
    _check(f"SELECT {call} FROM t", EDGE)


@pytest.mark.parametrize(
    "sql, message",
    [
        ("SELECT lpad(s, 9, '') FROM t", "Insufficient padding in LPAD"),
        ("SELECT regexp_matches(s, 'a', 'x') FROM t", "Unrecognized Regex option x"),
        ("SELECT regexp_matches(s, 'a', 'g') FROM t", "only valid for regexp_replace"),
        ("SELECT regexp_extract(s, 'a', 10) FROM t", "Group index must be between 0 and 9"),
        # DuckDB's lpad/rpad take an INTEGER width and do not narrow a BIGINT
        ("SELECT lpad(s, 3000000000, 'x') FROM t", "width of lpad/rpad must be an INTEGER"),
        ("SELECT rpad(s, CAST(2 AS BIGINT), 'x') FROM t", "width of lpad/rpad must be an INTEGER"),
    ],
)
def test_value_errors_name_the_call(sql, message):
    with pytest.raises(duckdb.Error):
        duckdb_table(sql, {"t": EDGE})
    with pytest.raises(EddiesError, match=message):
        execute(sql, make_catalog({"t": EDGE}))


def test_adjacent_string_literals_stay_a_syntax_error():
    with pytest.raises(EddiesError, match=r"adjacent string literals.*line 1, column"):
        execute("SELECT 'a'  'b' FROM t", make_catalog({"t": EDGE}))


def test_make_date_of_an_impossible_date_is_an_error():
    tables = {"t": _date_table([(None, None, None, 2021)])}
    sql = "SELECT make_date(y, 2, 29) FROM t"
    with pytest.raises(duckdb.Error):
        duckdb_table(sql, tables)
    with pytest.raises(EddiesError, match=r"(?i)make_date"):
        execute(sql, make_catalog(tables))


@pytest.mark.parametrize(
    "sql, name",
    [
        ("SELECT extract(century FROM d) FROM t", "century"),
        ("SELECT date_trunc('decade', d) FROM t", "decade"),
        ("SELECT strftime(d, '%Q') FROM t", "%Q"),
    ],
)
def test_unsupported_date_parts_are_named(sql, name):
    tables = {"t": _date_table([(DATES[0], STAMPS[0], STAMPS[0], 2020)])}
    with pytest.raises(UnsupportedQueryError, match=f"(?i){re.escape(name)}.*line 1"):
        execute(sql, make_catalog(tables))


def test_unknown_function_is_named():
    with pytest.raises(UnsupportedQueryError, match=r"(?i)no_such_fn"):
        execute("SELECT no_such_fn(s) FROM t", make_catalog({"t": EDGE}))
