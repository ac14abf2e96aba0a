"""eddies-2000 §4, Figures 4, 5 and 6: two expensive selections, static orders vs. eddies.

    SELECT * FROM u WHERE s1(u.unique1) AND s2(u.unique2)

over one Wisconsin relation ``u``. ``s1`` and ``s2`` are expensive UDFs (a model or a
web service behind a predicate) with a cost in abstract *delay units* per tuple and a
selectivity set through the data:

* ``s1(unique1)`` passes iff ``unique1 < sel1 * n``; ``unique1`` is a random permutation,
  so exactly ``sel1`` of the rows pass, spread evenly over the scan.
* ``s2(unique2)`` passes iff ``(unique2 * 7919) mod n < sel2 * n``: a fixed scramble of the
  sequential key (7919 is prime and coprime to n), so again an exact selectivity spread
  over the scan, and independent of ``s1`` (a function of the position only, while
  ``unique1`` is a random permutation of the positions).

Fig. 4: s2 costs 5 units, s1 costs 1..25 units across runs, both 50% selective.
Fig. 5: both cost 5 units, s2 50% selective, s1's selectivity 0.1..0.9 across runs.
For each point: static s1→s2, static s2→s1 (the paper simulates static plans with an
eddy that enforces the order; so do we, ``policy="static"``), the naive back-pressure
eddy and the lottery eddy. Fig. 6: the share of tuples the eddies sent to s1 first.

How the UDF cost is spent (``--cpu``):

* ``shared`` (default): the two predicates are CPU-bound and share ONE simulated
  processor, like the paper's spin loops on a single-processor Ultra-1. Each call asks
  for ``cost * unit * len(batch)`` seconds of that processor, which it gets in
  round-robin quanta through a FIFO lock (processor sharing, as time slicing does), so a
  query's completion time is its total work. This is the setting in which the paper's
  cost model, and hence Fig. 5, holds: T(s1→s2) = n·u·(c1 + sel1·c2).
* ``parallel``: each predicate is latency-bound (a remote model or web service) and
  simply ``await trio.sleep(...)``; the two run concurrently, so a static order's time is
  that of its bottleneck, max(n·c1, n·sel1·c2)·u, and Fig. 5's two static orders tie.

Both are ``async def`` UDFs awaited in the eddy's trio run rather than sync UDFs in worker
threads: a sleeping coroutine costs no real CPU and no GIL, so the measured times are the
simulated costs plus the engine's own overhead, undisturbed by thread scheduling on this
2-core machine (a spinning sync UDF would fight the eddy for the GIL).

Run: ``python bench/fig4_5_selections.py [--quick]``; PNGs go to ``bench/out/``.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import re
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import trio
from common import (
    busy_summary,
    console,
    engine_or_exit,
    fmt_pct,
    fmt_ratio,
    fmt_s,
    print_table,
    progress,
    verdict,
)

from eddies.sources.wisconsin import wisconsin_table

SQL = "SELECT * FROM u WHERE s1(u.unique1) AND s2(u.unique2)"
SCRAMBLE = 7919  # prime multiplier for s2's scramble of unique2
OUT_DIR = pathlib.Path(__file__).resolve().parent / "out"
PLANS = ("s1→s2", "s2→s1", "naive", "lottery")
TARGET_LOTTERY = 1.15
TARGET_NAIVE = 1.15
TARGET_SPREAD = 1.5


# ---------------------------------------------------------------- simulated cost
class SharedCPU:
    """One simulated processor shared by the predicates: exact processor sharing.

    ``work(s)`` returns once the caller has received ``s`` seconds of the processor while
    ``k`` callers active at once each progress at ``1/k`` of real time — what OS time
    slicing among the paper's spin loops does. The schedule is kept in virtual time:
    whoever wakes first advances every job by the real time elapsed, so trio's
    millisecond timer rounding delays a notification but loses no processor time to
    the jobs still running.
    """

    def __init__(self) -> None:
        self.jobs: dict[int, list] = {}  # id -> [remaining seconds, trio.Event]
        self.last = 0.0
        self.busy = 0.0
        self._ids = 0

    def _advance(self, now: float) -> None:
        elapsed, self.last = now - self.last, now
        while elapsed > 0 and self.jobs:
            k = len(self.jobs)
            jid, (least, event) = min(self.jobs.items(), key=lambda kv: kv[1][0])
            step = min(least, elapsed / k)  # progress of every active job
            for job in self.jobs.values():
                job[0] -= step
            elapsed -= step * k
            self.busy += step * k
            if step >= least - 1e-9:
                del self.jobs[jid]
                event.set()

    def _next_event(self) -> float:
        return self.last + min(job[0] for job in self.jobs.values()) * len(self.jobs)

    async def work(self, seconds: float) -> None:
        if seconds <= 0:
            return
        self._advance(trio.current_time())
        event = trio.Event()
        self._ids += 1
        self.jobs[self._ids] = [seconds, event]
        while not event.is_set():
            with trio.move_on_at(self._next_event()):
                await event.wait()
            self._advance(trio.current_time())


class ParallelLatency:
    """Independent latency per call: predicates overlap freely (a remote service)."""

    def __init__(self) -> None:
        self.busy = 0.0

    async def work(self, seconds: float) -> None:
        await trio.sleep(seconds)
        self.busy += seconds


def make_predicate(cpu, seconds_per_tuple: float, passes):
    """An async vectorized UDF: spend the cost, then evaluate ``passes`` on the column."""

    async def predicate(col: pa.Array) -> np.ndarray:
        values = col.to_numpy(zero_copy_only=False)
        await cpu.work(seconds_per_tuple * len(values))
        return passes(values)

    return predicate


# ---------------------------------------------------------------- experiment
@dataclass
class Point:
    sweep: str  # "fig4" or "fig5"
    x: float  # s1's cost (fig4) or s1's selectivity (fig5)
    c1: float
    c2: float
    sel1: float
    sel2: float
    seconds: dict[str, float] = field(default_factory=dict)
    share_s1_first: dict[str, float | None] = field(default_factory=dict)
    busy: dict[str, str] = field(default_factory=dict)

    def best_static(self) -> float:
        return min(self.seconds["s1→s2"], self.seconds["s2→s1"])

    def worst_static(self) -> float:
        return max(self.seconds["s1→s2"], self.seconds["s2→s1"])

    def ratio(self, plan: str) -> float:
        return self.seconds[plan] / self.best_static()


def model_seconds(p: Point, n: int, unit: float, cpu_model: str) -> tuple[float, float]:
    """The cost model's completion time of s1→s2 and s2→s1 (ignoring engine overhead)."""
    if cpu_model == "shared":
        return n * unit * (p.c1 + p.sel1 * p.c2), n * unit * (p.c2 + p.sel2 * p.c1)
    return n * unit * max(p.c1, p.sel1 * p.c2), n * unit * max(p.c2, p.sel2 * p.c1)


def sm_names(explain_text: str) -> tuple[str, str]:
    """(SM of s1, SM of s2) as explain() names them; falls back to ("sm1", "sm2")."""
    found: dict[str, str] = {}
    for line in explain_text.splitlines():
        sms = re.findall(r"\bsm\d+\b", line)
        for udf in ("s1", "s2"):
            if len(set(sms)) == 1 and re.search(rf"\b{udf}\s*\(", line, re.IGNORECASE):
                found.setdefault(udf, sms[0])
    if len(found) == 2 and found["s1"] != found["s2"]:
        return found["s1"], found["s2"]
    console.print("[yellow]could not map s1/s2 to SM names in explain(); assuming sm1, sm2[/]")
    return "sm1", "sm2"


def s1_first_share(stats, span: tuple[str, ...], sm1: str, sm2: str) -> float | None:
    """Share of fresh tuples (span = u alone, nothing done) whose first SM was s1's."""
    to1 = to2 = 0
    for ev in stats.routing:
        if tuple(ev.span) == span and not ev.done:
            if ev.destination == sm1:
                to1 += ev.tuples
            elif ev.destination == sm2:
                to2 += ev.tuples
    return to1 / (to1 + to2) if to1 + to2 else None


def run_point(point: Point, table: pa.Table, args, seed: int) -> None:
    from eddies.engine import Catalog, explain, run_query

    n = table.num_rows
    unique1 = table["unique1"].to_numpy()
    unique2 = table["unique2"].to_numpy()
    thr1, thr2 = round(point.sel1 * n), round(point.sel2 * n)
    expected = int(np.count_nonzero((unique1 < thr1) & ((unique2 * SCRAMBLE) % n < thr2)))

    def fresh_catalog():
        cpu = SharedCPU() if args.cpu == "shared" else ParallelLatency()
        cat = Catalog()
        cat.add_table("u", table, batch_size=args.batch_size)
        cat.add_function("s1", make_predicate(cpu, point.c1 * args.unit, lambda v: v < thr1))
        cat.add_function(
            "s2",
            make_predicate(cpu, point.c2 * args.unit, lambda v: (v * SCRAMBLE) % n < thr2),
        )
        return cat

    sm1, sm2 = args.sm_names or sm_names(explain(SQL, fresh_catalog()))
    args.sm_names = (sm1, sm2)
    plans = {
        "s1→s2": {"policy": "static", "order": [sm1, sm2]},
        "s2→s1": {"policy": "static", "order": [sm2, sm1]},
        "naive": {"policy": "naive"},
        "lottery": {"policy": "lottery"},
    }
    for i, (label, kw) in enumerate(plans.items()):
        cat = fresh_catalog()
        times = []
        for r in range(args.repeat):
            t0 = time.perf_counter()
            run = run_query(
                SQL,
                cat,
                batch_size=args.batch_size,
                queue_capacity=args.queue_capacity,
                seed=seed + 97 * i + r,
                **kw,
            )
            times.append(time.perf_counter() - t0)
            if run.table.num_rows != expected:
                raise SystemExit(
                    f"{point.sweep} x={point.x} {label}: {run.table.num_rows} rows, "
                    f"expected {expected}"
                )
        point.seconds[label] = min(times)
        point.share_s1_first[label] = s1_first_share(run.stats, ("u",), sm1, sm2)
        point.busy[label] = busy_summary(run.stats, top=4)


def sweep_points(args) -> tuple[list[Point], list[Point]]:
    # The cost sweep runs to 25 units (the paper's stops at 9): under the paper's cost model
    # the worse static order is (c1 + 2.5) / (5 + c1 / 2) times the better one, which passes
    # 1.5x only beyond c1 = 20, and the issue asks for 1.5x at both ends of the sweep.
    if args.quick:
        costs, sels = [1, 9, 25], [0.1, 0.5, 0.9]
    elif args.fine:
        costs, sels = [1, 3, 5, 7, 9, 13, 17, 21, 25], [round(0.1 * k, 1) for k in range(1, 10)]
    else:
        costs, sels = [1, 5, 9, 17, 25], [0.1, 0.3, 0.5, 0.7, 0.9]
    fig4 = [Point("fig4", c, c1=c, c2=5, sel1=0.5, sel2=0.5) for c in costs]
    fig5 = [Point("fig5", s, c1=5, c2=5, sel1=s, sel2=0.5) for s in sels]
    return fig4, fig5


# ---------------------------------------------------------------- reporting
def report(points: list[Point], title: str, xlabel: str, args, n: int) -> None:
    rows, overheads = [], []
    for p in points:
        m12, m21 = model_seconds(p, n, args.unit, args.cpu)
        overheads += [p.seconds["s1→s2"] - m12, p.seconds["s2→s1"] - m21]
        rows.append(
            [
                f"{p.x:g}",
                fmt_s(p.seconds["s1→s2"]),
                fmt_s(p.seconds["s2→s1"]),
                fmt_s(p.seconds["naive"]),
                fmt_s(p.seconds["lottery"]),
                fmt_ratio(p.ratio("naive")),
                fmt_ratio(p.ratio("lottery")),
                fmt_ratio(p.worst_static() / p.best_static()),
                fmt_ratio(max(m12, m21) / min(m12, m21)),
                fmt_pct(p.share_s1_first.get("naive")),
                fmt_pct(p.share_s1_first.get("lottery")),
            ]
        )
    print_table(
        title,
        [
            xlabel,
            "s1→s2",
            "s2→s1",
            "naive",
            "lottery",
            "naive/best",
            "lott/best",
            "worse/best",
            "model w/b",
            "naive s1 1st",
            "lott s1 1st",
        ],
        rows,
        caption="seconds; best = the better static order; model w/b = the cost model's "
        f"worse/best ({args.cpu} cpu, no engine overhead);\ns1 1st = share of fresh tuples "
        "routed to s1 first; static runs took on average "
        f"{sum(overheads) / len(overheads):+.2f} s vs. the cost model (engine overhead)",
    )


def check_targets(fig4: list[Point], fig5: list[Point]) -> bool:
    console.print("[bold]Targets[/]")
    ok = True
    for name, pts in (("Fig. 4", fig4), ("Fig. 5", fig5)):
        worst = max(pts, key=lambda p: p.ratio("lottery"))
        ok &= verdict(
            f"{name}: lottery within {TARGET_LOTTERY}× of the better static order at every point",
            all(p.ratio("lottery") <= TARGET_LOTTERY for p in pts),
            f"max {worst.ratio('lottery'):.3f}× at x={worst.x:g}",
        )
    worst = max(fig4, key=lambda p: p.ratio("naive"))
    ok &= verdict(
        f"Fig. 4: naive within {TARGET_NAIVE}× of the better static order across the cost sweep",
        all(p.ratio("naive") <= TARGET_NAIVE for p in fig4),
        f"max {worst.ratio('naive'):.3f}× at x={worst.x:g}",
    )
    ends = [fig4[0], fig4[-1]]
    spreads = [p.worst_static() / p.best_static() for p in ends]
    ok &= verdict(
        f"Fig. 4: worse static order ≥ {TARGET_SPREAD}× the better one at the cost sweep's ends",
        all(s >= TARGET_SPREAD for s in spreads),
        ", ".join(f"x={p.x:g}: {s:.2f}×" for p, s in zip(ends, spreads, strict=True)),
    )
    # Not a target: with equal costs and s2 at 50%, the static orders differ by at most
    # max(1 + sel2, 2 / (1 + sel2)) = 1.33x over the whole selectivity range (shared cpu).
    spreads5 = [p.worst_static() / p.best_static() for p in (fig5[0], fig5[-1])]
    console.print(
        "  info  Fig. 5: worse/better static order at the sweep ends "
        + ", ".join(
            f"x={p.x:g}: {s:.2f}×" for p, s in zip((fig5[0], fig5[-1]), spreads5, strict=True)
        )
        + " (bounded by 1.33× with equal costs and s2 at 50%)"
    )
    return ok


def plot(fig4: list[Point], fig5: list[Point], args, n: int) -> list[pathlib.Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    styles = {"s1→s2": "o-", "s2→s1": "s-", "naive": "^--", "lottery": "D-"}
    paths = []
    for pts, name, xlabel, title in (
        (fig4, "fig4", "cost of s1 (delay units)", "Fig. 4: two 50% selections, s2 cost 5"),
        (fig5, "fig5", "selectivity of s1", "Fig. 5: costs 5 and 5, s2 selectivity 50%"),
    ):
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        xs = [p.x for p in pts]
        for plan in PLANS:
            ax.plot(xs, [p.seconds[plan] for p in pts], styles[plan], label=plan)
        model = [model_seconds(p, n, args.unit, args.cpu) for p in pts]
        ax.plot(xs, [min(m) for m in model], ":", color="gray", label="model: best static")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("completion time (s)")
        ax.set_title(title, fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = OUT_DIR / f"{name}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, pts, xlabel, title in (
        (axes[0], fig5, "selectivity of s1", "Fig. 6: tuples routed to s1 first (Fig. 5 runs)"),
        (axes[1], fig4, "cost of s1 (delay units)", "the same for the Fig. 4 runs"),
    ):
        xs = [p.x for p in pts]
        for plan, style in (("naive", "^--"), ("lottery", "D-")):
            ys = [
                math.nan if p.share_s1_first.get(plan) is None else 100 * p.share_s1_first[plan]
                for p in pts
            ]
            ax.plot(xs, ys, style, label=plan)
        ax.axhline(50, color="gray", lw=0.8, ls=":")
        ax.set_ylim(0, 100)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("% of tuples routed s1 → s2")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = OUT_DIR / "fig6.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 points per sweep, 1,600 rows")
    ap.add_argument("--fine", action="store_true", help="9 points per sweep (about 4 min)")
    ap.add_argument("--rows", type=int, default=None, help="rows of u (default 3000; quick 1600)")
    ap.add_argument(
        "--unit", type=float, default=125e-6, help="seconds per tuple per delay unit (125e-6)"
    )
    ap.add_argument("--cpu", choices=("shared", "parallel"), default="shared")
    ap.add_argument("--batch-size", type=int, default=40)
    ap.add_argument("--queue-capacity", type=int, default=2, help="batches per module queue")
    ap.add_argument("--repeat", type=int, default=1, help="runs per plan and point (min kept)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    args.sm_names = None
    engine_or_exit()

    n = args.rows or (1600 if args.quick else 3000)
    table = wisconsin_table(n, seed=args.seed)
    fig4, fig5 = sweep_points(args)
    console.print(
        f"[bold]eddies-2000 Fig. 4–6[/]: {SQL}\n  u = Wisconsin({n:,} rows), unit = "
        f"{args.unit * 1e6:g} µs/tuple, cpu = {args.cpu}, batch_size = {args.batch_size}, "
        f"queue_capacity = {args.queue_capacity}, repeat = {args.repeat}"
    )
    expected_s = (
        sum(
            sum(model_seconds(p, n, args.unit, args.cpu))
            + 2 * min(model_seconds(p, n, args.unit, args.cpu))
            for p in fig4 + fig5
        )
        * args.repeat
    )
    console.print(f"  the cost model expects about {expected_s:.0f} s of runs")

    t_start = time.perf_counter()
    with progress() as bar:
        task = bar.add_task("runs", total=len(fig4) + len(fig5))
        for k, p in enumerate(fig4 + fig5):
            bar.update(task, description=f"{p.sweep} x={p.x:g}")
            run_point(p, table, args, seed=args.seed * 1000 + 10 * k)
            bar.advance(task)
    console.print(
        f"  SM names: s1 → {args.sm_names[0]}, s2 → {args.sm_names[1]}; "
        f"wall time {time.perf_counter() - t_start:.1f} s"
    )

    report(fig4, "Fig. 4 — s1 cost varies, s2 cost 5, both 50%", "c1", args, n)
    report(fig5, "Fig. 5 — both cost 5, s2 50%, s1 selectivity varies", "sel1", args, n)
    console.print("[bold]Busiest modules (RunStats.busy_seconds) at the sweep ends[/]")
    for p in (fig4[0], fig4[-1], fig5[0], fig5[-1]):
        for plan in PLANS:
            console.print(f"  {p.sweep} x={p.x:g} {plan:8s} {p.busy[plan]}")
    ok = check_targets(fig4, fig5)
    if not args.no_plot:
        for path in plot(fig4, fig5, args, n):
            console.print(f"  wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
