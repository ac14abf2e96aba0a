"""Per-visit overhead of the eddy (issue 11, item 5): R⋈S⋈T at small and large batches.

The STAIRs §5.4 R⋈S⋈T of ``adaptive.py`` section (c) (3 × 50,000 rows) run with scan
batches of 256 and 32,768 rows: the work on tuples is the same, only the number of module
visits (Works) differs, so ``(t_256 − t_32768) / (visits_256 − visits_32768)`` is the
fixed cost of one visit. Each batch size runs with module visits inline (the default: the
eddy calls SteMs and UDF-free SMs directly) and through the modules' queues
(``inline_visits=False``, as before).

Prints wall and process CPU milliseconds (min of ``--repeat`` after a warm-up; CPU is what
counts on a loaded machine) and the visits per run (``RunStats`` batches_in summed).

Run: ``python bench/visits.py [--repeat 5] [--sizes 256,32768]``.
"""

from __future__ import annotations

import argparse
import gc
import time

from adaptive import stairs_tables
from common import print_table

from eddies.engine import Catalog, run_query

SQL = "SELECT count(*) FROM r, s, t WHERE r.a = s.a AND s.b = t.b"


def measure(cat: Catalog, batch_size: int, inline: bool, repeat: int) -> tuple[float, float, int]:
    """(best wall s, best CPU s, module visits per run) of the query."""

    def once():
        return run_query(SQL, cat, batch_size=batch_size, inline_visits=inline)

    run = once()
    visits = sum(m.batches_in for n, m in run.stats.modules.items() if not n.startswith("scan"))
    wall = cpu = float("inf")
    for _ in range(repeat):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        once()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu, visits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", default="256,32768")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    cat = Catalog()
    for name, tab in stairs_tables().items():
        cat.add_table(name, tab)
    rows = []
    for inline in (True, False):
        results = {n: measure(cat, n, inline, args.repeat) for n in sizes}
        small, large = results[min(sizes)], results[max(sizes)]
        extra = small[2] - large[2]
        per_visit = (small[1] - large[1]) / extra * 1e3 if extra else float("nan")
        for n, (wall, cpu, visits) in results.items():
            rows.append(
                [
                    "inline" if inline else "queued",
                    f"{n:,}",
                    f"{wall * 1e3:.1f}",
                    f"{cpu * 1e3:.1f}",
                    f"{visits:,}",
                    f"{per_visit:.3f}" if n == min(sizes) else "",
                ]
            )
    print_table(
        "R⋈S⋈T (3 × 50,000 rows): fixed cost per module visit",
        ["visits", "batch", "wall ms", "CPU ms", "visits/run", "CPU ms/visit"],
        rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
