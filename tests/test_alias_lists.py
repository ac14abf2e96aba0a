"""Column alias lists on derived tables and CTEs against DuckDB (issue 26, item 1):
``FROM (SELECT ...) AS d (c1, c2)`` and ``WITH t (c1, c2) AS (...)``
(engine/rewrite/alias_lists.py, engine/execution/composite.py).

The names rename the body's first columns; fewer names than columns keep the rest's own
names (as DuckDB); more names than columns is an EddiesError naming the table. Results
are compared with DuckDB's as bags of rows (and in order where the query orders), over
tables with NULLs and duplicates, under two policies and two batch sizes; the column
names are compared too, since renaming is the whole point.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from oracle import check_all, duckdb_table, make_catalog

from eddies.engine import execute
from eddies.errors import EddiesError

T = pa.table(
    {
        "a": pa.array([1, 2, 2, None, 5, 1, None], pa.int64()),
        "b": pa.array(["x", "y", "y", None, "x", "x", "z"]),
        "v": pa.array([10, 20, 20, 30, None, 10, 5], pa.int64()),
    }
)
CUSTOMER = pa.table(
    {
        "c_custkey": pa.array([1, 2, 3, 4, 5, 6], pa.int64()),
        "c_name": pa.array(["a", "b", "c", "d", "e", "f"]),
    }
)
ORDERS = pa.table(
    {
        "o_orderkey": pa.array([10, 11, 12, 13, 14, 15, 16], pa.int64()),
        "o_custkey": pa.array([1, 1, 2, 4, 4, 4, 7], pa.int64()),
        "o_comment": pa.array(
            ["plain", "special requests", "ok", None, "fine", "special deposits requests", "x"]
        ),
        "o_total": pa.array([5.0, 7.5, 1.0, 2.0, 9.0, 3.0, 4.0]),
    }
)
TABLES = {"t": T, "customer": CUSTOMER, "orders": ORDERS}


def _check(sql: str, ordered_keys=None) -> None:
    expected = check_all(
        sql,
        TABLES,
        policies=("lottery", "hybrid"),
        batch_sizes=(None, 3),
        ordered_keys=ordered_keys,
        debug_per_tuple=False,
    )
    ours = execute(sql, make_catalog(TABLES))
    assert [n.lower() for n in ours.column_names] == [n.lower() for n in expected.column_names]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM (SELECT a, v FROM t) AS d (x, y)",
        "SELECT d.x, y FROM (SELECT a, v FROM t WHERE a > 1) AS d (x, y)",
        "SELECT * FROM (SELECT a, b, v FROM t) AS d (x)",  # fewer names: the rest keep theirs
        "SELECT * FROM (SELECT * FROM t) AS d (p, q)",  # over a star: run, then renamed
        "SELECT x, count(*) AS n FROM (SELECT a, b FROM t) AS d (x, y) GROUP BY x",
        "SELECT * FROM (SELECT a AS b, b AS a FROM t) AS d (b, a)",  # names swapped back
        "SELECT * FROM (SELECT a, v FROM t) AS d (v, a) WHERE v IS NOT NULL",
        "SELECT * FROM (SELECT a, sum(v) FROM t GROUP BY a) AS g (k, s) JOIN t ON t.a = g.k",
        "SELECT * FROM t LEFT JOIN (SELECT a, 'tag' FROM t WHERE a = 2) AS d (x, tag) ON t.a = d.x",
        "SELECT * FROM (SELECT a FROM t UNION ALL SELECT v FROM t) AS d (n)",
        "SELECT * FROM (VALUES (1, 'p'), (2, 'q')) AS v (n, s)",  # VALUES keeps its own rule
        "WITH r (x, y) AS (SELECT a, v FROM t) SELECT * FROM r",
        "WITH r (x) AS (SELECT a, v FROM t) SELECT x, v FROM r WHERE x IS NOT NULL",
        "WITH r (x) AS (SELECT * FROM t) SELECT * FROM r",
        "WITH r (k, s) AS (SELECT a, sum(v) FROM t GROUP BY a) "
        "SELECT * FROM r WHERE s = (SELECT max(s) FROM r)",  # a CTE read twice
        "WITH r (k) AS (SELECT a FROM t), q (m) AS (SELECT k + 1 FROM r) SELECT * FROM q",
        "WITH r (k) AS (SELECT a FROM t) SELECT * FROM t WHERE a IN (SELECT k FROM r)",
    ],
)
def test_alias_lists_match_duckdb(sql):
    _check(sql)


def test_tpch_q13_shape():
    sql = """
        SELECT c_count, count(*) AS custdist
        FROM (
            SELECT c_custkey, count(o_orderkey)
            FROM customer LEFT OUTER JOIN orders
              ON c_custkey = o_custkey AND o_comment NOT LIKE '%special%requests%'
            GROUP BY c_custkey
        ) AS c_orders (c_custkey, c_count)
        GROUP BY c_count
        ORDER BY custdist DESC, c_count DESC"""
    _check(sql, ordered_keys=[1, 0])


def test_tpch_q15_shape():
    sql = """
        WITH revenue0 (supplier_no, total_revenue) AS (
            SELECT o_custkey, sum(o_total) FROM orders GROUP BY o_custkey
        )
        SELECT c_custkey, c_name, total_revenue
        FROM customer, revenue0
        WHERE c_custkey = supplier_no
          AND total_revenue = (SELECT max(total_revenue) FROM revenue0)
        ORDER BY c_custkey"""
    _check(sql, ordered_keys=[0])


@pytest.mark.parametrize(
    ("sql", "table"),
    [
        ("SELECT * FROM (SELECT a, v FROM t) AS d (x, y, z)", "'d'"),
        ("SELECT * FROM (SELECT * FROM t) AS d (p, q, r, s)", "'d'"),  # known once run
        ("SELECT * FROM t JOIN (SELECT a FROM t) AS e (x, y) ON t.a = e.x", "'e'"),
        ("WITH r (x, y, z) AS (SELECT a, v FROM t) SELECT * FROM r", "'r'"),
        ("WITH r (p, q, r, s) AS (SELECT * FROM t) SELECT * FROM r", "'r'"),
    ],
)
def test_too_many_names_are_refused(sql, table):
    with pytest.raises(EddiesError, match=f"{table} has [0-9]+ columns available but"):
        execute(sql, make_catalog(TABLES))


def test_duckdb_refuses_too_many_names_on_a_derived_table():
    """The oracle's own rule for the derived-table case the test above refuses."""
    import duckdb

    with pytest.raises(duckdb.BinderException, match="columns available"):
        duckdb_table("SELECT * FROM (SELECT a, v FROM t) AS d (x, y, z)", TABLES)


def test_alias_list_on_a_plain_table_is_still_refused():
    with pytest.raises(EddiesError, match="column aliases on a table"):
        execute("SELECT * FROM t AS x (p, q)", make_catalog(TABLES))
