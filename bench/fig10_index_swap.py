"""eddies-2000 §4.5, Figures 10 and 11: two index joins whose costs swap midway.

    SELECT * FROM R, S1, S2 WHERE R.b1 = S1.x AND R.b2 = S2.y

``R`` (6,000 rows) is scanned at ``--rate`` rows/s; ``b1`` and ``b2`` are independent
permutations, so every lookup key is distinct and no cache hides a lookup's cost. ``S1``
and ``S2`` are reachable only through asynchronous indexes (``max_concurrency`` lookups in
flight each), and each holds ``--selectivity`` of the keys, so an R tuple finds a match in
each with that probability. A lookup's latency depends on when it starts: before
``--switch`` seconds (phase 1) S1's lookups are fast and S2's slow; after it, swapped.
As in the paper, the cost is a delay (a remote server), not CPU. By default the swap comes
when all but ``selectivity × rows`` R tuples have arrived, which makes the two static
orders about equally slow (the eddy has to beat the better of two bad plans).

Plans, all in the same engine: two static orders (``policy="static"``, R probes S1 then
S2, or S2 then S1: each R tuple goes to its first index, and only its matches go on to
the second), the lottery eddy, and the windowed lottery eddy (``lottery-window``, tickets
re-earned every ``--window`` seconds). Each static order pays in one phase: S1→S2 runs the
R tuples left after the switch through the now-slow S1; S2→S1 pushes phase 1's R tuples
through slow S2 and, after the switch, all their matches through slow S1. An eddy that
follows the swap sends only the first index's matches to the slow one in each phase.

Printed: completion times, the ratio better static / eddy, lookups that ran slow, and
the share of fresh R tuples the eddies sent to S1 first in each phase. Plotted
(``bench/out/fig10.png``): results over time (Fig. 10) and that share over time (Fig. 11).

The runs use deep module queues (``--queue-capacity``, 1,024 batches) for every plan. With
the engine's default (4) a slow index's full queue stalls the whole eddy (see
bench/README.md); a diagnostic run of the windowed eddy with the default queues shows it.

Run: ``python bench/fig10_index_swap.py [--quick]``.
"""

from __future__ import annotations

import argparse
import math
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

SQL = "SELECT * FROM R, S1, S2 WHERE R.b1 = S1.x AND R.b2 = S2.y"
OUT = pathlib.Path(__file__).parent / "out"
#: The windowed eddy must beat the better static plan by at least this factor.
TARGET_SPEEDUP = 2.0


class SwappingIndex:
    """An index whose lookups are fast before the switch and slow after (or the reverse).

    ``phases.t0`` is the query's start (trio clock); each lookup's latency is fixed when it
    starts. Counts the lookups that ran slow."""

    def __init__(self, table: pa.Table, column: str, phases: Phases, fast_first: bool):
        keys = table.column(column).to_pylist()
        self.rows = {k: table.slice(i, 1) for i, k in enumerate(keys)}
        self.empty = table.slice(0, 0)
        self.column = column
        self.phases = phases
        self.fast_first = fast_first
        self.slow_calls = 0
        self.calls = 0

    async def __call__(self, bind: dict) -> pa.Table:
        self.calls += 1
        fast = self.phases.phase() == (1 if self.fast_first else 2)
        if not fast:
            self.slow_calls += 1
        await trio.sleep(self.phases.fast if fast else self.phases.slow)
        return self.rows.get(bind[self.column], self.empty)


@dataclass
class Phases:
    switch: float
    fast: float
    slow: float
    t0: float = 0.0

    def phase(self) -> int:
        return 1 if trio.current_time() - self.t0 < self.switch else 2


@dataclass
class Run:
    label: str
    kwargs: dict
    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    seconds: float = math.nan
    finished: bool = True
    slow_lookups: tuple[int, int] = (0, 0)
    stats: Any = None

    @property
    def total(self) -> int:
        return self.counts[-1] if self.counts else 0


def table_rows(table: pa.Table) -> list[tuple]:
    return list(zip(*(c.to_pylist() for c in table.columns), strict=True))


async def run_plan(cat, run: Run, phases: Phases, args, timeout: float) -> None:
    """Run the query, timing each result batch; give up after ``timeout`` seconds."""
    from eddies.engine import open_query

    batches = []
    phases.t0 = trio.current_time()
    with trio.move_on_after(timeout) as scope:
        async with open_query(SQL, cat, batch_size=args.batch_size, seed=1, **run.kwargs) as res:
            run.stats = res.stats  # filled in as the query runs, kept if it is stopped
            async for batch in res:
                run.times.append(trio.current_time() - phases.t0)
                run.counts.append(run.total + batch.num_rows)
                batches.append(batch)
        run.rows = table_rows(pa.Table.from_batches(batches, schema=res.schema))
    run.finished = not scope.cancelled_caught
    run.seconds = trio.current_time() - phases.t0


def s1_first_share(stats, switch: float, bin_s: float):
    """Share of fresh R tuples (span r, no Done bit) routed to probe:s1 rather than probe:s2:
    per phase, and per time bin (bin starts, shares)."""
    log = stats.routing_table()
    t = np.asarray(log["time_s"])
    dest = np.asarray(log["destination"].to_pylist(), dtype=object)
    fresh = (
        (np.asarray(log["span"].to_pylist(), dtype=object) == "r")
        & np.asarray(log["built"])
        & (np.asarray(log["done"].to_pylist(), dtype=object) == "")
    )
    to1 = fresh & (dest == "probe:s1")
    step = fresh & ((dest == "probe:s1") | (dest == "probe:s2"))
    n = np.asarray(log["tuples"])

    def share(mask):
        total = n[step & mask].sum()
        return n[to1 & mask].sum() / total if total else math.nan

    edges = np.arange(0.0, (t.max() if len(t) else 0) + bin_s, bin_s)
    idx = np.clip(np.digitize(t, edges) - 1, 0, len(edges) - 1)
    all1 = np.bincount(idx[to1], n[to1], len(edges))
    all_ = np.bincount(idx[step], n[step], len(edges))
    per_bin = np.divide(all1, all_, out=np.full(len(edges), np.nan), where=all_ > 0)
    return (share(t < switch), share(t >= switch)), (edges, per_bin)


def plot(runs: list[Run], args) -> pathlib.Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUT.mkdir(exist_ok=True)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    for run, style in zip(runs, ["-", "-", "--", ":", "-."], strict=False):
        if run.times:
            ax1.step(run.times, run.counts, style, where="post", label=run.label, lw=1.6)
    ax1.set(xlabel="time (s)", ylabel="result tuples", title="Fig. 10: results over time")
    for run in runs:
        if run.stats is not None and run.kwargs.get("policy") != "static":
            _, (edges, per_bin) = s1_first_share(run.stats, args.switch, args.bin)
            ax2.step(edges, 100 * per_bin, where="post", label=run.label, lw=1.6)
    ax2.set(
        xlabel="time (s)",
        ylabel="% of R tuples routed to S1 first",
        ylim=(-3, 103),
        title=f"Fig. 11: routing of fresh R tuples (per {args.bin:g} s)",
    )
    for ax in (ax1, ax2):
        ax.axvline(args.switch, color="grey", lw=1, ls="--")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle(
        f"eddies-2000 Fig. 10/11: |R| = {args.rows} at {args.rate:g}/s, lookups "
        f"{args.fast * 1e3:g} ms / {args.slow * 1e3:g} ms × {args.concurrency}, "
        f"swap at {args.switch:g} s"
    )
    fig.tight_layout()
    path = OUT / "fig10.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2,000 rows, 50 ms slow lookups")
    ap.add_argument("--rows", type=int, default=6000, help="rows of R (6000)")
    ap.add_argument("--rate", type=float, default=700, help="R scan, rows/s (700)")
    ap.add_argument(
        "--switch", type=float, help="seconds until the swap (default: (1 - sel) × rows / rate)"
    )
    ap.add_argument("--fast", type=float, default=0.001, help="fast lookup, seconds (0.001)")
    ap.add_argument("--slow", type=float, default=0.1, help="slow lookup, seconds (0.1)")
    ap.add_argument("--concurrency", type=int, default=2, help="lookups in flight per index")
    ap.add_argument("--selectivity", type=float, default=0.1, help="share of keys in S1, S2")
    ap.add_argument("--batch-size", type=int, default=10, help="eddy batch size (10)")
    ap.add_argument("--window", type=float, default=0.05, help="lottery-window seconds (0.05)")
    ap.add_argument("--queue-capacity", type=int, default=1024, help="module queues (1024)")
    ap.add_argument("--no-diagnostic", action="store_true", help="skip the default-queue run")
    ap.add_argument("--diagnostic-timeout", type=float, default=45.0, help="its cap, seconds")
    ap.add_argument("--bin", type=float, default=0.25, help="seconds per bin of Fig. 11")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.slow, args.diagnostic_timeout = 2000, 0.05, 20.0
    if args.switch is None:
        args.switch = round((1 - args.selectivity) * args.rows / args.rate, 2)
    engine_or_exit()
    from eddies.engine import Catalog, explain

    rng = np.random.default_rng(args.seed)
    n, m = args.rows, max(1, round(args.selectivity * args.rows))
    r = pa.table({"id": np.arange(n), "b1": rng.permutation(n), "b2": rng.permutation(n)})
    s1 = pa.table({"x": rng.choice(n, m, replace=False), "p": np.arange(m)})
    s2 = pa.table({"y": rng.choice(n, m, replace=False), "q": np.arange(m)})
    phases = Phases(args.switch, args.fast, args.slow)
    idx1 = SwappingIndex(s1, "x", phases, fast_first=True)
    idx2 = SwappingIndex(s2, "y", phases, fast_first=False)
    cat = Catalog()
    cat.add_table("R", r, rate=args.rate)
    cat.add_index("S1", s1.schema, on=["x"], lookup=idx1, max_concurrency=args.concurrency)
    cat.add_index("S2", s2.schema, on=["y"], lookup=idx2, max_concurrency=args.concurrency)
    names = explain(SQL, cat)
    if "probe:s1" not in names or "probe:s2" not in names:
        raise SystemExit(f"unexpected plan:\n{names}")

    deep = {"queue_capacity": args.queue_capacity}
    window = {"policy": "lottery-window", "window": args.window}
    runs = [
        Run(f"eddy: lottery-window ({args.window:g} s)", window | deep),
        Run("eddy: lottery", {"policy": "lottery"} | deep),
        Run("static S1 → S2", {"policy": "static", "order": ["probe:s1", "probe:s2"]} | deep),
        Run("static S2 → S1", {"policy": "static", "order": ["probe:s2", "probe:s1"]} | deep),
    ]
    if not args.no_diagnostic:
        runs.append(Run("eddy: lottery-window, default queues", window))
    with progress() as bar:
        task = bar.add_task("runs", total=len(runs))
        for run in runs:
            bar.update(task, description=run.label)
            idx1.slow_calls = idx2.slow_calls = idx1.calls = idx2.calls = 0
            diagnostic = "queue_capacity" not in run.kwargs
            timeout = args.diagnostic_timeout if diagnostic else math.inf
            trio.run(run_plan, cat, run, phases, args, timeout)
            run.slow_lookups = (idx1.slow_calls, idx2.slow_calls)
            bar.advance(task)

    con = duckdb.connect()
    for name, table in (("R", r), ("S1", s1), ("S2", s2)):
        con.register(name, table)
    expected = Counter(con.execute(SQL).fetchall())
    rows = []
    for run in runs:
        shares = s1_first_share(run.stats, args.switch, args.bin)[0] if run.stats else (None,) * 2
        rows.append(
            [
                run.label,
                fmt_s(run.seconds, 1) if run.finished else f"> {run.seconds:.0f}",
                f"{run.total:,}",
                "–" if not run.finished else "yes" if Counter(run.rows) == expected else "NO",
                f"{run.slow_lookups[0]:,} / {run.slow_lookups[1]:,}",
                *(fmt_pct(x) if x is not None and not math.isnan(x) else "–" for x in shares),
            ]
        )
    print_table(
        f"Fig. 10: |R| = {n} at {args.rate:g} rows/s, S1/S2 {args.selectivity:.0%} of keys, "
        f"lookups {args.fast * 1e3:g} ms fast / {args.slow * 1e3:g} ms slow × "
        f"{args.concurrency}, swap at {args.switch:g} s",
        [
            "plan",
            "seconds",
            "results",
            "= DuckDB",
            "slow lookups S1 / S2",
            "S1 1st ph. 1",
            "S1 1st ph. 2",
        ],
        rows,
        caption="S1 1st = share of fresh R tuples routed to S1 first in phase 1 (before the "
        "swap) and phase 2; slow lookups = lookups that started in their index's slow phase",
    )
    for run in runs[:2]:
        console.print(f"  [bold]{run.label}[/] busiest: {busy_summary(run.stats, top=4)}")

    main_runs = [run for run in runs if "queue_capacity" in run.kwargs]
    eddy, lottery, static12, static21 = main_runs
    best_static = min(static12.seconds, static21.seconds)
    console.print("[bold]Targets[/]")
    ok = verdict(
        "every plan's result equals DuckDB's (bag)",
        all(run.finished and Counter(run.rows) == expected for run in main_runs),
        f"{sum(expected.values()):,} rows",
    )
    speedup = best_static / eddy.seconds
    ok &= verdict(
        f"windowed eddy ≥ {TARGET_SPEEDUP}× faster than the better static plan",
        speedup >= TARGET_SPEEDUP,
        f"{best_static:.1f} s / {eddy.seconds:.1f} s = {speedup:.2f}×",
    )
    console.print(
        f"  lottery (no window): {best_static / lottery.seconds:.2f}× the better static plan "
        "(it never forgets phase 1, so it keeps S1 first)"
    )
    if len(runs) > len(main_runs):
        diag = runs[-1]
        verdict(
            "diagnostic (not a target): the windowed eddy with default queues is as fast",
            diag.finished and diag.seconds <= 1.2 * eddy.seconds,
            (f"{diag.seconds:.1f} s" if diag.finished else f"stopped after {diag.seconds:.0f} s")
            + f" vs {eddy.seconds:.1f} s; a full index AM stalls every fresh R tuple",
        )
    if not args.no_plot:
        console.print(f"  plot: {plot(runs, args)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
