"""STAIRs, stairs-2004 §5.4: R ⋈ S ⋈ T with join selectivities that reverse halfway.

Over the first half of S (by arrival) every S tuple joins ``--fanout`` R tuples and no T
tuple, over the second half the reverse; 1% of S joins both, so the result is not empty
(the tables of ``bench/adaptive.py`` section (c)). Runs the query with each join state —
SteMs (``stems``), STAIRs that never migrate (``eddyjoins``, the paper's EddyJoins) and
STAIRs with greedy state migration (``stairs``) — under each policy in ``--policies``,
the two static EddyJoins plans (S tuples to R ⋈ S first, or to S ⋈ T first) and DuckDB.

``--rate`` (rows per second per table, 0 = as fast as the eddy takes them) streams the
three tables side by side, as the paper's tables arrive in primary-key order; without it
the eddy reads the leaf tables R and T first (its build-side preference), so no R or T
tuple arrives after S and there is no history to lift.

Prints, per run: wall ms and process CPU ms (min of ``--repeat`` after a warm-up), the
intermediate tuples the joins produced (tuples out of every SteM probe or STAIR join:
the work done, independent of machine load), and the STAIR migrations with the tuples
they moved. Run: ``python bench/stairs.py [--rows 50000] [--rate 200000] [--repeat 3]``.
Timings are wall clock on a shared machine: read the CPU and tuple columns.
"""

from __future__ import annotations

import argparse
import time

import duckdb
from adaptive import stairs_tables
from common import engine_or_exit, fmt_ms, print_table

from eddies.engine import Catalog, run_query

SQL = "SELECT count(*) FROM r, s, t WHERE r.a = s.a AND s.b = t.b"


def catalog(tables, rate: float) -> Catalog:
    cat = Catalog()
    for name, tab in tables.items():
        cat.add_table(name, tab, **({"rate": rate} if rate else {}))
    return cat


def join_work(stats) -> int:
    """Tuples out of every SteM probe and STAIR join: the intermediate results made."""
    return sum(m.tuples_out for m in stats.modules.values() if m.kind in ("probe", "join"))


def measure(fn, repeat: int):
    run = fn()  # warm-up, and the stats of one run
    walls, cpus = [], []
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        run = fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return run, min(walls), min(cpus)


def main(argv: list[str] | None = None) -> int:
    engine_or_exit()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--fanout", type=int, default=5)
    ap.add_argument("--rate", type=float, default=0.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--policies", default="lottery,rank")
    ap.add_argument("--batch-size", type=int, default=None)
    args = ap.parse_args(argv)
    tables = stairs_tables(args.rows, args.fanout)
    cat = catalog(tables, args.rate)
    opts = {"batch_size": args.batch_size}
    runs = {}
    for join_state in ("stems", "eddyjoins", "stairs"):
        for policy in args.policies.split(","):
            runs[f"{join_state} {policy}"] = lambda js=join_state, p=policy: run_query(
                SQL, cat, policy=p, join_state=js, **opts
            )
    for label, order in (
        ("eddyjoins static: S to R⋈S first", ("join:r-s", "join:s-t")),
        ("eddyjoins static: S to S⋈T first", ("join:s-t", "join:r-s")),
    ):
        runs[label] = lambda order=order: run_query(
            SQL, cat, policy="static", order=order, join_state="eddyjoins", **opts
        )
    rows, results = [], {}
    for label, fn in runs.items():
        run, wall, cpu = measure(fn, args.repeat)
        st = run.stats
        results[label] = run.table.column(0)[0].as_py()
        rows.append(
            [
                label,
                fmt_ms(wall),
                fmt_ms(cpu),
                f"{join_work(st):,}",
                str(st.stair_migrations),
                f"{st.stair_migrated_tuples:,}",
            ]
        )
    con = duckdb.connect()
    for name, tab in tables.items():
        con.register(name, tab)
    w0 = time.perf_counter()
    results["duckdb"] = con.execute(SQL).fetchone()[0]
    rows.append(["duckdb", fmt_ms(time.perf_counter() - w0), "", "", "", ""])
    if len(set(results.values())) != 1:
        raise SystemExit(f"results differ: {results}")
    print_table(
        f"STAIRs §5.4: R⋈S⋈T, 3×{args.rows:,} rows, selectivities reversed halfway "
        f"(rate {args.rate or 'unlimited'} rows/s; result {results['duckdb']:,})",
        ["run", "wall ms", "CPU ms", "join tuples out", "migrations", "tuples moved"],
        rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
