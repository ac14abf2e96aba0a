"""Durable state (eddies.engine.streaming.durable): a checkpointed query over streams, SIGKILLed
mid-stream and restarted from its checkpoint, replaying from the last committed batch as
Spark does, gives the same increments as an uninterrupted run, and DuckDB's result over
all rows: no row lost, none doubled. Processes are synchronized by their output lines
(pipes) and exit codes, never by the clock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from durable_driver import NEW_ANSWERS_FROM, QUERIES, events, side
from hypothesis import HealthCheck, given, settings
from oracle import assert_bags_equal, assert_same_bag, table_rows

from eddies.engine import Catalog, EddiesError, UnsupportedQueryError
from eddies.engine.streaming.sinks import MemorySink
from eddies.engine.streaming.thread_runner import BackgroundQuery
from eddies.modules.window import EventTimeWindow, RowWindow

DRIVER = str(Path(__file__).with_name("durable_driver.py"))
N = 8  # batches per run


def _driver(kind: str, ck: Path, out: Path, start: int, stop: int, *extra: str) -> list[str]:
    return [sys.executable, DRIVER, kind, str(ck), str(out), str(start), str(stop), *extra]


def _run(*args, **kwargs) -> None:
    done = subprocess.run(_driver(*args, **kwargs), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "done"


def _run_and_kill(kind: str, ck: Path, out: Path, hold: int, *extra: str) -> None:
    """Run until batch ``hold`` is committed and batch hold+1 pushed, then SIGKILL."""
    args = _driver(kind, ck, out, 0, N, "--hold", str(hold), *extra)
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line.strip())
            if lines[-1] == "holding":
                break
        assert lines[-2:] == [f"committed {hold}", "holding"], lines
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stdout.close()


def _increments(out: Path) -> dict[str, pa.Table]:
    return {p.name: pq.read_table(p) for p in sorted(out.glob("*.parquet"))}


def _union(increments: dict[str, pa.Table]) -> pa.Table:
    return pa.concat_tables(increments.values())


def _assert_same_increments(ours: dict[str, pa.Table], uninterrupted: dict[str, pa.Table]):
    assert sorted(ours) == sorted(uninterrupted)
    for name, table in ours.items():
        assert_bags_equal(table_rows(table), table_rows(uninterrupted[name]), context=name)


def _all_rows(kind: str) -> dict[str, pa.Table]:
    if kind == "agg":
        return {"events": pa.concat_tables(events(b) for b in range(N))}
    if kind == "lookup":  # each key answered as when it was first looked up
        first_seen: dict[int, int] = {}
        for b in range(N):
            for k in side(b, "l")["k"].to_pylist():
                if k is not None:
                    first_seen.setdefault(k, b)
        answers = [k * 10 + (1 if b < NEW_ANSWERS_FROM else 2) for k, b in first_seen.items()]
        return {
            "l": pa.concat_tables(side(b, "l") for b in range(N)),
            "i": pa.table(
                {"k": pa.array(list(first_seen), pa.int64()), "w": pa.array(answers, pa.int64())}
            ),
        }
    return {s: pa.concat_tables(side(b, s) for b in range(N)) for s in ("l", "r")}


def _latest_per_group(increments: dict[str, pa.Table], keys: int) -> pa.Table:
    """An update-mode stream's last value of each group, increments in commit order."""
    latest: dict[tuple, tuple] = {}
    schema = None
    for table in increments.values():  # names sort in batch order
        schema = table.schema
        for row in table_rows(table):
            latest[row[:keys]] = row
    return pa.Table.from_pylist(
        [dict(zip(schema.names, row, strict=True)) for row in latest.values()], schema
    )


def _check_against_duckdb(kind: str, increments: dict[str, pa.Table]) -> None:
    sql = QUERIES[kind]
    if kind in ("join", "lookup"):
        assert_same_bag(_union(increments), sql, _all_rows(kind))
    elif kind in ("agg", "joinagg"):  # no row is late in this data: every group's last value
        keys = 2 if kind == "agg" else 1
        assert_same_bag(_latest_per_group(increments, keys), sql, _all_rows(kind))


@pytest.mark.parametrize("kind", ["join", "window", "agg", "joinagg", "lookup"])
def test_a_query_killed_mid_stream_resumes_from_its_checkpoint_exactly_once(kind, tmp_path):
    _run(kind, tmp_path / "ck-a", tmp_path / "a", 0, N)
    uninterrupted = _increments(tmp_path / "a")
    hold = 3
    _run_and_kill(kind, tmp_path / "ck-b", tmp_path / "b", hold)
    # Spark resumes from its last committed batch: batches 2 and 3 come again (ignored:
    # the checkpoint holds them), batch 4 (taken before the kill, never committed) too.
    _run(kind, tmp_path / "ck-b", tmp_path / "b", hold - 1, N)
    restarted = _increments(tmp_path / "b")
    _assert_same_increments(restarted, uninterrupted)
    _check_against_duckdb(kind, restarted)
    if kind == "join":  # the restart joined tuples from before it with tuples after it
        union = _union(restarted).to_pydict()
        across = [
            (lv // 1000, rv // 1000)
            for lv, rv in zip(union["lv"], union["rv"], strict=True)
            if (lv // 1000 <= hold) != (rv // 1000 <= hold)
        ]
        assert across


@pytest.mark.parametrize("kind", ["join", "agg"])
def test_a_crash_between_the_sink_and_the_checkpoint_replays_the_batch_once(kind, tmp_path):
    _run(kind, tmp_path / "ck-a", tmp_path / "a", 0, N)
    dead = subprocess.run(
        _driver(kind, tmp_path / "ck-b", tmp_path / "b", 0, N, "--die-in-sink", "4"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dead.returncode == -signal.SIGKILL, dead.stderr
    assert dead.stdout.splitlines()[-1] == "committed 3"
    _run(kind, tmp_path / "ck-b", tmp_path / "b", 3, N)  # 3 ignored, 4 done again
    _assert_same_increments(_increments(tmp_path / "b"), _increments(tmp_path / "a"))
    _check_against_duckdb(kind, _increments(tmp_path / "b"))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("policy", "batch_size"), [("rank", 7), ("bandit", 7), ("random", 1), ("static", None)]
)
def test_killed_stream_stream_join_under_other_policies_and_batch_sizes(
    policy, batch_size, tmp_path
):
    extra = ["--policy", policy] + (["--batch-size", str(batch_size)] if batch_size else [])
    _run_and_kill("join", tmp_path / "ck", tmp_path / "b", 5, *extra)
    _run("join", tmp_path / "ck", tmp_path / "b", 4, N, *extra)
    _check_against_duckdb("join", _increments(tmp_path / "b"))


# ---------------------------------------------------------------- in-process restarts

SQL = "SELECT l.v AS lv, r.v AS rv FROM l JOIN r ON l.k = r.k AND l.v < r.v + 5000"


def _in_process_run(ck, batches, start, stop, hold, window, policy, batch_size, debug=True):
    """Push/commit batches start..stop-1 (then push ``hold`` uncommitted and abandon the
    query by closing its streams: its last increment is not committed, nor checkpointed)."""
    cat = Catalog()
    left = cat.add_stream("l", batches[0][0].schema, window=window)
    right = cat.add_stream("r", batches[0][1].schema)
    sink = MemorySink()
    query = BackgroundQuery(
        SQL, cat, sink=sink, checkpoint=ck, policy=policy, batch_size=batch_size, debug=debug
    )
    for b in range(start, stop):
        left.push(batches[b][0], ("l", b))
        right.push(batches[b][1], ("r", b))
        query.commit(b)
    if hold is not None:
        left.push(batches[hold][0], ("l", hold))
    left.close()
    right.close()
    query.result(timeout=120)
    committed = [(tag, t) for tag, t in sink.increments if tag != "final"]
    return committed if hold is not None else sink.increments


keys = st.lists(st.one_of(st.none(), st.integers(0, 6)), min_size=0, max_size=9)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.lists(st.tuples(keys, keys), min_size=2, max_size=6),
    cut=st.integers(0, 5),
    back=st.integers(0, 2),
    policy=st.sampled_from(["lottery", "rank", "bandit", "random", "static"]),
    batch_size=st.sampled_from([1, 7, None]),
)
def test_restart_at_any_commit_equals_duckdb(data, cut, back, policy, batch_size):
    batches = [
        tuple(
            pa.table(
                {
                    "k": pa.array(ks, pa.int64()),
                    "v": pa.array([b * 1000 + i for i in range(len(ks))], pa.int64()),
                }
            )
            for ks in pair
        )
        for b, pair in enumerate(data)
    ]
    cut = min(cut, len(batches) - 1)
    with tempfile.TemporaryDirectory() as ck:
        first = _in_process_run(ck, batches, 0, cut, cut, None, policy, batch_size)
        second = _in_process_run(
            ck, batches, max(0, cut - back), len(batches), None, None, policy, batch_size
        )
    # Replayed commits (tags below the cut, seen twice) add nothing the second time.
    replayed = {tag for tag, _ in first} & {tag for tag, _ in second}
    assert all(t.num_rows == 0 for tag, t in second if tag in replayed)
    result = pa.concat_tables(t for _, t in first + second)
    tables = {
        "l": pa.concat_tables(b[0] for b in batches),
        "r": pa.concat_tables(b[1] for b in batches),
    }
    assert_same_bag(result, SQL, tables)


@pytest.mark.parametrize(
    "window", [RowWindow(5), EventTimeWindow("v", 3000)], ids=["rows", "event-time"]
)
def test_restarted_windowed_join_equals_an_uninterrupted_run(window, tmp_path):
    batches = [(side(b, "l"), side(b, "r")) for b in range(N)]
    whole = _in_process_run(tmp_path / "a", batches, 0, N, None, window, "lottery", 7)
    first = _in_process_run(tmp_path / "b", batches, 0, 4, 4, window, "lottery", 7)
    second = _in_process_run(tmp_path / "b", batches, 2, N, None, window, "lottery", 7)
    assert_bags_equal(
        table_rows(pa.concat_tables(t for _, t in first + second)),
        table_rows(pa.concat_tables(t for _, t in whole)),
    )


# ---------------------------------------------------------------- refusals and files


def _catalog() -> Catalog:
    cat = Catalog()
    cat.add_stream("l", side(0, "l").schema)
    cat.add_table("d", pa.table({"k": [1, 2], "name": ["a", "b"]}))
    return cat


@pytest.mark.parametrize(
    ("sql", "options", "message"),
    [
        ("SELECT k, count(*) FROM l GROUP BY k", {}, "give output_mode"),
        ("SELECT v FROM l ORDER BY v", {}, "give output_mode"),
        ("SELECT v FROM l LIMIT 3", {}, "give output_mode"),
        ("WITH x AS (SELECT v FROM l) SELECT v FROM x", {}, "composite"),
        ("SELECT l.v FROM l LEFT JOIN d ON l.k = d.k", {}, "outer joins"),
        ("SELECT l.v, i.w FROM l JOIN i ON l.k = i.k", {}, "read by an index AM and another"),
    ],
)
def test_state_that_is_not_checkpointed_is_refused(sql, options, message, tmp_path):
    cat = _catalog()

    async def lookup(bind):
        return [{"k": bind["k"], "w": 1}]

    cat.add_table("i", pa.table({"k": pa.array([1], pa.int64()), "w": pa.array([1], pa.int64())}))
    cat.add_index("i", pa.schema([("k", pa.int64()), ("w", pa.int64())]), on=["k"], lookup=lookup)
    query = BackgroundQuery(sql, cat, checkpoint=str(tmp_path), **options)
    with pytest.raises(UnsupportedQueryError, match=message):
        query.result(timeout=60)


def test_checkpoint_of_another_query_or_bad_option_is_an_error(tmp_path):
    cat = _catalog()
    query = BackgroundQuery("SELECT v FROM l", cat, checkpoint=tmp_path)
    cat.table("l").stream.push(side(0, "l"), 0)
    query.commit(0)
    cat.table("l").stream.close()
    query.result(timeout=60)
    assert list(tmp_path.glob("commit-*/meta.json"))
    other = BackgroundQuery("SELECT k FROM l", _catalog(), checkpoint=tmp_path)
    with pytest.raises(EddiesError, match="another query"):
        other.result(timeout=60)
    with pytest.raises(EddiesError, match="checkpoint must be a folder"):
        BackgroundQuery("SELECT v FROM l", _catalog(), checkpoint=3)
    static = Catalog()
    static.add_table("d", pa.table({"k": [1]}))
    with pytest.raises(EddiesError, match="stream tables"):
        BackgroundQuery("SELECT k FROM d", static, checkpoint=tmp_path / "s").result(60)


def test_a_half_written_commit_is_never_read(tmp_path):
    cat = _catalog()
    query = BackgroundQuery("SELECT v FROM l WHERE v % 2 = 0", cat, checkpoint=tmp_path)
    stream = cat.table("l").stream
    for b in range(2):
        stream.push(side(b, "l"), b)
        query.commit(b)
    stream.close()
    query.result(60)
    (tmp_path / ".commit-000000000003.tmp-999").mkdir()  # a crash while writing commit 3
    (tmp_path / ".commit-000000000003.tmp-999" / "meta.json").write_text("{")
    cat = _catalog()
    sink = MemorySink()
    query = BackgroundQuery("SELECT v FROM l WHERE v % 2 = 0", cat, checkpoint=tmp_path, sink=sink)
    stream = cat.table("l").stream
    for b in range(3):
        stream.push(side(b, "l"), b)  # 0 and 1 are replays: ignored
        query.commit(b)
    stream.close()
    query.result(60)
    assert stream.batches_ignored == 2
    sql = "SELECT v FROM l WHERE v % 2 = 0"
    assert_same_bag(sink.table(query.schema), sql, {"l": side(2, "l")})
    assert [p.name for p in tmp_path.iterdir()] == ["commit-000000000005"]


# ---------------------------------------------------------------- static tables, modes

DIM = pa.table({"k": pa.array([0, 1, 2, 2, 5, None, 9], pa.int64()), "name": list("abcdefg")})


def _restart_run(ck, sql, pushes, start, stop, hold, dim=None, **options):
    """Generic in-process run: ``pushes[b]`` maps stream name -> table; batch b is pushed
    (id ``(name, b)``) and committed (tag b) for b in start..stop-1; ``hold``: one more
    batch pushed uncommitted before the streams close (its results are dropped, as a
    crash would). Returns the committed increments [(tag, table)]."""
    cat = Catalog()
    streams = {name: cat.add_stream(name, t.schema) for name, t in pushes[0].items()}
    if dim is not None:
        cat.add_table("dim", dim)
    sink = MemorySink()
    query = BackgroundQuery(sql, cat, sink=sink, checkpoint=ck, debug=True, **options)
    for b in range(start, stop):
        for name, table in pushes[b].items():
            streams[name].push(table, (name, b))
        query.commit(b)
    if hold is not None:
        for name, table in pushes[hold].items():
            streams[name].push(table, (name, hold))
    for stream in streams.values():
        stream.close()
    query.result(timeout=120)
    return [(t, x) for t, x in sink.increments if hold is None or t != "final"]


@pytest.mark.parametrize(("policy", "batch_size"), [("lottery", 7), ("rank", 1), ("static", None)])
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT l.v, d.name FROM l JOIN dim d ON l.k = d.k",
        "SELECT l.v, r.v AS rv, d.name FROM l JOIN r ON l.k = r.k JOIN dim d ON d.k = r.k",
        "SELECT a.v, b.v AS bv FROM l a JOIN l b ON a.k = b.k JOIN dim d ON d.k = b.k",
    ],
    ids=["stream-static", "stream-stream-static", "stream-self-join"],
)
def test_restart_with_static_tables_equals_duckdb(sql, policy, batch_size, tmp_path):
    """Static tables are read again after a restart; their tuples must not find the
    restored stream tuples (which are newer, as in the first run), or results double."""
    names = ("l", "r") if " r " in sql else ("l",)
    pushes = [{s: side(b, s) for s in names} for b in range(6)]
    options = {"policy": policy, "batch_size": batch_size}
    first = _restart_run(tmp_path, sql, pushes, 0, 3, 3, DIM, **options)
    second = _restart_run(tmp_path, sql, pushes, 1, 6, None, DIM, **options)
    tables = {s: pa.concat_tables(p[s] for p in pushes) for s in names} | {"dim": DIM}
    assert_same_bag(pa.concat_tables(t for _, t in first + second), sql, tables)


@pytest.mark.parametrize(
    ("mode", "sql"),
    [
        ("append", QUERIES["agg"]),
        ("complete", "SELECT page, count(*) AS n, sum(v) AS s FROM events GROUP BY page"),
        ("update", "SELECT count(*) AS n, avg(v) AS a, max(v) AS m FROM events"),
    ],
)
def test_restarted_aggregate_gives_the_uninterrupted_increments(mode, sql, tmp_path):
    pushes = [{"events": events(b)} for b in range(8)]
    options = {"output_mode": mode, "policy": "lottery", "batch_size": 7}
    if mode == "append":
        options["watermarks"] = {"events": ("ts", "30 seconds")}
    whole = _restart_run(tmp_path / "a", sql, pushes, 0, 8, None, **options)
    first = _restart_run(tmp_path / "b", sql, pushes, 0, 5, 5, **options)
    second = _restart_run(tmp_path / "b", sql, pushes, 3, 8, None, **options)
    ours = dict(first)
    for tag, table in second:  # replayed tags (3, 4) come again as empty increments
        if tag in ours:
            assert table.num_rows == 0 or mode == "complete", tag
            continue
        ours[tag] = table
    assert sorted(ours, key=str) == sorted(dict(whole), key=str)
    for tag, table in whole:
        if mode == "complete" and tag in (3, 4):
            continue  # the replayed commits of a complete-mode query repeat every group
        assert_bags_equal(table_rows(ours[tag]), table_rows(table), context=str(tag))
    every = {"events": pa.concat_tables(p["events"] for p in pushes)}
    if mode == "append":  # each group once, when final: all increments are the result
        assert_same_bag(pa.concat_tables(ours.values()), sql, every)
    elif mode == "complete":
        assert_same_bag(ours["final"], sql, every)


async def test_open_query_commits_write_the_checkpoint_a_restart_resumes(tmp_path):
    """Inside trio, ``await results.commit(tag)`` checkpoints; a second open_query with the
    same folder resumes (pushes come from a worker thread, as from a producer)."""
    import trio

    from eddies.engine import open_query

    sql = "SELECT l.v, r.v AS rv FROM l JOIN r ON l.k = r.k"
    got = []

    async def run(start: int, stop: int) -> None:
        cat = Catalog()
        streams = {s: cat.add_stream(s, side(0, s).schema) for s in ("l", "r")}
        async with open_query(sql, cat, checkpoint=tmp_path) as results:

            async def consume():
                async for batch in results:
                    got.append(batch)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume)
                for b in range(start, stop):
                    for s, stream in streams.items():
                        await trio.to_thread.run_sync(stream.push, side(b, s), (s, b))
                    await results.commit(b)
                for stream in streams.values():
                    await trio.to_thread.run_sync(stream.close)

    await run(0, 3)
    assert len(list(tmp_path.glob("commit-*"))) == 1
    await run(2, 6)  # batch 2 is a replay: ignored
    tables = {s: pa.concat_tables(side(b, s) for b in range(6)) for s in ("l", "r")}
    assert_same_bag(pa.Table.from_batches(got), sql, tables)


def test_a_batch_id_json_cannot_hold_fails_the_query_clearly(tmp_path):
    cat = _catalog()
    query = BackgroundQuery("SELECT v FROM l", cat, checkpoint=tmp_path)
    cat.table("l").stream.push(side(0, "l"), frozenset({1}))
    with pytest.raises(EddiesError, match="batch ids and commit tags must be"):
        query.commit(0)
    with pytest.raises(EddiesError, match="batch ids and commit tags must be"):
        query.result(timeout=60)


@pytest.mark.parametrize(
    "window", [RowWindow(700), EventTimeWindow("v", 900)], ids=["rows", "event-time"]
)
def test_restart_after_windowed_stems_evicted_equals_an_uninterrupted_run(window, tmp_path):
    """Enough rows that the windowed SteM evicts (renumbers its rows) before the
    checkpoint: the snapshot after eviction restores the same window."""
    rng = np.random.default_rng(3)
    batches = [
        tuple(
            pa.table(
                {
                    "k": pa.array(rng.integers(0, 400, 1500), pa.int64()),
                    "v": pa.array(np.arange(1500) + b * 1500, pa.int64()),
                }
            )
            for _ in range(2)
        )
        for b in range(8)
    ]
    # debug=False: the constraint checker identifies tuples by row id, which eviction
    # renumbers (also without a checkpoint).
    args = (window, "lottery", None, False)
    whole = _in_process_run(tmp_path / "a", batches, 0, 8, None, *args)
    first = _in_process_run(tmp_path / "b", batches, 0, 5, 5, *args)
    second = _in_process_run(tmp_path / "b", batches, 4, 8, None, *args)
    assert any(s.num_rows for _, s in second)
    assert_bags_equal(
        table_rows(pa.concat_tables(t for _, t in first + second)),
        table_rows(pa.concat_tables(t for _, t in whole)),
    )


def test_attach_with_durable_state_refuses_a_query_it_cannot_checkpoint(tmp_path):
    """Before any Spark query starts (a stand-in streaming DataFrame, the stream table
    already in the catalog): a table read by a scan and an index AM is not checkpointed."""
    from eddies.engine.spark.driver import attach

    class Frame:
        isStreaming = True

    cat = _catalog()

    async def lookup(bind):
        return [{"k": bind["k"], "w": 1}]

    cat.add_table("i", pa.table({"k": pa.array([1], pa.int64()), "w": pa.array([1], pa.int64())}))
    cat.add_index("i", pa.schema([("k", pa.int64()), ("w", pa.int64())]), on=["k"], lookup=lookup)
    sql = "SELECT l.v, i.w FROM l JOIN i ON l.k = i.k"
    with pytest.raises(UnsupportedQueryError, match="read by an index AM and another"):
        attach(sql, cat, {"l": Frame()}, checkpoint_location=tmp_path, durable_state=True)
    with pytest.raises(EddiesError, match="durable_state must be"):
        attach(sql, cat, {"l": Frame()}, checkpoint_location=tmp_path, durable_state="yes")


LOOKUP_SQL = "SELECT l.v, i.w FROM l JOIN i ON l.k = i.k"


@pytest.mark.parametrize(("policy", "batch_size"), [("lottery", 7), ("random", 1), ("rank", None)])
def test_lookup_answers_are_checkpointed_so_a_restart_sees_the_same_enrichment(
    policy, batch_size, tmp_path
):
    """An index AM's answers (the looked-up table's SteM and its EOTs: the lookup cache)
    are checkpointed: after a restart, keys looked up before the last commit are answered
    from the cache, as in an uninterrupted run, even though the source now answers
    otherwise (``version``); keys first seen later get the new answer in both runs."""
    version = {"now": 1}
    lookups = []

    async def lookup(bind):
        lookups.append(bind["k"])
        return [{"k": bind["k"], "w": bind["k"] * 10 + version["now"]}]

    def run(ck, start, stop, hold):
        cat = Catalog()
        stream = cat.add_stream("l", side(0, "l").schema)
        cat.add_index(
            "i", pa.schema([("k", pa.int64()), ("w", pa.int64())]), on=["k"], lookup=lookup
        )
        sink = MemorySink()
        query = BackgroundQuery(
            LOOKUP_SQL,
            cat,
            sink=sink,
            checkpoint=ck,
            debug=True,
            policy=policy,
            batch_size=batch_size,
        )
        for b in list(range(start, stop)) + ([hold] if hold is not None else []):
            version["now"] = 1 if b < 4 else 2  # the source changes its answers at batch 4
            stream.push(side(b, "l"), ("l", b))
            if b != hold:
                query.commit(b)
        stream.close()
        query.result(timeout=120)
        return [(t, x) for t, x in sink.increments if hold is None or t != "final"]

    whole = run(tmp_path / "a", 0, N, None)
    first = run(tmp_path / "b", 0, 4, 4)
    looked_before = len(lookups)
    second = run(tmp_path / "b", 2, N, None)
    ours = pa.concat_tables(t for _, t in first + second)
    assert_bags_equal(table_rows(ours), table_rows(pa.concat_tables(t for _, t in whole)))
    # DuckDB: each key's answer is the one of the version of the batch it first came in.
    first_seen = {}
    for b in range(N):
        for k in side(b, "l")["k"].to_pylist():
            if k is not None:
                first_seen.setdefault(k, b)
    answers = pa.table(
        {
            "k": pa.array(list(first_seen), pa.int64()),
            "w": pa.array(
                [k * 10 + (1 if b < 4 else 2) for k, b in first_seen.items()], pa.int64()
            ),
        }
    )
    every = pa.concat_tables(side(b, "l") for b in range(N))
    assert_same_bag(ours, LOOKUP_SQL, {"l": every, "i": answers})
    # The restart looked up only keys the checkpoint did not hold.
    cached = {k for k, b in first_seen.items() if b < 4}
    assert not cached & set(lookups[looked_before:])
