"""Equi-joins hidden in an OR of ANDs (engine/rewrite/or_factoring.py): the common
conjuncts factored out, the single-table filters each OR implies derived, and the answers
still DuckDB's.

TPC-H Q19 writes ``p_partkey = l_partkey`` in each of its three branches; planned as
written, the eddy built the cross product of part and lineitem.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pyarrow as pa
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import assert_same_bag, check_all, duckdb_table, make_catalog

from eddies.engine import execute, explain
from eddies.engine.plan.planner import plan_query
from eddies.engine.rewrite import RULES, Stage
from eddies.engine.rewrite.or_factoring import factor_ors, implied_filters

EXAMPLES = int(os.environ.get("EDDIES_OR_EXAMPLES", "40"))

Q19 = """
select sum(l_extendedprice * (1 - l_discount)) as revenue, count(*) as n
from lineitem, part
where
  (p_partkey = l_partkey and p_brand = 'Brand#12'
   and p_container in ('SM CASE', 'SM BOX', 'SM PACK', 'SM PKG')
   and l_quantity >= 1 and l_quantity <= 1 + 10 and p_size between 1 and 5
   and l_shipmode in ('AIR', 'AIR REG') and l_shipinstruct = 'DELIVER IN PERSON')
  or
  (l_partkey = p_partkey and p_brand = 'Brand#23'
   and p_container in ('MED BAG', 'MED BOX', 'MED PKG', 'MED PACK')
   and l_quantity >= 10 and l_quantity <= 10 + 10 and p_size between 1 and 10
   and l_shipmode in ('AIR', 'AIR REG') and l_shipinstruct = 'DELIVER IN PERSON')
  or
  (p_partkey = l_partkey and p_brand = 'Brand#34'
   and p_container in ('LG CASE', 'LG BOX', 'LG PACK', 'LG PKG')
   and l_quantity >= 20 and l_quantity <= 20 + 10 and p_size between 1 and 15
   and l_shipmode in ('AIR', 'AIR REG') and l_shipinstruct = 'DELIVER IN PERSON')
"""


def _q19_tables(n_part: int = 200, n_lineitem: int = 3000, seed: int = 7) -> dict[str, pa.Table]:
    """part and lineitem with Q19's columns, values drawn so every branch matches rows
    (dbgen's domains, narrowed); some lineitem keys have no part, some are NULL."""
    rng = np.random.default_rng(seed)
    brands = [f"Brand#{m}{n}" for m in (1, 2, 3) for n in (2, 3, 4)]
    containers = [f"{s} {k}" for s in ("SM", "MED", "LG") for k in ("CASE", "BOX", "PACK", "BAG")]
    part = pa.table(
        {
            "p_partkey": pa.array(np.arange(1, n_part + 1), pa.int64()),
            "p_brand": rng.choice(brands, n_part),
            "p_container": rng.choice(containers, n_part),
            "p_size": pa.array(rng.integers(1, 20, n_part), pa.int32()),
        }
    )
    keys = rng.integers(1, n_part + 20, n_lineitem)
    lineitem = pa.table(
        {
            "l_partkey": pa.array(keys, pa.int64(), mask=rng.random(n_lineitem) < 0.02),
            "l_quantity": rng.integers(1, 51, n_lineitem).astype(np.float64),
            "l_extendedprice": np.round(rng.random(n_lineitem) * 1000, 2),
            "l_discount": np.round(rng.integers(0, 11, n_lineitem) / 100, 2),
            "l_shipmode": rng.choice(["AIR", "AIR REG", "MAIL", "SHIP"], n_lineitem),
            "l_shipinstruct": rng.choice(["DELIVER IN PERSON", "NONE"], n_lineitem),
        }
    )
    return {"part": part, "lineitem": lineitem}


def _factored(sql: str) -> str:
    return factor_ors(sqlglot.parse_one(sql, dialect="duckdb")).sql(dialect="duckdb")


# ------------------------------------------------------------------------ the rewrite
def test_factor_ors_is_a_checked_stage_rule_after_unshadow():
    rules = [rule for _, rule in RULES]
    assert (Stage.CHECKED, factor_ors) in RULES
    assert rules.index(factor_ors) > [r.__name__ for r in rules].index("unshadow")


def test_common_conjuncts_are_factored_out_with_equalities_in_either_order():
    got = _factored("SELECT * FROM a, b WHERE (a.x = b.x AND a.y = 1) OR (b.x = a.x AND b.z = 2)")
    assert got == "SELECT * FROM a, b WHERE a.x = b.x AND (a.y = 1 OR b.z = 2)"


def test_a_branch_left_empty_makes_the_or_its_common_part():
    got = _factored("SELECT * FROM a WHERE (x = 1 AND y = 2) OR (y = 2) OR (y = 2 AND z = 3)")
    assert got == "SELECT * FROM a WHERE y = 2"


def test_nested_ors_in_on_having_and_subqueries_are_factored():
    sql = (
        "SELECT k FROM a JOIN b ON (a.k = b.k AND b.v > 1) OR (a.k = b.k AND b.v < 0) "
        "WHERE a.w IN (SELECT w FROM c WHERE (c.p = 1 AND c.q = 2) OR (c.p = 1 AND c.r = 3)) "
        "GROUP BY k HAVING (SUM(a.w) > 1 AND k > 0) OR (k > 0 AND COUNT(*) > 2)"
    )
    got = _factored(sql)
    assert "ON a.k = b.k AND (b.v > 1 OR b.v < 0)" in got
    assert "WHERE c.p = 1 AND (c.q = 2 OR c.r = 3)" in got
    assert "HAVING k > 0 AND (SUM(a.w) > 1 OR COUNT(*) > 2)" in got


def test_ors_without_common_conjuncts_and_unstable_calls_are_left_as_written():
    for sql in (
        "SELECT * FROM a WHERE (x = 1 AND y = 2) OR (x = 2 AND y = 1)",
        "SELECT * FROM a WHERE (RANDOM() < 0.5 AND y = 2) OR (RANDOM() < 0.5 AND y = 1)",
        "SELECT * FROM a WHERE (f(x) AND y = 2) OR (f(x) AND y = 1)",
        "SELECT * FROM a WHERE (x IN (SELECT 1) AND y = 2) OR (x IN (SELECT 1) AND y = 1)",
    ):
        tree = sqlglot.parse_one(sql, dialect="duckdb")
        assert factor_ors(tree.copy()) == tree, sql


def test_factoring_keeps_the_value_under_three_valued_logic():
    """Every assignment of TRUE / FALSE / NULL to A, B, C, D: DuckDB gives the original
    and the factored condition the same value (not only the same rows kept)."""
    originals = [
        "(a AND b) OR (a AND c)",
        "(a AND b) OR a",
        "(a AND b AND c) OR (c AND d AND a) OR (a AND c)",
        "NOT ((b AND a) OR (a AND d))",
        "(a AND (b OR (c AND d) OR (d AND c AND a))) OR (a AND c)",
    ]
    values = ["TRUE", "FALSE", "NULL::BOOLEAN"]
    rows = " UNION ALL ".join(
        f"SELECT {w} AS a, {x} AS b, {y} AS c, {z} AS d"
        for w, x, y, z in itertools.product(values, repeat=4)
    )
    for original in originals:
        factored = _factored(f"SELECT * FROM t WHERE {original}").split(" WHERE ", 1)[1]
        assert factored != original
        sql = f"SELECT count(*) FROM ({rows}) WHERE ({original}) IS DISTINCT FROM ({factored})"
        assert duckdb_table(sql, {}).column(0)[0].as_py() == 0, (original, factored)


def test_implied_filters_per_alias_of_every_branch():
    where = sqlglot.parse_one(
        "(a.x = b.x AND a.y = 1 AND b.z > 2 AND a.w < 3) OR (a.y = 2 AND a.x + b.x > 1)"
    )
    alias = {"a": 0, "b": 1}
    got = implied_filters([where], lambda c: alias.get(c.table))
    assert [g.sql() for g in got] == ["(a.y = 1 AND a.w < 3) OR a.y = 2"]  # b only in one
    assert implied_filters([sqlglot.parse_one("a.y = 1 OR a.y = 2")], lambda c: 0) == []
    assert implied_filters([where], lambda c: None) == []  # columns it cannot place


# ------------------------------------------------------------------------ TPC-H Q19
def test_q19_plans_an_equi_join_and_per_table_filters():
    tables = _q19_tables(20, 50)
    cat = make_catalog(tables)
    plan = plan_query(Q19, cat)
    edges = [p for p in plan.graph.predicates if p.edge is not None]
    assert len(edges) == 1
    edge = edges[0].edge
    assert {edge.left_columns, edge.right_columns} == {("l_partkey",), ("p_partkey",)}
    singles = [
        p for p in plan.graph.predicates if p.edge is None and bin(p.alias_mask).count("1") == 1
    ]
    ors = [p for p in singles if " OR " in str(p.sql)]
    assert len(ors) == 2  # one implied filter over part, one over lineitem
    text = explain(Q19, cat)
    assert "stem:part  hash indexes on (p_partkey)" in text
    assert "stem:lineitem  hash indexes on (l_partkey)" in text
    assert "hash indexes on none" not in text


def test_q19_matches_duckdb():
    tables = _q19_tables()
    expected = duckdb_table(Q19, tables)
    assert expected.column("n")[0].as_py() > 0  # the data reaches every part of the query
    assert_same_bag(execute(Q19, make_catalog(tables)), Q19, tables, expected=expected)


def test_q19_matches_duckdb_under_every_policy():
    check_all(Q19, _q19_tables(40, 300))


# ------------------------------------------------------------------------ property
_SMALL = st.one_of(st.none(), st.integers(0, 3))


def _table(draw, prefix: str) -> pa.Table:
    n = draw(st.integers(0, 6))
    return pa.table(
        {
            f"{prefix}k": pa.array(draw(st.lists(_SMALL, min_size=n, max_size=n)), pa.int64()),
            f"{prefix}v": pa.array(draw(st.lists(_SMALL, min_size=n, max_size=n)), pa.int64()),
        }
    )


def _atom(draw, names: list[str]) -> str:
    """One predicate over one or two of the tables ``names``."""
    t, u = draw(st.sampled_from(names)), draw(st.sampled_from(names))
    col = draw(st.sampled_from(["k", "v"]))
    kind = draw(st.sampled_from(["eq", "const", "null", "lt", "in"]))
    if kind == "eq" and t != u:
        return f"{t}.{t}{col} = {u}.{u}k"
    if kind == "lt":
        return f"{t}.{t}{col} < {u}.{u}v + {draw(st.integers(-1, 1))}"
    if kind == "null":
        return f"{t}.{t}{col} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == "in":
        return f"{t}.{t}{col} IN (1, 3)"
    return f"{t}.{t}{col} {draw(st.sampled_from(['=', '<>', '>=']))} {draw(st.integers(0, 3))}"


@st.composite
def or_queries(draw):
    """(tables, SQL): 2-3 tables with NULLs and duplicates, and a WHERE (or an inner or
    LEFT JOIN's ON) that is an OR of ANDs whose branches share some conjuncts."""
    names = ["a", "b", "c"][: draw(st.integers(2, 3))]
    tables = {n: _table(draw, n) for n in names}
    common = [_atom(draw, names) for _ in range(draw(st.integers(0, 2)))]
    branches = []
    for _ in range(draw(st.integers(2, 3))):
        own = [_atom(draw, names) for _ in range(draw(st.integers(0, 3)))]
        mixed = draw(st.permutations(common + own))
        branches.append("(" + " AND ".join(mixed or ["TRUE"]) + ")")
    condition = " OR ".join(branches)
    where = draw(st.sampled_from(["where", "inner", "left"]))
    if where == "where":
        sql = f"SELECT * FROM {', '.join(names)} WHERE {condition}"
    else:
        join = "JOIN" if where == "inner" else "LEFT JOIN"
        rest = "".join(f" CROSS JOIN {n}" for n in names[2:])
        sql = f"SELECT * FROM a{rest} {join} b ON {condition}"
    return tables, sql


@settings(max_examples=EXAMPLES, deadline=None, report_multiple_bugs=False)
@given(case=or_queries())
def test_ors_of_ands_match_duckdb(case):
    tables, sql = case
    cat = make_catalog(tables)
    for policy in ("naive", "lottery"):
        assert_same_bag(execute(sql, cat, policy=policy, seed=0), sql, tables, context=policy)


# ------------------------------------------------------------------------ TPC-DS Q48
Q48 = """
select sum(ss_quantity) as q, count(*) as n
from store_sales, store, customer_demographics, customer_address, date_dim
where s_store_sk = ss_store_sk and ss_sold_date_sk = d_date_sk and d_year = 2000
and ((cd_demo_sk = ss_cdemo_sk and cd_marital_status = 'M' and ss_sales_price between 1 and 5)
  or (cd_demo_sk = ss_cdemo_sk and cd_marital_status = 'D' and ss_sales_price between 4 and 8)
  or (ss_cdemo_sk = cd_demo_sk and cd_marital_status = 'S' and ss_sales_price between 7 and 9))
and ((ss_addr_sk = ca_address_sk and ca_country = 'US' and ca_state in ('CO', 'OH')
      and ss_net_profit between 0 and 20)
  or (ss_addr_sk = ca_address_sk and ca_country = 'US' and ca_state in ('OR', 'MN')
      and ss_net_profit between 15 and 30))
"""


def _q48_tables(n: int = 400, seed: int = 3) -> dict[str, pa.Table]:
    rng = np.random.default_rng(seed)

    def keys(high: int, size: int) -> pa.Array:
        return pa.array(rng.integers(0, high, size), pa.int64(), mask=rng.random(size) < 0.05)

    return {
        "store_sales": pa.table(
            {
                "ss_store_sk": keys(4, n),
                "ss_sold_date_sk": keys(6, n),
                "ss_cdemo_sk": keys(12, n),
                "ss_addr_sk": keys(12, n),
                "ss_quantity": pa.array(rng.integers(1, 100, n), pa.int64()),
                "ss_sales_price": pa.array(rng.integers(0, 11, n), pa.float64()),
                "ss_net_profit": pa.array(rng.integers(0, 35, n), pa.float64()),
            }
        ),
        "store": pa.table({"s_store_sk": pa.array([0, 1, 2, 2], pa.int64())}),  # a duplicate
        "customer_demographics": pa.table(
            {
                "cd_demo_sk": pa.array(np.arange(10), pa.int64()),
                "cd_marital_status": rng.choice(["M", "D", "S", "W"], 10),
            }
        ),
        "customer_address": pa.table(
            {
                "ca_address_sk": pa.array(np.arange(10), pa.int64()),
                "ca_country": rng.choice(["US", "CA"], 10, p=[0.8, 0.2]),
                "ca_state": rng.choice(["CO", "OH", "OR", "MN", "TX"], 10),
            }
        ),
        "date_dim": pa.table(
            {
                "d_date_sk": pa.array(np.arange(6), pa.int64()),
                "d_year": pa.array([1999, 2000, 2000, 2001, 2000, 1998], pa.int64()),
            }
        ),
    }


def test_q48_joins_every_table_by_key_and_matches_duckdb():
    tables = _q48_tables()
    cat = make_catalog(tables)
    plan = plan_query(Q48, cat)
    assert sum(p.edge is not None for p in plan.graph.predicates) == 4  # a star of 4 keys
    assert "hash indexes on none" not in explain(Q48, cat)
    expected = duckdb_table(Q48, tables)
    assert expected.column("n")[0].as_py() > 0
    assert_same_bag(execute(Q48, cat), Q48, tables, expected=expected)
