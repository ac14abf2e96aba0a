"""One focused differential test (eddies vs DuckDB) per SQL feature of the contract.

Small hand-made tables with NULLs and duplicate rows; every query runs under every routing
policy, with batch_size=None and with batch_size=1 (debug=True), unless noted.
"""

from __future__ import annotations

from decimal import Decimal

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from oracle import (
    assert_same_bag,
    check_all,
    duckdb_rows,
    make_catalog,
    table_rows,
)

from eddies.engine import POLICIES, Catalog, execute

I64 = pa.int64()


def _tbl(names: list[str], types: list[pa.DataType], rows: list[tuple]) -> pa.Table:
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in names]
    return pa.table(
        {n: pa.array(list(c), type=t) for n, t, c in zip(names, types, cols, strict=True)}
    )


R = _tbl(
    ["id", "k", "v", "s", "f"],
    [I64, I64, I64, pa.string(), pa.float64()],
    [
        (1, 1, 10, "apple", 1.5),
        (2, 1, 20, "banana", 2.25),
        (3, 2, None, "avocado", None),
        (4, None, 40, None, -0.5),
        (5, 3, 50, "cherry", 3.0),
        (6, 2, 20, "apple", 1.5),
        (6, 2, 20, "apple", 1.5),  # duplicate row
        (8, None, None, "b_c", 0.0),
        (9, 4, -5, "a%b", 2.5),
    ],
)
S = _tbl(
    ["id", "k", "w", "name"],
    [I64, I64, I64, pa.string()],
    [
        (1, 1, 100, "x"),
        (2, 2, 200, "y"),
        (3, 2, 300, None),
        (4, None, 400, "z"),
        (5, 5, None, "x"),
        (6, 1, 100, "x"),
        (6, 1, 100, "x"),  # duplicate row
    ],
)
T = _tbl(
    ["id", "k", "u", "name"],
    [I64, I64, I64, pa.string()],
    [
        (1, 1, 7, "x"),
        (2, 3, 8, "y"),
        (3, None, 9, "z"),
        (4, 2, None, "x"),
        (5, 1, 7, "w"),
        (6, 2, 8, "it's"),
    ],
)
EMPTY = R.schema.empty_table()
NULLKEYS = _tbl(["id", "k"], [I64, I64], [(1, None), (2, None), (3, None)])
FLOATS = _tbl(
    ["id", "x"],
    [I64, pa.float64()],
    [(1, 0.5), (2, 1.25), (3, -2.0), (4, None), (5, 0.5), (6, 3.0)],
)
FLOATS2 = _tbl(["id", "y"], [I64, pa.float64()], [(10, 0.5), (11, 3.0), (12, None), (13, 7.75)])
# signed zeros: -0.0 = 0.0 in SQL
ZEROS = _tbl(["id", "z"], [I64, pa.float64()], [(1, 0.0), (2, -0.0), (3, 1.0), (4, -0.0)])
# NaN: DuckDB orders NaN above every number and treats NaN = NaN as true
NANS = _tbl(
    ["id", "x"],
    [I64, pa.float64()],
    [(1, float("nan")), (2, 1.0), (3, None), (4, float("nan")), (5, -1.0)],
)
# other Arrow types as they come from Parquet/pandas
TYPED = pa.table(
    {
        "id": pa.array([1, 2, 3, 4, 5], pa.int64()),
        "i32": pa.array([1, 2, None, 2, 5], pa.int32()),
        "i16": pa.array([10, -3, 7, None, 7], pa.int16()),
        "u8": pa.array([1, 2, 3, 4, 200], pa.uint8()),
        "f32": pa.array([0.5, 1.25, None, -2.0, 0.5], pa.float32()),
        "b": pa.array([True, False, None, True, False], pa.bool_()),
        "ls": pa.array(["x", "y", None, "x", "zz"], pa.large_string()),
        "dict": pa.array(["x", "y", "x", None, "w"]).dictionary_encode(),
        "d": pa.array([18262, 18263, None, 18262, 18300], pa.date32()),
        "ts": pa.array([0, 3_600_000_000, None, 0, 7_200_000_000], pa.timestamp("us")),
        "tsz": pa.array([0, 3600, 7200, None, 3600], pa.timestamp("s", tz="UTC")),
        "dec": pa.array(
            [Decimal("1.25"), Decimal("2.00"), Decimal("-3.50"), None, Decimal("5.75")],
            pa.decimal128(10, 2),
        ),
    }
)
EDGES = _tbl(
    ["src", "dst"],
    [I64, I64],
    [(1, 2), (2, 3), (3, 1), (1, 3), (3, 4), (4, 1), (2, 1), (2, 3), (None, 1), (1, None)],
)

TABLES = {
    "r": R,
    "s": S,
    "t": T,
    "e": EMPTY,
    "nk": NULLKEYS,
    "fl": FLOATS,
    "fl2": FLOATS2,
    "edges": EDGES,
    "zeros": ZEROS,
    "nans": NANS,
    "ty": TYPED,
}

policy_param = pytest.mark.parametrize("policy", POLICIES)


def check(sql: str, policy: str, **kw) -> pa.Table:
    return check_all(sql, TABLES, policies=[policy], **kw)


# ---------------------------------------------------------------------------- basics
@policy_param
def test_select_star(policy):
    check("SELECT * FROM r", policy)


@policy_param
def test_projection_with_expressions_and_aliases(policy):
    check("SELECT r.id AS ident, r.v, r.v + r.k AS total, 'c' AS const, 7 FROM r", policy)


@policy_param
def test_unqualified_columns_single_table(policy):
    check("SELECT id, s FROM r WHERE v > 10", policy)


# ---------------------------------------------------------------------------- predicates
@policy_param
@pytest.mark.parametrize(
    "pred",
    [
        "r.k IN (1, 3)",
        "r.k NOT IN (1, 3)",
        "r.s IN ('apple', 'cherry', 'zzz')",
        "r.k IN (1, NULL)",
        "r.k NOT IN (1, NULL)",  # never true: three-valued logic
    ],
)
def test_in_list(policy, pred):
    check(f"SELECT r.id, r.k, r.s FROM r WHERE {pred}", policy)


@policy_param
@pytest.mark.parametrize(
    "pred",
    [
        "r.v BETWEEN 10 AND 40",
        "r.v NOT BETWEEN 10 AND 40",
        "r.f BETWEEN 0 AND 2.25",
        "r.s BETWEEN 'apple' AND 'b'",
    ],
)
def test_between(policy, pred):
    check(f"SELECT r.id, r.v FROM r WHERE {pred}", policy)


@policy_param
@pytest.mark.parametrize(
    "pattern",
    ["a%", "%a", "%an%", "_p%", "a_%", "apple", "%", "b_c", "a%b"],
)
def test_like(policy, pattern):
    check(f"SELECT r.id, r.s FROM r WHERE r.s LIKE '{pattern}'", policy)


@policy_param
def test_not_like(policy):
    check("SELECT r.id, r.s FROM r WHERE r.s NOT LIKE 'a%'", policy)


@policy_param
@pytest.mark.parametrize(
    "pred", ["r.v IS NULL", "r.v IS NOT NULL", "r.s IS NULL AND r.k IS NULL", "r.f IS NOT NULL"]
)
def test_is_null(policy, pred):
    check(f"SELECT r.id FROM r WHERE {pred}", policy)


@policy_param
@pytest.mark.parametrize(
    "pred",
    [
        "NOT (r.v > 15)",  # NULL v: NOT NULL is NULL -> row dropped
        "NOT (r.v > 15 OR r.k = 1)",
        "NOT (r.v > 15 AND r.k = 2)",
        "r.v > 15 OR r.k = 2",  # NULL OR TRUE is TRUE
        "(r.v > 15) = FALSE",
        "NOT (r.s = 'apple')",
        "r.v <> 20",
    ],
)
def test_three_valued_where(policy, pred):
    check(f"SELECT r.id, r.v, r.k FROM r WHERE {pred}", policy)


@policy_param
@pytest.mark.parametrize("op", ["=", "<>", "<", "<=", ">", ">="])
def test_comparisons(policy, op):
    check(f"SELECT r.id FROM r WHERE r.v {op} 20", policy)


@policy_param
def test_string_comparison(policy):
    check("SELECT r.id, r.s FROM r WHERE r.s >= 'b' OR r.s < 'apricot'", policy)


# ---------------------------------------------------------------------------- expressions
@policy_param
def test_case(policy):
    check(
        "SELECT r.id, "
        "CASE WHEN r.v > 20 THEN 'big' WHEN r.v > 0 THEN 'small' ELSE 'other' END, "
        "CASE r.k WHEN 1 THEN 'one' WHEN 2 THEN 'two' END, "
        "CASE WHEN r.s IS NULL THEN -1 ELSE r.id END "
        "FROM r",
        policy,
    )


@policy_param
def test_case_in_where(policy):
    check("SELECT r.id FROM r WHERE CASE WHEN r.k = 1 THEN r.v > 15 ELSE r.v < 30 END", policy)


@policy_param
def test_arithmetic(policy):
    check(
        "SELECT r.id, r.v + 1, r.v - r.k, r.v * 3, r.v * r.f, -r.v, r.f + 0.25, "
        "(r.v + r.k) * 2 - 1 FROM r",
        policy,
    )


@policy_param
def test_division(policy):
    # DuckDB's / on integers is a float division (7 / 2 = 3.5)
    check("SELECT r.id, r.v / 4, r.v / r.f, r.f / 2 FROM r WHERE r.f <> 0", policy)


@policy_param
def test_modulo(policy):
    # DuckDB's % truncates toward zero: -5 % 3 = -2
    check("SELECT r.id, r.v % 3, r.v % 7, r.id % 2 FROM r", policy)


@policy_param
def test_arithmetic_in_where(policy):
    check("SELECT r.id FROM r WHERE r.v * 2 + r.k > 40 AND r.id % 2 = 0", policy)


@policy_param
def test_cast_to_varchar_and_double(policy):
    check(
        "SELECT r.id, CAST(r.k AS VARCHAR), CAST(r.v AS DOUBLE), CAST(r.id AS BIGINT) FROM r",
        policy,
    )


@policy_param
def test_cast_double_to_integer(policy):
    # DuckDB rounds a DOUBLE half to even: 1.5 -> 2, 2.5 -> 2, -0.5 -> 0, 2.25 -> 2
    check("SELECT r.id, CAST(r.f AS INTEGER) FROM r", policy)


@policy_param
def test_cast_string_to_integer(policy):
    check("SELECT r.id, CAST('12' AS INTEGER) + r.id FROM r", policy)


@policy_param
def test_cast_in_where(policy):
    check("SELECT r.id FROM r WHERE CAST(r.k AS VARCHAR) = '2'", policy)


# ---------------------------------------------------------------------------- aggregates
AGG_EXPRS = [
    "COUNT(*)",
    "COUNT(r.v)",
    "COUNT(r.s)",
    "SUM(r.v)",
    "SUM(r.f)",
    "AVG(r.v)",
    "AVG(r.f)",
    "MIN(r.v)",
    "MAX(r.v)",
    "MIN(r.s)",
    "MAX(r.s)",
    "MIN(r.f)",
    "MAX(r.f)",
]


@policy_param
@pytest.mark.parametrize("agg", AGG_EXPRS)
def test_aggregate_grouped(policy, agg):
    check(f"SELECT r.k, {agg} FROM r GROUP BY r.k", policy)


@pytest.mark.parametrize("agg", AGG_EXPRS)
def test_aggregate_global(agg):
    check_all(f"SELECT {agg} FROM r", TABLES)


@pytest.mark.parametrize("agg", AGG_EXPRS)
def test_aggregate_global_over_empty_table(agg):
    # one row: COUNT = 0, the others NULL
    check_all(f"SELECT {agg.replace('r.', 'e.')} FROM e", TABLES)


@policy_param
def test_aggregate_grouped_over_empty_table(policy):
    check("SELECT e.k, COUNT(*), SUM(e.v) FROM e GROUP BY e.k", policy)


@policy_param
def test_count_distinct(policy):
    check(
        "SELECT r.k, COUNT(DISTINCT r.v), COUNT(DISTINCT r.s), COUNT(*) FROM r GROUP BY r.k",
        policy,
    )


@policy_param
def test_count_distinct_global(policy):
    check("SELECT COUNT(DISTINCT r.v), COUNT(DISTINCT r.k), COUNT(r.k) FROM r", policy)


@policy_param
def test_several_aggregates_over_join(policy):
    check(
        "SELECT s.name, COUNT(*), SUM(r.v), AVG(s.w), MIN(r.s), MAX(r.id) "
        "FROM r, s WHERE r.k = s.k GROUP BY s.name",
        policy,
    )


@policy_param
def test_aggregate_of_expression(policy):
    check("SELECT r.k, SUM(r.v * 2 + 1), MAX(r.v - r.id) FROM r GROUP BY r.k", policy)


@policy_param
def test_group_by_null_keys(policy):
    # NULL keys form one group
    check("SELECT r.k, COUNT(*), SUM(r.id) FROM r GROUP BY r.k", policy)


@policy_param
def test_group_by_two_columns_with_nulls(policy):
    check("SELECT r.k, r.s, COUNT(*) FROM r GROUP BY r.k, r.s", policy)


@policy_param
def test_group_by_column_not_selected(policy):
    check("SELECT COUNT(*), SUM(r.v) FROM r GROUP BY r.k", policy)


@policy_param
def test_having(policy):
    check("SELECT r.k, COUNT(*) AS c FROM r GROUP BY r.k HAVING COUNT(*) >= 2", policy)


@policy_param
def test_having_on_aggregate_not_selected(policy):
    check("SELECT r.k FROM r GROUP BY r.k HAVING SUM(r.v) > 20 OR MIN(r.id) = 4", policy)


@policy_param
def test_distinct(policy):
    check("SELECT DISTINCT r.k, r.s FROM r", policy)


@policy_param
def test_distinct_over_join(policy):
    check("SELECT DISTINCT s.name, r.k FROM r, s WHERE r.k = s.k", policy)


# ---------------------------------------------------------------------------- ordering
@policy_param
@pytest.mark.parametrize(
    "order",
    [
        "r.v ASC",
        "r.v DESC",
        "r.v ASC NULLS FIRST",
        "r.v ASC NULLS LAST",
        "r.v DESC NULLS FIRST",
        "r.v DESC NULLS LAST",
        "r.v",  # DuckDB's default: NULLS LAST
    ],
)
def test_order_by(policy, order):
    check(f"SELECT r.v, r.id FROM r ORDER BY {order}", policy, ordered_keys=[0])


@policy_param
def test_order_by_two_keys_mixed_direction(policy):
    check(
        "SELECT r.k, r.s, r.id FROM r ORDER BY r.k DESC NULLS FIRST, r.s ASC",
        policy,
        ordered_keys=[0, 1],
    )


@policy_param
def test_order_by_string_and_float(policy):
    check("SELECT r.s, r.f FROM r ORDER BY r.s, r.f DESC", policy, ordered_keys=[0, 1])


@policy_param
def test_order_by_aggregate_alias(policy):
    check(
        "SELECT r.k, COUNT(*) AS c FROM r GROUP BY r.k ORDER BY c DESC, r.k NULLS FIRST",
        policy,
        ordered_keys=[1, 0],
    )


@policy_param
@pytest.mark.parametrize(
    "tail", ["LIMIT 3", "LIMIT 3 OFFSET 2", "LIMIT 0", "LIMIT 100", "LIMIT 2 OFFSET 20"]
)
def test_limit_offset_ordered(policy, tail):
    # ordered on every column, so the rows LIMIT keeps are determined
    check(
        f"SELECT r.id, r.v, r.s FROM r ORDER BY r.id, r.v, r.s {tail}",
        policy,
        ordered_keys=[0, 1, 2],
    )


@policy_param
def test_offset_without_limit(policy):
    check("SELECT r.id FROM r ORDER BY r.id DESC OFFSET 4", policy, ordered_keys=[0])


@policy_param
def test_limit_without_order_is_a_sub_bag(policy):
    sql_full = "SELECT r.id, s.id FROM r, s WHERE r.k = s.k"
    full = duckdb_rows(sql_full, TABLES)
    for bs in (None, 1):
        ours = table_rows(
            execute(sql_full + " LIMIT 4", make_catalog(TABLES), policy=policy, batch_size=bs)
        )
        assert len(ours) == min(4, len(full))
        remaining = list(full)
        for row in ours:
            assert row in remaining, f"{row} is not a row of the unlimited result {full}"
            remaining.remove(row)


# ---------------------------------------------------------------------------- joins
@policy_param
def test_equi_join_where(policy):
    check("SELECT r.id, s.id, r.k FROM r, s WHERE r.k = s.k", policy)


@policy_param
def test_join_on(policy):
    check("SELECT r.id, s.id, s.w FROM r JOIN s ON r.k = s.k WHERE s.w > 100", policy)


@policy_param
def test_inner_join_on_chain(policy):
    check(
        "SELECT r.id, s.id, t.id FROM r INNER JOIN s ON r.k = s.k INNER JOIN t ON s.name = t.name",
        policy,
    )


@policy_param
def test_join_on_with_extra_conditions(policy):
    check(
        "SELECT r.id, s.id FROM r JOIN s ON r.k = s.k AND s.w >= 200 AND r.v IS NOT NULL",
        policy,
    )


@policy_param
def test_select_star_over_join(policy):
    check("SELECT * FROM r, t WHERE r.k = t.k", policy)


@policy_param
def test_multi_column_equi_join(policy):
    check("SELECT r.id, s.id FROM r, s WHERE r.k = s.k AND r.id = s.id", policy)


@policy_param
def test_multi_column_equi_join_on(policy):
    check(
        "SELECT r.id, s.id, t.id FROM s JOIN t ON s.k = t.k AND s.name = t.name, r "
        "WHERE r.id = s.id",
        policy,
    )


@policy_param
def test_self_join_with_aliases(policy):
    check("SELECT a.id, b.id, a.k FROM r a, r b WHERE a.k = b.k AND a.id < b.id", policy)


@policy_param
def test_self_join_equal_ids_keeps_duplicates(policy):
    check("SELECT a.id, b.id FROM r AS a JOIN r AS b ON a.id = b.id", policy)


@policy_param
def test_three_way_self_join(policy):
    check(
        "SELECT a.src, b.src, c.src FROM edges a, edges b, edges c "
        "WHERE a.dst = b.src AND b.dst = c.src",
        policy,
    )


@policy_param
def test_triangle_cyclic_query(policy):
    # a.dst = b.src, b.dst = c.src, c.dst = a.src: three edges, one cycle
    check(
        "SELECT a.src, a.dst, b.dst FROM edges a, edges b, edges c "
        "WHERE a.dst = b.src AND b.dst = c.src AND c.dst = a.src",
        policy,
    )


@policy_param
def test_cyclic_query_three_tables(policy):
    check(
        "SELECT r.id, s.id, t.id FROM r, s, t WHERE r.k = s.k AND s.name = t.name AND t.id = r.id",
        policy,
    )


@policy_param
def test_cross_product(policy):
    check("SELECT r.id, s.id FROM r, s", policy)


@policy_param
def test_cross_join_keyword(policy):
    check("SELECT r.id, t.name FROM r CROSS JOIN t WHERE r.v > 20", policy)


@policy_param
def test_cross_product_three_tables_with_filters(policy):
    check("SELECT r.id, s.id, t.id FROM r, s, t WHERE r.k = 2 AND s.w > 250", policy)


@policy_param
def test_cross_product_plus_join(policy):
    check("SELECT r.id, s.id, t.id FROM r, s, t WHERE r.k = s.k", policy)


@policy_param
@pytest.mark.parametrize("op", ["<", "<=", ">", "<>"])
def test_non_equi_join(policy, op):
    check(f"SELECT r.id, s.id FROM r, s WHERE r.v {op} s.w / 10", policy)


@policy_param
def test_non_equi_join_plus_equi_join(policy):
    check("SELECT r.id, s.id FROM r, s WHERE r.k = s.k AND r.v * 10 < s.w", policy)


@policy_param
def test_multi_table_or_predicate(policy):
    check("SELECT r.id, t.id FROM r, t WHERE r.k = t.k AND (r.v > 30 OR t.u = 7)", policy)


@policy_param
def test_join_with_empty_table(policy):
    check("SELECT r.id, e.id FROM r, e WHERE r.k = e.k", policy)


@policy_param
def test_three_way_join_with_empty_table(policy):
    check("SELECT r.id, s.id, e.id FROM r, s, e WHERE r.k = s.k AND s.k = e.k", policy)


@policy_param
def test_select_from_empty_table(policy):
    check("SELECT * FROM e WHERE e.v > 0", policy)


@policy_param
def test_cross_product_with_empty_table(policy):
    check("SELECT r.id, e.id FROM r, e", policy)


@policy_param
def test_all_null_join_keys_never_join(policy):
    check("SELECT nk.id, r.id FROM nk, r WHERE nk.k = r.k", policy)


@policy_param
def test_null_keys_do_not_join_with_null_keys(policy):
    check("SELECT a.id, b.id FROM nk a, nk b WHERE a.k = b.k", policy)


@policy_param
def test_null_keys_self_join_on_nullable_column(policy):
    check("SELECT a.id, b.id FROM r a JOIN r b ON a.v = b.v", policy)


@policy_param
def test_string_join_keys(policy):
    check("SELECT s.id, t.id, s.name FROM s, t WHERE s.name = t.name", policy)


@policy_param
def test_float_join_keys(policy):
    check("SELECT fl.id, fl2.id, fl.x FROM fl, fl2 WHERE fl.x = fl2.y", policy)


@policy_param
def test_int_float_join_keys(policy):
    # BIGINT = DOUBLE: compare as numbers (3 = 3.0)
    check("SELECT fl.id, r.id FROM fl, r WHERE fl.x = r.k", policy)


@policy_param
def test_join_then_group_order_limit(policy):
    check(
        "SELECT s.name, COUNT(*) AS c, SUM(r.v) AS sv FROM r JOIN s ON r.k = s.k "
        "WHERE r.v IS NOT NULL GROUP BY s.name HAVING COUNT(*) > 1 "
        "ORDER BY c DESC, s.name LIMIT 5",
        policy,
        ordered_keys=[1, 0],
    )


# ---------------------------------------------------------------------------- more predicates
@policy_param
@pytest.mark.parametrize(
    "pred",
    [
        "NULL",
        "NOT NULL",
        "r.v = NULL",
        "r.v > 10 AND NULL",
        "r.v > 10 OR NULL",
        "NULL IS NULL",
        "r.v IS NULL OR NULL",
    ],
)
def test_null_literal_predicates(policy, pred):
    check(f"SELECT r.id FROM r WHERE {pred}", policy)


@policy_param
@pytest.mark.parametrize("pred", ["TRUE", "FALSE", "1 = 1", "1 = 0", "NOT FALSE"])
def test_constant_predicates(policy, pred):
    check(f"SELECT r.id, s.id FROM r, s WHERE r.k = s.k AND {pred}", policy)


@policy_param
def test_column_equality_within_one_alias(policy):
    # a.k = a.id compares two columns of one tuple: a selection, not a join edge
    check("SELECT a.id, b.id FROM r a, r b WHERE a.k = b.k AND a.k = a.id", policy)


@policy_param
def test_equi_join_on_expression(policy):
    check("SELECT r.id, s.id FROM r, s WHERE r.k + 1 = s.k", policy)


@policy_param
def test_repeated_join_predicates(policy):
    check("SELECT r.id, s.id FROM r, s WHERE r.k = s.k AND s.k = r.k AND r.k = s.k", policy)


@policy_param
def test_transitive_equalities(policy):
    check(
        "SELECT r.id, s.id, t.id FROM r, s, t WHERE r.k = s.k AND s.k = t.k AND r.k = t.k",
        policy,
    )


@policy_param
def test_same_column_joined_to_two_tables(policy):
    check("SELECT r.id, s.id, t.id FROM r, s, t WHERE r.k = s.k AND r.k = t.k", policy)


@policy_param
def test_operator_precedence(policy):
    check("SELECT r.id FROM r WHERE r.v > 10 OR r.k = 2 AND r.s LIKE 'a%'", policy)


@policy_param
@pytest.mark.parametrize(
    "pred", ["r.f > 1", "r.v = 20.0", "r.v IN (20.0, 10)", "r.v + 0.5 > 20", "r.f = 3"]
)
def test_mixed_numeric_literals(policy, pred):
    check(f"SELECT r.id FROM r WHERE {pred}", policy)


@policy_param
def test_string_literal_with_quote(policy):
    check("SELECT t.id FROM t WHERE t.name = 'it''s' OR t.name LIKE '%''%'", policy)


@policy_param
def test_between_reversed_bounds(policy):
    check("SELECT r.id FROM r WHERE r.v BETWEEN 40 AND 10", policy)


@policy_param
def test_case_insensitive_identifiers(policy):
    check("SELECT R.ID, r.K, X.W FROM R, s AS X WHERE R.k = x.K AND r.V > 10", policy)


@policy_param
def test_quoted_identifiers(policy):
    check('SELECT "r"."id", "s"."w" FROM "r" JOIN "s" ON "r"."k" = "s"."k"', policy)


@policy_param
def test_qualified_star(policy):
    check("SELECT s.*, r.id FROM r, s WHERE r.k = s.k", policy)


# ---------------------------------------------------------------------------- more ordering
@policy_param
def test_order_by_column_not_selected(policy):
    # (id, f) orders r totally up to identical rows, so the sequence of s is determined
    check("SELECT r.s FROM r ORDER BY r.id DESC, r.f", policy, ordered_keys=[0])


@policy_param
def test_order_by_expression(policy):
    check(
        "SELECT r.id, r.v FROM r ORDER BY r.v * -1 NULLS FIRST, r.id",
        policy,
        ordered_keys=[1, 0],
    )


@policy_param
def test_distinct_order_by_limit(policy):
    check(
        "SELECT DISTINCT r.k FROM r ORDER BY r.k DESC NULLS LAST LIMIT 3",
        policy,
        ordered_keys=[0],
    )


@policy_param
def test_order_by_over_join(policy):
    check(
        "SELECT r.id, s.id, s.w FROM r JOIN s ON r.k = s.k ORDER BY s.w DESC, r.id, s.id",
        policy,
        ordered_keys=[2, 0, 1],
    )


# ---------------------------------------------------------------------------- more aggregates
@policy_param
def test_group_by_expression_of_key_in_select(policy):
    check("SELECT r.k * 2, COUNT(*), r.k FROM r GROUP BY r.k", policy)


@policy_param
@pytest.mark.parametrize("n", [1, 100])
def test_having_without_group_by(policy, n):
    check(f"SELECT COUNT(*) FROM r HAVING COUNT(*) > {n}", policy)


@policy_param
def test_global_aggregate_where_nothing_passes(policy):
    check(
        "SELECT COUNT(*), COUNT(r.v), SUM(r.v), AVG(r.f), MIN(r.s), MAX(r.id) "
        "FROM r WHERE r.v > 1000",
        policy,
    )


@policy_param
def test_global_aggregate_over_join_without_matches(policy):
    check("SELECT COUNT(*), SUM(r.v) FROM r, nk WHERE r.k = nk.k", policy)


@policy_param
def test_grouped_aggregate_over_join_without_matches(policy):
    check("SELECT r.k, COUNT(*) FROM r, nk WHERE r.k = nk.k GROUP BY r.k", policy)


@policy_param
def test_count_distinct_over_join(policy):
    check(
        "SELECT t.name, COUNT(DISTINCT r.s), COUNT(DISTINCT r.k), COUNT(*) "
        "FROM r, t WHERE r.k = t.k GROUP BY t.name",
        policy,
    )


# ---------------------------------------------------------------------------- float edge cases
@policy_param
def test_signed_zero_join_keys(policy):
    check("SELECT a.id, b.id FROM zeros a, zeros b WHERE a.z = b.z", policy)


@policy_param
def test_signed_zero_filter(policy):
    check("SELECT COUNT(*) FROM zeros WHERE zeros.z = 0", policy)


@policy_param
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT DISTINCT zeros.z FROM zeros",
        "SELECT zeros.z, COUNT(*) FROM zeros GROUP BY zeros.z",
        "SELECT COUNT(DISTINCT zeros.z) FROM zeros",
        "SELECT DISTINCT zeros.z * 2 FROM zeros",
    ],
)
def test_signed_zero_distinct_and_group_by(policy, sql):
    # -0.0 and 0.0 are one value: one DISTINCT row, one group
    check(sql, policy)


@policy_param
@pytest.mark.parametrize("pred", ["nans.x > 0", "nans.x < 0", "nans.x = nans.x", "nans.x <> 1"])
def test_nan_comparisons(policy, pred):
    check(f"SELECT nans.id FROM nans WHERE {pred}", policy)


@policy_param
def test_nan_join_keys(policy):
    check("SELECT a.id, b.id FROM nans a, nans b WHERE a.x = b.x", policy)


@policy_param
def test_nan_group_by(policy):
    check("SELECT nans.x, COUNT(*) FROM nans GROUP BY nans.x", policy)


@policy_param
def test_nan_order_by(policy):
    check("SELECT nans.x, nans.id FROM nans ORDER BY nans.x, nans.id", policy, ordered_keys=[0, 1])


# ---------------------------------------------------------------------------- Arrow types
@policy_param
def test_int32_joins_int64(policy):
    check("SELECT ty.id, r.id FROM ty, r WHERE ty.i32 = r.k", policy)


@policy_param
def test_int16_and_uint8_columns(policy):
    check(
        "SELECT ty.id, ty.i16 + ty.u8, ty.u8 * 2 FROM ty, r WHERE ty.u8 = r.k AND ty.i16 > 0",
        policy,
    )


@policy_param
def test_float32_column(policy):
    check("SELECT ty.id, ty.f32 * 2 FROM ty WHERE ty.f32 >= 0.5", policy)


@policy_param
def test_float32_joins_float64(policy):
    check("SELECT ty.id, fl.id FROM ty, fl WHERE ty.f32 = fl.x", policy)


@policy_param
@pytest.mark.parametrize(
    "pred", ["ty.b", "NOT ty.b", "ty.b = TRUE", "ty.b IS NULL", "ty.b OR ty.id > 3"]
)
def test_bool_column_predicates(policy, pred):
    check(f"SELECT ty.id, ty.b FROM ty WHERE {pred}", policy)


@policy_param
def test_large_string_and_dictionary_join(policy):
    check(
        "SELECT a.id, b.id, t.id FROM ty a, ty b, t WHERE a.ls = b.dict AND b.dict = t.name",
        policy,
    )


@policy_param
def test_dictionary_string_predicates_and_group(policy):
    check(
        "SELECT ty.dict, COUNT(*) FROM ty WHERE ty.dict LIKE 'x%' OR ty.dict IN ('w') "
        "GROUP BY ty.dict",
        policy,
    )


@policy_param
def test_date_and_timestamp_columns(policy):
    check(
        "SELECT a.id, b.id, a.d, a.ts, a.tsz FROM ty a, ty b "
        "WHERE a.d = b.d AND a.ts = b.ts AND a.tsz <= b.tsz",
        policy,
    )


@policy_param
def test_date_and_timestamp_aggregates(policy):
    check(
        "SELECT ty.b, MIN(ty.d), MAX(ty.ts), MIN(ty.tsz), COUNT(DISTINCT ty.d) "
        "FROM ty GROUP BY ty.b",
        policy,
    )


@policy_param
def test_timestamp_order_by(policy):
    check(
        "SELECT ty.tsz, ty.id FROM ty ORDER BY ty.tsz DESC NULLS LAST, ty.id",
        policy,
        ordered_keys=[0, 1],
    )


@policy_param
def test_decimal_column(policy):
    check(
        "SELECT ty.id, ty.dec, ty.dec * 2 FROM ty WHERE ty.dec > 1.5",
        policy,
    )


@policy_param
def test_decimal_aggregates(policy):
    check("SELECT ty.b, SUM(ty.dec), MAX(ty.dec), AVG(ty.dec) FROM ty GROUP BY ty.b", policy)


# ---------------------------------------------------------------------------- data sources
def _check_catalog(cat: Catalog, sql: str, tables: dict) -> None:
    for policy in POLICIES:
        for bs in (None, 1):
            ours = execute(sql, cat, policy=policy, batch_size=bs)
            assert_same_bag(ours, sql, tables, context=f"policy={policy} batch_size={bs}")


SOURCE_SQL = "SELECT r.id, s.id, r.s, s.w FROM r, s WHERE r.k = s.k AND r.v >= 10"


def test_parquet_and_csv_sources(tmp_path):
    pq.write_table(R, tmp_path / "r.parquet")
    pacsv.write_csv(S, tmp_path / "s.csv")
    cat = Catalog()
    cat.add_table("r", str(tmp_path / "r.parquet"))
    cat.add_table("s", tmp_path / "s.csv")  # os.PathLike
    _check_catalog(cat, SOURCE_SQL, {"r": R, "s": S})


def test_pandas_source():
    cat = Catalog()
    cat.add_table("r", R.to_pandas())
    cat.add_table("s", S)
    assert isinstance(R.to_pandas(), pd.DataFrame)
    _check_catalog(cat, SOURCE_SQL, {"r": R, "s": S})


def test_record_batch_reader_source():
    # a reader can be consumed only once, so a fresh catalog per run
    for policy in POLICIES:
        cat = Catalog()
        cat.add_table(
            "r", pa.RecordBatchReader.from_batches(R.schema, R.to_batches(max_chunksize=2))
        )
        cat.add_table("s", S)
        ours = execute(SOURCE_SQL, cat, policy=policy)
        assert_same_bag(ours, SOURCE_SQL, {"r": R, "s": S}, context=f"policy={policy}")


def test_chunked_table_and_table_batch_size():
    chunked = pa.concat_tables([R.slice(0, 3), R.slice(3, 2), R.slice(5)])
    assert chunked.column(0).num_chunks > 1
    cat = Catalog()
    cat.add_table("r", chunked, batch_size=2)
    cat.add_table("s", S, batch_size=1)
    _check_catalog(cat, SOURCE_SQL, {"r": R, "s": S})


def test_catalog_reused_across_queries():
    cat = make_catalog(TABLES)
    for sql in [
        "SELECT r.id FROM r WHERE r.k = 1",
        "SELECT r.id, s.id FROM r, s WHERE r.k = s.k",
        "SELECT r.id FROM r WHERE r.k = 1",
    ]:
        assert_same_bag(execute(sql, cat), sql, TABLES)
