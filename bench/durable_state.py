"""What durable state costs: checkpoint size and time per commit (eddies.engine.streaming.durable).

A stream-stream join (``l JOIN r ON l.k = r.k``) and an update-mode aggregate over one
stream are pushed micro-batch by micro-batch under ``BackgroundQuery``, a commit point
after each micro-batch, once without and once with ``checkpoint=`` (a temporary folder).
Per commit it measures the time of ``commit()`` (which, with a checkpoint, includes the
SteM snapshot at the grant and writing the files: Arrow IPC, fsync, rename) and, with a
checkpoint, the size of the commit's files. The join runs with a ``RowWindow`` on both
streams (bounded state: the checkpoint stays the size of the window) and without one
(every tuple kept: the checkpoint grows with the stream, since each commit writes the
whole state, not a delta). The results of the runs with and without a checkpoint are
checked equal.

Run: ``python bench/durable_state.py [--batches 100 --rows 2000 --window 20000]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
from common import print_table, verdict

from eddies.engine import Catalog
from eddies.engine.streaming import BackgroundQuery
from eddies.engine.streaming.sinks import MemorySink
from eddies.modules.window import RowWindow

SIDE = pa.schema([("k", pa.int64()), ("v", pa.int64())])
EVENTS = pa.schema([("ts", pa.timestamp("us")), ("page", pa.int64()), ("v", pa.int64())])
JOIN = "SELECT l.v, r.v AS rv FROM l JOIN r ON l.k = r.k"
AGG = (
    "SELECT time_bucket(INTERVAL '1 minute', ts) AS minute, page, count(*) AS n, sum(v) AS s "
    "FROM events GROUP BY minute, page"
)


def run(kind: str, batches: int, rows: int, window: int | None, checkpoint: str | None):
    """(commit seconds per batch, checkpoint bytes per batch, result rows)."""
    rng = np.random.default_rng(1)
    cat = Catalog()
    options: dict = {"checkpoint": checkpoint}
    if kind == "agg":
        streams = {"events": cat.add_stream("events", EVENTS)}
        options |= {"output_mode": "update", "watermarks": {"events": ("ts", "30 seconds")}}
        sql = AGG
    else:
        win = RowWindow(window) if window else None
        streams = {n: cat.add_stream(n, SIDE, window=win) for n in ("l", "r")}
        sql = JOIN
    sink = MemorySink()
    query = BackgroundQuery(sql, cat, sink=sink, **options)
    seconds, sizes = [], []
    start = dt.datetime(2024, 1, 1)
    for b in range(batches):
        for name, stream in streams.items():
            if name == "events":
                ts = [start + dt.timedelta(seconds=b * 10 + i * 10 / rows) for i in range(rows)]
                data = pa.table([ts, rng.integers(0, 50, rows), np.arange(rows)], schema=EVENTS)
            else:
                keys = rng.integers(0, rows * 5, rows)
                data = pa.table([keys, np.arange(rows) + b * rows], schema=SIDE)
            stream.push(data, (name, b))
        began = time.perf_counter()
        query.commit(b)
        seconds.append(time.perf_counter() - began)
        durable = query._results.durable if query._results is not None else None
        sizes.append(durable.bytes_written if durable is not None else 0)
    for stream in streams.values():
        stream.close()
    query.result(timeout=600)
    return seconds, sizes, sink.table(query.schema).num_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--rows", type=int, default=2000, help="rows per stream per batch")
    parser.add_argument("--window", type=int, default=20000)
    args = parser.parse_args()
    table, ok = [], True
    for label, kind, window in (
        (f"join, RowWindow({args.window})", "join", args.window),
        ("join, no window", "join", None),
        ("update aggregate, watermark 30 s", "agg", None),
    ):
        plain, _, rows_plain = run(kind, args.batches, args.rows, window, None)
        with tempfile.TemporaryDirectory() as folder:
            durable, sizes, rows_durable = run(kind, args.batches, args.rows, window, folder)
        ok &= verdict(
            f"{label}: same result with and without checkpoint", rows_plain == rows_durable
        )
        table.append(
            [
                label,
                f"{statistics.median(plain) * 1e3:.1f}",
                f"{statistics.median(durable) * 1e3:.1f}",
                f"{max(durable) * 1e3:.1f}",
                f"{statistics.median(sizes) / 1e6:.2f}",
                f"{sizes[-1] / 1e6:.2f}",
            ]
        )
    print_table(
        f"commit cost, {args.batches} micro-batches of {args.rows} rows per stream",
        [
            "query",
            "commit ms (no ckpt, median)",
            "commit ms (ckpt, median)",
            "commit ms (ckpt, max)",
            "ckpt MB (median)",
            "ckpt MB (last)",
        ],
        table,
    )
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
