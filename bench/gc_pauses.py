"""Full garbage collections during small queries, with and without engine/runtime/gc_freeze.py.

Runs the issue-10 (a) query (2,000 rows, a 5% predicate, a per-row ``async def`` UDF; the
UDF sleeps 0.1 ms here so that many runs fit) ``--runs`` times in a fresh interpreter,
once with the default (the import-time heap frozen out of collections) and once with
``EDDIES_GC_FREEZE=0``, and prints per generation how many collections ran and how long
they took (``gc.callbacks``), plus the objects a full collection scans. Side by side in
one run::

    .venv/bin/python bench/gc_pauses.py              # 60 runs each
    .venv/bin/python bench/gc_pauses.py --runs 200
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from common import print_table

CHILD = r"""
import gc, json, sys, time
sys.path.insert(0, {bench!r})
import trio
from adaptive_async import make_table, query
from eddies.engine import Catalog, run_query

pauses = {{0: [], 1: [], 2: []}}
def timed(phase, info):
    if phase == "start":
        timed.t = time.perf_counter()
    else:
        pauses[info["generation"]].append((time.perf_counter() - timed.t) * 1e3)

async def slow(x):
    await trio.sleep(0.0001)
    return x % 2 == 0

table = make_table(2000, 100, 1)
def once():
    cat = Catalog()
    cat.add_table("t", table)
    cat.add_function("slow", slow, vectorized=False, max_concurrency=32)
    run_query(query(100), cat, seed=1)

once()
gc.callbacks.append(timed)
for _ in range({runs}):
    once()
gc.callbacks.remove(timed)
print(json.dumps({{"pauses": pauses, "tracked": len(gc.get_objects()),
                   "frozen": gc.get_freeze_count()}}))
"""


def measure(runs: int, freeze: bool) -> dict:
    env = dict(os.environ)
    env["EDDIES_GC_FREEZE"] = "1" if freeze else "0"
    bench = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(bench=bench, runs=runs)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    rows = []
    for freeze in (False, True):
        seen = measure(args.runs, freeze)
        for gen in ("0", "1", "2"):
            ms = sorted(seen["pauses"][gen])
            rows.append(
                [
                    "frozen (default)" if freeze else "EDDIES_GC_FREEZE=0",
                    gen,
                    len(ms),
                    f"{ms[len(ms) // 2]:.2f}" if ms else "-",
                    f"{ms[-1]:.2f}" if ms else "-",
                    f"{sum(ms):.1f}",
                    seen["tracked"] if gen == "2" else "",
                    seen["frozen"] if gen == "2" else "",
                ]
            )
    print_table(
        f"garbage collections over {args.runs} runs of the issue-10 (a) query",
        [
            "heap",
            "generation",
            "collections",
            "median ms",
            "max ms",
            "total ms",
            "objects scanned",
            "frozen",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
