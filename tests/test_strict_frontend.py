"""The strict front end (issue 9, item 1): what eddies runs matches DuckDB, the rest is refused.

* ``* EXCLUDE``, ``* REPLACE``, ``JOIN ... USING`` and ``NATURAL JOIN`` are compared with
  DuckDB as bags of rows (NULL join keys, duplicate keys, batch sizes 1, 7 and default);
* every refused construct raises the right EddiesError subclass, names the construct and
  gives the line and column where it starts;
* AND/OR chains of 5,000 terms run (no RecursionError); more than 63 tables are refused
  with the limit in the message.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from oracle import assert_same_bag, check_all, make_catalog

from eddies.engine import EddiesError, execute
from eddies.errors import SqlSyntaxError, UnknownColumnError, UnsupportedQueryError

# Duplicate and NULL join keys on every side; t and u share a and c, w shares a only.
T = pa.table(
    {
        "a": pa.array([1, 1, 2, None, 3], pa.int64()),
        "b": pa.array([10, 11, None, 30, 40], pa.int64()),
        "c": pa.array(["x", "y", "y", None, "z"], pa.string()),
    }
)
U = pa.table(
    {
        "a": pa.array([1, None, 1, 2, 4], pa.int64()),
        "d": pa.array([100, 200, 300, None, 500], pa.int64()),
        "c": pa.array(["x", "y", None, "y", "z"], pa.string()),
    }
)
W = pa.table({"a": pa.array([1, 2, 2, None], pa.int64()), "e": pa.array([5, 6, 7, 8], pa.int64())})
TABLES = {"t": T, "u": U, "w": W}
POLICIES = ["static", "lottery", "hybrid"]  # hybrid: the default
BATCHES = (None, 1, 7)

RUNS = [
    "SELECT * EXCLUDE (c) FROM t",
    "SELECT * EXCLUDE (A, c) FROM t",
    "SELECT t.* EXCLUDE (b) FROM t",
    "SELECT * EXCLUDE (a) FROM t JOIN u ON t.a = u.a",
    "SELECT * EXCLUDE (t.a) FROM t JOIN u ON t.a = u.a",
    "SELECT * REPLACE (a + 1 AS a) FROM t",
    "SELECT * REPLACE (b * 2 AS b, upper(c) AS c) FROM t WHERE a IS NOT NULL",
    "SELECT * REPLACE (d AS a) FROM t JOIN u ON t.a = u.a",
    "SELECT * EXCLUDE (a) REPLACE (b + 1 AS b) FROM t",
    "SELECT t.* REPLACE (b AS c), u.* FROM t JOIN u ON t.a = u.a",
    "SELECT * FROM t JOIN u USING (a)",
    "SELECT * FROM t INNER JOIN u USING (a, c)",
    "SELECT * FROM t JOIN u USING (A, a)",
    "SELECT a, t.a, u.a, d FROM t JOIN u USING (a)",
    "SELECT t.*, u.* FROM t JOIN u USING (a)",
    "SELECT * FROM t JOIN u USING (a) JOIN w USING (a)",
    "SELECT * FROM w, t JOIN u USING (c)",
    "SELECT * FROM t JOIN u USING (c) JOIN w ON t.a = w.a",
    "SELECT * FROM t NATURAL JOIN u",
    "SELECT * FROM t NATURAL INNER JOIN u WHERE b > 5",
    "SELECT * FROM t NATURAL JOIN u NATURAL JOIN w",
    "SELECT a, c, u.* FROM t NATURAL JOIN u",
    "SELECT * FROM t NATURAL JOIN t AS t2",
    "SELECT * EXCLUDE (a) FROM t NATURAL JOIN u",
    "SELECT * REPLACE (a + 1 AS a) FROM t JOIN u USING (a)",
    "SELECT a, count(*), sum(d) FROM t JOIN u USING (a) GROUP BY a",
    "SELECT DISTINCT a FROM t NATURAL JOIN w",
    "SELECT count(*) FROM t, u JOIN w ON t.a = w.a",
]


@pytest.mark.parametrize("sql", RUNS)
def test_matches_duckdb(sql):
    check_all(sql, TABLES, policies=POLICIES, batch_sizes=BATCHES)


def _refused(sql, kind, names, line, col, tables=TABLES):
    with pytest.raises(kind) as info:
        execute(sql, make_catalog(tables))
    message = str(info.value)
    for name in names:
        assert name.lower() in message.lower(), message
    found = re.search(r"line (\d+), column (\d+)", message)
    assert found is not None, message
    assert (int(found.group(1)), int(found.group(2))) == (line, col), message
    return message


REFUSED = [
    # (sql, error class, words the message names, line, column)
    ("SELECT a,, b FROM t", SqlSyntaxError, ["two commas"], 1, 10),
    ("SELECT a\nFROM t\nORDER BY a ASC DESC", SqlSyntaxError, ["DESC after ASC"], 3, 16),
    ("SELECT\nFROM t", SqlSyntaxError, ["SELECT list"], 1, 1),
    ("SELECT DISTINCT FROM t", SqlSyntaxError, ["SELECT list"], 1, 1),
    ("SELECT a FROM t\n  GROUP BY", SqlSyntaxError, ["GROUP BY list"], 2, 3),
    ("SELECT a FROM t\n  GROUP BY ORDER BY a", SqlSyntaxError, ["GROUP BY list"], 2, 3),
    ("SELECT a FROM t ORDER BY", SqlSyntaxError, ["ORDER BY list"], 1, 17),
    ("SELECT a FROM t OFFSET", SqlSyntaxError, ["OFFSET count"], 1, 17),
    ("SELECT a FROM t LIMIT", SqlSyntaxError, ["LIMIT count"], 1, 17),
    ("SELECT a FROM t WHERE", SqlSyntaxError, ["WHERE condition"], 1, 17),
    ("SELECT a FROM t AS order", SqlSyntaxError, ["reserved word"], 1, 20),
    ("SELECT a FROM t\x00", SqlSyntaxError, ["NUL"], 1, 16),
    ("SELEC a FROM t", SqlSyntaxError, ["SELEC", "did you mean SELECT"], 1, 1),
    ("SELECT a,\n   'abc FROM t", SqlSyntaxError, ["closing '"], 2, 4),
    ('SELECT "a FROM t', SqlSyntaxError, ['closing "'], 1, 8),
    ("SELECT a FROM t WHERE a = = 1", SqlSyntaxError, ["operand is missing"], 1, 27),
    ("SELECT * FROM t\nJOIN u", SqlSyntaxError, ["ON, USING or NATURAL"], 2, 6),
    ("SELECT * FROM t CROSS JOIN u ON t.a = u.a", SqlSyntaxError, ["CROSS JOIN"], 1, 28),
    ("SELECT min(a, b) FROM t", UnsupportedQueryError, ["min(a, b)"], 1, 15),
    ("SELECT max(a, 2) FROM t", UnsupportedQueryError, ["max(a, b)"], 1, 15),
    ("SELECT count(a, b) FROM t", UnsupportedQueryError, ["COUNT takes one"], 1, 17),
    ("SELECT *\nFROM t ASOF JOIN u ON t.a >= u.a", UnsupportedQueryError, ["ASOF JOIN"], 2, 18),
    ("SELECT * FROM t POSITIONAL JOIN u", UnsupportedQueryError, ["POSITIONAL JOIN"], 1, 33),
    ("SELECT * FROM t FULL JOIN u USING (a)", UnsupportedQueryError, ["FULL JOIN", "USING"], 1, 27),
    ("SELECT * FROM t SEMI JOIN u ON t.a = u.a", UnsupportedQueryError, ["SEMI JOIN"], 1, 27),
    ("SELECT * FROM t USING SAMPLE 10%", UnsupportedQueryError, ["SAMPLE"], 1, 30),
    ("SELECT * FROM t\nTABLESAMPLE 50%", UnsupportedQueryError, ["TABLESAMPLE"], 2, 13),
    ("SELECT * FROM t LIMIT 10%", UnsupportedQueryError, ["LIMIT", "PERCENT"], 1, 23),
    ("PIVOT t ON a USING sum(b)", UnsupportedQueryError, ["PIVOT"], 1, 7),
    ("SELECT * FROM t PIVOT (sum(b) FOR a IN (1, 2))", UnsupportedQueryError, ["PIVOT"], 1, 24),
    ("SELECT * FROM t UNPIVOT (v FOR k IN (a, b))", UnsupportedQueryError, ["PIVOT"], 1, 26),
    ("SELECT a FROM t\nUNION BY NAME SELECT a FROM u", UnsupportedQueryError, ["BY NAME"], 1, 8),
    (
        "WITH RECURSIVE x AS (SELECT a FROM t) SELECT * FROM x",
        UnsupportedQueryError,
        ["WITH RECURSIVE"],
        1,
        16,
    ),
    (  # uncorrelated, it runs (tests/test_membership_bodies.py)
        "SELECT a FROM t WHERE a = 1 OR a IN (SELECT a FROM u WHERE u.a > t.a LIMIT 1)",
        UnsupportedQueryError,
        ["IN / EXISTS subquery with LIMIT", "t.a"],
        1,
        66,
    ),
    ("SELECT var_pop(a) OVER () FROM t", UnsupportedQueryError, ["window function"], 1, 8),
    ("SELECT stddev(a) OVER () FROM t", UnsupportedQueryError, ["window function"], 1, 8),
    ("SELECT *", UnsupportedQueryError, ["without FROM", "'*'"], 1, 8),  # SELECT 1 runs
    ("SELECT * FROM t AS x(p, q)", UnsupportedQueryError, ["column aliases"], 1, 22),
    ("SELECT a FROM t WHERE (a, b) = (1, 2)", UnsupportedQueryError, ["row value"], 1, 24),
    ("SELECT a, row_number() FROM t", UnsupportedQueryError, ["needs an OVER"], 1, 11),
    ("SELECT * FROM t GROUP BY ROLLUP (a)", UnsupportedQueryError, ["'*'", "ROLLUP"], 1, 8),
    ("SELECT a FROM t QUALIFY a > 1", UnsupportedQueryError, ["QUALIFY"], 1, 25),
    ("SELECT COLUMNS('a') FROM t", UnsupportedQueryError, ["COLUMNS"], 1, 8),
    ("SELECT a FROM t; SELECT b FROM t", SqlSyntaxError, ["one SQL statement"], 1, 25),
    # names
    ("SELECT * FROM t JOIN u USING (zz)", UnknownColumnError, ["zz", "right side"], 1, 31),
    ("SELECT * FROM t JOIN w USING (e)", UnknownColumnError, ["'e'", "left side"], 1, 31),
    (
        "SELECT * FROM t JOIN u ON t.a = u.a JOIN w USING (a)",
        UnknownColumnError,
        ["ambiguous"],
        1,
        51,
    ),
    ("SELECT * FROM t NATURAL JOIN t2", UnknownColumnError, ["no column name"], 1, 30),
    (
        "SELECT * FROM t JOIN u ON w.a = u.a JOIN w ON t.a = w.a",
        UnknownColumnError,
        ["later"],
        1,
        27,
    ),
    ("SELECT * EXCLUDE (zz) FROM t", UnknownColumnError, ["EXCLUDE", "zz"], 1, 19),
    ("SELECT * EXCLUDE (a, a) FROM t", UnknownColumnError, ["twice"], 1, 22),
    ("SELECT * REPLACE (1 AS zz) FROM t", UnknownColumnError, ["REPLACE", "zz"], 1, 19),
    ("SELECT * EXCLUDE (b) REPLACE (1 AS b) FROM t", UnknownColumnError, ["twice"], 1, 31),
    ("SELECT * EXCLUDE (a, b, c) FROM t", UnsupportedQueryError, ["empty"], 1, 8),
    ("SELECT a AS x, b AS x FROM t ORDER BY x", UnknownColumnError, ["ambiguous"], 1, 39),
    ("SELECT a AS x, b AS x FROM t\nGROUP BY x", UnknownColumnError, ["ambiguous"], 2, 10),
    ("SELECT t.a FROM t, u GROUP BY a", UnknownColumnError, ["ambiguous"], 1, 31),
    ("SELECT t.a, u.a FROM t, u ORDER BY a", UnknownColumnError, ["ambiguous"], 1, 36),
]


@pytest.mark.parametrize(("sql", "kind", "names", "line", "col"), REFUSED)
def test_refused_with_position(sql, kind, names, line, col):
    _refused(sql, kind, names, line, col, tables={**TABLES, "t2": pa.table({"q": [1]})})


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a, a FROM t ORDER BY a",  # the same expression twice is not ambiguous
        "SELECT a AS x, a AS x FROM t ORDER BY x",
        "SELECT a AS b, b AS a FROM t ORDER BY a",  # ORDER BY prefers the alias
        "SELECT a + 1 AS a FROM t GROUP BY a",  # GROUP BY prefers the column
        "SELECT t.a FROM t, u ORDER BY a",  # one select item named a
        "SELECT a, FROM t",  # DuckDB allows a trailing comma
    ],
)
def test_unambiguous_names_match_duckdb(sql):
    assert_same_bag(execute(sql, make_catalog(TABLES)), sql, TABLES)


def test_qualified_names_stay_ordered_by_alias():
    sql = "SELECT a AS b, b AS a FROM t ORDER BY a"
    check_all(sql, TABLES, policies=["static"], batch_sizes=(None,), ordered_keys=[1])


@pytest.mark.slow  # > 5 s: parsing and planning 5,000 terms, DuckDB on 63 tables
@pytest.mark.parametrize("op", ["OR", "AND"])
def test_chain_of_5000_terms_runs(op):
    terms = [f"a <> {i}" if op == "AND" else f"a = {i}" for i in range(5000)]
    sql = f"SELECT a, b FROM t WHERE {f' {op} '.join(terms)}"
    check_all(sql, TABLES, policies=["static"], batch_sizes=(None, 7))


@pytest.mark.slow  # > 5 s: parsing and planning 5,000 terms, DuckDB on 63 tables
def test_chain_of_5000_terms_in_select_and_join():
    ors = " OR ".join(f"u.d = {i}" for i in range(5000))
    sql = f"SELECT t.a, ({ors}) AS hit FROM t JOIN u USING (a)"
    check_all(sql, TABLES, policies=["static"], batch_sizes=(None,))


@pytest.mark.slow  # > 5 s: parsing and planning 5,000 terms, DuckDB on 63 tables
def test_5000_conjuncts_over_two_tables_share_sms():
    terms = " AND ".join(f"t.b <> {i}" if i % 2 else f"u.d <> {i + 1}" for i in range(5000))
    sql = f"SELECT * FROM t JOIN u ON t.a = u.a WHERE {terms}"
    check_all(sql, TABLES, policies=POLICIES, batch_sizes=(None, 7))


def test_deep_arithmetic_is_refused_not_recursion_error():
    sql = "SELECT " + " + ".join(["a"] * 5000) + " FROM t"
    message = _refused(sql, UnsupportedQueryError, ["levels deep"], 1, 8)
    assert "200" in message


def test_deep_parentheses_are_refused_not_recursion_error():
    sql = "SELECT a FROM t WHERE " + "(" * 300 + "a = 1" + ")" * 300
    with pytest.raises(UnsupportedQueryError, match=r"nests too deeply.*line 1, column \d+"):
        execute(sql, make_catalog(TABLES))


def _many(n: int) -> tuple[dict[str, pa.Table], str]:
    tables = {f"t{i}": pa.table({"k": [1, 2, 3], "v": [i, None, i]}) for i in range(n)}
    joins = " AND ".join(f"t{i}.k = t{i + 1}.k" for i in range(n - 1))
    return tables, f"SELECT count(*), sum(t0.v) FROM {', '.join(tables)} WHERE {joins}"


@pytest.mark.slow  # > 5 s: parsing and planning 5,000 terms, DuckDB on 63 tables
def test_63_tables_run():
    tables, sql = _many(63)
    check_all(sql, tables, policies=["static"], batch_sizes=(None,))


def test_257_tables_are_refused_with_the_limit():
    """Spans have no width limit (issue 26; 70 aliases run in test_many_predicates.py), but
    a query's tables are bounded."""
    tables, sql = _many(257)
    with pytest.raises(UnsupportedQueryError, match=r"257 tables.*at most 256.*line \d+, column"):
        execute(sql, make_catalog(tables))


def test_every_refusal_is_an_eddies_error():
    for sql, kind, *_ in REFUSED:
        assert issubclass(kind, EddiesError), sql
