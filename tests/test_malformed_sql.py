"""A corpus of several hundred malformed, unsupported and hostile statements (issue 9).

Each must raise an EddiesError subclass (never a raw sqlglot, Arrow or Recursion error)
whose message gives a line and column; none runs. Mutations of valid queries (a token
dropped, duplicated or swapped with its neighbour) are kept only when DuckDB rejects them
too, so the corpus is "what DuckDB calls an error", judged by the oracle, not by us.
Planning is synchronous (``explain`` plans without running), so a hang would show as a
test that never ends; nothing here runs a query.
"""

from __future__ import annotations

import logging
import re

import duckdb
import pyarrow as pa
import pytest
from oracle import make_catalog
from sqlglot.dialects.dialect import Dialect

from eddies.engine import EddiesError, explain

TABLES = {
    "t": pa.table({"a": [1, 2, None], "b": [10, None, 30], "c": ["x", "y", None]}),
    "u": pa.table({"a": [1, None, 3], "d": [5, 6, 7], "c": ["x", None, "z"]}),
}

BASES = [
    "SELECT a, b FROM t WHERE a > 1 ORDER BY b DESC LIMIT 2 OFFSET 1",
    "SELECT DISTINCT c FROM t WHERE c LIKE 'x%' AND b IS NOT NULL",
    "SELECT t.a, u.d FROM t JOIN u ON t.a = u.a WHERE u.d BETWEEN 1 AND 9",
    "SELECT c, count(*) AS n, sum(b) FROM t GROUP BY c HAVING count(*) > 0 ORDER BY n",
    "SELECT * EXCLUDE (c) FROM t JOIN u USING (a)",
    "SELECT CASE WHEN a IN (1, 2) THEN 'lo' ELSE 'hi' END AS k FROM t NATURAL JOIN u",
    "SELECT CAST(a AS DOUBLE) / 2, coalesce(b, 0) FROM t, u WHERE t.a = u.a",
    "SELECT * REPLACE (a + 1 AS a) FROM t WHERE NOT (a = 1 OR b < 3)",
]

UNSUPPORTED = [
    "SELECT * FROM t ASOF JOIN u ON t.a >= u.a",
    "SELECT * FROM t POSITIONAL JOIN u",
    "SELECT * FROM t RIGHT JOIN u USING (a)",
    "SELECT * FROM t, u FULL OUTER JOIN t AS v ON u.a = v.a",
    "SELECT * FROM t ANTI JOIN u ON t.a = u.a",
    "SELECT * FROM t USING SAMPLE 10%",
    "SELECT * FROM t TABLESAMPLE 10%",
    "SELECT * FROM t LIMIT 10%",
    "PIVOT t ON c USING sum(b)",
    "UNPIVOT t ON a, b INTO NAME k VALUE v",
    "SELECT * FROM t PIVOT (sum(b) FOR c IN ('x'))",
    "SELECT a FROM t WHERE a = 1 OR EXISTS (SELECT 1 FROM u)",
    "SELECT a FROM t QUALIFY a > 1",
    "SELECT a FROM t GROUP BY CUBE (a)",
    "SELECT a FROM t GROUP BY GROUPING SETS ((a), ())",
    "SELECT min(a, 2) FROM t",
    "SELECT max(b, 1) FROM t",
    "SELECT COLUMNS('a|b') FROM t",
    "SELECT * RENAME (a AS z) FROM t",
    "SELECT a FROM t, LATERAL (SELECT a) s",
    "SELECT a FROM read_csv('x.csv')",
    "SELECT a FROM main.t",
    "SELECT x.y.a FROM t",
    "SELECT a FROM t AS x(p, q, r)",
    "SELECT [1, 2] FROM t",
    "SELECT {'k': 1} FROM t",
    "SELECT a FROM t WHERE a = ?",
    "SELECT a FROM t WHERE a = $1",
    "SELECT INTERVAL 1 DAY FROM t",
    "SELECT list_transform([1], x -> x + 1) FROM t",
    "SELECT 1",
    "VALUES (1), (2)",
    "DESCRIBE t",
    "CREATE TABLE z (a INT)",
    "INSERT INTO t VALUES (1, 2, 'x')",
    "DELETE FROM t",
    "DROP TABLE t",
    "SELECT a FROM t ORDER BY a WITH FILL",
    # a window call in FROM used to loop between the window split and its inner query
    "SELECT a FROM count(*) OVER (), t",
    "SELECT a FROM sum(a) OVER (PARTITION BY b), t",
    "SELECT CAST(3 AS DECIMAL(10, h)) FROM t",  # was a raw ValueError
]

HOSTILE = [
    "",
    "   ",
    ";",
    ";;;",
    "-- only a comment",
    "/* unclosed comment",
    "SELECT a FROM t\x00",
    "SELECT\x00a FROM t",
    "SELECT 'abc FROM t",
    'SELECT "abc FROM t',
    "SELECT a FROM t WHERE c = 'x",
    "SELEC a FROM t",
    "SELECT a FORM t",
    "SELECT a FROM t WHER a = 1",
    "SELECT a FROM t ORDER a",
    "SELECT a FROM t WHERE (a = 1",
    "SELECT a FROM t WHERE a = 1)",
    "SELECT (((a FROM t",
    "SELECT a FROM t WHERE " + "(" * 500 + "a = 1" + ")" * 500,
    "SELECT a FROM t WHERE " + "NOT " * 2000 + "a = 1",
    "SELECT " + " + ".join(["a"] * 3000) + " FROM t",
    "SELECT " + "abs(" * 400 + "a" + ")" * 400 + " FROM t",
    "SELECT " + "- " * 2000 + "a FROM t",
    "SELECT " + "x" * 100_000 + " FROM t",
    "SELECT a FROM " + "t" * 100_000,
    'SELECT "' + "q" * 100_000 + '" FROM t',
    "SELECT a FROM t WHERE c = '" + "z" * 100_000,
    "SELECT a FROM t; DROP TABLE t",
    "SELECT a FROM t;\nSELECT b FROM t",
    "SELECT \u202e a FROM t",
    "SELECT a FROM t WHERE a = 1 1",
    "SELECT a a a FROM t",
    "SELECT a FROM t t t",
    "SELECT * FROM t JOIN u",
    "SELECT * FROM t INNER JOIN u",
    "SELECT * FROM t NATURAL JOIN u ON t.a = u.a",
    "SELECT * FROM t CROSS JOIN u USING (a)",
    "SELECT * FROM t JOIN u USING (a) ON t.a = u.a",
    "SELECT * FROM t JOIN u USING (nope)",
    "SELECT a,, b FROM t",
    "SELECT , a FROM t",
    "SELECT FROM t",
    "SELECT DISTINCT FROM t",
    "SELECT a FROM t GROUP BY",
    "SELECT a FROM t ORDER BY",
    "SELECT a FROM t OFFSET",
    "SELECT a FROM t LIMIT",
    "SELECT a FROM t HAVING",
    "SELECT a FROM t ORDER BY a ASC DESC",
    "SELECT a FROM t ORDER BY a DESC ASC",
    "SELECT a FROM t LIMIT -1",
    "SELECT a FROM t LIMIT 'x'",
    "SELECT a FROM t LIMIT 1.5",
    "SELECT * EXCLUDE (nope) FROM t",
    "SELECT * EXCLUDE (a, a) FROM t",
    "SELECT * REPLACE (1 AS nope) FROM t",
    "SELECT * EXCLUDE (a, b, c) FROM t",
    "SELECT a FROM t, u",
    "SELECT nope FROM t",
    "SELECT a FROM nope",
    "SELECT t.nope FROM t",
    "SELECT z.a FROM t",
    "SELECT a FROM t, t",
    "SELECT a + 'x' FROM t",
    "SELECT sum(c) FROM t",
    "SELECT a FROM t WHERE b",
    "SELECT a FROM t WHERE sum(a) > 1",
    "SELECT sum(sum(a)) FROM t",
    "SELECT a, count(*) FROM t",
    "SELECT a AS x, b AS x FROM t ORDER BY x",
    "SELECT a FROM t ORDER BY 5",
    "SELECT a FROM t GROUP BY 0",
    "SELECT nope(a) FROM t",
    "SELECT * FROM t NATURAL JOIN (SELECT 1 AS q) s",
    "SELECT a FROM t AS limit WHERE a = 1",
    "SELECT a FROM t AS order",
]


def _mutations(sql: str) -> list[str]:
    """Statements one token away from ``sql``: dropped, doubled, or swapped with the next."""
    tokens = Dialect.get_or_raise("duckdb").tokenize(sql)
    spans = [(t.start, t.end + 1) for t in tokens]
    out = []
    for i, (start, end) in enumerate(spans):
        out.append(sql[:start] + sql[end:])  # drop
        out.append(sql[:end] + " " + sql[start:end] + sql[end:])  # double
        if i + 1 < len(spans):
            n_start, n_end = spans[i + 1]
            out.append(sql[:start] + sql[n_start:n_end] + " " + sql[start:end] + sql[n_end:])
    return out


def _duckdb_rejects(sql: str) -> bool:
    con = duckdb.connect(":memory:")
    try:
        for name, data in TABLES.items():
            con.register(name, data)
        con.execute(sql).fetchall()
        return False
    except duckdb.Error:
        return True
    finally:
        con.close()


def _corpus() -> list[str]:
    mutated = {m for base in BASES for m in _mutations(base)}
    rejected = sorted(m for m in mutated if _duckdb_rejects(m))
    return rejected + UNSUPPORTED + HOSTILE


CORPUS = _corpus()
CATALOG = make_catalog(TABLES)
POSITION = re.compile(r"line (\d+), column (\d+)")


def test_corpus_is_several_hundred_statements():
    assert len(CORPUS) >= 300, len(CORPUS)


@pytest.mark.parametrize("sql", CORPUS, ids=[f"q{i}" for i in range(len(CORPUS))])
def test_refused_with_a_position(sql):
    with pytest.raises(EddiesError) as info:
        explain(sql, CATALOG)
    message = str(info.value)
    found = POSITION.search(message)
    assert found is not None, f"no position in {message!r} for {sql[:200]!r}"
    line, col = int(found.group(1)), int(found.group(2))
    lines = sql.split("\n")
    assert 1 <= line <= len(lines), message
    assert 1 <= col <= len(lines[line - 1]) + 1, message
    assert len(message) < 2000, "the message repeats a huge input"


@pytest.mark.parametrize(
    "sql", ["EXPLAIN SELECT a FROM t", "SELECT a FROM t FOR UPDATE", "CREATE TABLE x END SELECT 1"]
)
def test_sqlglot_warnings_do_not_reach_the_user(sql, caplog):
    """sqlglot logs "Falling back to parsing as a 'Command'" and the like; the engine
    refuses such statements with an EddiesError, so the warning is noise and is dropped."""
    with caplog.at_level(logging.WARNING), pytest.raises(EddiesError):
        explain(sql, CATALOG)
    assert [r for r in caplog.records if r.name.startswith("sqlglot")] == []
