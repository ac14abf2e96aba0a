"""A producer process for tests/test_durable.py: pushes deterministic micro-batches into a
checkpointed BackgroundQuery and commits each, as Spark's foreachBatch would.

    python durable_driver.py KIND CHECKPOINT OUT START STOP [--hold K] [--die-in-sink K]

KIND: ``join`` (a stream-stream join), ``window`` (the same with a RowWindow on one
side), ``agg`` (an update-mode aggregate with a watermark), ``joinagg`` (an aggregate over
a stream-stream join), ``lookup`` (a stream enriched by an index AM whose source changes
its answers at batch NEW_ANSWERS_FROM). Batches START..STOP-1 are pushed and committed (commit tag =
batch id); increments go to a ParquetSink in OUT. After each commit it prints
``committed <b>``. ``--hold K``: after committing batch K it pushes batch K+1 (taken, not
committed), prints ``holding`` and blocks on stdin, to be killed. ``--die-in-sink K``: it
SIGKILLs itself after the sink wrote batch K's increment, before the checkpoint.
Without either, it closes the streams after STOP-1 and prints ``done``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import sys

import pyarrow as pa

from eddies.engine import Catalog
from eddies.engine.streaming.sinks import ParquetSink
from eddies.engine.streaming.thread_runner import BackgroundQuery
from eddies.modules.window import RowWindow

ROWS = 17
SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])
EVENTS = pa.schema([("ts", pa.timestamp("us")), ("page", pa.string()), ("v", pa.int64())])
START = dt.datetime(2024, 1, 1)

QUERIES = {
    "join": "SELECT l.v AS lv, r.v AS rv, l.k FROM l JOIN r ON l.k = r.k",
    "window": "SELECT l.v AS lv, r.v AS rv, l.k FROM l JOIN r ON l.k = r.k",
    "agg": (
        "SELECT time_bucket(INTERVAL '1 minute', ts) AS minute, page, count(*) AS n, "
        "sum(v) AS s, min(v) AS lo FROM events GROUP BY minute, page"
    ),
    "joinagg": "SELECT l.k, count(*) AS n, sum(r.v) AS s FROM l JOIN r ON l.k = r.k GROUP BY l.k",
    "lookup": "SELECT l.v, i.w FROM l JOIN i ON l.k = i.k",
}
#: ``lookup``: the looked-up source answers ``k * 10 + 1`` before this batch, ``+ 2`` from it.
NEW_ANSWERS_FROM = 4


def side(b: int, which: str) -> pa.Table:
    """Batch ``b`` of stream ``which`` ("l" or "r"): keys with NULLs and duplicates."""
    shift = 0 if which == "l" else 5
    keys = [
        None if (b + i + shift) % 10 == 0 else (b * 7 + i * 3 + shift) % 13 for i in range(ROWS)
    ]
    values = [b * 1000 + i + (500 if which == "r" else 0) for i in range(ROWS)]
    return pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array(values, pa.int64())})


def events(b: int) -> pa.Table:
    """Batch ``b`` of the event stream: 20 s of event time per batch, in order (so no row
    is late with a 30 s lateness), three pages."""
    ts = [START + dt.timedelta(seconds=20 * b + i) for i in range(ROWS)]
    pages = [["home", "cart", "help"][(b + i) % 3] for i in range(ROWS)]
    return pa.table(
        {"ts": pa.array(ts, pa.timestamp("us")), "page": pages, "v": list(range(b, b + ROWS))},
        schema=EVENTS,
    )


class DyingSink(ParquetSink):
    """A ParquetSink whose process dies (SIGKILL) right after writing one tag's file."""

    def __init__(self, folder: str, die_at: object) -> None:
        super().__init__(folder)
        self.die_at = die_at

    def write(self, table: pa.Table, tag: object) -> None:
        super().write(table, tag)
        if tag == self.die_at:
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=sorted(QUERIES))
    parser.add_argument("checkpoint")
    parser.add_argument("out")
    parser.add_argument("start", type=int)
    parser.add_argument("stop", type=int)
    parser.add_argument("--hold", type=int)
    parser.add_argument("--die-in-sink", type=int)
    parser.add_argument("--policy", default="lottery")
    parser.add_argument("--batch-size", type=int, default=None)
    args = parser.parse_args()

    catalog = Catalog()
    options: dict = {"policy": args.policy, "batch_size": args.batch_size, "seed": 7}
    current = {"batch": 0}

    async def lookup(bind: dict) -> list[dict]:
        new = current["batch"] >= NEW_ANSWERS_FROM
        return [{"k": bind["k"], "w": bind["k"] * 10 + (2 if new else 1)}]

    if args.kind == "lookup":
        streams = {"l": catalog.add_stream("l", SCHEMA)}
        catalog.add_index(
            "i", pa.schema([("k", pa.int64()), ("w", pa.int64())]), on=["k"], lookup=lookup
        )
    elif args.kind == "agg":
        streams = {"events": catalog.add_stream("events", EVENTS)}
        options |= {"output_mode": "update", "watermarks": {"events": ("ts", "30 seconds")}}
    else:
        window = RowWindow(40) if args.kind == "window" else None
        streams = {
            "l": catalog.add_stream("l", SCHEMA, window=window),
            "r": catalog.add_stream("r", SCHEMA),
        }
        if args.kind == "joinagg":
            options["output_mode"] = "update"
    die_at = ("batch", args.die_in_sink) if args.die_in_sink is not None else None
    sink = DyingSink(args.out, die_at)
    query = BackgroundQuery(
        QUERIES[args.kind], catalog, sink=sink, checkpoint=args.checkpoint, **options
    )

    def push(b: int) -> None:
        current["batch"] = b
        for name, stream in streams.items():
            stream.push(events(b) if name == "events" else side(b, name), (name, b))

    for b in range(args.start, args.stop):
        push(b)
        query.commit(("batch", b))
        print(f"committed {b}", flush=True)
        if b == args.hold:
            push(b + 1)
            print("holding", flush=True)
            sys.stdin.read()  # killed here
            return
    for stream in streams.values():
        stream.close()
    query.result(timeout=120)
    print("done", flush=True)


if __name__ == "__main__":
    main()
