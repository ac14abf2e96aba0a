"""Composite queries (issue 14, items 4 and 5) against DuckDB: WITH, derived tables, scalar
subqueries, UNION [ALL] / INTERSECT [ALL] / EXCEPT [ALL], window functions, QUALIFY,
GROUP BY ALL, ORDER BY ALL and DISTINCT ON (engine/execution/composite.py,
engine/above/duckdb_runtime.py).

Every pinned case runs under the lottery, rank and hybrid (default) policies at batch sizes
7 and the default and must equal DuckDB's result as a bag of rows (and in order where the query
orders); the tables hold NULLs and duplicates. A hypothesis test builds queries mixing the
shapes. Streaming: open_query and the CLI run them; a LIMIT over UNION ALL or over a block
with a scalar subquery stops the eddy early (counted in scanned rows); what cannot run
(a stream table, explain of a composite query) is refused with an EddiesError.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_same_bag, check_all, duckdb_table, make_catalog, table_rows

from eddies.engine import Catalog, EddiesError, execute, explain, open_query, run_query
from eddies.engine.cli import main
from eddies.engine.streaming.thread_runner import BackgroundQuery
from eddies.errors import UnsupportedQueryError

POLICIES = ("lottery", "rank", "hybrid")  # hybrid: the default
BATCH_SIZES = (None, 7)
MAX_EXAMPLES = int(os.environ.get("EDDIES_COMPOSITE_EXAMPLES", "12"))

T = pa.table(
    {
        "k": pa.array(range(10), pa.int64()),  # a unique key: a total order for windows
        "a": pa.array([1, 2, 2, None, 5, 7, 2, None, 5, 1], pa.int64()),
        "b": pa.array(["x", "y", "y", None, "x", "z", "y", "x", None, "x"]),
        "c": pa.array([1.5, 2.5, None, 0.5, 3.0, 1.0, 2.5, 4.0, None, 1.5]),
    }
)
U = pa.table(
    {
        "k": pa.array(range(7), pa.int64()),
        "a": pa.array([2, 5, 5, None, 9, 1, 2], pa.int32()),
        "d": pa.array([10, 20, 30, 40, 50, None, 10], pa.int64()),
    }
)
TABLES = {"t": T, "u": U}


def _check(sql: str, ordered_keys=None, check_bag: bool = True) -> None:
    check_all(
        sql,
        TABLES,
        policies=POLICIES,
        batch_sizes=BATCH_SIZES,
        ordered_keys=ordered_keys,
        check_bag=check_bag,
    )


# ------------------------------------------------------------- CTEs and derived tables
@pytest.mark.parametrize(
    "sql",
    [
        # a CTE with an aggregate, joined in the outer eddy
        "WITH c AS (SELECT a, count(*) AS n FROM t GROUP BY a) "
        "SELECT c.a, n, d FROM c JOIN u ON c.a = u.a",
        # one CTE used twice (a self-join of its result)
        "WITH c AS (SELECT a, b FROM t WHERE a IS NOT NULL) "
        "SELECT x.a, y.b FROM c AS x JOIN c AS y ON x.a = y.a",
        # a CTE reading an earlier CTE; a CTE named like a catalog table shadows it
        "WITH c AS (SELECT a FROM t), u AS (SELECT a, a * 2 AS d FROM c) SELECT * FROM u",
        # derived tables: aggregate, DISTINCT, LIMIT inside
        "SELECT d.a, d.m FROM (SELECT a, max(c) AS m FROM t GROUP BY a) AS d WHERE d.m > 1",
        "SELECT x.b, u.d FROM (SELECT DISTINCT b, a FROM t) AS x JOIN u ON x.a = u.a",
        "SELECT s.a FROM (SELECT a FROM t ORDER BY k LIMIT 4) AS s",
        "SELECT * FROM (SELECT b, count(*) AS n FROM t GROUP BY b) AS g, "
        "(SELECT sum(d) AS s FROM u) AS h",
        # a derived table inside a CTE, a window inside a derived table
        "WITH c AS (SELECT * FROM (SELECT a, b FROM t) AS z WHERE a > 1) "
        "SELECT b, count(*) FROM c GROUP BY b",
        "SELECT w.a, w.r FROM (SELECT a, rank() OVER (ORDER BY a) AS r FROM t) AS w WHERE w.r < 5",
        # on the NULL-supplying side of an outer join: items that are not NULL on padded
        # rows ('x', coalesce) must still be NULL there (sqlglot's merge made them 'x', 0)
        "SELECT t.k, v.n, v.m FROM t LEFT JOIN (SELECT u.a AS a, 'x' AS n, "
        "coalesce(u.d, 0) AS m FROM u) AS v ON t.a = v.a",
        "WITH c AS (SELECT u.a AS a, 'x' AS n FROM u) SELECT t.k, c.n FROM t LEFT JOIN c "
        "ON t.a = c.a",
        "SELECT v.n, t.k FROM (SELECT u.a AS a, 1 AS n FROM u) AS v RIGHT JOIN t ON t.a = v.a",
        "SELECT t.k, v.n FROM t FULL JOIN (SELECT u.a AS a, 'x' AS n FROM u) AS v ON t.a = v.a",
    ],
)
def test_ctes_and_derived_tables(sql):
    _check(sql)


# ------------------------------------------------------------------ scalar subqueries
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k, a FROM t WHERE a > (SELECT avg(a) FROM t)",
        "SELECT k, (SELECT max(d) FROM u) AS m, a FROM t",
        "SELECT k FROM t WHERE c >= (SELECT min(c) FROM t WHERE b = 'y') OR a IS NULL",
        "SELECT t.k, d FROM t JOIN u ON t.a = u.a WHERE d > (SELECT min(d) FROM u)",
        # no row: NULL; a string value; a value used twice
        "SELECT k, a FROM t WHERE a = (SELECT a FROM u WHERE d > 1000)",
        "SELECT k FROM t WHERE b = (SELECT max(b) FROM t)",
        "SELECT a + (SELECT count(*) FROM u) AS x, b FROM t",
        # nested: a scalar subquery inside a scalar subquery
        "SELECT k FROM t WHERE a < (SELECT max(a) FROM u WHERE d > (SELECT avg(d) FROM u))",
        # inside an aggregate query
        "SELECT b, sum(a) FROM t GROUP BY b HAVING sum(a) > (SELECT min(a) FROM u)",
    ],
)
def test_scalar_subqueries(sql):
    _check(sql)


def test_scalar_subquery_with_several_rows_fails_as_in_duckdb():
    with pytest.raises(EddiesError, match="More than one row"):
        execute("SELECT k FROM t WHERE a > (SELECT a FROM u)", make_catalog(TABLES))
    with pytest.raises(UnsupportedQueryError, match="one column"):
        execute("SELECT k FROM t WHERE a > (SELECT a, d FROM u)", make_catalog(TABLES))


# ---------------------------------------------------------------------- set operations
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a FROM t UNION ALL SELECT a FROM u",
        "SELECT a, b FROM t UNION ALL SELECT d, 'u' FROM u UNION ALL SELECT k, b FROM t",
        "SELECT a, c FROM t UNION ALL SELECT a, d FROM u",  # DOUBLE with BIGINT
        "SELECT a FROM t UNION SELECT a FROM u",
        "SELECT a FROM t INTERSECT SELECT a FROM u",
        "SELECT a FROM t INTERSECT ALL SELECT a FROM u",
        "SELECT a FROM t EXCEPT SELECT a FROM u",
        "SELECT a FROM t EXCEPT ALL SELECT a FROM u",
        "SELECT b FROM t EXCEPT ALL SELECT b FROM t WHERE k < 3",
        "(SELECT a FROM t UNION SELECT a FROM u) EXCEPT SELECT d FROM u",
        "SELECT a FROM t UNION ALL SELECT b FROM t",  # no common type: DuckDB's VARCHAR
        "WITH c AS (SELECT a FROM t) SELECT a FROM c UNION SELECT a + 1 FROM c",
    ],
)
def test_set_operations(sql):
    _check(sql)


@pytest.mark.parametrize(
    ("sql", "keys"),
    [
        ("SELECT a FROM t UNION SELECT a FROM u ORDER BY 1 DESC", [0]),
        ("SELECT a, b FROM t EXCEPT SELECT a, 'x' FROM u ORDER BY a NULLS FIRST, b", [0, 1]),
        ("SELECT a FROM t INTERSECT ALL SELECT a FROM u ORDER BY a LIMIT 2", [0]),
    ],
)
def test_ordered_set_operations(sql, keys):
    _check(sql, ordered_keys=keys)


def test_union_all_with_limit_gives_the_right_number_of_rows():
    cat = make_catalog(TABLES)
    for limit, offset in [(0, 0), (3, 0), (12, 0), (5, 8), (100, 3)]:
        sql = f"SELECT a FROM t UNION ALL SELECT a FROM u LIMIT {limit} OFFSET {offset}"
        for batch_size in BATCH_SIZES:
            got = execute(sql, cat, batch_size=batch_size)
            assert got.num_rows == max(0, min(limit, 17 - offset))


# ------------------------------------------------------------------- window functions
@pytest.mark.parametrize(
    ("sql", "keys"),
    [
        ("SELECT k, b, row_number() OVER (PARTITION BY b ORDER BY k) AS rn FROM t", None),
        ("SELECT k, rank() OVER (ORDER BY a) r, dense_rank() OVER (ORDER BY a DESC) FROM t", None),
        ("SELECT k, lag(a) OVER (ORDER BY k), lead(a, 2, -1) OVER (ORDER BY k) FROM t", None),
        (
            "SELECT k, percent_rank() OVER (PARTITION BY b ORDER BY a), cume_dist() OVER "
            "(ORDER BY a NULLS FIRST, k), ntile(3) OVER (ORDER BY k) FROM t",
            None,
        ),
        (
            "SELECT k, nth_value(a, 2) OVER (PARTITION BY b ORDER BY k), nth_value(c, 3 "
            "IGNORE NULLS) OVER (ORDER BY k) FROM t QUALIFY ntile(2) OVER (ORDER BY k) = 1",
            None,
        ),
        (
            "SELECT k, first_value(c) OVER (PARTITION BY b ORDER BY k), last_value(c) OVER "
            "(PARTITION BY b ORDER BY k ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED "
            "FOLLOWING) FROM t",
            None,
        ),
        (
            "SELECT k, sum(a) OVER (PARTITION BY b ORDER BY k ROWS BETWEEN 1 PRECEDING AND "
            "CURRENT ROW) s, count(a) OVER (ORDER BY k) n FROM t",
            None,
        ),
        (
            "SELECT k, avg(c) OVER (ORDER BY a RANGE BETWEEN 1 PRECEDING AND 1 FOLLOWING), "
            "min(c) OVER (PARTITION BY b), max(c) OVER (ORDER BY a RANGE BETWEEN UNBOUNDED "
            "PRECEDING AND CURRENT ROW), count(*) OVER () FROM t",
            None,
        ),
        # windows over a join and over an aggregate
        (
            "SELECT t.k, d, sum(d) OVER (PARTITION BY t.a ORDER BY t.k, u.k) "
            "FROM t JOIN u ON t.a = u.a",
            None,
        ),
        ("SELECT b, sum(a) AS s, rank() OVER (ORDER BY sum(a) DESC) FROM t GROUP BY b", None),
        # expressions around and inside windows
        ("SELECT k, a * 10 + row_number() OVER (ORDER BY k DESC) FROM t", None),
        ("SELECT k, lag(a + k, 1) OVER (PARTITION BY b IS NULL ORDER BY k) FROM t", None),
        # QUALIFY, ORDER BY over windows, star with a window
        ("SELECT *, row_number() OVER (ORDER BY k) AS rn FROM t QUALIFY rn <= 3", None),
        (
            "SELECT b, k FROM t QUALIFY row_number() OVER (PARTITION BY b ORDER BY k DESC) = 1",
            None,
        ),
        ("SELECT k, rank() OVER (ORDER BY a) AS r FROM t ORDER BY r, k LIMIT 6", [1, 0]),
        ("SELECT DISTINCT b, count(*) OVER (PARTITION BY b) FROM t", None),
    ],
)
def test_window_functions(sql, keys):
    _check(sql, ordered_keys=keys)


# ------------------------------------------------- GROUP BY ALL, ORDER BY ALL, DISTINCT ON
@pytest.mark.parametrize(
    ("sql", "keys"),
    [
        ("SELECT b, count(*), sum(a) FROM t GROUP BY ALL", None),
        ("SELECT b, a % 2 AS odd, max(c) FROM t GROUP BY ALL", None),
        ("SELECT count(*), sum(a) FROM t GROUP BY ALL", None),
        ("SELECT 2, 'x' || 'y', b, count(*) FROM t GROUP BY ALL", None),
        ("SELECT 2, count(*) FROM t WHERE k < 0 GROUP BY ALL", None),
        ("SELECT a, b FROM t ORDER BY ALL", [0, 1]),
        ("SELECT a, b FROM t ORDER BY ALL DESC", [0, 1]),
        ("SELECT b, count(*) FROM t GROUP BY ALL ORDER BY ALL", [0, 1]),
        ("SELECT DISTINCT ON (b) b, k, a FROM t ORDER BY b, k DESC", [0, 1]),
        ("SELECT DISTINCT ON (a % 2) a % 2 AS p, k FROM t ORDER BY a % 2, k", [0, 1]),
    ],
)
def test_group_order_all_and_distinct_on(sql, keys):
    _check(sql, ordered_keys=keys)


# ------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    ("sql", "names"),
    [
        ("SELECT var_pop(a) OVER (ORDER BY k) FROM t", "window function"),
        ("SELECT median(a) OVER () FROM t", "window function"),
        ("SELECT sum(a) OVER w FROM t WINDOW w AS (ORDER BY k)", "WINDOW"),
        ("SELECT k FROM t WHERE row_number() OVER () > 1", "WHERE"),
        ("SELECT k FROM t QUALIFY k > 1", "QUALIFY"),
        ("SELECT *, * , rank() OVER () FROM t", "more than one *"),
        ("WITH RECURSIVE c AS (SELECT a FROM t) SELECT * FROM c", "WITH RECURSIVE"),
        ("SELECT a FROM t UNION BY NAME SELECT a FROM u", "BY NAME"),
        ("SELECT * FROM (SELECT a, a FROM t) AS d", "two columns named"),
        ("SELECT *, count(*) FROM t GROUP BY ALL", "GROUP BY ALL with *"),
        (
            "SELECT k FROM t WHERE a > (SELECT avg(u.a + t.a) FROM u WHERE u.k = t.k)",
            "inside an agg",
        ),
        ("SELECT x.a FROM t, (SELECT a FROM u WHERE u.k = t.k) AS x", "correlated"),
        ("SELECT a, b FROM t UNION SELECT a FROM u", "same number of result columns"),
    ],
)
def test_refused_clearly(sql, names):
    with pytest.raises(UnsupportedQueryError, match=names):
        execute(sql, make_catalog(TABLES))


def test_explain_refuses_a_composite_query():
    with pytest.raises(UnsupportedQueryError, match="explain shows one eddy"):
        explain("SELECT a FROM t UNION SELECT a FROM u", make_catalog(TABLES))


def test_composite_over_a_stream_is_refused():
    cat = make_catalog(TABLES)
    cat.add_stream("s", pa.schema([("a", pa.int64())]))
    with pytest.raises(UnsupportedQueryError, match="stream table 's'"):
        execute("SELECT a FROM s UNION ALL SELECT a FROM t", cat)


# ---------------------------------------------------------------------- streaming
def _big_catalog(n: int) -> Catalog:
    cat = Catalog()
    cat.add_table("big", pa.table({"x": pa.array(range(n), pa.int64())}), batch_size=100)
    cat.add_table("t", T)
    return cat


def _scanned(stats) -> int:
    return sum(m.tuples_out for m in stats.modules.values() if m.kind == "scan")


async def test_union_all_streams_and_limit_stops_the_eddy_early():
    cat = _big_catalog(50_000)
    sql = "SELECT x FROM big UNION ALL SELECT k FROM t LIMIT 250"
    async with open_query(sql, cat, batch_size=100) as results:
        rows = 0
        async for batch in results:
            assert isinstance(batch, pa.RecordBatch)
            rows += batch.num_rows
    assert rows == 250
    assert len(results.runs) == 1  # the second branch never started
    assert _scanned(results.runs[0]) < 50_000


async def test_scalar_subquery_keeps_the_outer_eddy_streaming():
    cat = _big_catalog(50_000)
    sql = "SELECT x FROM big WHERE x >= (SELECT min(k) FROM t) LIMIT 30"
    async with open_query(sql, cat, batch_size=100) as results:
        batches = [b async for b in results]
    assert sum(b.num_rows for b in batches) == 30
    assert len(results.runs) == 2  # the subquery, then the outer eddy
    assert _scanned(results.runs[-1]) < 50_000


async def test_open_query_runs_windows_and_ctes():
    sql = (
        "WITH c AS (SELECT b, count(*) AS n FROM t GROUP BY b) "
        "SELECT b, n, rank() OVER (ORDER BY n DESC) FROM c"
    )
    async with open_query(sql, make_catalog(TABLES), policy="rank") as results:
        batches = [b async for b in results]
    assert_same_bag(pa.Table.from_batches(batches), sql, TABLES)
    assert results.schema is not None and results.stats is results.runs[-1]


def test_leaving_a_composite_query_early_stops_it():
    cat = _big_catalog(20_000)

    async def first_batch() -> int:
        sql = "SELECT x FROM big UNION ALL SELECT x + 1 FROM big"
        async with open_query(sql, cat, batch_size=100) as results:
            async for batch in results:
                return batch.num_rows
        return 0

    assert trio.run(first_batch) > 0


def test_cli_query_runs_a_composite_query(tmp_path, capsys):
    path = tmp_path / "t.parquet"
    import pyarrow.parquet as pq

    pq.write_table(T, path)
    sql = "SELECT b, count(*) AS n FROM t GROUP BY ALL ORDER BY ALL"
    out = tmp_path / "out.parquet"
    code = main(["query", sql, "--table", f"t={path}", "--output", str(out), "--no-progress"])
    assert code == 0
    assert_same_bag(pq.read_table(out), sql, TABLES)
    code = main(["query", "SELECT a FROM t UNION SELECT k FROM t", "--table", f"t={path}"])
    assert code == 0
    assert "a" in capsys.readouterr().out


# ------------------------------------------------------------------------- hypothesis
_PREDICATES = ["a > 1", "b IS NOT NULL", "c < 3", "a = 2 OR b = 'x'", "k % 2 = 0", "TRUE"]


@st.composite
def block(draw) -> str:
    """A SELECT over t returning (k, a, b) under a drawn predicate, maybe from a CTE,
    a derived table, or with a scalar subquery in WHERE."""
    where = draw(st.sampled_from(_PREDICATES))
    source = draw(st.sampled_from(["t", "derived", "subquery"]))
    if source == "derived":
        inner = draw(st.sampled_from(["SELECT * FROM t", "SELECT DISTINCT k, a, b, c FROM t"]))
        return f"SELECT k, a, b FROM ({inner}) AS d WHERE {where}"
    if source == "subquery":
        agg = draw(st.sampled_from(["min(a)", "avg(c)", "count(*) - 8", "max(d) / 10"]))
        table = "u" if "d" in agg else "t"
        return f"SELECT k, a, b FROM t WHERE a >= (SELECT {agg} FROM {table}) OR {where}"
    return f"SELECT k, a, b FROM t WHERE {where}"


@st.composite
def mixed_query(draw) -> tuple[str, list[int] | None]:
    left, right = draw(block()), draw(block())
    shape = draw(
        st.sampled_from(
            ["setop", "window", "cte", "qualify", "distinct_on", "group_all", "order_all"]
        )
    )
    if shape == "group_all":
        agg = draw(st.sampled_from(["count(*)", "sum(a)", "max(k) - min(k)", "count(DISTINCT a)"]))
        return (
            f"SELECT b, a % 2 AS p, {agg} AS v FROM ({left} UNION ALL {right}) AS x GROUP BY ALL",
            None,
        )
    if shape == "order_all":
        limit = draw(st.integers(0, 12))
        direction = draw(st.sampled_from(["", " DESC"]))
        return f"SELECT b, k FROM ({left}) AS x ORDER BY ALL{direction} LIMIT {limit}", [0, 1]
    if shape == "setop":
        op = draw(
            st.sampled_from(
                ["UNION", "UNION ALL", "INTERSECT", "INTERSECT ALL", "EXCEPT", "EXCEPT ALL"]
            )
        )
        return f"{left} {op} {right}", None
    if shape == "window":
        fn = draw(
            st.sampled_from(
                [
                    "row_number() OVER (PARTITION BY b ORDER BY k)",
                    "rank() OVER (ORDER BY a NULLS FIRST)",
                    "lag(a) OVER (ORDER BY k)",
                    "sum(a) OVER (PARTITION BY b ORDER BY k ROWS 2 PRECEDING)",
                    "avg(a) OVER (ORDER BY a RANGE BETWEEN 2 PRECEDING AND CURRENT ROW)",
                    "last_value(b) OVER (ORDER BY k)",
                ]
            )
        )
        extra = draw(st.sampled_from(["", " WHERE a <= (SELECT max(a) FROM u)", " WHERE k > 1"]))
        return f"SELECT k, a, {fn} AS w FROM ({left}) AS x{extra}", None
    if shape == "cte":
        return (
            f"WITH c AS ({left}) SELECT c.k, c.b, r.a FROM c JOIN ({right}) AS r ON c.a = r.a",
            None,
        )
    if shape == "qualify":
        return (
            f"SELECT k, b FROM ({left}) AS x QUALIFY rank() OVER (PARTITION BY b ORDER BY k) <= 2",
            None,
        )
    return f"SELECT DISTINCT ON (b) b, k FROM ({left}) AS x ORDER BY b, k", [0, 1]


def _maybe(values: list) -> st.SearchStrategy:
    return st.one_of(st.none(), st.sampled_from(values))


@st.composite
def tables(draw) -> dict[str, pa.Table]:
    """t and u with drawn rows: duplicates and NULLs; k stays a unique key (0, 1, ...)."""
    t_rows = draw(
        st.lists(
            st.tuples(_maybe([1, 2, 5, 7]), _maybe(["x", "y", "z"]), _maybe([0.5, 1.5, 2.5])),
            max_size=14,
        )
    )
    u_rows = draw(st.lists(st.tuples(_maybe([1, 2, 5, 9]), _maybe([10, 20, 30])), max_size=8))
    t = pa.table(
        {
            "k": pa.array(range(len(t_rows)), pa.int64()),
            "a": pa.array([r[0] for r in t_rows], pa.int64()),
            "b": pa.array([r[1] for r in t_rows], pa.string()),
            "c": pa.array([r[2] for r in t_rows], pa.float64()),
        }
    )
    u = pa.table(
        {
            "k": pa.array(range(len(u_rows)), pa.int64()),
            "a": pa.array([r[0] for r in u_rows], pa.int32()),
            "d": pa.array([r[1] for r in u_rows], pa.int64()),
        }
    )
    return {"t": t, "u": u}


@given(query=mixed_query(), data=st.one_of(st.just(TABLES), tables()))
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
def test_mixed_composite_queries_match_duckdb(query, data):
    sql, keys = query
    try:
        expected = duckdb_table(sql, data)
    except duckdb.InvalidInputException:  # a scalar subquery with several rows
        with pytest.raises(EddiesError, match="More than one row"):
            execute(sql, make_catalog(data))
        return
    del expected
    check_all(sql, data, policies=POLICIES, batch_sizes=BATCH_SIZES, ordered_keys=keys)


async def test_a_simple_derived_table_is_merged_into_one_eddy():
    cat = _big_catalog(50_000)
    sql = "SELECT d.x FROM (SELECT x FROM big WHERE x % 2 = 0) AS d JOIN t ON d.x = t.k LIMIT 3"
    async with open_query(sql, cat, batch_size=100) as results:
        rows = sum([b.num_rows async for b in results])
    assert rows == 3
    assert len(results.runs) == 1  # sqlglot's merge_subqueries: one eddy over big and t
    assert {"scan:big", "scan:t"} <= set(results.runs[0].modules)


async def test_a_cte_used_twice_runs_once():
    sql = "WITH c AS (SELECT a FROM t WHERE a > 1) SELECT x.a FROM c AS x JOIN c AS y ON x.a = y.a"
    async with open_query(sql, make_catalog(TABLES)) as results:
        got = pa.Table.from_batches([b async for b in results])
    assert_same_bag(got, sql, TABLES)
    assert len(results.runs) == 2  # the CTE, then the join reading its result twice


V = pa.table(
    {
        "d": pa.array([dt.date(2020, 1, 2), dt.date(2021, 5, 6), None]),
        "ts": pa.array(
            [dt.datetime(2020, 1, 2, 3, 4, 5, 123456), dt.datetime(2020, 1, 2), None],
            pa.timestamp("us"),
        ),
        "tz": pa.array(
            [dt.datetime(2020, 1, 2, 3, 4, 5, 123456), None, dt.datetime(2019, 1, 1)],
            pa.timestamp("us", tz="UTC"),
        ),
        "ms": pa.array([1577934245123, None, 0], pa.timestamp("ms")),
        "m": pa.array(
            [decimal.Decimal("1.25"), decimal.Decimal("-3.50"), None], pa.decimal128(10, 2)
        ),
        "f": pa.array([0.1, float("nan"), 1e300]),
        "s": pa.array(["it's", "b", None]),
        "i8": pa.array([1, -2, None], pa.int8()),
        "flag": pa.array([True, None, False]),
    }
)


@pytest.mark.parametrize("column", V.column_names)
@pytest.mark.parametrize("aggregate", ["max", "min"])
def test_scalar_subquery_values_keep_their_type(column, aggregate):
    sql = (
        f"SELECT {column}, (SELECT {aggregate}({column}) FROM v) AS x FROM v "
        f"WHERE {column} = (SELECT {aggregate}({column}) FROM v) OR {column} IS NULL"
    )
    got = execute(sql, make_catalog({"v": V}))
    assert_same_bag(got, sql, {"v": V})
    assert got.schema.field("x").type == V.schema.field(column).type


def test_registered_functions_run_in_the_eddy_below_windows():
    cat = make_catalog(TABLES)
    cat.add_function("twice", lambda v: pc.multiply(v, 2), return_type=pa.int64())
    got = execute("SELECT k, sum(twice(a)) OVER (ORDER BY k) AS s FROM t", cat)
    expected = duckdb_table("SELECT k, sum(a * 2) OVER (ORDER BY k) AS s FROM t", TABLES)
    assert sorted(table_rows(got)) == sorted(table_rows(expected))
    with pytest.raises(UnsupportedQueryError, match="registered function"):
        execute("SELECT twice(rank() OVER (ORDER BY k)) FROM t", cat)


def test_an_error_in_a_derived_eddy_query_shows_that_query():
    sql = "WITH c AS (SELECT a FROM t) SELECT * FROM c WHERE zz > 1"
    with pytest.raises(EddiesError, match=r"zz.*derived from the statement: SELECT \* FROM c"):
        execute(sql, make_catalog(TABLES))


def test_run_query_and_background_query_run_composite_queries():
    sql = "SELECT b, count(*) FROM t GROUP BY ALL UNION ALL SELECT 'u', count(*) FROM u"
    run = run_query(sql, make_catalog(TABLES), policy="rank", batch_size=7)
    assert_same_bag(run.table, sql, TABLES)
    assert run.stats is not None and run.stats.rows_out >= 1  # the last eddy query's
    background = BackgroundQuery(sql, make_catalog(TABLES))
    assert_same_bag(background.result(timeout=60), sql, TABLES)


def test_an_unused_cte_does_not_run():
    # It would fail (more than one row in a scalar subquery) if it ran.
    sql = (
        "WITH bad AS (SELECT k FROM t WHERE a = (SELECT a FROM u)), "
        "good AS (SELECT a FROM t) SELECT count(*) FROM good"
    )
    check_all(sql, TABLES, policies=POLICIES, batch_sizes=BATCH_SIZES)


@pytest.mark.parametrize(
    "sql",
    [
        "WITH c AS (SELECT a, count(*) AS n FROM t GROUP BY a) "
        "SELECT c.a, n, d FROM c JOIN u ON c.a = u.a",
        "SELECT t.k, d FROM t JOIN u ON t.a = u.a WHERE d > (SELECT min(d) FROM u)",
        "SELECT t.a FROM t JOIN u ON t.a = u.a UNION ALL SELECT a FROM u",
        "SELECT t.a, u.d FROM t JOIN u ON t.a = u.a EXCEPT ALL SELECT a, d FROM u WHERE d > 20",
        "SELECT t.k, sum(d) OVER (PARTITION BY t.b ORDER BY t.k, u.k) FROM t JOIN u ON t.a = u.a",
    ],
)
def test_joins_under_every_policy_and_batch_size(sql):
    # The eddy under each composite part: every policy, one tuple at a time too.
    check_all(sql, TABLES, policies=("static", "random", "bandit"), batch_sizes=(None, 7, 1))
