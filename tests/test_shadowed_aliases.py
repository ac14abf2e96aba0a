"""A subquery that reads the same table as its enclosing query, under the same name.

SQL resolves ``t.b`` inside ``(SELECT ... FROM u JOIN t ...)`` to the subquery's own ``t``.
Before engine/rewrite/unshadow.py the rewrites that move subquery parts next to the outer query
mixed the two up: ``a IN (SELECT u.a FROM u JOIN t ON u.a = t.b)`` kept every row, ``a IN
(SELECT a FROM t WHERE b > 5) OR b IS NULL`` too, and nested subqueries failed with
"unknown table or alias 't'". Every query is compared with DuckDB as a bag of rows under
several policies at batch sizes 1, 7 and the default.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import check_all

from eddies.engine import Catalog, execute
from eddies.engine.frontend.parse import parse_statement

POLICIES = ("lottery", "rank", "hybrid", "static")
BATCH_SIZES = (None, 1, 7)

T = pa.table(
    {
        "a": pa.array([1, 2, 2, None, 5, -3, 0, 7], pa.int64()),
        "b": pa.array([10, None, 20, 20, -5, 3, 0, 7], pa.int64()),
    }
)
U = pa.table({"a": pa.array([1, 2, None, 7, 7, 9], pa.int64())})
TABLES = {"t": T, "u": U}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a FROM t WHERE a IN (SELECT u.a FROM u JOIN t ON u.a = t.b)",
        "SELECT a FROM t WHERE a IN (SELECT a FROM t WHERE b > 5) OR b IS NULL",
        "SELECT a FROM t WHERE a IN (SELECT a FROM u WHERE u.a IN (SELECT a FROM t WHERE b > 5))",
        "SELECT a FROM t WHERE a IN (SELECT a FROM u WHERE EXISTS "
        "(SELECT 1 FROM t WHERE t.b = u.a))",
        "SELECT t.a FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.a = t.a AND u.a IN "
        "(SELECT a FROM t WHERE b > 5))",
        "SELECT a FROM t WHERE EXISTS (SELECT 1 FROM t WHERE t.b > 15)",
        "SELECT a FROM t WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.b > 15)",
        "SELECT a FROM t WHERE EXISTS (SELECT 1 FROM u JOIN t ON u.a = t.b WHERE t.a = 7)",
        "SELECT a, (SELECT max(t.b) FROM t WHERE t.a > 1) FROM t",
        "SELECT a FROM t WHERE b = (SELECT max(b) FROM t WHERE t.a = 2)",
        "SELECT a FROM t WHERE b = (SELECT max(b) FROM t x WHERE x.a = t.a)",
        "SELECT a, (SELECT count(*) FROM t WHERE t.b = 20) FROM t",
        "SELECT t.a FROM t JOIN (SELECT t.a FROM t WHERE t.b > 5) x ON t.a = x.a",
        "WITH x AS (SELECT a FROM t WHERE b > 5) SELECT a FROM t WHERE a IN (SELECT a FROM x)",
        "SELECT a FROM t GROUP BY a HAVING count(*) > (SELECT count(*) FROM t WHERE t.a = 2) - 1",
    ],
)
def test_shadowed_table_matches_duckdb(sql):
    check_all(sql, TABLES, policies=POLICIES, batch_sizes=BATCH_SIZES)


def test_only_shadowing_aliases_are_renamed():
    """The outer query keeps its names; the subquery's own `t` and the columns that read it
    are renamed; a correlated column still names the outer `t`."""
    root = parse_statement(
        "SELECT t.a FROM t WHERE EXISTS (SELECT 1 FROM t WHERE t.b > 5) "
        "AND t.a IN (SELECT u.a FROM u WHERE u.a = t.b)"
    )
    sql = root.sql(dialect="duckdb")
    assert sql.startswith("SELECT t.a FROM t WHERE EXISTS(SELECT 1 FROM t AS t_2 WHERE t_2.b > 5)")
    assert "u.a = t.b" in sql  # correlated: the outer t


def test_error_from_a_renamed_subquery_still_names_the_column():
    cat = Catalog()
    for name, table in TABLES.items():
        cat.add_table(name, table)
    with pytest.raises(Exception, match="nope"):
        execute("SELECT a FROM t WHERE a IN (SELECT t.nope FROM t)", cat)


FORMS = [
    "a IN (SELECT {q}a FROM t WHERE {q}b > {k})",
    "a NOT IN (SELECT {q}a FROM t WHERE {q}a IS NOT NULL AND {q}b > {k})",
    "EXISTS (SELECT 1 FROM t WHERE {q}b > {k})",
    "b > (SELECT avg({q}b) FROM t WHERE {q}a > {k})",
    "a IN (SELECT u.a FROM u JOIN t ON u.a = t.a WHERE {q}b > {k})",
]


@settings(max_examples=60, deadline=None)
@given(
    forms=st.lists(st.sampled_from(FORMS), min_size=1, max_size=2),
    joiner=st.sampled_from([" AND ", " OR "]),
    qualified=st.booleans(),
    k=st.sampled_from([-10, 0, 5, 15, 100]),
)
def test_shadowed_forms_match_duckdb(forms, joiner, qualified, k):
    q = "t." if qualified else ""
    where = joiner.join(f.format(q=q, k=k) for f in forms)
    check_all(
        f"SELECT a, b FROM t WHERE {where}", TABLES, policies=("hybrid",), batch_sizes=(None, 7)
    )
