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
import pyarrow.parquet as pq
import pytest
from conftest import assert_same_bag

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[dev]')")
if shutil.which("java") is None:  # pragma: no cover - environment
    pytest.skip("Spark needs Java 17 on PATH", allow_module_level=True)

from eddies.engine import Catalog
from eddies.engine.streaming import BackgroundQuery
from eddies.sources.spark import feed_stream

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
