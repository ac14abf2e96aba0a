"""Which queries ``attach(..., placement="executors")`` places, and what it refuses (no
Spark: :func:`~eddies.engine.spark_executors.analyze_placement` is pure). The placed
kinds run against Spark in tests/test_spark_executors.py."""

from __future__ import annotations

import pyarrow as pa
import pytest

from eddies.engine import Catalog
from eddies.engine.errors import EddiesError, UnsupportedQueryError
from eddies.engine.options import RunOptions
from eddies.engine.spark_executors import NEW, analyze_placement
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
