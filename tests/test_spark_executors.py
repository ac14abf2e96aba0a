"""``attach(..., placement="executors")`` equals ``placement="driver"`` (Spark ``local[2]``).

One test per kind of placed query — a stream-static join, a stream-lookup join, a
stream-stream join (restarted from Spark's checkpoint half-way) and an update-mode
aggregate — runs the same files through both placements and compares the two results,
and both with DuckDB. Spark takes seconds per streaming query: select with ``-m spark``.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from oracle import assert_bags_equal, assert_same_bag, table_rows

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[dev]')")
if shutil.which("java") is None:  # pragma: no cover - environment
    pytest.skip("Spark needs Java 17 on PATH", allow_module_level=True)

from eddies.engine import Catalog
from eddies.engine.spark.driver import attach
from eddies.engine.streaming.sinks import CallbackSink, ParquetSink

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

EVENTS = pa.table(
    {
        "k": pa.array([None if i % 13 == 0 else i % 9 for i in range(360)], pa.int64()),
        "v": pa.array(np.arange(360) % 97, pa.int64()),  # duplicates
    }
)
DIM = pa.table({"k": pa.array([0, 1, 2, 2, 5, None], pa.int64()), "name": list("abcdef")})
NAMES = pa.table({"k": pa.array(np.arange(7), pa.int64()), "label": [f"n{i}" for i in range(7)]})


def _files(folder, table: pa.Table, parts: int, first: int = 0) -> None:
    folder.mkdir(exist_ok=True)
    size = -(-table.num_rows // parts)
    for i in range(parts):
        pq.write_table(table.slice(i * size, size), folder / f"part-{first + i:03d}.parquet")


def _events(spark, folder, per_trigger: int = 2):
    return (
        spark.readStream.schema("k long, v long")
        .option("maxFilesPerTrigger", per_trigger)
        .parquet(str(folder))
    )


def _both(spark, tmp_path, sql, catalog_for, sources, **kwargs) -> dict[str, pa.Table]:
    """The same query over the same files in both placements: placement -> result."""
    out = {}
    for placement in ("driver", "executors"):
        attachment = attach(
            sql,
            catalog_for(),
            sources(),
            checkpoint_location=tmp_path / f"checkpoint-{placement}",
            trigger={"availableNow": True},
            placement=placement,
            **kwargs,
        )
        out[placement] = attachment.await_termination(180)
        assert len(attachment.micro_batches) >= 2
        assert sum(m.rows_in for m in attachment.micro_batches) == EVENTS.num_rows
        if placement == "executors":
            assert attachment.plan.kind == "map"
            assert all(m.eddy_seconds > 0 for m in attachment.micro_batches)
    return out


def _same(results: dict[str, pa.Table], sql: str) -> None:
    assert_bags_equal(
        table_rows(results["executors"]), table_rows(results["driver"]), sql, "executors"
    )


def test_a_stream_static_join_on_executors_equals_the_driver_placement(spark, tmp_path):
    _files(tmp_path / "in", EVENTS, parts=6)
    sql = "SELECT e.v, d.name FROM events e JOIN dim d ON e.k = d.k WHERE e.v % 4 <> 1"

    def catalog():
        cat = Catalog()
        cat.add_table("dim", DIM)
        return cat

    results = _both(
        spark,
        tmp_path,
        sql,
        catalog,
        lambda: {"events": _events(spark, tmp_path / "in")},
        policy="rank",
        batch_size=7,
    )
    _same(results, sql)
    assert_same_bag(results["executors"], sql, {"events": EVENTS, "dim": DIM})


def _recording_lookup(folder):
    """An async lookup of NAMES that appends ``pid key`` to a file per call (it runs in
    Spark's Python workers; defined here so cloudpickle ships it by value)."""

    async def lookup(bind: dict) -> pa.Table:
        with open(os.path.join(folder, f"calls-{os.getpid()}.txt"), "a") as f:
            f.write(f"{bind['k']}\n")
        return NAMES.filter(pc.equal(NAMES["k"], bind["k"]))

    return lookup


def test_a_stream_lookup_join_on_executors_caches_lookups_per_worker(spark, tmp_path):
    """An index AM (a web-source stand-in) looked up from the executors: the result equals
    the driver placement's and DuckDB's, and each Python worker process looks each key up
    at most once over all micro-batches (its cache)."""
    _files(tmp_path / "in", EVENTS, parts=6)
    calls = tmp_path / "calls"
    calls.mkdir()
    sql = (
        "SELECT e.v, n.label, d.name FROM events e JOIN names n ON n.k = e.k "
        "JOIN dim d ON d.k = e.k WHERE e.v > 3"
    )

    def catalog():
        cat = Catalog()
        cat.add_table("dim", DIM)
        cat.add_index("names", NAMES.schema, on=["k"], lookup=_recording_lookup(str(calls)))
        return cat

    results = _both(
        spark,
        tmp_path,
        sql,
        catalog,
        lambda: {"events": _events(spark, tmp_path / "in")},
        policy="lottery",
        batch_size=1,
    )
    _same(results, sql)
    assert_same_bag(results["executors"], sql, {"events": EVENTS, "dim": DIM, "names": NAMES})
    workers = [p for p in calls.iterdir() if p.name != f"calls-{os.getpid()}.txt"]
    assert workers  # the executors looked keys up
    for path in workers:
        keys = path.read_text().split()
        assert len(keys) == len(set(keys)), f"{path.name} looked a key up twice: {keys}"


def test_a_stream_stream_join_on_executors_keeps_its_state_in_spark(spark, tmp_path):
    """Two streams joined on executors, state per key bucket in Spark's state store. Half
    the files, then the query stops; a new attachment on the same checkpoint gets the
    rest: old rows meet new ones (Spark restored the state), and the union of both runs'
    increments equals the driver placement's result over all files and DuckDB's."""
    left = EVENTS.slice(0, 240)
    right = pa.table(
        {
            "k": pa.array([None if i % 7 == 0 else i % 11 for i in range(120)], pa.int64()),
            "w": pa.array(np.arange(120), pa.int64()),
        }
    )
    sql = "SELECT l.v, r.w, l.k FROM l JOIN r ON l.k = r.k WHERE r.w % 5 <> 2"

    def sources():
        return {
            "l": _events(spark, tmp_path / "l", per_trigger=1),
            "r": spark.readStream.schema("k long, w long")
            .option("maxFilesPerTrigger", 1)
            .parquet(str(tmp_path / "r")),
        }

    def run(placement: str) -> None:
        attachment = attach(
            sql,
            Catalog(),
            sources(),
            checkpoint_location=tmp_path / f"checkpoint-{placement}",
            trigger={"availableNow": True},
            sink=ParquetSink(tmp_path / f"out-{placement}"),
            placement=placement,
            batch_size=16,
        )
        attachment.await_termination(180)
        assert len(attachment.micro_batches) >= 2
        taken.append(sum(m.rows_in for m in attachment.micro_batches))
        if placement == "executors":
            assert attachment.plan.kind == "join"

    _files(tmp_path / "l", left.slice(0, 120), parts=3)
    _files(tmp_path / "r", right.slice(0, 60), parts=3)
    taken: list[int] = []
    run("executors")
    _files(tmp_path / "l", left.slice(120), parts=3, first=3)
    _files(tmp_path / "r", right.slice(60), parts=3, first=3)
    run("executors")  # restarted from Spark's checkpoint and state store
    run("driver")
    assert taken == [180, 180, 360]  # NULL keys included; none taken twice
    ours = pq.read_table(tmp_path / "out-executors")
    across = pc.and_(pc.less(ours["v"], 120), pc.greater_equal(ours["w"], 60))
    assert pc.any(across).as_py()  # an old left row met a new right row after the restart
    driver = pq.read_table(tmp_path / "out-driver")
    _same({"executors": ours, "driver": driver}, sql)
    assert_same_bag(ours, sql, {"l": left, "r": right})


def _upserted(increments: list[tuple], key: str) -> pa.Table:
    """Update-mode increments applied in order as upserts by ``key``."""
    latest: dict = {}
    for _, table in increments:
        rows = table.to_pylist()
        assert len({r[key] for r in rows}) == len(rows)  # a group at most once per increment
        for row in rows:
            latest[row[key]] = row
    return pa.Table.from_pylist(list(latest.values()), increments[0][1].schema)


def test_an_update_mode_aggregate_on_executors_equals_the_driver_placement(spark, tmp_path):
    """GROUP BY over a stream joined with a table, output_mode='update': partial states
    per partition, merged per group-key bucket in Spark's state store; the increments,
    applied as upserts, equal the driver placement's and DuckDB's result."""
    _files(tmp_path / "in", EVENTS, parts=5)
    sql = (
        "SELECT d.name, count(*) AS n, sum(e.v) AS s, avg(e.v) AS a, min(e.v) AS lo, "
        "max(e.v) AS hi FROM events e JOIN dim d ON e.k = d.k GROUP BY d.name"
    )
    increments: dict[str, list] = {"driver": [], "executors": []}
    for placement, found in increments.items():
        cat = Catalog()
        cat.add_table("dim", DIM)
        attachment = attach(
            sql,
            cat,
            {"events": _events(spark, tmp_path / "in", per_trigger=1)},
            checkpoint_location=tmp_path / f"checkpoint-{placement}",
            trigger={"availableNow": True},
            sink=CallbackSink(lambda table, tag, found=found: found.append((tag, table))),
            output_mode="update",
            placement=placement,
            policy="static",
        )
        attachment.await_termination(180)
        assert len(found) >= 3
        assert sum(m.rows_in for m in attachment.micro_batches) == EVENTS.num_rows
        if placement == "executors":
            assert attachment.plan.kind == "aggregate"
    ours = _upserted(increments["executors"], "name")
    _same({"executors": ours, "driver": _upserted(increments["driver"], "name")}, sql)
    assert_same_bag(ours, sql, {"events": EVENTS, "dim": DIM})
