"""Continuous queries: a windowed stream-stream-static join, pushed micro-batch by micro-batch.

Two streams, ``orders(k, o)`` and ``payments(k, p)``, arrive in alternating micro-batches
and join each other on ``k`` and a static table ``customers`` (stems-2003 §2.3 windows:
each stream keeps its last ``--window`` tuples). The eddy runs under
``BackgroundQuery`` with a commit point after every push, as a Spark attachment does.
Measured in one run:

* the eddy's throughput (rows pushed per second, commit points included) and the peak
  number of rows its windowed stores held — it must stay near the window, however long
  the stream;
* DuckDB computing the same sliding-window join at once over all the input (arrival
  numbers and expiries from window functions, as in tests/test_windows.py): not a
  streaming engine, but the oracle and a yardstick — the result must be equal. (The
  commit point after each push makes the arrival order the push order; without it two
  streams' batches may be built in either order, and the window sees that order.)
* the same stream without windows, which keeps every tuple (memory grows with the input).

Run: ``python bench/stream_windows.py [--batches 200 --rows 2000 --window 20000]``.
"""

from __future__ import annotations

import argparse
import time

import duckdb
import numpy as np
import pyarrow as pa
from common import console, engine_or_exit, fmt_ratio, print_table, progress, verdict

ORDERS = pa.schema([("k", pa.int64()), ("o", pa.int64())])
PAYMENTS = pa.schema([("k", pa.int64()), ("p", pa.int64())])
SQL = (
    "SELECT o.o, p.p, c.name FROM orders o JOIN payments p ON o.k = p.k "
    "JOIN customers c ON c.k = o.k WHERE c.tier <> 'none'"
)


def make_input(batches: int, rows: int, keys: int, seed: int):
    """Alternating micro-batches [(stream, table)] and the customers table."""
    rng = np.random.default_rng(seed)
    pushes = []
    for i in range(batches):
        name, schema = ("orders", ORDERS) if i % 2 == 0 else ("payments", PAYMENTS)
        k = rng.integers(0, keys, rows)
        pushes.append((name, pa.table([k, np.arange(rows) + i * rows], schema=schema)))
    customers = pa.table(
        {
            "k": np.arange(keys),
            "name": [f"c{i}" for i in range(keys)],
            "tier": rng.choice(["gold", "silver", "none"], keys),
        }
    )
    return pushes, customers


def run_eddy(pushes, customers, window: int | None):
    """Push every micro-batch with a commit point after each; (seconds, rows, peak rows)."""
    from eddies.engine import Catalog
    from eddies.engine.streaming import BackgroundQuery
    from eddies.modules.window import RowWindow

    cat = Catalog()
    win = RowWindow(window) if window else None
    streams = {
        "orders": cat.add_stream("orders", ORDERS, window=win),
        "payments": cat.add_stream("payments", PAYMENTS, window=win),
    }
    cat.add_table("customers", customers)
    rows_out = 0

    def count(batch):
        nonlocal rows_out
        rows_out += batch.num_rows

    query = BackgroundQuery(SQL, cat, on_batch=count)
    started = time.perf_counter()
    with progress() as bar:
        task = bar.add_task(f"window {window or 'none'}", total=len(pushes))
        for i, (name, table) in enumerate(pushes):
            streams[name].push(table, i)
            query.commit((name, i))  # as a Spark attachment: the batch is fully processed
            bar.advance(task)
    for stream in streams.values():
        stream.close()
    query.result(600)
    seconds = time.perf_counter() - started
    peak = sum(c.peak_stored_rows for c in query.stats.windows.values())
    return seconds, rows_out, peak


def run_duckdb(pushes, customers, window: int | None) -> tuple[float, int]:
    """The same (sliding-window) join computed at once; (seconds, rows)."""
    seq = 0
    parts: dict[str, list[pa.Table]] = {"orders": [], "payments": []}
    for name, table in pushes:
        n = table.num_rows
        parts[name].append(table.append_column("seq", pa.array(np.arange(seq, seq + n))))
        seq += n
    con = duckdb.connect()
    for name, tables in parts.items():
        con.register(f"{name}_raw", pa.concat_tables(tables))
    con.register("customers", customers)
    lead = f"lead(seq, {window}) OVER (ORDER BY seq)" if window else "NULL::BIGINT"
    sql = f"""
    WITH o AS (SELECT *, {lead} AS x FROM orders_raw),
         p AS (SELECT *, {lead} AS x FROM payments_raw)
    SELECT count(*) FROM o JOIN p ON o.k = p.k JOIN customers c ON c.k = o.k
    WHERE c.tier <> 'none'
      AND greatest(o.seq, p.seq) < coalesce(o.x, 9e18)
      AND greatest(o.seq, p.seq) < coalesce(p.x, 9e18)"""
    started = time.perf_counter()
    (rows,) = con.execute(sql).fetchone()
    return time.perf_counter() - started, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=200, help="micro-batches in all")
    parser.add_argument("--rows", type=int, default=2000, help="rows per micro-batch")
    parser.add_argument("--window", type=int, default=20_000, help="tuples kept per stream")
    parser.add_argument("--keys", type=int, default=50_000, help="distinct join keys")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    engine_or_exit()
    pushes, customers = make_input(args.batches, args.rows, args.keys, args.seed)
    total = args.batches * args.rows
    console.print(
        f"{args.batches} micro-batches × {args.rows:,} rows, alternating two streams; "
        f"RowWindow({args.window:,}) per stream; {args.keys:,} keys"
    )
    windowed = run_eddy(pushes, customers, args.window)
    unwindowed = run_eddy(pushes, customers, None)
    duck_seconds, duck_rows = run_duckdb(pushes, customers, args.window)
    full_seconds, full_rows = run_duckdb(pushes, customers, None)
    rows = [
        (
            f"eddies, RowWindow({args.window:,})",
            f"{windowed[1]:,}",
            f"{windowed[0]:.2f}",
            f"{total / windowed[0]:,.0f}",
            f"{windowed[2]:,}",
        ),
        (
            "eddies, no window",
            f"{unwindowed[1]:,}",
            f"{unwindowed[0]:.2f}",
            f"{total / unwindowed[0]:,.0f}",
            f"{unwindowed[2]:,}",
        ),
        ("DuckDB, windowed, whole input at once", f"{duck_rows:,}", f"{duck_seconds:.2f}", "", ""),
        ("DuckDB, no window, whole input at once", f"{full_rows:,}", f"{full_seconds:.2f}", "", ""),
    ]
    print_table(
        "windowed stream-stream-static join, pushed micro-batch by micro-batch",
        ["run", "rows out", "seconds", "rows in/s", "peak rows stored"],
        rows,
    )
    console.print(f"  eddies windowed / DuckDB time: {fmt_ratio(windowed[0] / duck_seconds)}")
    verdict("the windowed result equals DuckDB's", windowed[1] == duck_rows)
    verdict("the unwindowed result equals DuckDB's", unwindowed[1] == full_rows)
    bound = 2 * (2 * args.window + 2 * args.rows) + 2 * 4096
    verdict(
        "memory stays near the window",
        windowed[2] <= bound,
        f"peak {windowed[2]:,} rows in the two stores; bound {bound:,}; input {total:,}",
    )


if __name__ == "__main__":
    main()
