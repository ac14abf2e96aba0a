"""Incremental aggregates over streams (engine/streaming/incremental.py) against DuckDB.

At every commit point: ``complete`` equals DuckDB's result over the rows pushed so far;
``update`` equals it restricted to the groups that got a row since the previous commit;
``append`` emits each group once, exactly when the watermark passes its end. Watermarks
are simulated here in plain Python from their definition (largest event time pushed minus
the lateness, advanced at commits; a row whose group's end is at or before the watermark
is late) and the accepted rows go to DuckDB. Also time_bucket against DuckDB, the
refusals, and a 1M-row run that counts the live groups held.
"""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import (
    assert_bags_equal,
    assert_same_bag,
    assert_same_ordered,
    duckdb_table,
    table_rows,
)

from eddies.engine import Catalog, EddiesError, UnsupportedQueryError, execute
from eddies.engine.streaming.sinks import CallbackSink
from eddies.engine.streaming.thread_runner import BackgroundQuery

BASE = dt.datetime(2024, 1, 1)
SCHEMA = pa.schema(
    [("ts", pa.timestamp("us")), ("k", pa.int64()), ("v", pa.int64()), ("x", pa.float64())]
)
DIM = pa.table({"k": pa.array([0, 1, 2, 2, 3, None], pa.int64()), "name": list("abbcde")})
#: (policy, batch_size): every policy at 7 rows a batch, the per-tuple eddy, the default.
RUNS = [(p, 7) for p in ("lottery", "rank", "bandit", "random", "static")]
RUNS += [("lottery", 1), ("lottery", None)]

# Queries with their group keys' output positions and the SQL of the keys a batch touches.
GROUPED = (
    "SELECT s.k, count(*) AS n, sum(s.v) AS sv, avg(s.x) AS ax, min(s.v) AS mn, "
    "max(s.x) AS mx, count(s.v) AS cv, avg(s.v) AS av FROM s GROUP BY s.k",
    (0,),
    "SELECT DISTINCT s.k FROM s",
)
JOINED = (
    "SELECT d.name, s.k, count(*) AS n, sum(s.v) + 1 AS sv, bool_or(s.v > 3) AS big, "
    "max(s.ts) AS last FROM s JOIN dim d ON s.k = d.k WHERE s.v IS NULL OR s.v <> 2 "
    "GROUP BY d.name, s.k HAVING count(*) > 1",
    (0, 1),
    "SELECT DISTINCT d.name, s.k FROM s JOIN dim d ON s.k = d.k WHERE s.v IS NULL OR s.v <> 2",
)
GLOBAL = ("SELECT count(*), sum(s.v), min(s.x), count(s.x) FROM s", (), "SELECT DISTINCT 1 FROM s")

rows_st = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(0, 120)),
        st.one_of(st.none(), st.integers(0, 4)),
        st.one_of(st.none(), st.integers(-5, 9)),
        # quarters: sums are exact in any order, so merged partial sums equal DuckDB's
        st.one_of(st.none(), st.integers(-400, 400).map(lambda q: q / 4)),
    ),
    max_size=40,
)


def _table(rows: list[tuple]) -> pa.Table:
    ts = [None if r[0] is None else BASE + dt.timedelta(seconds=r[0]) for r in rows]
    cols = [ts, [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows]]
    return pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(cols, SCHEMA, strict=True)], schema=SCHEMA
    )


def _pieces(rows: list[tuple], cuts: list[int]) -> list[pa.Table]:
    bounds = sorted({min(c, len(rows)) for c in cuts} | {0, len(rows)})
    return [_table(rows[a:b]) for a, b in itertools.pairwise(bounds)] or [_table([])]


def _run(sql, pieces, commits, *, dim=True, **options):
    """Push ``pieces``, committing after piece i when ``commits[i]``; the increments as
    (tag, table) in order (the last one tagged "final") and the run's stats."""
    cat = Catalog()
    stream = cat.add_stream("s", SCHEMA)
    if dim:
        cat.add_table("dim", DIM)
    got: list[tuple] = []
    query = BackgroundQuery(
        sql, cat, sink=CallbackSink(lambda t, tag: got.append((tag, t))), **options
    )
    for i, piece in enumerate(pieces):
        stream.push(piece, i)
        if commits[i]:
            query.commit(i, timeout=60)
    stream.close()
    query.result(timeout=60)
    return got, query.stats


def _concat(pieces: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(pieces) if pieces else _table([])


@pytest.mark.parametrize(("policy", "batch_size"), RUNS)
@pytest.mark.parametrize("query", [GROUPED, JOINED, GLOBAL], ids=["grouped", "joined", "global"])
@pytest.mark.parametrize("mode", ["update", "complete"])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_st, cuts=st.lists(st.integers(0, 40), max_size=5), commit=st.data())
def test_every_commit_equals_duckdb_over_the_rows_pushed_so_far(
    policy, batch_size, query, mode, rows, cuts, commit
):
    pieces = _pieces(rows, cuts)
    commits = [commit.draw(st.booleans(), label=f"commit after {i}") for i in range(len(pieces))]
    _check_commits(query, mode, pieces, commits, policy, batch_size, rows)


@pytest.mark.parametrize(("policy", "batch_size"), RUNS[:1] + RUNS[-2:])
@pytest.mark.parametrize("query", [GROUPED, JOINED, GLOBAL], ids=["grouped", "joined", "global"])
@pytest.mark.parametrize("mode", ["update", "complete"])
def test_groups_that_grow_over_several_commits(policy, batch_size, query, mode):
    rows = [(i, i % 3, i % 7 - 2, (i % 5) / 4 if i % 17 else float("nan")) for i in range(60)]
    pieces = _pieces(rows, [10, 11, 25, 40, 41, 50])
    _check_commits(
        query, mode, pieces, [True, False, True, True, True, False, True], policy, batch_size, rows
    )


def _check_commits(query, mode, pieces, commits, policy, batch_size, rows):
    sql, key_positions, keys_sql = query
    got, stats = _run(sql, pieces, commits, output_mode=mode, policy=policy, batch_size=batch_size)
    assert [tag for tag, _ in got] == [i for i, c in enumerate(commits) if c] + ["final"]
    upserts: dict[tuple, tuple] = {}
    pushed, since = 0, 0
    increments = iter(got)
    for i in range(len(pieces) + 1):
        if i < len(pieces) and not commits[i]:
            continue
        end = i + 1 if i < len(pieces) else len(pieces)
        tag, ours = next(increments)
        so_far = {"s": _concat(pieces[:end]), "dim": DIM}
        expected = duckdb_table(sql, so_far)
        ctx = f"mode={mode} policy={policy} batch_size={batch_size} increment={tag}"
        if mode == "update":
            batch = {"s": _concat(pieces[since:end]), "dim": DIM}
            touched = set(table_rows(duckdb_table(keys_sql, batch))) if end > since else set()
            if not key_positions and touched:
                touched = {()}
            want = [
                r for r in table_rows(expected) if tuple(r[p] for p in key_positions) in touched
            ]
            if tag == "final" and not key_positions and not rows:
                want = table_rows(expected)  # a global aggregate over no rows: one row, once
            assert_bags_equal(table_rows(ours), want, sql, ctx)
            for r in table_rows(ours):
                upserts[tuple(r[p] for p in key_positions)] = r
        else:
            assert_same_bag(ours, sql, so_far, context=ctx, expected=expected)
        pushed += sum(p.num_rows for p in pieces[since:end])
        since = end
    everything = {"s": _concat(pieces), "dim": DIM}
    if mode == "update":  # the increments, applied as upserts, give the whole result
        assert_bags_equal(list(upserts.values()), table_rows(duckdb_table(sql, everything)), sql)
    assert stats.streaming_aggregate.late_rows == 0


BUCKETED = (
    "SELECT time_bucket(INTERVAL '10 seconds', s.ts) AS b, s.k, count(*) AS n, sum(s.v) AS sv "
    "FROM s WHERE coalesce(s.v, 0) <> 3 GROUP BY b, s.k"
)
BUCKET_US = 10_000_000
TOUCHED = "SELECT DISTINCT time_bucket(INTERVAL '10 seconds', s.ts), s.k FROM s"
#: The event time itself as a group key: a group is final once the watermark reaches it.
BY_TIME = (
    "SELECT s.ts, s.k, count(*) AS n, max(s.x) AS mx FROM s WHERE coalesce(s.v, 0) <> 3 "
    "GROUP BY s.ts, s.k",
    0,
    "SELECT DISTINCT s.ts, s.k FROM s",
)


def _simulate(pieces, commits, lateness_s, sql_filter, width_us):
    """Per piece: its accepted rows; per commit: the watermark after it (µs or None); the
    late-row count. Plain Python from the definition, independent of the engine: a row is
    late when its group's end (its bucket's end; with width 0 its event time) is at or
    before the watermark of the previous commit; a NULL event time is never late."""
    wm, top, late, accepted, marks = None, None, 0, [], []
    for i, piece in enumerate(pieces):
        rows = piece.to_pylist()
        keep = []
        for r in rows:
            if r["ts"] is not None:
                t = int((r["ts"] - dt.datetime(1970, 1, 1)).total_seconds() * 1_000_000)
                top = t if top is None else max(top, t)
            if not sql_filter(r):
                continue
            end = None if r["ts"] is None else _end_us((r["ts"],), width_us)
            if end is not None and wm is not None and end <= wm:
                late += 1
            else:
                keep.append(r)
        accepted.append(pa.Table.from_pylist(keep, SCHEMA))
        if commits[i] and top is not None:
            mark = top - lateness_s * 1_000_000
            wm = mark if wm is None else max(wm, mark)
        marks.append(wm)
    return accepted, marks, late


def _end_us(row: tuple, width_us: int) -> float:
    """The end of a group whose first column is its event-time key (the bucket start, for
    width > 0, after flooring as DuckDB's time_bucket does); NULL: never."""
    if row[0] is None:
        return float("inf")
    us = int((row[0] - dt.datetime(1970, 1, 1)).total_seconds() * 1_000_000)
    if width_us:
        origin = 946_857_600_000_000  # DuckDB's time_bucket origin, 2000-01-03
        us = (us - origin) // width_us * width_us + origin
    return us + width_us


@pytest.mark.parametrize(("policy", "batch_size"), RUNS)
@pytest.mark.parametrize("mode", ["update", "append"])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=rows_st,
    cuts=st.lists(st.integers(0, 40), max_size=6),
    lateness=st.integers(0, 30),
    commit=st.data(),
)
def test_watermarks_drop_late_rows_and_append_emits_each_final_group_once(
    policy, batch_size, mode, rows, cuts, lateness, commit
):
    pieces = _pieces(rows, cuts)
    commits = [commit.draw(st.booleans(), label=f"commit after {i}") for i in range(len(pieces))]
    _check_watermarks(mode, pieces, commits, lateness, policy, batch_size)


@pytest.mark.parametrize("mode", ["update", "append"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=rows_st,
    cuts=st.lists(st.integers(0, 40), max_size=6),
    lateness=st.integers(0, 30),
    commit=st.data(),
)
def test_the_event_time_itself_as_a_group_key(mode, rows, cuts, lateness, commit):
    pieces = _pieces(rows, cuts)
    commits = [commit.draw(st.booleans(), label=f"commit after {i}") for i in range(len(pieces))]
    _check_watermarks(mode, pieces, commits, lateness, "lottery", 7, BY_TIME)


@pytest.mark.parametrize(("policy", "batch_size"), RUNS[:1] + RUNS[-2:])
@pytest.mark.parametrize("mode", ["update", "append"])
def test_rows_of_a_bucket_that_ended_at_the_watermark_are_late(policy, batch_size, mode):
    lateness = 5
    pieces = _pieces(
        [(t, t % 2, 1, 0.0) for t in range(0, 21)]  # wm 15
        # 15 and 10 are behind the watermark, but their bucket [10, 20) is open; wm 25
        + [(15, 0, 1, 0.0), (16, 1, 1, 0.0), (10, 0, 1, 0.0), (30, 1, 1, 0.0)]
        # [10, 20) is final; NULL is a group of its own until the end; wm 30
        + [(25, 0, 1, 0.0), (26, 0, 1, 0.0), (35, 1, 1, 0.0), (None, 1, 1, 0.0)]
        # 29 is late: [20, 30) ended at the watermark, 30; [30, 40) is open; wm 42
        + [(29, 1, 1, 0.0), (30, 1, 1, 0.0), (47, 0, 1, 0.0)],
        [21, 25, 29],
    )
    got = _check_watermarks(mode, pieces, [True, True, True, True], lateness, policy, batch_size)
    assert got.late_rows == 1
    assert got.evicted_groups == 8  # every (bucket, k) group and the NULL one, once final


def _check_watermarks(mode, pieces, commits, lateness, policy, batch_size, query=None):
    sql, width_us, touched_sql = query or (BUCKETED, BUCKET_US, TOUCHED)
    got, stats = _run(
        sql,
        pieces,
        commits,
        dim=False,
        output_mode=mode,
        watermarks={"s": ("ts", f"{lateness} seconds")},
        policy=policy,
        batch_size=batch_size,
    )
    accepted, marks, late = _simulate(
        pieces, commits, lateness, lambda r: (r["v"] or 0) != 3, width_us
    )
    assert stats.streaming_aggregate.late_rows == late
    emitted: list[tuple] = []
    since = 0
    increments = iter(got)
    for i in range(len(pieces) + 1):
        if i < len(pieces) and not commits[i]:
            continue
        end = i + 1 if i < len(pieces) else len(pieces)
        tag, ours = next(increments)
        expected = table_rows(duckdb_table(sql, {"s": _concat(accepted[:end])}))
        ctx = f"mode={mode} policy={policy} batch_size={batch_size} increment={tag}"
        if mode == "update":
            batch = {"s": _concat(accepted[since:end])}
            touched = set(table_rows(duckdb_table(touched_sql, batch)))
            want = [r for r in expected if _row_key(r) in touched]
        else:
            done = {_row_key(r) for r in emitted}
            wm = marks[i] if tag != "final" else None
            want = [
                r
                for r in expected
                if _row_key(r) not in done
                and (tag == "final" or (wm is not None and _end_us(r, width_us) <= wm))
            ]
        assert_bags_equal(table_rows(ours), want, sql, ctx)
        emitted += table_rows(ours)
        since = end
    if mode == "append":  # every group once, and all of them
        everything = table_rows(duckdb_table(sql, {"s": _concat(accepted)}))
        assert_bags_equal(emitted, everything, sql, "append: the union of the increments")
    assert stats.streaming_aggregate.live_groups == 0  # the end of input makes every group final
    return stats.streaming_aggregate


def _row_key(row: tuple) -> tuple:
    return (row[0], row[1])


def test_time_bucket_equals_duckdbs():
    ts = [BASE + dt.timedelta(seconds=s * 37, microseconds=s) for s in range(-40, 300)]
    ts += [None, dt.datetime(1969, 12, 31, 23, 59, 59), dt.datetime(1999, 12, 31, 23, 0)]
    tables = {
        "t": pa.table({"ts": pa.array(ts, pa.timestamp("us")), "v": list(range(len(ts)))}),
        "z": pa.table({"ts": pa.array(ts, pa.timestamp("us", tz="UTC"))}),
        # nanoseconds are floored to microseconds first, before 1970 too
        "n": pa.table(
            {"ts": pa.array([-1_500, 1_700_000_000_123_456_789, None], pa.timestamp("ns"))}
        ),
    }
    cat = Catalog()
    for name, table in tables.items():
        cat.add_table(name, table)
    for width in ["7 minutes", "1 hour 30 minutes", "10 seconds", "3 days", "1 week", "250 ms"]:
        for sql in [
            f"SELECT time_bucket(INTERVAL '{width}', ts) AS b, count(*), sum(v) FROM t GROUP BY b",
            f"SELECT ts, time_bucket(INTERVAL '{width}', ts) FROM z",
            f"SELECT time_bucket(INTERVAL '{width}', ts) FROM n",
        ]:
            assert_same_bag(execute(sql, cat), sql, tables)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"output_mode": "appendix"}, "output_mode must be one of"),
        ({"output_mode": "update", "watermarks": {"s": ("ts", "1 month")}}, "no fixed length"),
        ({"output_mode": "update", "watermarks": {"s": "ts"}}, "event-time column, allowed"),
        ({"output_mode": "update", "watermarks": {"s": ("ts", -3)}}, "time span"),
        ({"watermarks": {"s": ("ts", "1 second")}}, "watermarks need an output_mode"),
    ],
)
def test_bad_option_values_are_refused_before_the_query_starts(options, message):
    cat = Catalog()
    cat.add_stream("s", SCHEMA)
    with pytest.raises(EddiesError, match=message):
        BackgroundQuery("SELECT s.k, count(*) FROM s GROUP BY s.k", cat, **options)


@pytest.mark.parametrize(
    ("sql", "options", "error", "message"),
    [
        (
            "SELECT k, count(*) FROM s GROUP BY k",
            {"output_mode": "append"},
            UnsupportedQueryError,
            "append",
        ),
        (
            "SELECT k, count(*) FROM s GROUP BY k",
            {"output_mode": "append", "watermarks": {"s": ("ts", "5 s")}},
            UnsupportedQueryError,
            "GROUP BY key on the watermarked",
        ),
        (
            "SELECT k, median(v) FROM s GROUP BY k",
            {"output_mode": "update"},
            UnsupportedQueryError,
            "incrementally",
        ),
        (
            "SELECT count(DISTINCT v) FROM s",
            {"output_mode": "complete"},
            UnsupportedQueryError,
            "incrementally",
        ),
        (
            "SELECT k, v FROM s",
            {"output_mode": "complete"},
            UnsupportedQueryError,
            "needs an aggregation",
        ),
        (
            "SELECT k, count(*) FROM s GROUP BY k ORDER BY 2",
            {"output_mode": "update"},
            UnsupportedQueryError,
            "complete",
        ),
        (
            "SELECT k, count(*) FROM s GROUP BY k",
            {"output_mode": "update", "watermarks": {"s": ("nope", "5 s")}},
            EddiesError,
            "no column 'nope'",
        ),
        (
            "SELECT k, count(*) FROM s GROUP BY k",
            {"output_mode": "update", "watermarks": {"s": ("v", "5 s")}},
            EddiesError,
            "must be a TIMESTAMP",
        ),
        (
            "SELECT k, count(*) FROM s GROUP BY k",
            {"output_mode": "update", "watermarks": {"other": ("ts", "5 s")}},
            EddiesError,
            "not a stream table this query reads",
        ),
        (
            "SELECT k, count(*) FROM dim GROUP BY k",
            {"output_mode": "update"},
            EddiesError,
            "reads none",
        ),
    ],
)
def test_a_mode_that_does_not_fit_the_query_is_refused(sql, options, error, message):
    cat = Catalog()
    cat.add_stream("s", SCHEMA)
    cat.add_table("dim", DIM)
    query = BackgroundQuery(sql, cat, **options)
    with pytest.raises(error, match=message):
        query.result(timeout=60)


def test_a_windowed_aggregate_over_a_million_rows_holds_a_bounded_number_of_groups():
    n, per_push, keys = 1_000_000, 50_000, 100

    i = np.arange(n, dtype=np.int64)
    table = pa.table(
        {
            # 10 ms apart, a little out of order (within 2 s): 10,000 s of event time
            "ts": pa.array(
                (BASE - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
                + i * 10_000
                - (i * 7919 % 200) * 10_000,
                pa.int64(),
            ).cast(pa.timestamp("us")),
            "k": pa.array(i * 31 % keys),
            "v": pa.array(i % 13),
            "x": pa.array(np.zeros(n)),
        }
    )
    sql = (
        "SELECT time_bucket(INTERVAL '1 minute', ts) AS b, k, count(*) AS n, sum(v) AS sv "
        "FROM s GROUP BY b, k"
    )
    pieces = [table.slice(start, per_push) for start in range(0, n, per_push)]
    got, stats = _run(
        sql,
        pieces,
        [True] * len(pieces),
        dim=False,
        output_mode="append",
        watermarks={"s": ("ts", "5 seconds")},
    )
    agg = stats.streaming_aggregate
    emitted = pa.concat_tables([t for _, t in got])
    expected = duckdb_table(sql, {"s": table})
    assert expected.num_rows > 166 * keys  # 10,000 s in 1-minute buckets, 100 keys each
    assert_same_bag(emitted, sql, {"s": table}, expected=expected)
    assert agg.late_rows == 0  # 2 s out of order, 5 s allowed
    # One push spans 500 s: about 9 buckets x 100 keys are open at a time, never all 16,700.
    assert agg.peak_live_groups <= 11 * keys
    assert agg.evicted_groups == expected.num_rows


def test_attach_refuses_a_mode_that_does_not_fit_before_spark_starts():
    from types import SimpleNamespace

    from eddies.engine.spark.driver import attach

    cat = Catalog()
    cat.add_stream("s", SCHEMA)
    started = []
    frame = SimpleNamespace(
        isStreaming=True, writeStream=SimpleNamespace(foreachBatch=started.append)
    )
    with pytest.raises(UnsupportedQueryError, match="append"):
        attach(
            "SELECT k, count(*) FROM s GROUP BY k",
            cat,
            {"s": frame},
            checkpoint_location="unused",
            output_mode="append",
            watermarks={"s": ("ts", "1 minute")},
        )
    with pytest.raises(EddiesError, match="output_mode must be one of"):
        attach("SELECT k FROM s", cat, {"s": frame}, checkpoint_location="x", output_mode="full")
    assert not started  # no Spark query was started


async def test_open_query_answers_at_each_commit_inside_trio():
    import trio

    from eddies.engine import open_query

    cat = Catalog()
    stream = cat.add_stream("s", SCHEMA)
    sql = "SELECT s.k, count(*) AS n, sum(s.v) AS sv FROM s GROUP BY s.k"
    rows = [(i, i % 2, i, 0.0) for i in range(6)]
    async with open_query(sql, cat, output_mode="complete", batch_size=2) as results:
        results.keep_increments = True
        async with trio.open_nursery() as nursery:

            async def drain():
                async for _ in results:
                    pass

            nursery.start_soon(drain)
            for i, piece in enumerate([_table(rows[:3]), _table(rows[3:])]):
                await trio.to_thread.run_sync(stream.push, piece, i)
                got = pa.Table.from_batches(await results.commit(i), results.schema)
                assert_same_bag(got, sql, {"s": _table(rows[: 3 * (i + 1)])})
            await trio.to_thread.run_sync(stream.close)
    assert results.stats.streaming_aggregate.commits == 2


@pytest.mark.parametrize(("policy", "batch_size"), RUNS[:1] + RUNS[-2:])
def test_complete_mode_orders_and_limits_every_increment(policy, batch_size):
    sql = (
        "SELECT d.name, count(*) AS n, avg(s.v) AS av FROM s JOIN dim d ON s.k = d.k "
        "GROUP BY d.name HAVING sum(s.v) > 0 ORDER BY n DESC, d.name NULLS FIRST LIMIT 3"
    )
    rows = [(i, i % 5, i % 9 - 3, 0.0) for i in range(50)]
    pieces = _pieces(rows, [5, 20, 35])
    got, _ = _run(sql, pieces, [True] * len(pieces), output_mode="complete", policy=policy)
    for i, (_, ours) in enumerate(got):
        so_far = {"s": _concat(pieces[: min(i + 1, len(pieces))]), "dim": DIM}
        assert_same_ordered(ours, sql, so_far, [1, 0])


@pytest.mark.parametrize("mode", ["append", "update"])
def test_a_query_without_aggregates_stays_continuous_in_append_and_update_mode(mode):
    sql = "SELECT s.v, d.name FROM s JOIN dim d ON s.k = d.k WHERE s.v > 0"
    rows = [(i, i % 5, i % 9 - 3, 0.0) for i in range(50)]
    pieces = _pieces(rows, [5, 20, 35])
    got, _ = _run(sql, pieces, [True] * len(pieces), output_mode=mode, batch_size=7)
    for i, (_, ours) in enumerate(got[:-1]):  # each micro-batch's own join results
        assert_same_bag(ours, sql, {"s": pieces[i], "dim": DIM})
    assert got[-1][1].num_rows == 0


def test_the_query_watermark_is_the_smallest_of_the_streams_and_never_goes_back():
    schema = pa.schema([("ts", pa.timestamp("us")), ("k", pa.int64())])
    cat = Catalog()
    a, b = cat.add_stream("a", schema), cat.add_stream("b", schema)
    query = BackgroundQuery(
        "SELECT time_bucket(INTERVAL '10 seconds', a.ts) AS w, count(*) AS n "
        "FROM a JOIN b ON a.k = b.k GROUP BY w",
        cat,
        output_mode="update",
        watermarks={"a": ("ts", "2 seconds"), "B": ("TS", "10 seconds")},
    )

    def push(stream, seconds, batch_id):
        rows = [
            {"ts": None if s is None else BASE + dt.timedelta(seconds=s), "k": 1} for s in seconds
        ]
        stream.push(pa.Table.from_pylist(rows, schema), batch_id)

    def watermark_s():
        us = query.stats.streaming_aggregate.watermark_us
        base = (BASE - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
        return None if us is None else (us - base) / 1e6

    push(a, [30], 0)
    query.commit(0)
    assert watermark_s() == 28  # b has seen no row: only a counts
    push(b, [20], 0)
    query.commit(1)
    assert watermark_s() == 28  # min(28, 10) = 10 would go back: it stays
    push(b, [50], 1)
    push(a, [35, None], 1)
    query.commit(2)
    assert watermark_s() == 33  # min(35 - 2, 50 - 10)
    a.close()
    b.close()
    query.result(timeout=60)


def test_the_streaming_docs_example_runs(capsys):
    text = (Path(__file__).parent.parent / "docs" / "streaming.md").read_text()
    section = text[text.index("## Incremental aggregates") :]
    code = section[
        section.index("```python\n") + 10 : section.index("\n```", section.index("```python"))
    ]
    exec(compile(code, "docs/streaming.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("0 [{'minute': datetime.datetime(2023, 12, 31, 23, 58)")
    assert out[-2].startswith("final [{'minute': datetime.datetime(2024, 1, 1, 0, 2)")
    assert out[-1] == "2"
