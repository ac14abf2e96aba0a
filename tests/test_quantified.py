"""``x op ANY/SOME/ALL (subquery)`` against DuckDB (engine/rewrite/quantified.py).

Every comparison (= <> < <= > >=) with ANY and ALL, over bodies that are empty, hold NULLs
and duplicates, are correlated, grouped, limited or set operations, in WHERE (alone, under
NOT and OR) and in the SELECT list, compared with DuckDB as bags of rows under several
policies at batch sizes 1, 7 and the default.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import check_all, make_catalog

from eddies.engine import UnsupportedQueryError, execute

POLICIES = ("lottery", "rank", "hybrid", "static")
MAX_EXAMPLES = int(os.environ.get("EDDIES_QUANTIFIED_EXAMPLES", "60"))

T = pa.table(
    {
        "a": pa.array([1, 2, 2, None, 5, -3, 0, 7], pa.int64()),
        "b": pa.array([10, None, 2, 20, -5, 3, 0, 7], pa.int64()),
        "s": pa.array(["x", "y", None, "Y", "", "x", "a", "z"]),
        "f": pa.array([1.5, -0.5, None, 2.0, float("nan"), 0.0, -0.0, 3.25]),
    }
)
U = pa.table(
    {
        "a": pa.array([1, 2, None, 7, 7, 9], pa.int64()),
        "c": pa.array(["p", None, "q", "r", "r", "x"]),
        "e": pa.array([1.0, 2.0, 3.0, None, float("nan"), 5.0]),
    }
)
V = pa.table({"a": pa.array([], pa.int64())})
TABLES = {"t": T, "u": U, "v": V}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a FROM t WHERE b > ALL (SELECT a FROM u WHERE a IS NOT NULL)",
        "SELECT a FROM t WHERE b > ALL (SELECT a FROM u)",
        "SELECT a FROM t WHERE b = ANY (SELECT a FROM u)",
        "SELECT a FROM t WHERE b <> ALL (SELECT a FROM u WHERE a IS NOT NULL)",
        "SELECT a FROM t WHERE b < SOME (SELECT a FROM u)",
        "SELECT a, b >= ALL (SELECT a FROM u), b <= ANY (SELECT a FROM u), "
        "b = ALL (SELECT a FROM u), b <> ANY (SELECT a FROM u) FROM t",
        "SELECT a, a = ALL (SELECT a FROM u WHERE a = 7), a <> ANY (SELECT a FROM u WHERE a = 7) "
        "FROM t",
        "SELECT a, a > ALL (SELECT a FROM v), a > ANY (SELECT a FROM v) FROM t",
        "SELECT a, a > ALL (SELECT a FROM u WHERE u.a > t.b), "
        "a < ANY (SELECT a FROM u WHERE u.a < t.b) FROM t",
        "SELECT a FROM t WHERE a >= ALL (SELECT x.a FROM t x WHERE x.b = t.b)",
        "SELECT a FROM t WHERE NOT (b > ALL (SELECT a FROM u))",
        "SELECT a FROM t WHERE b > ALL (SELECT a FROM u GROUP BY a HAVING count(*) > 1)",
        "SELECT a FROM t WHERE b > ANY (SELECT a FROM u UNION SELECT 3)",
        "SELECT a FROM t WHERE b > ANY (SELECT a + 1 FROM u ORDER BY 1 LIMIT 2)",
        "SELECT a, s = ANY (SELECT c FROM u), s > ALL (SELECT c FROM u WHERE c IS NOT NULL) FROM t",
        "SELECT a, f > ALL (SELECT e FROM u), f <= ANY (SELECT e FROM u) FROM t",
    ],
)
def test_quantified_comparisons_match_duckdb(sql):
    check_all(sql, TABLES, policies=POLICIES, batch_sizes=(None, 1, 7))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a FROM t WHERE a = ANY ([1, 2])",
        "SELECT a FROM t WHERE (a, b) = ANY (SELECT a, a FROM u)",
    ],
)
def test_other_quantified_forms_are_refused_with_a_position(sql):
    with pytest.raises(UnsupportedQueryError, match=r"ANY is not supported.*line 1, column"):
        execute(sql, make_catalog(TABLES))


OPS = ["=", "<>", "<", "<=", ">", ">="]
BODIES = [
    "SELECT a FROM u",
    "SELECT a FROM u WHERE a IS NOT NULL",
    "SELECT a FROM u WHERE a > {k}",
    "SELECT a FROM v",
    "SELECT u.a FROM u WHERE u.a <> t.a",  # correlated
    "SELECT u.a FROM u WHERE u.a > t.b",  # correlated
    "SELECT a FROM u GROUP BY a",
    "SELECT a FROM u UNION ALL SELECT {k}",
]


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(
    op=st.sampled_from(OPS),
    quantifier=st.sampled_from(["ANY", "SOME", "ALL"]),
    body=st.sampled_from(BODIES),
    k=st.sampled_from([-10, 1, 5, 100]),
    left=st.sampled_from(["a", "b", "a + 1", "NULL::BIGINT"]),
    place=st.sampled_from(["where", "not", "or", "select"]),
)
def test_quantified_generator_matches_duckdb(op, quantifier, body, k, left, place):
    term = f"{left} {op} {quantifier} ({body.format(k=k)})"
    if place == "select":
        sql = f"SELECT a, {term} FROM t"
    elif place == "not":
        sql = f"SELECT a FROM t WHERE NOT ({term})"
    elif place == "or":
        sql = f"SELECT a FROM t WHERE {term} OR b IS NULL"
    else:
        sql = f"SELECT a, b FROM t WHERE {term}"
    check_all(sql, TABLES, policies=("hybrid", "lottery"), batch_sizes=(None, 7))
