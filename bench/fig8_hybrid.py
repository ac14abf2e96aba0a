"""stems-2003 §4.3, Figure 8: index join, hash join, and the eddy's hybrid of the two.

    Q4: SELECT * FROM R, S WHERE R.key = S.key

A key-key join (every R tuple matches exactly one S tuple, so caching plays no part).
``R`` is scanned at ``--r-rate`` rows/s. ``S`` has two access methods: a scan AM paced at
``--s-rate`` rows/s, and an asynchronous index AM on ``key`` whose lookups each take
``--latency`` seconds, ``--concurrency`` at a time. Three catalogs, three runs:

* **index join**: S has only the index AM, so every R tuple is looked up. Its results
  come at the lookup rate from the start.
* **hash join**: S has only the scan: a symmetric hash join of two scans, whose results
  grow quadratically while both scans run (few R tuples find their S partner early) but
  which finishes with the S scan, sooner than the index join (the scan is the faster AM).
* **hybrid**: S has both AMs; for each R tuple the eddy chooses between probing S's SteM
  (hash join) and looking it up in the index (index join), from the results per second
  it observes of each (``eddies.router.access_choice``). The paper's shape: the hybrid
  tracks the index join early and the hash join late.

Also plotted: the share of R tuples the hybrid sent to the index AM over time, estimated
per time bin as tuples routed to the index AM / R tuples built into R's SteM (each R tuple
makes that one choice right after it is built; tuples coming back from the index AM go on
to probe the SteM too, so the routing log's probe counts alone would count them twice).

Run: ``python bench/fig8_hybrid.py [--quick]``; the plot goes to ``bench/out/fig8.png``.
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
    fmt_pct,
    fmt_s,
    print_table,
    progress,
    verdict,
)

SQL = "SELECT * FROM R, S WHERE R.key = S.key"
OUT = pathlib.Path(__file__).parent / "out"
FRACTIONS = (0.1, 0.25, 0.5, 0.9, 1.0)
#: The hybrid's times to 10% and to 100% of the results, over the better pure plan's.
TARGET_TRACK = 1.15


@dataclass
class Run:
    """One plan's run: when each result batch arrived (cumulative counts)."""

    label: str
    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    stats: Any = None

    @property
    def total(self) -> int:
        return self.counts[-1] if self.counts else 0

    def time_to(self, fraction: float) -> float:
        k = int(np.searchsorted(self.counts, fraction * self.total - 1e-9))
        return self.times[k]


class RemoteIndex:
    """S behind an index on ``key``: each lookup sleeps, then returns the matching row."""

    def __init__(self, table: pa.Table, latency: float) -> None:
        self.rows = {k: table.slice(i, 1) for i, k in enumerate(table["key"].to_pylist())}
        self.empty = table.slice(0, 0)
        self.latency = latency
        self.calls = 0

    async def __call__(self, bind: dict) -> pa.Table:
        self.calls += 1
        await trio.sleep(self.latency)
        return self.rows.get(bind["key"], self.empty)


def table_rows(table: pa.Table) -> list[tuple]:
    return list(zip(*(c.to_pylist() for c in table.columns), strict=True))


async def run_plan(cat, label: str, batch_size: int) -> Run:
    from eddies.engine import open_query

    run, batches = Run(label), []
    t0 = trio.current_time()
    async with open_query(SQL, cat, batch_size=batch_size, seed=1) as results:
        async for batch in results:
            run.times.append(trio.current_time() - t0)
            run.counts.append(run.total + batch.num_rows)
            batches.append(batch)
    run.stats = results.stats
    run.rows = table_rows(pa.Table.from_batches(batches, schema=results.schema))
    return run


def index_share(stats, bin_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """Per time bin: bin starts, share of the newly built R tuples sent to the index AM,
    the same share cumulated from the start; and the tuples per destination of built R
    singletons with no Done bit."""
    log = stats.routing_table()
    t = np.asarray(log["time_s"])
    dest = np.asarray(log["destination"].to_pylist(), dtype=object)
    span = np.asarray(log["span"].to_pylist(), dtype=object)
    tuples = np.asarray(log["tuples"])
    built = np.asarray(log["built"])
    done = np.asarray(log["done"].to_pylist(), dtype=object)
    lookup = np.array([str(d).startswith("lookup:") for d in dest])
    r_new = (dest == "build:r") & ~built
    r_step = (span == "r") & built & (done == "")
    edges = np.arange(0.0, t.max() + bin_s, bin_s)
    idx = np.clip(np.digitize(t, edges) - 1, 0, len(edges) - 1)
    new = np.bincount(idx[r_new], tuples[r_new], len(edges))
    looked = np.bincount(idx[lookup & r_step], tuples[lookup & r_step], len(edges))
    share = np.divide(looked, new, out=np.full(len(edges), np.nan), where=new > 0)
    cumulative = np.cumsum(looked) / np.maximum(np.cumsum(new), 1)
    totals: dict[str, int] = {}
    for d, n in zip(dest[r_step], tuples[r_step], strict=True):
        totals[d] = totals.get(d, 0) + int(n)
    return edges, np.minimum(share, 1.0), np.minimum(cumulative, 1.0), totals


def plot(runs: list[Run], hybrid_share, args) -> pathlib.Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUT.mkdir(exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    early = 1.5 * min(r.time_to(0.25) for r in runs)
    for ax, title, xmax in (
        (axes[0], "(i) the first seconds", early),
        (axes[1], "(ii) the whole run", None),
    ):
        for run, style in zip(runs, ["-", "--", ":"], strict=False):
            ax.step(run.times, run.counts, style, where="post", label=run.label, lw=1.8)
        ax.set(xlabel="time (s)", ylabel="result tuples", title=title)
        if xmax is not None:
            ax.set_xlim(0, xmax)
            ax.set_ylim(0, 1.1 * max(np.interp(xmax, r.times, r.counts) for r in runs))
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    edges, share, cumulative, _ = hybrid_share
    ax = axes[2]
    ax.bar(edges, share, width=args.bin, align="edge", alpha=0.6, label=f"per {args.bin:g} s")
    ax.plot(edges + args.bin, cumulative, "k-", lw=1.5, label="cumulative")
    ax.set(
        xlabel="time (s)",
        ylabel="share of new R tuples sent to the index AM",
        ylim=(0, 1.05),
        title="(iii) hybrid: R tuples to the index (rest: SteM)",
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    fig.suptitle(
        f"stems-2003 Fig. 8: Q4, |R| = |S| = {args.rows}, R scan {args.r_rate:g}/s, "
        f"S scan {args.s_rate:g}/s, S index {args.latency * 1e3:g} ms × {args.concurrency}"
    )
    fig.tight_layout()
    path = OUT / "fig8.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1,000 rows at double the rates")
    ap.add_argument("--rows", type=int, default=2000, help="rows of R and of S (2000)")
    ap.add_argument("--r-rate", type=float, default=500, help="R scan, rows/s (500)")
    ap.add_argument("--s-rate", type=float, default=400, help="S scan, rows/s (400)")
    ap.add_argument("--latency", type=float, default=0.05, help="seconds per lookup (0.05)")
    ap.add_argument("--concurrency", type=int, default=16, help="lookups in flight (16)")
    ap.add_argument("--batch-size", type=int, default=50, help="scan batch size (50)")
    ap.add_argument("--bin", type=float, default=0.25, help="seconds per bin of panel iii")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.r_rate, args.s_rate = 1000, 2 * args.r_rate, 2 * args.s_rate
        args.concurrency *= 2
    engine_or_exit()
    from eddies.engine import Catalog

    rng = np.random.default_rng(args.seed)
    r = pa.table({"key": rng.permutation(args.rows), "a": np.arange(args.rows)})
    s = pa.table({"key": rng.permutation(args.rows), "b": np.arange(args.rows) * 3})
    index = RemoteIndex(s, args.latency)

    def catalog(scan: bool, lookups: bool) -> Catalog:
        cat = Catalog()
        cat.add_table("R", r, rate=args.r_rate, batch_size=args.batch_size)
        if scan:
            cat.add_table("S", s, rate=args.s_rate, batch_size=args.batch_size)
        if lookups:
            cat.add_index("S", s.schema, on=["key"], lookup=index, max_concurrency=args.concurrency)
        return cat

    plans = {
        "index join (S: index only)": catalog(False, True),
        "hash join (S: scan only)": catalog(True, False),
        "hybrid (S: scan + index)": catalog(True, True),
    }
    runs, lookups = [], []
    with progress() as bar:
        task = bar.add_task("runs", total=len(plans))
        for label, cat in plans.items():
            bar.update(task, description=label)
            index.calls = 0
            runs.append(trio.run(run_plan, cat, label, args.batch_size))
            lookups.append(index.calls)
            bar.advance(task)
    ij, hj, hy = runs

    con = duckdb.connect()
    con.register("R", r)
    con.register("S", s)
    expected = Counter(con.execute(SQL).fetchall())
    print_table(
        f"Fig. 8: Q4 over |R| = |S| = {args.rows}; R scan {args.r_rate:g} rows/s, S scan "
        f"{args.s_rate:g} rows/s, S index {args.latency * 1e3:g} ms × {args.concurrency} "
        "(seconds)",
        ["plan", "results", "= DuckDB", "lookups", *(f"{f:.0%}" for f in FRACTIONS)],
        [
            [
                run.label,
                f"{run.total:,}",
                "yes" if Counter(run.rows) == expected else "[red]NO[/]",
                n,
                *(fmt_s(run.time_to(f)) for f in FRACTIONS),
            ]
            for run, n in zip(runs, lookups, strict=True)
        ],
        caption="p% = seconds until p% of the results were output",
    )
    share = index_share(hy.stats, args.bin)
    _, per_bin, _, totals = share
    first = per_bin[: max(1, round(1.0 / args.bin))]
    last = per_bin[len(per_bin) // 2 :]
    console.print(
        f"  hybrid: R tuples to the index AM {fmt_pct(np.nanmean(first))} in the first second, "
        f"{fmt_pct(np.nanmean(last))} in the second half; per destination "
        + ", ".join(f"{d} {n:,}" for d, n in totals.items())
        + " (probe counts include tuples back from the index)"
    )
    console.print(f"  hybrid busiest: {busy_summary(hy.stats, top=4)}")

    console.print("[bold]Targets[/]")
    ok = verdict(
        "every plan's result equals DuckDB's (bag)",
        all(Counter(run.rows) == expected for run in runs),
        f"{sum(expected.values()):,} rows",
    )
    ok &= verdict(
        "the setting: index join ahead early (10%), hash join done first",
        ij.time_to(0.1) < hj.time_to(0.1) and hj.time_to(1.0) < ij.time_to(1.0),
        f"10%: index {fmt_s(ij.time_to(0.1))} s, hash {fmt_s(hj.time_to(0.1))} s; 100%: "
        f"index {fmt_s(ij.time_to(1.0))} s, hash {fmt_s(hj.time_to(1.0))} s",
    )
    for frac, word in ((0.1, "early (10% of results)"), (1.0, "late (completion)")):
        best = min(ij.time_to(frac), hj.time_to(frac))
        ratio = hy.time_to(frac) / best
        ok &= verdict(
            f"hybrid tracks the better plan {word}: within {TARGET_TRACK}×",
            ratio <= TARGET_TRACK,
            f"{fmt_s(hy.time_to(frac))} s vs {fmt_s(best)} s: {ratio:.2f}×",
        )
    console.print(
        f"  time to 50%: index {fmt_s(ij.time_to(0.5))} s, hash {fmt_s(hj.time_to(0.5))} s, "
        f"hybrid {fmt_s(hy.time_to(0.5))} s"
    )
    if not args.no_plot:
        console.print(f"  plot: {plot(runs, share, args)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
