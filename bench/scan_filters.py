"""Dynamic scan filters (issue 11, item 1): a complete SteM's keys skip Parquet row groups.

Two joins over Parquet files with many row groups, each run by eddies with the dynamic
filter on (the default) and off (``filters=False``, which also turns the SteM filters
off), and by DuckDB (2 threads) on the same files, in one run:

(a) ``star_dates``: a sales fact table clustered by its date key (as time-ordered facts
    are), 2M rows in row groups of 20k, joined to a 730-day date dimension restricted to
    one month and to a 100-row store dimension restricted to one state (``count(*)``,
    ``sum``). The date SteM's keys cover one month: the sales row groups of the other
    23 months are skipped by their statistics.
(b) ``tpch_sf1_keys``: TPC-H SF1 ``orders ⋈ lineitem`` on orderkey with ``o_orderkey <
    120000 AND o_orderpriority = '1-URGENT'`` (``count(*)``). The orders selection is
    pushed into the orders scan statically; the lineitem side learns the order keys only
    from the orders SteM, once it holds its table (the files from ``tpchgen-cli``, as in
    bench/joins.py; lineitem has 53 row groups).

Printed per engine: rows the fact scan delivered (after its filters), row groups read and
skipped (by the pushed selection and by the dynamic filter), rows the dynamic filter
removed, and the min of ``--repeat`` timed runs after one warm-up; the answers must agree.
Run: ``python bench/scan_filters.py [--repeat 3] [--tpch-dir bench/out/tpch]``.
The machine running it may be shared: times are indicative, the counts are exact.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import best_of, fmt_ms, print_table

from eddies.engine import Catalog, run_query

OUT = pathlib.Path(__file__).resolve().parent / "out"
DUCKDB_THREADS = 2

STAR_SQL = """
SELECT count(*), sum(s.amount) FROM sales s, date_dim d, store t
WHERE s.date_key = d.date_key AND s.store_key = t.store_key
  AND d.year = 2024 AND d.month = 3 AND t.state = 'CA'
"""
TPCH_SQL = """
SELECT count(*) FROM orders o, lineitem l
WHERE l.l_orderkey = o.o_orderkey AND o.o_orderkey < 120000
  AND o.o_orderpriority = '1-URGENT'
"""


def star_files(where: pathlib.Path, rows: int = 2_000_000) -> dict[str, pathlib.Path]:
    """The star's three Parquet files, written once (seeded)."""
    where.mkdir(parents=True, exist_ok=True)
    paths = {t: where / f"{t}.parquet" for t in ("sales", "date_dim", "store")}
    if all(p.exists() for p in paths.values()):
        return paths
    rng = np.random.default_rng(11)
    days = 730
    dates = np.datetime64("2023-01-01") + np.arange(days).astype("timedelta64[D]")
    date_dim = pa.table(
        {
            "date_key": pa.array(np.arange(days), pa.int32()),
            "year": dates.astype("datetime64[Y]").astype(int) + 1970,
            "month": dates.astype("datetime64[M]").astype(int) % 12 + 1,
        }
    )
    states = np.array(["CA", "NY", "TX", "WA", "OR"])
    store = pa.table(
        {"store_key": pa.array(np.arange(100), pa.int32()), "state": states[np.arange(100) % 5]}
    )
    sales = pa.table(
        {
            "date_key": pa.array(np.sort(rng.integers(0, days, rows)), pa.int32()),
            "store_key": pa.array(rng.integers(0, 100, rows), pa.int32()),
            "amount": rng.integers(1, 1000, rows),
        }
    )
    pq.write_table(date_dim, paths["date_dim"])
    pq.write_table(store, paths["store"])
    pq.write_table(sales, paths["sales"], row_group_size=20_000)
    return paths


def tpch_files(where: pathlib.Path) -> dict[str, pathlib.Path] | None:
    """The SF1 orders and lineitem files bench/joins.py generates, or None if absent."""
    paths = {t: where / "sf1" / f"{t}.parquet" for t in ("orders", "lineitem")}
    return paths if all(p.exists() for p in paths.values()) else None


def values(table: pa.Table) -> list[tuple[int, ...]]:
    """The answer's rows as integers (DuckDB sums to DECIMAL, eddies to BIGINT)."""
    return [tuple(int(v) for v in row.values()) for row in table.to_pylist()]


def eddies_runner(paths: dict[str, pathlib.Path], sql: str, on: bool):
    """A call running ``sql`` over the files (catalog built once; ``on``: filters)."""
    cat = Catalog()
    for name, path in paths.items():
        cat.add_table(name, str(path))

    def run():
        result = run_query(sql, cat, filters=on)
        return values(result.table), result.stats

    return run


def duckdb_runner(paths: dict[str, pathlib.Path], sql: str):
    """A call running ``sql`` in DuckDB over ``read_parquet`` views of the files."""
    con = duckdb.connect(":memory:")
    con.execute(f"SET threads={DUCKDB_THREADS}")
    for name, path in paths.items():
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{path}')")

    def run():
        return values(con.sql(sql).to_arrow_table()), None

    return run


def scan_row(stats, fact: str) -> list:
    """The fact scan's counts as table cells."""
    m = stats.modules[f"scan:{fact}"]
    read = m.row_groups - m.row_groups_skipped - m.dynamic_row_groups_skipped
    return [
        f"{m.tuples_out:,}",
        f"{read}/{m.row_groups}",
        str(m.row_groups_skipped),
        str(m.dynamic_row_groups_skipped),
        f"{m.dynamic_rows_filtered:,}",
    ]


def bench(title: str, paths, sql: str, fact: str, repeat: int) -> None:
    """Time the three runners, check their answers agree, print one table."""
    rows = []
    answers = {}
    for label, runner in (
        ("eddies, dynamic filter on", eddies_runner(paths, sql, True)),
        ("eddies, filters=False", eddies_runner(paths, sql, False)),
        ("DuckDB", duckdb_runner(paths, sql)),
    ):
        timing = best_of(runner, repeat=repeat)
        answer, stats = timing.value
        answers[label] = answer
        counts = scan_row(stats, fact) if stats is not None else ["–"] * 5
        rows.append([label, *counts, fmt_ms(timing.best)])
    if len({repr(a) for a in answers.values()}) != 1:
        raise SystemExit(f"{title}: the answers differ: {answers}")
    print_table(
        f"{title}: {next(iter(answers.values()))}",
        [
            "engine",
            f"{fact} rows delivered",
            "row groups read",
            "skipped (pushed)",
            "skipped (dynamic)",
            "rows removed (dynamic)",
            "best ms",
        ],
        rows,
        caption=f"min of {repeat} after one warm-up; shared 2-core machine",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tpch-dir", type=pathlib.Path, default=OUT / "tpch")
    args = ap.parse_args(argv)
    bench("star_dates", star_files(OUT / "scan_filters"), STAR_SQL, "sales", args.repeat)
    tpch = tpch_files(args.tpch_dir)
    if tpch is None:
        print(f"tpch_sf1_keys skipped: no SF1 files under {args.tpch_dir} (bench/joins.py)")
    else:
        bench("tpch_sf1_keys", tpch, TPCH_SQL, "lineitem", args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
