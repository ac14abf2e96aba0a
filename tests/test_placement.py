"""Which queries ``attach(..., placement="executors")`` places, and what it refuses (no
Spark: :func:`~eddies.engine.spark.executors.analyze_placement` is pure). The placed
kinds run against Spark in tests/test_spark_executors.py."""

from __future__ import annotations

import pyarrow as pa
import pytest

from eddies.engine import Catalog
from eddies.engine.options import RunOptions
from eddies.engine.spark.executors import NEW, analyze_placement
from eddies.errors import EddiesError, UnsupportedQueryError
from eddies.modules.window import RowWindow

STREAMS = {
    "events": pa.schema([("k", pa.int64()), ("v", pa.int64()), ("ts", pa.timestamp("us"))]),
    "r": pa.schema([("k", pa.int64()), ("w", pa.int64())]),
}


async def _lookup(bind: dict) -> pa.Table:
    return pa.table({"k": [bind["k"]], "label": ["x"]})


def _catalog() -> Catalog:
    cat = Catalog()
    cat.add_table("dim", pa.table({"k": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}))
    schema = pa.schema([("k", pa.int64()), ("label", pa.string())])
    cat.add_index("names", schema, on=["k"], lookup=_lookup)
    cat.add_table("mixed", pa.table({"k": pa.array([1], pa.int64()), "label": ["y"]}))
    cat.add_index("mixed", schema, on=["k"], lookup=_lookup)
    return cat


def _place(sql: str, **options):
    return analyze_placement(sql, _catalog(), STREAMS, RunOptions.from_kwargs(None, **options))


@pytest.mark.parametrize(
    ("sql", "options", "kind"),
    [
        ("SELECT e.v, d.name FROM events e JOIN dim d ON e.k = d.k", {}, "map"),
        ("SELECT e.v, n.label FROM events e JOIN names n ON e.k = n.k WHERE e.v > 1", {}, "map"),
        ("SELECT e.v, r.w FROM events e JOIN r ON e.k = r.k", {}, "join"),
        (
            "SELECT d.name, count(*), avg(e.v) FROM events e JOIN dim d ON e.k = d.k "
            "GROUP BY d.name",
            {"output_mode": "update"},
            "aggregate",
        ),
        ("SELECT count(*) FROM events", {"output_mode": "update"}, "aggregate"),
    ],
)
def test_placed_kinds(sql, options, kind):
    plan = _place(sql, **options)
    assert plan.kind == kind and plan.reason
    assert (NEW in plan.sql) == (kind == "join")


def test_a_stream_stream_join_gets_the_new_row_predicate_and_keeps_its_where():
    plan = _place("SELECT e.v, r.w FROM events e JOIN r ON e.k = r.k WHERE e.v > 3")
    assert plan.sql.endswith(f'WHERE e.v > 3 AND ("e"."{NEW}" OR "r"."{NEW}")')
    assert plan.partition.keys == {"e": ("k",), "r": ("k",)}


@pytest.mark.parametrize(
    ("sql", "options", "why"),
    [
        ("SELECT DISTINCT e.v FROM events e", {}, "ORDER BY, DISTINCT, LIMIT"),
        ("SELECT e.v FROM events e ORDER BY e.v LIMIT 3", {}, "ORDER BY, DISTINCT, LIMIT"),
        ("SELECT e.k, count(*) FROM events e GROUP BY e.k", {}, "output_mode='update' only"),
        (
            "SELECT e.k, count(*) FROM events e GROUP BY e.k",
            {"output_mode": "complete"},
            "got 'complete'",
        ),
        (
            "SELECT e.k, count(*) FROM events e JOIN r ON e.k = r.k GROUP BY e.k",
            {"output_mode": "update"},
            "several stream aliases",
        ),
        ("SELECT e.v, r.w FROM events e JOIN r ON e.v < r.w", {}, "cannot be partitioned"),
        ("SELECT e.v, d.name FROM events e LEFT JOIN dim d ON e.k = d.k", {}, "outer joins"),
        ("SELECT e.v, b.label FROM events e JOIN mixed b ON e.k = b.k", {}, "index AM and a scan"),
        (
            "SELECT time_bucket(INTERVAL '1 minute', ts) AS m, count(*) FROM events GROUP BY m",
            {"output_mode": "update", "watermarks": {"events": ("ts", "10 seconds")}},
            "watermarks",
        ),
    ],
)
def test_what_executors_refuse_and_why(sql, options, why):
    with pytest.raises(UnsupportedQueryError, match="placement='executors'") as info:
        _place(sql, **options)
    assert why in str(info.value) and "placement='driver'" in str(info.value)


def test_windows_and_driver_checkpoints_are_refused():
    sql = "SELECT e.v, r.w FROM events e JOIN r ON e.k = r.k"
    with pytest.raises(UnsupportedQueryError, match="windows"):
        analyze_placement(sql, _catalog(), STREAMS, RunOptions(), windows={"r": RowWindow(5)})
    with pytest.raises(EddiesError, match="checkpoint="):
        analyze_placement(sql, _catalog(), STREAMS, RunOptions.from_kwargs(None, checkpoint="x"))


# ---------------------------------------------------------------------------------------
# The executors' functions without Spark: the same calls Spark makes, against DuckDB.

import datetime as dt  # noqa: E402
import itertools  # noqa: E402
from collections import defaultdict  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from oracle import assert_bags_equal, duckdb_table, table_rows  # noqa: E402

from eddies.engine.spark.executors import (  # noqa: E402
    _aggregate_state_fn,
    _buckets_of,
    _join_state_fn,
    _pack_fn,
    _partials_fn,
    _unipc,
    make_task,
)
from eddies.engine.spark.shuffle import BUCKET, INPUT  # noqa: E402

RUNS = [(p, 7) for p in ("lottery", "rank", "bandit", "random", "static")]
RUNS += [("lottery", 1), ("lottery", None)]
PAIR = pa.schema([("k", pa.int64()), ("v", pa.int64())])
DIM = pa.table({"k": pa.array([0, 1, 2, 2, None], pa.int64()), "name": list("abcde")})


class FakeState:
    """Spark's GroupState as ``applyInPandasWithState`` hands it to the function."""

    def __init__(self) -> None:
        self.value = None

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple:
        return self.value

    def update(self, value: tuple) -> None:
        self.value = value


def _call_states(fn, packed: list[pa.RecordBatch], states: dict) -> list[pa.Table]:
    """Spark's shuffle and state step: the packed blobs grouped by bucket, one call per
    bucket with that bucket's state; the output blobs decoded."""
    by_bucket: dict[int, list[bytes]] = defaultdict(list)
    for batch in packed:
        for bucket, blob in zip(
            batch.column(BUCKET).to_pylist(), batch.column("blob").to_pylist(), strict=True
        ):
            by_bucket[bucket].append(blob)
    out = []
    for bucket, blobs in sorted(by_bucket.items()):
        frames = iter([pd.DataFrame({"blob": blobs})])
        for frame in fn((bucket,), frames, states[bucket]):
            out += [_unipc(b) for b in frame["blob"]]
    return out


def _pieces(table: pa.Table, parts: int) -> list[list[pa.RecordBatch]]:
    size = max(1, -(-table.num_rows // parts))
    return [table.slice(i, size).to_batches() for i in range(0, table.num_rows, size)]


pairs_st = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(0, 4)), st.integers(-3, 6)), max_size=30
)


def _pair_table(rows: list[tuple]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "v": pa.array([r[1] for r in rows], pa.int64()),
        }
    )


def _batches(rows: list[tuple], cuts: list[int]) -> list[pa.Table]:
    bounds = sorted({0, len(rows), *[c for c in cuts if c <= len(rows)]})
    return [_pair_table(rows[a:b]) for a, b in itertools.pairwise(bounds)]


JOINS = [
    "SELECT l.v AS lv, r.v AS rv, d.name FROM l JOIN r ON l.k = r.k "
    "JOIN dim d ON d.k = l.k WHERE l.v <> r.v",
    # a self-join: one shipped input read by two aliases (old rows meet its own new ones)
    "SELECT a.v AS av, b.v AS bv, r.v AS rv FROM l a JOIN l b ON a.k = b.k "
    "JOIN r ON r.k = b.k WHERE a.v <= b.v",
    # aliases of one table on different columns: two shipped copies
    "SELECT a.v AS av, b.k AS bk FROM l a JOIN l b ON a.k = b.v",
]


@pytest.mark.parametrize(("policy", "batch_size"), RUNS)
@pytest.mark.parametrize("sql", JOINS, ids=["two-streams", "self-join", "copies"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    left=pairs_st,
    right=pairs_st,
    cuts=st.lists(st.integers(0, 30), max_size=4),
    buckets=st.integers(1, 3),
)
def test_a_stream_stream_join_per_bucket_over_micro_batches_equals_duckdb(
    policy, batch_size, sql, left, right, cuts, buckets
):
    """Per micro-batch: rows hashed on the join key, packed per bucket, one state call per
    bucket (old rows pruned to the new rows' keys); the union of every output equals
    DuckDB's join over all rows."""
    cat = Catalog()
    cat.add_table("dim", DIM)
    schemas = {"l": PAIR, "r": PAIR}
    options = RunOptions.from_kwargs(None, policy=policy, batch_size=batch_size, seed=1)
    plan = analyze_placement(sql, cat, schemas, options)
    assert plan.kind == "join"
    task = make_task(plan, cat, schemas, options, buckets)
    batches = {"l": _batches(left, cuts), "r": _batches(right, cuts)}
    states: dict = defaultdict(FakeState)
    outputs = []
    for n in range(max(len(b) for b in batches.values())):
        parts = []
        for i, one in enumerate(plan.partition.inputs):
            if n >= len(batches[one.table]):
                continue
            piece = batches[one.table][n]
            (key,) = one.columns
            rows = piece.combine_chunks()  # NULL keys too: the pack drops them
            struct = pa.StructArray.from_arrays(
                [c.combine_chunks() for c in rows.columns], names=rows.column_names
            )
            columns = {BUCKET: pa.array(_buckets_of(rows, [key], buckets))}
            for j in range(len(plan.partition.inputs)):
                columns[f"{INPUT}{j}"] = struct if j == i else pa.nulls(len(rows), struct.type)
            parts.append(pa.table(columns))
        if not parts:
            continue
        shuffled = pa.concat_tables(parts)
        packed = [b for piece in _pieces(shuffled, 2) for b in _pack_fn(BUCKET, task)(iter(piece))]
        outputs += _call_states(_join_state_fn(task), packed, states)
    ours = pa.concat_tables(outputs) if outputs else plan.result_schema.empty_table()
    tables = {"l": _pair_table(left), "r": _pair_table(right), "dim": DIM}
    assert_bags_equal(table_rows(ours), table_rows(duckdb_table(sql, tables)), sql)


@pytest.mark.parametrize(("policy", "batch_size"), RUNS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=pairs_st,
    cuts=st.lists(st.integers(0, 30), max_size=4),
    buckets=st.integers(1, 3),
    grouped=st.booleans(),
)
def test_an_update_aggregate_per_bucket_over_micro_batches_equals_duckdb(
    policy, batch_size, rows, cuts, buckets, grouped
):
    """Per micro-batch: partial states per partition, packed per group-key bucket, merged
    per bucket in its state; each increment holds the groups it changed, and the
    increments applied as upserts equal DuckDB's aggregate over all rows."""
    if grouped:
        sql = (
            "SELECT d.name, count(*) AS n, sum(s.v) AS sv, avg(s.v) AS av, min(s.v) AS lo "
            "FROM s JOIN dim d ON s.k = d.k GROUP BY d.name"
        )
    else:
        sql = "SELECT count(*) AS n, sum(s.v) AS sv, max(s.v) AS hi FROM s"
    cat = Catalog()
    cat.add_table("dim", DIM)
    schemas = {"s": PAIR}
    options = RunOptions.from_kwargs(
        None, policy=policy, batch_size=batch_size, seed=1, output_mode="update"
    )
    plan = analyze_placement(sql, cat, schemas, options)
    assert plan.kind == "aggregate"
    task = make_task(plan, cat, schemas, options, buckets)
    states: dict = defaultdict(FakeState)
    latest: dict = {}
    for piece in _batches(rows, cuts):
        packed = [b for part in _pieces(piece, 2) for b in _partials_fn(task)(iter(part))]
        increment = _call_states(_aggregate_state_fn(task), packed, states)
        keys = [r.get("name") for t in increment for r in t.to_pylist()]
        assert len(keys) == len(set(keys))  # a group at most once per increment
        for table in increment:
            for row in table.to_pylist():
                latest[row.get("name")] = row
    ours = pa.Table.from_pylist(list(latest.values()), plan.result_schema)
    expected = duckdb_table(sql, {"s": _pair_table(rows), "dim": DIM})
    if not grouped and not rows:  # no micro-batch ran: Spark emits nothing either
        expected = expected.slice(0, 0)
    assert_bags_equal(table_rows(ours), table_rows(expected), sql)


def test_group_key_buckets_are_the_same_in_every_process_and_type_stable():
    """The bucket of a group key depends on its value only (not on NULLs elsewhere in the
    column, which turn pandas' int64 into float64)."""
    with_null = pa.table({"g": pa.array([1, 2, None, 3], pa.int64())})
    without = pa.table({"g": pa.array([1, 2, 3], pa.int64())})
    a, b = _buckets_of(with_null, ["g"], 7), _buckets_of(without, ["g"], 7)
    assert list(a[[0, 1, 3]]) == list(b)
    assert np.all((a >= 0) & (a < 7))


@pytest.mark.parametrize(("policy", "batch_size"), RUNS[:1] + RUNS[-2:])
def test_a_hopping_window_aggregate_on_executors_equals_duckdb(policy, batch_size):
    """GROUP BY window(ts, 10 min, 5 min) placed on executors: each row's windows are
    exploded in the partitions' StreamingAggregates, the partial states hashed on the
    window start; the upserted increments equal DuckDB's window-join aggregate."""
    base = dt.datetime(2024, 1, 1)
    schema = pa.schema([("ts", pa.timestamp("us")), ("v", pa.int64())])
    minutes = [(m * 7) % 53 for m in range(60)] + [None, None]
    rows = pa.table(
        {
            "ts": pa.array(
                [None if m is None else base + dt.timedelta(minutes=m) for m in minutes],
                pa.timestamp("us"),
            ),
            "v": pa.array([i % 5 for i in range(len(minutes))], pa.int64()),
        }
    )
    sql = (
        "SELECT window(s.ts, INTERVAL '10 minutes', INTERVAL '5 minutes') AS w, "
        "count(*) AS n, sum(s.v) AS sv FROM s GROUP BY w"
    )
    options = RunOptions.from_kwargs(
        None, policy=policy, batch_size=batch_size, seed=1, output_mode="update"
    )
    plan = analyze_placement(sql, Catalog(), {"s": schema}, options)
    assert plan.kind == "aggregate"
    task = make_task(plan, Catalog(), {"s": schema}, options, 3)
    states: dict = defaultdict(FakeState)
    latest: dict = {}
    for start in range(0, rows.num_rows, 17):
        piece = rows.slice(start, 17)
        packed = [b for part in _pieces(piece, 2) for b in _partials_fn(task)(iter(part))]
        for table in _call_states(_aggregate_state_fn(task), packed, states):
            latest |= {row["w"]: row for row in table.to_pylist()}
    starts = pa.table(
        {"start": [base + dt.timedelta(minutes=m) for m in range(-10, 60, 5)]},
        schema=pa.schema([("start", pa.timestamp("us"))]),
    )
    theirs = (
        "SELECT w.start AS w, count(*) AS n, sum(s.v) AS sv FROM s JOIN w ON "
        "s.ts >= w.start AND s.ts < w.start + INTERVAL '10 minutes' GROUP BY w.start"
    )
    ours = pa.Table.from_pylist(list(latest.values()), plan.result_schema)
    expected = duckdb_table(theirs, {"s": rows, "w": starts})
    assert_bags_equal(table_rows(ours), table_rows(expected), sql)
