"""Hopping (sliding) and tumbling event-time windows: Spark's ``window(ts, size[, slide])``
as a GROUP BY key, against DuckDB.

DuckDB has no ``window()``; the oracle joins the rows with a table of window starts
(multiples of the slide since 1970-01-01, as Spark aligns them) on
``start <= ts < start + size``, so a row counts once in each window that holds it and a
row with a NULL ts in none. Batch queries (``execute``) under every policy and batch sizes
1, 7 and the default; streaming aggregates at every commit (``complete``: every window so
far; ``update``: the windows the micro-batch touched) and with a watermark (``append``:
each window once, when the watermark passes its end; the state stays bounded).
"""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_bags_equal, duckdb_table, table_rows

from eddies.engine import Catalog, UnsupportedQueryError, execute
from eddies.engine.streaming.sinks import CallbackSink
from eddies.engine.streaming.thread_runner import BackgroundQuery

BASE = dt.datetime(2024, 1, 1)  # a multiple of every slide below since 1970
SCHEMA = pa.schema([("ts", pa.timestamp("us")), ("k", pa.int64()), ("v", pa.int64())])
DIM = pa.table({"k": pa.array([0, 1, 1, 2, None], pa.int64()), "name": list("abcde")})
RUNS = [(p, 7) for p in ("lottery", "rank", "bandit", "random", "static")]
RUNS += [("lottery", 1), ("lottery", None)]
#: (size, slide) in minutes: slide dividing size, not dividing it, tumbling.
SHAPES = [(10, 5), (10, 4), (6, 6), (15, 1)]

rows_st = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(-30, 90)),  # minutes from BASE (some before it)
        st.one_of(st.none(), st.integers(0, 3)),
        st.one_of(st.none(), st.integers(-5, 9)),
    ),
    max_size=40,
)


def _table(rows: list[tuple]) -> pa.Table:
    ts = [None if r[0] is None else BASE + dt.timedelta(minutes=r[0], seconds=7) for r in rows]
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us")),
            "k": pa.array([r[1] for r in rows], pa.int64()),
            "v": pa.array([r[2] for r in rows], pa.int64()),
        }
    )


def _starts(size: int, slide: int) -> pa.Table:
    """Every window start (minutes, aligned on BASE) that can hold a row of rows_st."""
    first = -30 - size
    first -= first % slide
    starts = [BASE + dt.timedelta(minutes=m) for m in range(first, 91, slide)]
    return pa.table({"start": pa.array(starts, pa.timestamp("us"))})


def _window_sql(size: int, slide: int) -> str:
    return f"window(s.ts, INTERVAL '{size} minutes', INTERVAL '{slide} minutes')"


def _queries(size: int, slide: int) -> list[tuple[str, str]]:
    """(our SQL, DuckDB's SQL over the window-start table ``w``) pairs."""
    win = _window_sql(size, slide)
    inside = f"s.ts >= w.start AND s.ts < w.start + INTERVAL '{size} minutes'"
    return [
        (
            f"SELECT {win} AS ws, count(*) AS n, sum(s.v) AS sv, max(s.v) AS mx FROM s GROUP BY ws",
            f"SELECT w.start AS ws, count(*) AS n, sum(s.v) AS sv, max(s.v) AS mx "
            f"FROM s JOIN w ON {inside} GROUP BY w.start",
        ),
        (
            f"SELECT d.name, {win} AS ws, {win} + INTERVAL '{size} minutes' AS we, "
            f"count(s.v) AS n, avg(s.v) AS a FROM s JOIN dim d ON s.k = d.k "
            f"WHERE s.v IS NULL OR s.v <> 3 GROUP BY d.name, {win} HAVING count(*) > 0",
            f"SELECT d.name, w.start AS ws, w.start + INTERVAL '{size} minutes' AS we, "
            f"count(s.v) AS n, avg(s.v) AS a FROM s JOIN dim d ON s.k = d.k JOIN w ON {inside} "
            f"WHERE s.v IS NULL OR s.v <> 3 GROUP BY d.name, w.start HAVING count(*) > 0",
        ),
    ]


@pytest.mark.parametrize(("policy", "batch_size"), RUNS)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_st, shape=st.sampled_from(SHAPES))
def test_window_group_keys_equal_duckdbs_window_join(policy, batch_size, rows, shape):
    size, slide = shape
    s = _table(rows)
    cat = Catalog()
    cat.add_table("s", s)
    cat.add_table("dim", DIM)
    tables = {"s": s, "dim": DIM, "w": _starts(size, slide)}
    for ours, theirs in _queries(size, slide):
        got = execute(ours, cat, policy=policy, batch_size=batch_size, seed=1)
        assert_bags_equal(table_rows(got), table_rows(duckdb_table(theirs, tables)), ours)


def test_a_tumbling_window_equals_time_bucket_on_aligned_widths():
    """Without a slide, window() tumbles: for widths that divide a day, Spark's epoch
    alignment and DuckDB's time_bucket origin (2000-01-03) agree."""
    s = _table([(m, m % 3, m) for m in range(-20, 60, 3)] + [(None, 1, 1)])
    cat = Catalog()
    cat.add_table("s", s)
    ours = "SELECT window(s.ts, '10 minutes') AS b, count(*) AS n FROM s GROUP BY 1"
    theirs = (
        "SELECT time_bucket(INTERVAL '10 minutes', s.ts) AS b, count(*) AS n FROM s "
        "WHERE s.ts IS NOT NULL GROUP BY 1"
    )
    assert_bags_equal(table_rows(execute(ours, cat)), table_rows(duckdb_table(theirs, {"s": s})))


def _push_all(sql, pieces, **options):
    cat = Catalog()
    stream = cat.add_stream("s", SCHEMA)
    cat.add_table("dim", DIM)
    got: list[tuple] = []
    query = BackgroundQuery(
        sql, cat, sink=CallbackSink(lambda t, tag: got.append((tag, t))), **options
    )
    for i, piece in enumerate(pieces):
        stream.push(piece, i)
        query.commit(i, timeout=60)
    stream.close()
    query.result(timeout=60)
    return got, query.stats


@pytest.mark.parametrize(("policy", "batch_size"), RUNS[:1] + RUNS[-2:])
@pytest.mark.parametrize("mode", ["complete", "update"])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_st, cuts=st.lists(st.integers(0, 40), max_size=4), shape=st.sampled_from(SHAPES))
def test_every_commit_of_a_windowed_stream_aggregate_equals_duckdb(
    policy, batch_size, mode, rows, cuts, shape
):
    """complete: every window over the rows pushed so far; update: those of them that the
    micro-batch touched (a window holding one of its rows)."""
    size, slide = shape
    bounds = sorted({0, len(rows), *[c for c in cuts if c <= len(rows)]})
    pieces = [_table(rows[a:b]) for a, b in itertools.pairwise(bounds)]
    for ours, theirs in _queries(size, slide):
        got, _ = _push_all(ours, pieces, output_mode=mode, policy=policy, batch_size=batch_size)
        assert [tag for tag, _ in got] == [*range(len(pieces)), "final"]
        w = _starts(size, slide)
        for i, (_, increment) in enumerate(got[:-1]):
            so_far = pa.concat_tables([SCHEMA.empty_table(), *pieces[: i + 1]])
            expected = duckdb_table(theirs, {"s": so_far, "dim": DIM, "w": w})
            if mode == "update":
                touched = duckdb_table(
                    theirs.replace("FROM s ", "FROM piece s "),
                    {"piece": pieces[i], "dim": DIM, "w": w},
                )
                keys = {(r["ws"], r.get("name")) for r in touched.to_pylist()}
                expected = pa.Table.from_pylist(
                    [r for r in expected.to_pylist() if (r["ws"], r.get("name")) in keys],
                    expected.schema,
                )
            assert_bags_equal(table_rows(increment), table_rows(expected), ours, f"commit {i}")
        if mode == "update":  # nothing changed after the last commit
            assert got[-1][1].num_rows == 0


@pytest.mark.parametrize(("policy", "batch_size"), RUNS[:1] + RUNS[-2:])
@pytest.mark.parametrize("shape", SHAPES)
def test_append_mode_emits_each_hopping_window_once_when_the_watermark_passes_it(
    policy, batch_size, shape
):
    """Rows in event-time order with a lateness covering the disorder: no row is late,
    every window leaves once, at the first commit whose watermark is at or past its end,
    and all of them together equal DuckDB's; the live windows stay bounded."""
    size, slide = shape
    rows = [(m // 2, m % 4, m) for m in range(0, 180)]  # 0..89 minutes, two rows a minute
    pieces = [_table(rows[i : i + 12]) for i in range(0, len(rows), 12)]
    sql, theirs = _queries(size, slide)[0]
    got, stats = _push_all(
        sql,
        pieces,
        output_mode="append",
        watermarks={"s": ("ts", "1 minute")},
        policy=policy,
        batch_size=batch_size,
    )
    agg = stats.streaming_aggregate
    assert agg.late_rows == 0
    seen = set()
    for i, (_, increment) in enumerate(got[:-1]):
        newest = max(r[0] for r in rows[: 12 * (i + 1)])
        watermark = BASE + dt.timedelta(minutes=newest, seconds=7) - dt.timedelta(minutes=1)
        for row in increment.to_pylist():
            assert row["ws"] + dt.timedelta(minutes=size) <= watermark
            assert row["ws"] not in seen
            seen.add(row["ws"])
    everything = pa.concat_tables([t for _, t in got])
    all_rows = pa.concat_tables(pieces)
    expected = duckdb_table(theirs, {"s": all_rows, "w": _starts(size, slide)})
    assert_bags_equal(table_rows(everything), table_rows(expected), sql)
    # Open windows only: those ending after the watermark and starting by the newest row
    # (size + lateness + a piece's 6 minutes), not the 90 minutes' worth.
    assert agg.peak_live_groups <= (size + 1 + 6) // slide + 2 < expected.num_rows
    assert agg.evicted_groups == expected.num_rows and seen  # each window forgotten once


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT window(s.ts, '10 minutes') FROM s", "without GROUP BY"),
        ("SELECT count(*) FROM s WHERE window(s.ts, '5 minutes') IS NULL", "in WHERE or ON"),
        (
            "SELECT count(*) FROM s GROUP BY window(s.ts, '10 minutes'), window(s.ts, '5 minutes')",
            r"2 window\(\) keys",
        ),
        (
            "SELECT window(s.ts, '10 minutes') + INTERVAL 1 MINUTE AS x, count(*) FROM s "
            "GROUP BY 1",
            "must be a whole key",
        ),
        (
            "SELECT count(window(s.ts, '10 minutes')) FROM s GROUP BY window(s.ts, '10 minutes')",
            "only as a GROUP BY key",
        ),
        ("SELECT count(*) FROM s GROUP BY window(s.ts, '5 minutes', '10 minutes')", "slide"),
        ("SELECT count(*) FROM s GROUP BY window(s.ts, '1 month')", "month"),
        ("SELECT count(*) FROM s GROUP BY window(s.ts, s.v)", "literals"),
        ("SELECT count(*) FROM s GROUP BY window(s.ts, '5 minutes', '1 minute', '0 s')", "start"),
    ],
)
def test_window_outside_a_group_key_or_with_bad_spans_is_refused(sql, message):
    cat = Catalog()
    cat.add_table("s", _table([(1, 1, 1)]))
    with pytest.raises(UnsupportedQueryError, match=message):
        execute(sql, cat)


def test_named_windows_stay_refused():
    cat = Catalog()
    cat.add_table("s", _table([(1, 1, 1)]))
    with pytest.raises(UnsupportedQueryError, match="WINDOW"):
        execute("SELECT sum(s.v) OVER w FROM s WINDOW w AS (ORDER BY s.v)", cat)


def test_the_hopping_window_docs_example_runs(capsys):
    text = (Path(__file__).parent.parent / "docs" / "streaming.md").read_text()
    section = text[text.index("### Hopping (sliding) and tumbling windows") :]
    code = section[
        section.index("```python\n") + 10 : section.index("\n```", section.index("```python"))
    ]
    exec(compile(code, "docs/streaming.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    expected = [line.removeprefix("# ") for line in code.splitlines() if line.startswith("# ")]
    assert out == expected
