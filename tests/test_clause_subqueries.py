"""Correlated scalar subqueries in HAVING, ORDER BY and QUALIFY (issue 14, item 4), against
DuckDB.

HAVING: engine/plan/having_split.py computes the block's items and the HAVING condition as
columns of the grouped block (where engine/rewrite/decorrelate.py joins the subquery in) and keeps
the groups whose condition holds around it. ORDER BY and QUALIFY: engine/plan/window_split.py
hoists the term into the eddy's SELECT list and sorts or filters above the eddy. Every case
runs under lottery, rank and hybrid at batch sizes 1, 7 and the default; ordered results
are compared in order. NULL keys, duplicates, the COUNT bug and empty groups included.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from oracle import check_all, make_catalog

from eddies.engine import execute
from eddies.errors import UnsupportedQueryError

POLICIES = ("lottery", "rank", "hybrid")
BATCH_SIZES = (None, 7, 1)

T = pa.table(
    {
        "id": pa.array(range(10), pa.int64()),
        "g": pa.array([1, 1, 2, 2, 3, None, 4, 2, None, 5], pa.int64()),
        "x": pa.array([1, 2, 3, 4, 5, 6, None, 4, 9, 2], pa.int64()),
    }
)
U = pa.table(
    {
        "g": pa.array([1, 2, 2, 4, None, 4, 4, 7, 5], pa.int64()),
        "y": pa.array([10, 20, 30, 40, 50, None, 40, 5, 1], pa.int64()),
    }
)
TABLES = {"t": T, "u": U}

HAVING = [
    "SELECT t.g FROM t GROUP BY t.g HAVING (SELECT max(u.y) FROM u WHERE u.g = t.g) > 1",
    "SELECT t.g, sum(t.x) AS s FROM t GROUP BY t.g "
    "HAVING sum(t.x) < (SELECT count(*) FROM u WHERE u.g = t.g) * 3",
    "SELECT t.g, count(*) FROM t GROUP BY t.g "
    "HAVING count(*) >= (SELECT count(*) FROM u WHERE u.g = t.g)",  # count over none: 0
    "SELECT t.g FROM t GROUP BY t.g HAVING (SELECT max(u.y) FROM u WHERE u.g = t.g) > 15",
    "SELECT t.g, max(t.x) AS m FROM t WHERE t.x > 1 GROUP BY t.g "
    "HAVING max(t.x) * 10 > (SELECT avg(u.y) FROM u WHERE u.g = t.g) OR t.g IS NULL",
    "SELECT DISTINCT count(*) AS n FROM t GROUP BY t.g "
    "HAVING (SELECT count(*) FROM u WHERE u.g = t.g) >= 1",
    "SELECT t.g FROM t GROUP BY t.g HAVING EXISTS (SELECT 1 FROM u WHERE u.g = t.g AND u.y > 20)",
]

ORDERED = [
    (
        "SELECT t.g, sum(t.x) AS s FROM t GROUP BY t.g "
        "HAVING sum(t.x) > (SELECT min(u.y) FROM u WHERE u.g = t.g) / 10 "
        "ORDER BY 2 DESC, 1 NULLS FIRST LIMIT 3",
        [0, 1],
    ),
    (
        "SELECT t.g, count(*) AS n FROM t GROUP BY t.g "
        "HAVING count(*) <= (SELECT count(*) FROM u WHERE u.g = t.g) + 1 "
        "ORDER BY (SELECT max(u.y) FROM u WHERE u.g = t.g) NULLS FIRST, t.g NULLS LAST",
        [0, 1],
    ),
    (
        "SELECT t.id, t.g FROM t ORDER BY (SELECT max(u.y) FROM u WHERE u.g = t.g) "
        "DESC NULLS LAST, t.id",
        [0, 1],
    ),
    (
        "SELECT t.id FROM t ORDER BY (SELECT count(*) FROM u WHERE u.g = t.g), t.id LIMIT 4",
        [0],
    ),
    (
        "SELECT t.g, sum(t.x) FROM t GROUP BY t.g "
        "ORDER BY (SELECT max(u.y) FROM u WHERE u.g = t.g) NULLS FIRST, 1 NULLS FIRST",
        [0, 1],
    ),
]

QUALIFY = [
    "SELECT t.id, t.g FROM t "
    "QUALIFY row_number() OVER (PARTITION BY t.g ORDER BY t.id) "
    "<= (SELECT count(*) FROM u WHERE u.g = t.g)",
]


@pytest.mark.parametrize("sql", HAVING + QUALIFY)
def test_equals_duckdb(sql):
    check_all(sql, TABLES, policies=POLICIES, batch_sizes=BATCH_SIZES)


@pytest.mark.parametrize("sql, keys", ORDERED)
def test_ordered_equals_duckdb_in_order(sql, keys):
    check_all(sql, TABLES, policies=POLICIES, batch_sizes=BATCH_SIZES, ordered_keys=keys)


def test_output_names_are_the_blocks_own():
    out = execute(
        "SELECT t.g AS key, sum(t.x) FROM t GROUP BY t.g "
        "HAVING sum(t.x) > (SELECT count(*) FROM u WHERE u.g = t.g)",
        make_catalog(TABLES),
    )
    plain = execute("SELECT t.g AS key, sum(t.x) FROM t GROUP BY t.g", make_catalog(TABLES))
    assert out.schema.names == plain.schema.names


def test_star_with_a_correlated_having_is_refused():
    with pytest.raises(UnsupportedQueryError, match=r"'\*'"):
        execute(
            "SELECT * FROM t GROUP BY ALL "
            "HAVING count(*) > (SELECT count(*) FROM u WHERE u.g = t.g)",
            make_catalog(TABLES),
        )


def test_group_by_all_with_a_correlated_having_is_refused_as_duckdb_refuses_it():
    sql = (
        "SELECT t.g, count(*) FROM t GROUP BY ALL "
        "HAVING count(*) >= (SELECT count(*) FROM u WHERE u.g = t.g)"
    )
    check_all(sql, TABLES, policies=POLICIES, errors_too=True)  # DuckDB refuses it
    with pytest.raises(UnsupportedQueryError, match="GROUP BY ALL"):
        execute(sql, make_catalog(TABLES))
