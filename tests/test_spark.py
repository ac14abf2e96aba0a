"""Spark Structured Streaming feeding an eddy through ``foreachBatch`` (Spark ``local[2]``).

Spark takes several seconds to start, so one session serves the whole module; select
these tests with ``-m spark``. A folder of Parquet files is read with ``readStream``
(trigger ``availableNow``), each micro-batch is pushed into a StreamTable joined with a
local table, and the result must equal DuckDB's over the union of the files. A replayed
``batch_id`` must change nothing.
"""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from oracle import assert_same_bag

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[dev]')")
if shutil.which("java") is None:  # pragma: no cover - environment
    pytest.skip("Spark needs Java 17 on PATH", allow_module_level=True)

import trio

from eddies.engine import Catalog
from eddies.engine.spark.driver import attach, feed_stream
from eddies.engine.streaming.sinks import CallbackSink, ParquetSink, SparkSink
from eddies.engine.streaming.thread_runner import BackgroundQuery

pytestmark = [
    pytest.mark.spark,
    # pyspark 4 warns that it does not support pandas 3 yet; toArrow() does not use pandas.
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

EVENTS = pa.table(
    {
        "k": pa.array([None if i % 13 == 0 else i % 9 for i in range(400)], pa.int64()),
        "v": pa.array(np.arange(400), pa.int64()),
    }
)
DIM = pa.table({"k": pa.array([0, 1, 2, 2, 5, None], pa.int64()), "name": list("abcdef")})
SQL = "SELECT e.v, d.name FROM events e JOIN dim d ON e.k = d.k WHERE e.v % 4 <> 1"


def _files(folder, table: pa.Table, parts: int) -> None:
    folder.mkdir()
    size = -(-table.num_rows // parts)
    for i in range(parts):
        pq.write_table(table.slice(i * size, size), folder / f"part-{i:03d}.parquet")


def test_micro_batches_from_spark_give_duckdbs_result(spark, tmp_path):
    _files(tmp_path / "in", EVENTS, parts=8)
    cat = Catalog()
    events = cat.add_stream("events", EVENTS.schema)
    cat.add_table("dim", DIM)
    query = BackgroundQuery(SQL, cat, batch_size=32, debug=True)
    source = (
        spark.readStream.schema("k long, v long")
        .option("maxFilesPerTrigger", 3)  # several micro-batches
        .parquet(str(tmp_path / "in"))
    )
    streaming = feed_stream(
        source,
        events,
        checkpoint_location=str(tmp_path / "checkpoint"),
        trigger={"availableNow": True},
    )
    streaming.awaitTermination(120)
    batches = streaming.lastProgress["batchId"] + 1
    # A replay of a batch Spark already delivered changes nothing.
    assert not events.push(EVENTS.slice(0, 10), ("events", 0))
    events.close()
    assert batches >= 3
    assert events.rows_taken == EVENTS.num_rows
    assert_same_bag(query.result(60), SQL, {"events": EVENTS, "dim": DIM})


ORDERS = pa.table(
    {
        "k": pa.array([None if i % 11 == 0 else i % 7 for i in range(300)], pa.int64()),
        "o": pa.array(np.arange(300), pa.int64()),
        "at": pa.array(
            1_700_000_000_000_000 + np.arange(300) * 60_000_000, pa.timestamp("us", "UTC")
        ),
    }
)
NAMES = pa.table({"k": pa.array(np.arange(9), pa.int64()), "label": [f"n{i}" for i in range(9)]})


async def _lookup_names(bind: dict) -> pa.Table:
    """A web-source stand-in: an async index AM with 5 ms of latency per lookup."""
    await trio.sleep(0.005)
    return NAMES.filter(pc.equal(NAMES["k"], bind["k"]))


def test_attach_two_streams_a_table_and_a_lookup_source_per_micro_batch(spark, tmp_path):
    """Stream-stream-static join plus an index AM; each increment is a Spark DataFrame."""
    _files(tmp_path / "events", EVENTS, parts=6)
    _files(tmp_path / "orders", ORDERS, parts=3)
    cat = Catalog()
    cat.add_table("dim", DIM)
    cat.add_index("names", NAMES.schema, on=["k"], lookup=_lookup_names)
    frames = []
    sink = SparkSink(spark, lambda df, tag: frames.append((tag, df.toArrow())))
    sql = (
        "SELECT e.v, o.o, o.at, d.name, n.label FROM events e JOIN orders o ON e.k = o.k "
        "JOIN dim d ON d.k = e.k JOIN names n ON n.k = o.k WHERE e.v % 3 <> 0"
    )
    attachment = attach(
        sql,
        cat,
        {
            "events": spark.readStream.schema("k long, v long")
            .option("maxFilesPerTrigger", 2)
            .parquet(str(tmp_path / "events")),
            "orders": spark.readStream.schema("k long, o long, at timestamp")
            .option("maxFilesPerTrigger", 1)
            .parquet(str(tmp_path / "orders")),
        },
        checkpoint_location=tmp_path / "checkpoints",
        trigger={"availableNow": True},
        sink=sink,
        batch_size=16,
        debug=True,
    )
    attachment.await_termination(120)
    streams = {m.stream for m in attachment.micro_batches}
    assert streams == {"events", "orders"} and len(attachment.micro_batches) >= 6
    assert sum(m.rows_in for m in attachment.micro_batches) == 700
    assert [tag for tag, _ in frames][-1] == "final"
    ours = pa.concat_tables([t for _, t in frames if t.num_rows])
    tables = {"events": EVENTS, "orders": ORDERS, "dim": DIM, "names": NAMES}
    assert_same_bag(ours, sql, tables)
    rows_out = sum(m.rows_out for m in attachment.micro_batches)
    assert rows_out + frames[-1][1].num_rows == ours.num_rows


def test_a_batch_spark_replays_after_a_failure_changes_nothing(spark, tmp_path):
    """The callback fails after batch 1 reached the eddy: Spark, restarted from its
    checkpoint, runs batch 1 again; the stream table ignores it, and the Parquet sink's
    files equal DuckDB's result over all the input."""
    _files(tmp_path / "in", EVENTS, parts=6)
    cat = Catalog()
    cat.add_table("dim", DIM)
    failed = []

    def crash_once(record):
        if record.batch_id == 1 and not failed:
            failed.append(record)
            raise RuntimeError("driver crashed after the eddy took batch 1")

    source = (
        spark.readStream.schema("k long, v long")
        .option("maxFilesPerTrigger", 2)
        .parquet(str(tmp_path / "in"))
    )
    attachment = attach(
        SQL,
        cat,
        {"events": source},
        checkpoint_location=tmp_path / "checkpoints",
        trigger={"availableNow": True},
        sink=ParquetSink(tmp_path / "out"),
        on_micro_batch=crash_once,
        batch_size=32,
    )
    with pytest.raises(Exception, match="driver crashed"):
        attachment.streaming_queries["events"].awaitTermination(120)
    # Restart the Spark side from the same checkpoint, into the same running eddy.
    attachment.streaming_queries["events"] = (
        source.writeStream.foreachBatch(attachment.callback("events"))
        .option("checkpointLocation", str(tmp_path / "checkpoints" / "events"))
        .trigger(availableNow=True)
        .start()
    )
    attachment.await_termination(120)
    replayed = [m for m in attachment.micro_batches if m.replayed]
    assert [(m.stream, m.batch_id) for m in replayed] == [("events", 1)]
    assert failed and failed[0].batch_id == 1
    ours = pq.read_table(tmp_path / "out")
    assert_same_bag(ours, SQL, {"events": EVENTS, "dim": DIM})
    assert sorted(p.name for p in (tmp_path / "out").iterdir())[:2] == [
        "events-batch-000000.parquet",
        "events-batch-000001.parquet",
    ]


def test_attach_in_update_mode_answers_a_group_by_at_every_micro_batch(spark, tmp_path):
    """GROUP BY over a stream with output_mode="update": every micro-batch's increment holds
    the groups it changed, with their running values; applied as upserts in order, the
    increments give DuckDB's result over all the files."""
    _files(tmp_path / "in", EVENTS, parts=5)
    cat = Catalog()
    cat.add_table("dim", DIM)
    increments: list[tuple] = []
    sql = (
        "SELECT d.name, count(*) AS n, sum(e.v) AS s, max(e.v) AS top "
        "FROM events e JOIN dim d ON e.k = d.k GROUP BY d.name"
    )
    attachment = attach(
        sql,
        cat,
        {
            "events": spark.readStream.schema("k long, v long")
            .option("maxFilesPerTrigger", 1)
            .parquet(str(tmp_path / "in"))
        },
        checkpoint_location=tmp_path / "checkpoint",
        trigger={"availableNow": True},
        sink=CallbackSink(lambda table, tag: increments.append((tag, table))),
        output_mode="update",
    )
    attachment.await_termination(120)
    assert len(attachment.micro_batches) == 5
    assert [tag for tag, _ in increments] == [
        ("events", m.batch_id) for m in attachment.micro_batches
    ] + ["final"]
    assert all(t.num_rows for _, t in increments[:-1])  # every file touches some group
    latest: dict[str, dict] = {}
    for _, table in increments:
        rows = table.to_pylist()
        assert len({r["name"] for r in rows}) == len(rows)  # a group at most once
        for row in rows:  # running values only grow
            before = latest.get(row["name"])
            assert before is None or (row["n"] > before["n"] and row["top"] >= before["top"])
            latest[row["name"]] = row
    upserted = pa.Table.from_pylist(list(latest.values()), increments[0][1].schema)
    assert_same_bag(upserted, sql, {"events": EVENTS, "dim": DIM})
    assert attachment.stats.streaming_aggregate.commits == 5


def test_a_restarted_attachment_resumes_a_stream_stream_join_from_its_checkpoint(spark, tmp_path):
    """Two streams joined, the attachment ended after the first files; a new attachment
    (a new catalog: empty SteMs) with the same checkpoint location gets more files: its
    results join the new rows with the old ones, and all increments together equal
    DuckDB's join over every row, none lost or doubled."""
    left = pa.table({"k": EVENTS["k"], "v": EVENTS["v"]}).slice(0, 240)
    right = pa.table(
        {
            "k": pa.array([None if i % 7 == 0 else i % 11 for i in range(120)], pa.int64()),
            "w": pa.array(np.arange(120), pa.int64()),
        }
    )
    sql = "SELECT l.v, r.w FROM l JOIN r ON l.k = r.k"

    def run() -> object:
        cat = Catalog()
        sources = {
            name: spark.readStream.schema(schema)
            .option("maxFilesPerTrigger", 1)
            .parquet(str(tmp_path / name))
            for name, schema in (("l", "k long, v long"), ("r", "k long, w long"))
        }
        attachment = attach(
            sql,
            cat,
            sources,
            checkpoint_location=tmp_path / "checkpoints",
            trigger={"availableNow": True},
            sink=ParquetSink(tmp_path / "out"),
            batch_size=16,
            durable_state=True,
        )
        attachment.await_termination(180)
        assert attachment.durable
        return attachment

    (tmp_path / "l").mkdir()
    (tmp_path / "r").mkdir()
    for i in range(3):  # the first half of each stream, three files each
        pq.write_table(left.slice(40 * i, 40), tmp_path / "l" / f"part-{i:03d}.parquet")
        pq.write_table(right.slice(20 * i, 20), tmp_path / "r" / f"part-{i:03d}.parquet")
    run()
    for i in range(3, 6):
        pq.write_table(left.slice(40 * i, 40), tmp_path / "l" / f"part-{i:03d}.parquet")
        pq.write_table(right.slice(20 * i, 20), tmp_path / "r" / f"part-{i:03d}.parquet")
    second = run()
    assert {m.batch_id for m in second.micro_batches} >= {3, 4, 5}
    ours = pq.read_table(tmp_path / "out")
    assert_same_bag(ours, sql, {"l": left, "r": right})
    across = pc.and_(pc.less(ours["v"], 120), pc.greater_equal(ours["w"], 60))
    assert pc.any(across).as_py()  # an old left row met a new right row
