"""The 22 TPC-H queries (issue 26): eddies vs. DuckDB wall time per query, same Arrow tables.

Data: every TPC-H table at each scale factor asked for, generated once as Parquet by
``tpchgen-cli`` (the ``bench`` / ``dev`` extra) into ``--tpch-dir`` (default
``bench/out/tpch``) and read into memory with pyarrow. eddies runs over one Catalog of those
tables (default policy unless ``--policy``), DuckDB over one connection with the same
tables registered; both answer from memory, so the times compare engines, not I/O. The
query text is the test suite's (``tests/tpch_queries.py``: the specification's queries with
their validation parameters); ``tests/test_tpch_suite.py`` checks the answers, this script
only times them (best of ``--repeat`` after one warm-up, ``common.best_of``) and checks
that both engines return as many rows.

Run: ``python bench/tpch_suite.py [--sf 0.01 0.1] [--repeat 3] [--only 1,9,21]``.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from common import best_of, console, engine_or_exit, fmt_ms, fmt_ratio, print_table

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the query text lives with the suite that checks it
from tpch_queries import QUERIES  # noqa: E402

TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")


def tpch_tables(sf: float, data_dir: pathlib.Path) -> dict[str, pa.Table]:
    """The 8 tables at ``sf``, generated into ``data_dir/sf<sf>`` by tpchgen-cli if absent."""
    where = data_dir / f"sf{sf:g}"
    if not all((where / f"{t}.parquet").exists() for t in TABLES):
        where.mkdir(parents=True, exist_ok=True)
        exe = pathlib.Path(sys.executable).with_name("tpchgen-cli")
        cmd = [str(exe) if exe.exists() else "tpchgen-cli", "parquet", "-s", f"{sf:g}"]
        cmd += [f"--output-dir={where}"]
        console.print(f"generating TPC-H SF{sf:g}: {' '.join(cmd)}")
        try:
            subprocess.run(cmd, check=True, capture_output=True)
        except FileNotFoundError as exc:
            raise SystemExit("tpchgen-cli not found: pip install -e '.[bench]'") from exc
    return {t: pq.read_table(where / f"{t}.parquet") for t in TABLES}


def time_suite(sf: float, args: argparse.Namespace) -> list[list[str]]:
    """One table row per query: eddies and DuckDB best times (ms), their ratio, row counts."""
    from eddies.engine import Catalog, EddiesError, execute

    tables = tpch_tables(sf, args.tpch_dir)
    catalog = Catalog()
    con = duckdb.connect(":memory:", config={"threads": 2})  # as the issues measure it
    for name, table in tables.items():
        catalog.add_table(name, table)
        con.register(name, table)
    rows = []
    for number in args.only or sorted(QUERIES):
        sql = QUERIES[number]
        ddb = best_of(lambda sql=sql: con.sql(sql).to_arrow_table(), repeat=args.repeat)
        try:
            ours = best_of(
                lambda sql=sql: execute(sql, catalog, policy=args.policy), repeat=args.repeat
            )
        except EddiesError as exc:
            rows.append([f"Q{number}", "refused", fmt_ms(ddb.best), "–", type(exc).__name__])
            continue
        same = "yes" if ours.value.num_rows == ddb.value.num_rows else "NO"
        ratio = fmt_ratio(ours.best / ddb.best)
        rows.append([f"Q{number}", fmt_ms(ours.best), fmt_ms(ddb.best), ratio, same])
    con.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, nargs="+", default=[0.01, 0.1])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--policy", default=None, help="routing policy (default: the engine's)")
    ap.add_argument("--only", type=lambda s: [int(x) for x in s.split(",")], default=None)
    ap.add_argument("--tpch-dir", type=pathlib.Path, default=ROOT / "bench" / "out" / "tpch")
    args = ap.parse_args()
    if args.policy is None:
        from eddies.router.run_choices import DEFAULT_POLICY

        args.policy = DEFAULT_POLICY
    engine_or_exit()
    for sf in args.sf:
        print_table(
            f"TPC-H SF{sf:g}, policy={args.policy}: best of {args.repeat} (ms)",
            ["query", "eddies", "DuckDB", "eddies/DuckDB", "same rows"],
            time_suite(sf, args),
        )


if __name__ == "__main__":
    main()
