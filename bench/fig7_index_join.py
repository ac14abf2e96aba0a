"""stems-2003 §4.2, Figure 7: an index join through SteMs vs. an encapsulated index join.

    Q1: SELECT * FROM R, S WHERE R.a = S.x

``R`` (1,000 rows; ``a`` takes 250 distinct values, each equally often, in random order) is
scanned; ``S`` is reachable only through an asynchronous index on ``x`` (every lookup sleeps
``--latency`` seconds, then returns the one matching row), as in the paper's Table 3.

* **Encapsulated index join** (the paper's Fig. 5), written here in plain trio: a pipelined
  operator with a bounded input queue and a pool of ``--concurrency`` workers; each worker
  takes the next R tuple *in order*, looks its ``a`` up in the operator's own cache, and on
  a miss awaits the lookup (a lookup already in flight is awaited, not repeated). So a
  tuple whose match is cached still waits behind the uncached tuples ahead of it:
  head-of-line blocking.
* **Eddy with SteMs** (the paper's Fig. 6): a scan AM on R, an index AM on S with the same
  lookup function and ``max_concurrency``; R tuples probe S's SteM (the cache) and only
  the misses go on to the index AM, so cache probes and index lookups have separate queues.

Both issue the same lookups (one per distinct value, in order of first appearance), so the
curves of lookups over time (Fig. 7 ii) nearly coincide; the eddy's results over time
(Fig. 7 i) should rise almost linearly, the encapsulated join's parabolically.

The eddy runs twice: with the engine's default module queues (4 batches) and with deep
queues (``--deep-queue``). With shallow queues the eddy blocks on the full index AM (see
bench/README.md): the run then shows the head-of-line blocking the paper's design avoids.

Run: ``python bench/fig7_index_join.py [--quick]``; the plot goes to ``bench/out/fig7.png``.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import trio
from common import (
    busy_summary,
    console,
    engine_or_exit,
    fmt_ratio,
    fmt_s,
    print_table,
    progress,
    verdict,
)

SQL = "SELECT * FROM R, S WHERE R.a = S.x"
OUT = pathlib.Path(__file__).parent / "out"
FRACTIONS = (0.25, 0.5, 0.9, 1.0)
#: The SteM eddy must reach half of the results at least this many times sooner.
TARGET_SPEEDUP_50 = 1.5
#: ... and finish within this factor of the encapsulated join ("about the same time").
TARGET_COMPLETION = 1.15


@dataclass
class Run:
    """One plan's run: when results arrived (cumulative count) and when lookups were issued."""

    label: str
    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    issued: list[float] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    stats: Any = None

    def add(self, t: float, n: int) -> None:
        self.times.append(t)
        self.counts.append((self.counts[-1] if self.counts else 0) + n)

    @property
    def total(self) -> int:
        return self.counts[-1] if self.counts else 0

    def time_to(self, fraction: float) -> float:
        """Seconds until ``fraction`` of this run's results had arrived."""
        k = int(np.searchsorted(self.counts, fraction * self.total - 1e-9))
        return self.times[k]


class RemoteIndex:
    """S behind an index on ``x``: each lookup sleeps, then returns the matching rows.

    Records when each lookup was issued (seconds since ``start()``)."""

    def __init__(self, table: pa.Table, column: str, latency: float) -> None:
        keys = table.column(column).to_pylist()
        self.rows = {k: table.slice(i, 1) for i, k in enumerate(keys)}
        self.empty = table.slice(0, 0)
        self.column = column
        self.latency = latency
        self.t0 = 0.0
        self.issued: list[float] = []

    def start(self) -> None:
        self.t0 = trio.current_time()
        self.issued = []

    async def __call__(self, bind: dict) -> pa.Table:
        self.issued.append(trio.current_time() - self.t0)
        await trio.sleep(self.latency)
        return self.rows.get(bind[self.column], self.empty)


def table_rows(table: pa.Table) -> list[tuple]:
    return list(zip(*(c.to_pylist() for c in table.columns), strict=True))


# ---------------------------------------------------------------- the two plans
async def encapsulated_join(r: pa.Table, index: RemoteIndex, workers: int, queue: int) -> Run:
    """Fig. 5's index join operator: a bounded input queue, a cache, ``workers`` workers
    that take R tuples in order and await a lookup on a miss."""
    run = Run("encapsulated index join")
    r_rows = table_rows(r)
    a = r.column("a").to_pylist()
    cache: dict[Any, pa.Table] = {}
    pending: dict[Any, trio.Event] = {}
    index.start()
    send, receive = trio.open_memory_channel[int](queue)

    async def scan() -> None:
        async with send:
            for i in range(r.num_rows):
                await send.send(i)

    async def worker(inbox: trio.MemoryReceiveChannel) -> None:
        async with inbox:
            async for i in inbox:
                key = a[i]
                if key not in cache:
                    if key in pending:  # someone is looking it up: wait for that lookup
                        await pending[key].wait()
                    else:
                        pending[key] = trio.Event()
                        cache[key] = await index({"x": key})
                        pending.pop(key).set()
                matches = table_rows(cache[key])
                run.rows += [r_rows[i] + m for m in matches]
                run.add(trio.current_time() - index.t0, len(matches))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(scan)
        async with receive:
            for _ in range(workers):
                nursery.start_soon(worker, receive.clone())
    run.issued = index.issued
    return run


async def eddy_join(cat, index: RemoteIndex, label: str, batch_size: int, queue: int | None) -> Run:
    """The same join in the eddy: scan AM on R, SteMs on R and S, index AM on S."""
    from eddies.engine import open_query

    run = Run(label)
    batches = []
    index.start()
    async with open_query(
        SQL, cat, policy="lottery", batch_size=batch_size, queue_capacity=queue, seed=1
    ) as results:
        async for batch in results:
            run.add(trio.current_time() - index.t0, batch.num_rows)
            batches.append(batch)
    run.stats = results.stats
    run.rows = table_rows(pa.Table.from_batches(batches, schema=results.schema))
    run.issued = index.issued
    return run


# ---------------------------------------------------------------- data, plot, report
def make_data(rows: int, distinct: int, seed: int) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    a = rng.permutation(np.resize(np.arange(distinct), rows))  # every value equally often
    r = pa.table({"key": np.arange(rows), "a": a})
    s = pa.table({"x": np.arange(distinct), "y": np.arange(distinct) * 10})
    return r, s


def plot(runs: list[Run], args) -> pathlib.Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUT.mkdir(exist_ok=True)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    styles = ["-", "--", ":"]
    for run, style in zip(runs, styles, strict=False):
        ax1.step(run.times, run.counts, style, where="post", label=run.label)
        issued = np.arange(1, len(run.issued) + 1)
        ax2.step(run.issued, issued, style, where="post", label=run.label)
    ax1.set(xlabel="time (s)", ylabel="RS results output", title="(i) results over time")
    ax2.set(xlabel="time (s)", ylabel="lookups issued into S", title="(ii) lookups over time")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(
        f"stems-2003 Fig. 7: Q1, |R| = {args.rows}, {args.distinct} distinct R.a, "
        f"lookup {args.latency * 1e3:g} ms, {args.concurrency} in flight"
    )
    fig.tight_layout()
    path = OUT / "fig7.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="400 rows, 100 values, 50 ms lookups")
    ap.add_argument("--rows", type=int, default=1000, help="rows of R (1000)")
    ap.add_argument("--distinct", type=int, default=250, help="distinct values of R.a (250)")
    ap.add_argument("--latency", type=float, default=0.1, help="seconds per lookup (0.1)")
    ap.add_argument("--concurrency", type=int, default=4, help="lookups in flight (4)")
    ap.add_argument("--batch-size", type=int, default=1, help="eddy batch size (1: per tuple)")
    ap.add_argument("--queue", type=int, default=4, help="encapsulated join's input queue (4)")
    ap.add_argument("--deep-queue", type=int, default=1024, help="eddy's deep module queues")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.distinct, args.latency = 400, 100, 0.05
    engine_or_exit()
    from eddies.engine import Catalog, explain

    r, s = make_data(args.rows, args.distinct, args.seed)
    index = RemoteIndex(s, "x", args.latency)
    cat = Catalog()
    cat.add_table("R", r, batch_size=args.batch_size)
    cat.add_index("S", s.schema, on=["x"], lookup=index, max_concurrency=args.concurrency)
    lookup_name = next(line.split()[0] for line in explain(SQL, cat).splitlines() if "am:" in line)

    plans = [
        ("encapsulated index join", None),
        ("eddy + SteMs, default queues", None),
        (f"eddy + SteMs, queues of {args.deep_queue}", args.deep_queue),
    ]
    runs: list[Run] = []
    with progress() as bar:
        task = bar.add_task("runs", total=len(plans))
        for label, queue in plans:
            bar.update(task, description=label)
            if label.startswith("encapsulated"):
                runs.append(trio.run(encapsulated_join, r, index, args.concurrency, args.queue))
            else:
                runs.append(trio.run(eddy_join, cat, index, label, args.batch_size, queue))
            bar.advance(task)

    con = duckdb.connect()
    con.register("R", r)
    con.register("S", s)
    expected = Counter(con.execute(SQL).fetchall())
    base = runs[0]
    table = []
    for run in runs:
        table.append(
            [
                run.label,
                f"{run.total:,}",
                "yes" if Counter(run.rows) == expected else "[red]NO[/]",
                len(run.issued),
                *(fmt_s(run.time_to(f)) for f in FRACTIONS),
                fmt_ratio(base.time_to(0.5) / run.time_to(0.5)),
            ]
        )
    print_table(
        f"Fig. 7: Q1 over |R| = {args.rows} ({args.distinct} distinct R.a), index lookups of "
        f"{args.latency * 1e3:g} ms, {args.concurrency} in flight (seconds)",
        ["plan", "results", "= DuckDB", "lookups", "25%", "50%", "90%", "100%", "50% speedup"],
        table,
        caption="p% = seconds until p% of the results were output; 50% speedup = the "
        "encapsulated join's time to 50% / the plan's",
    )
    for run in runs[1:]:
        console.print(f"  [bold]{run.label}[/] busiest: {busy_summary(run.stats, top=4)}")

    console.print("[bold]Targets[/]")
    ok = verdict(
        "every plan's result equals DuckDB's (bag)",
        all(Counter(run.rows) == expected for run in runs),
        f"{sum(expected.values()):,} rows",
    )
    ok &= verdict(
        "every plan issues one lookup per distinct R.a",
        all(len(run.issued) == args.distinct for run in runs),
        ", ".join(str(len(run.issued)) for run in runs) + f" lookups via {lookup_name}",
    )
    deep, shallow = runs[2], runs[1]
    speedup = base.time_to(0.5) / deep.time_to(0.5)
    ok &= verdict(
        f"SteMs (deep queues) output half the results ≥ {TARGET_SPEEDUP_50}× sooner",
        speedup >= TARGET_SPEEDUP_50,
        f"{fmt_s(deep.time_to(0.5))} s vs {fmt_s(base.time_to(0.5))} s: {speedup:.2f}×",
    )
    finish = deep.time_to(1.0) / base.time_to(1.0)
    ok &= verdict(
        f"SteMs (deep queues) finish within {TARGET_COMPLETION}× of the encapsulated join",
        finish <= TARGET_COMPLETION,
        f"{fmt_s(deep.time_to(1.0))} s vs {fmt_s(base.time_to(1.0))} s: {finish:.2f}×",
    )
    shallow_speedup = base.time_to(0.5) / shallow.time_to(0.5)
    verdict(
        f"diagnostic (not a target): SteMs with the default queues ≥ {TARGET_SPEEDUP_50}× "
        "sooner too",
        shallow_speedup >= TARGET_SPEEDUP_50,
        f"{shallow_speedup:.2f}×; below target means the eddy stalls fresh R tuples while "
        "prior probers wait for the full index AM (head-of-line blocking)",
    )
    if not args.no_plot:
        console.print(f"  plot: {plot(runs, args)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
