"""Rows written in the query: VALUES lists (engine/rewrite/values_rows.py, a UNION ALL of one-row
SELECTs) and SELECTs without FROM, which read one row, as SQL (and DuckDB) define it:
``SELECT 1 + 1``, a CTE of constants, ``x IN (SELECT 1 UNION SELECT 3)``, ``EXISTS
(SELECT 1 WHERE ...)``, a scalar ``(SELECT 5)``, set-operation branches
(engine/execution/composite.py
reads them over a one-row table). ``x IN (SELECT 1)`` used to fail with a raw KeyError.
Against DuckDB under lottery, rank and hybrid at batch sizes 1, 7 and the default.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from oracle import check_all, make_catalog

from eddies.engine import execute
from eddies.errors import EddiesError, UnsupportedQueryError

T = pa.table(
    {
        "g": pa.array([1, 1, 2, 2, 3, None], pa.int64()),
        "x": pa.array([1, 2, 3, None, 5, 6], pa.int64()),
    }
)
TABLES = {"t": T}

CASES = [
    "SELECT 1 + 1 AS two, 'a' AS s, NULL AS n",
    "SELECT count(*) AS n, sum(3) AS s",
    "SELECT 1 AS a WHERE 1 = 0",
    "SELECT 1 AS a UNION ALL SELECT 2 UNION ALL SELECT 2",
    "SELECT 1 AS a UNION SELECT 2 EXCEPT SELECT 1",
    "SELECT t.g FROM t WHERE t.g IN (SELECT 1)",
    "SELECT t.g FROM t WHERE t.g NOT IN (SELECT 1 UNION SELECT 3)",
    "SELECT t.g FROM t WHERE t.g NOT IN (SELECT NULL)",
    "SELECT t.g FROM t WHERE EXISTS (SELECT 1 WHERE 1 = 0)",
    "SELECT t.g FROM t WHERE t.x > 2 OR NOT EXISTS (SELECT 1)",
    "SELECT t.g, (SELECT 5) AS f, (SELECT t.x + 1) AS y FROM t",
    "WITH p AS (SELECT 2 AS lim) SELECT t.g FROM t, p WHERE t.g <= p.lim",
    "WITH p AS (SELECT 2 AS lim) SELECT t.g, t.x FROM t JOIN p ON t.g = p.lim",
    "SELECT t.g FROM t UNION ALL SELECT 7",
    # VALUES
    "VALUES (1, 2), (3, 4)",
    "SELECT * FROM (VALUES (1, 'a'), (2, 'b'), (2, NULL)) AS v(a, b)",
    "SELECT * FROM (VALUES (1), (2.5), (NULL))",
    "SELECT * FROM (VALUES (1, 2)) AS v(a)",
    "SELECT t.g FROM t WHERE t.g IN (VALUES (1), (2))",
    "SELECT t.g FROM t WHERE t.g NOT IN (VALUES (1), (NULL))",
    "SELECT t.g, v.n FROM t JOIN (VALUES (1, 'one'), (2, 'two'), (2, 'deux')) AS v(k, n) "
    "ON t.g = v.k",
    "SELECT t.g, v.n FROM t LEFT JOIN (VALUES (1, 'one')) AS v(k, n) ON t.g = v.k",
    "SELECT v.a + 1 AS b, count(*) FROM (VALUES (1), (2), (2)) v(a) GROUP BY b",
]


@pytest.mark.parametrize("sql", CASES)
def test_equals_duckdb(sql):
    check_all(sql, TABLES, policies=("lottery", "rank", "hybrid"), batch_sizes=(None, 7, 1))


def test_star_without_from_is_refused():
    with pytest.raises(UnsupportedQueryError, match="without FROM"):
        execute("SELECT *", make_catalog(TABLES))


@pytest.mark.parametrize(
    "sql, words",
    [
        ("SELECT * FROM (VALUES (1), (2, 3)) AS v(a)", "same length"),
        ("SELECT * FROM (VALUES (1, 2)) AS v(a, b, c)", "alias names 3"),
    ],
)
def test_bad_values_lists_are_errors(sql, words):
    with pytest.raises(EddiesError, match=words):
        execute(sql, make_catalog(TABLES))
