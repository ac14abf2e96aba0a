"""Scale-out mode: independent eddies over partitions (``eddies.engine.spark.partitioned``).

The analysis tests need no Spark. The Spark tests (``-m spark``) run the partitioned mode
on the shared ``local[2]`` session and compare its result, as a bag, with a single-node
``execute`` run and with DuckDB, on data with NULL join keys and duplicates.
"""

from __future__ import annotations

import shutil
from importlib.util import find_spec

import numpy as np
import pyarrow as pa
import pytest
from oracle import assert_same_bag, assert_same_ordered, make_catalog

from eddies.engine import Catalog, DataSourceError, execute
from eddies.engine.spark.partitioned import analyze_partitioning

FACT = pa.schema([("id", pa.int64()), ("k1", pa.int64()), ("k2", pa.int32()), ("v", pa.float64())])
SMALL = pa.schema([("k", pa.int64()), ("name", pa.string())])


def _catalog(*names: str) -> Catalog:
    cat = Catalog()
    for name in names:
        cat.add_table(name, SMALL.empty_table())
    return cat


def test_star_with_one_partitioned_fact_table_splits_it():
    sql = """SELECT f.id, a.name, b.name FROM f JOIN a ON f.k1 = a.k JOIN b ON f.k2 = b.k
             WHERE f.v > 1"""
    plan = analyze_partitioning(sql, _catalog("a", "b"), {"f": FACT})
    assert plan.partitionable and plan.strategy == "split"
    assert plan.broadcast == ("a", "b") and plan.finish == ()
    (one,) = plan.inputs
    assert (one.table, one.columns, one.aliases) == ("f", (), ("f",))
    assert one.project == ("id", "k1", "k2", "v")  # only the columns the query reads


def test_two_partitioned_tables_hash_on_their_join_key():
    sql = "SELECT f.id, g.v FROM f JOIN g ON f.k1 = g.k2 JOIN a ON a.k = f.k2"
    plan = analyze_partitioning(sql, _catalog("a"), {"f": FACT, "g": FACT})
    assert plan.strategy == "hash"
    assert plan.keys == {"f": ("k1",), "g": ("k2",)}
    # int64 = int32: both are hashed as bigint so equal values meet.
    assert {i.hash_types for i in plan.inputs} == {("bigint",)}
    assert "f.k1 = g.k2" in plan.reason


def test_three_partitioned_tables_in_one_class_also_through_a_broadcast_table():
    cat = _catalog("a")
    sql = "SELECT * FROM f, g, h WHERE f.k1 = g.k1 AND g.k1 = h.id"
    plan = analyze_partitioning(sql, cat, {"f": FACT, "g": FACT, "h": FACT})
    assert plan.keys == {"f": ("k1",), "g": ("k1",), "h": ("id",)}
    sql = "SELECT * FROM f, g, a WHERE f.k1 = a.k AND a.k = g.k2"
    plan = analyze_partitioning(sql, cat, {"f": FACT, "g": FACT})
    assert plan.strategy == "hash" and plan.keys == {"f": ("k1",), "g": ("k2",)}
    # Two classes both tie f and g: hash on both (fewer skewed buckets).
    sql = "SELECT * FROM f, g WHERE f.k1 = g.k1 AND f.k2 = g.k2"
    plan = analyze_partitioning(sql, cat, {"f": FACT, "g": FACT})
    assert plan.keys == {"f": ("k1", "k2"), "g": ("k1", "k2")}


def test_partitioned_tables_on_different_keys_run_on_the_driver():
    sql = "SELECT * FROM f, g, h WHERE f.k1 = g.k1 AND g.k2 = h.k2"
    plan = analyze_partitioning(sql, Catalog(), {"f": FACT, "g": FACT, "h": FACT})
    assert not plan.partitionable and plan.strategy == "driver"
    assert "no equi-join column class ties every partitioned alias (f, g, h)" in plan.reason
    assert "f.k1 = g.k1" in plan.reason and "g.k2 = h.k2" in plan.reason
    plan = analyze_partitioning(
        "SELECT * FROM f, g WHERE f.v < g.v", Catalog(), {"f": FACT, "g": FACT}
    )
    assert plan.strategy == "driver" and "share no equi-join" in plan.reason


def test_self_joins():
    cat = Catalog()
    # Both aliases hash on the same column: the table is shipped once.
    plan = analyze_partitioning("SELECT * FROM f x JOIN f y ON x.k1 = y.k1", cat, {"f": FACT})
    assert plan.strategy == "hash"
    (one,) = plan.inputs
    assert one.aliases == ("x", "y") and one.columns == ("k1",) and plan.sql.count("f") == 2
    # Different columns: each alias reads its own copy, partitioned its own way.
    sql = "SELECT x.id, y.id FROM f AS x, f y WHERE x.k1 = y.id"
    plan = analyze_partitioning(sql, cat, {"f": FACT})
    assert plan.strategy == "hash"
    assert sorted((i.name, i.aliases, i.columns) for i in plan.inputs) == [
        ("f__p0", ("x",), ("k1",)),
        ("f__p1", ("y",), ("id",)),
    ]
    assert '"f__p0" AS "x"' in plan.sql and '"f__p1" AS "y"' in plan.sql
    # No equality between the aliases: not partitionable.
    plan = analyze_partitioning("SELECT * FROM f x, f y WHERE x.v < y.v", cat, {"f": FACT})
    assert plan.strategy == "driver"


def test_aggregation_ordering_and_limit_are_finished_on_the_driver():
    sql = "SELECT a.name, count(*), sum(f.v) FROM f JOIN a ON f.k1 = a.k GROUP BY a.name"
    plan = analyze_partitioning(sql, _catalog("a"), {"f": FACT})
    assert plan.strategy == "split" and plan.finish == ("GROUP BY/aggregates",)
    sql = "SELECT DISTINCT f.k1 FROM f, g WHERE f.k1 = g.k1 ORDER BY 1 LIMIT 3"
    plan = analyze_partitioning(sql, Catalog(), {"f": FACT, "g": FACT})
    assert plan.strategy == "hash" and plan.finish == ("DISTINCT", "ORDER BY", "LIMIT/OFFSET")


def test_names_of_catalog_tables_and_errors():
    cat = _catalog("a")
    cat.add_table("f", FACT.empty_table())
    plan = analyze_partitioning("SELECT * FROM f JOIN a ON f.k1 = a.k", cat, ["f"])
    assert plan.strategy == "split" and plan.broadcast == ("a",)
    with pytest.raises(DataSourceError, match="not in the catalog"):
        analyze_partitioning("SELECT * FROM g", cat, ["g"])
    # Mixed int and float keys hash as double; strings and ints cannot be compared at all.
    g = pa.schema([("k", pa.float64())])
    plan = analyze_partitioning("SELECT * FROM f, g WHERE f.k1 = g.k", cat, {"f": FACT, "g": g})
    assert {i.hash_types for i in plan.inputs} == {("double",)}


# ---------------------------------------------------------------------------------------
# Spark (one shared local[2] session; few jobs)


def spark_test(fn):
    """Marks of a Spark test: ``-m spark``, pyspark's pandas warning, skip without Java."""
    for mark in (
        pytest.mark.spark,
        # pyspark 4 warns that it does not support pandas 3 yet; the Arrow paths do not use it.
        pytest.mark.filterwarnings(
            "ignore:PySpark does not yet fully support pandas:FutureWarning"
        ),
        pytest.mark.skipif(find_spec("pyspark") is None, reason="pyspark is not installed"),
        pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs Java 17 on PATH"),
    ):
        fn = mark(fn)
    return fn


rng = np.random.default_rng(4)
N = 3000
BIG = pa.table(
    {
        "id": pa.array(np.arange(N), pa.int64()),
        "k": pa.array(
            [None if i % 17 == 0 else int(x) for i, x in enumerate(rng.integers(0, 60, N))],
            pa.int64(),
        ),
        "c": pa.array(rng.integers(0, 8, N), pa.int32()),
        "v": pa.array(rng.integers(0, 100, N), pa.int64()),
    }
)
OTHER = pa.table(
    {
        "k": pa.array(
            [None if i % 11 == 0 else int(x) for i, x in enumerate(rng.integers(0, 80, 800))],
            pa.int32(),
        ),
        "w": pa.array(rng.integers(0, 5, 800), pa.int64()),
        "tag": pa.array([["x", "y", None][i % 3] for i in range(800)], pa.string()),
    }
)
DIM = pa.table({"c": pa.array([0, 1, 2, 2, 3, 5, None], pa.int32()), "name": list("abccdef")})


def _frames(spark, **tables):
    from pyspark.sql.pandas.types import from_arrow_schema

    return {
        name: spark.createDataFrame(t, schema=from_arrow_schema(t.schema)).repartition(3)
        for name, t in tables.items()
    }


def _check(result: pa.Table, sql: str, tables: dict[str, pa.Table]) -> None:
    single = execute(sql, make_catalog(tables))
    assert_same_bag(result, sql, tables, expected=single)  # partitioned == single node
    assert_same_bag(result, sql, tables)  # == DuckDB


@spark_test
def test_one_partitioned_table_with_broadcast_dims(spark):
    from eddies.engine.spark.partitioned import run_partitioned, run_partitioned_arrow

    cat = make_catalog({"dim": DIM})
    frames = _frames(spark, big=BIG)
    tables = {"big": BIG, "dim": DIM}
    sql = "SELECT b.id, b.v, d.name FROM big b JOIN dim d ON b.c = d.c WHERE b.v % 3 <> 1"
    df = run_partitioned(spark, sql, cat, frames, batch_size=256)
    assert df.columns == ["id", "v", "name"]
    _check(df.toArrow(), sql, tables)
    # Aggregation and ORDER BY: the join runs partitioned, the driver finishes it.
    sql = """SELECT d.name, count(*) AS n, sum(b.v) AS s, count(DISTINCT b.k) AS dk
             FROM big b, dim d WHERE b.c = d.c GROUP BY d.name ORDER BY n DESC, d.name"""
    result = run_partitioned_arrow(spark, sql, cat, frames, partitions=4)
    assert_same_ordered(result, sql, tables, keys=[1, 0])
    _check(result, sql, tables)
    sql = "SELECT count(*) FROM big b JOIN dim d ON b.c = d.c"
    _check(run_partitioned(spark, sql, cat, frames).toArrow(), sql, tables)


@spark_test
def test_two_partitioned_tables_hash_partitioned_on_the_join_key(spark):
    from structlog.testing import capture_logs

    from eddies.engine.spark.partitioned import run_partitioned, run_partitioned_arrow

    cat = make_catalog({"dim": DIM})
    frames = _frames(spark, big=BIG, other=OTHER)
    tables = {"big": BIG, "other": OTHER, "dim": DIM}
    sql = """SELECT b.id, o.w, o.tag, d.name FROM big b JOIN other o ON b.k = o.k
             JOIN dim d ON d.c = b.c WHERE o.w <> 2"""
    with capture_logs() as logs:
        df = run_partitioned(spark, sql, cat, frames, partitions=5)
    assert [e["strategy"] for e in logs if e["event"] == "running partitioned"] == ["hash"]
    _check(df.toArrow(), sql, tables)
    # A self-join on two different columns: each alias reads its own hashed copy.
    sql = "SELECT x.id, y.id, y.v FROM big x, big y WHERE x.k = y.id AND x.v < 50"
    _check(run_partitioned_arrow(spark, sql, cat, frames), sql, tables)
    sql = "SELECT DISTINCT o.tag, b.c FROM big b, other o WHERE b.k = o.k"
    _check(run_partitioned_arrow(spark, sql, cat, frames), sql, tables)


@spark_test
def test_a_query_that_cannot_partition_runs_on_the_driver(spark):
    from structlog.testing import capture_logs

    from eddies.engine.spark.partitioned import run_partitioned

    cat = make_catalog({"dim": DIM})
    frames = _frames(spark, big=BIG, other=OTHER)
    tables = {"big": BIG, "other": OTHER, "dim": DIM}
    sql = "SELECT b.id, o.w FROM big b, other o WHERE b.v < o.w AND b.id < 200"
    with capture_logs() as logs:
        df = run_partitioned(spark, sql, cat, frames)
    assert any(e["event"] == "query runs as one eddy on the driver" for e in logs)
    _check(df.toArrow(), sql, tables)
    # A table the executors cannot get: a stream.
    cat.add_stream("events", pa.schema([("c", pa.int32())]))
    with pytest.raises(DataSourceError, match="cannot be broadcast"):
        run_partitioned(spark, "SELECT * FROM big b, events e WHERE b.c = e.c", cat, frames)
