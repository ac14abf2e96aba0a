"""nycflights13 queries, eddies vs DuckDB on the same Arrow tables.

The demo-like 4-way join flights ⋈ planes ⋈ airports ⋈ weather (weather joined on the two
columns origin and time_hour, a timestamp) with selections runs once under each policy;
a few aggregates and an ORDER BY ... LIMIT query run under the default policy.
"""

from __future__ import annotations

import pytest
from oracle import assert_same_bag, assert_same_ordered, make_catalog

from eddies.engine import POLICIES, execute
from eddies.sources.nycflights import load_table


@pytest.fixture(scope="module")
def tables():
    return {
        name: load_table(name) for name in ("flights", "planes", "airports", "weather", "airlines")
    }


@pytest.fixture(scope="module")
def cat(tables):
    return make_catalog(tables)


FOUR_WAY = """
SELECT f.year, f.month, f.day, f.carrier, f.flight, f.tailnum,
       p.manufacturer, p.seats, a.name, w.temp, w.wind_speed
FROM flights f
JOIN planes p ON f.tailnum = p.tailnum
JOIN airports a ON f.dest = a.faa
JOIN weather w ON f.origin = w.origin AND f.time_hour = w.time_hour
WHERE f.month = 1 AND f.day <= 7 AND p.seats > 100 AND w.wind_speed > 10
"""


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
def test_four_way_join_each_policy(cat, tables, policy):
    ours = execute(FOUR_WAY, cat, policy=policy, seed=11)
    assert ours.num_rows > 100  # the query is not trivially empty
    assert_same_bag(ours, FOUR_WAY, tables, context=f"policy={policy}")


COMMA_FOUR_WAY_COUNT = """
SELECT a.name, COUNT(*) AS n, AVG(f.arr_delay) AS avg_delay, MAX(w.precip) AS max_precip
FROM flights f, planes p, airports a, weather w
WHERE f.tailnum = p.tailnum AND f.origin = a.faa
  AND f.origin = w.origin AND f.time_hour = w.time_hour
  AND p.engines >= 2 AND f.month IN (6, 7) AND w.visib < 5
GROUP BY a.name
"""


@pytest.mark.slow
def test_four_way_join_grouped_comma_syntax(cat, tables):
    ours = execute(COMMA_FOUR_WAY_COUNT, cat, policy="lottery", seed=2)
    assert_same_bag(ours, COMMA_FOUR_WAY_COUNT, tables)


def test_carrier_aggregates(cat, tables):
    sql = """
    SELECT l.name, f.carrier, COUNT(*), COUNT(f.dep_delay), SUM(f.distance),
           AVG(f.dep_delay), MIN(f.arr_delay), MAX(f.arr_delay), COUNT(DISTINCT f.dest)
    FROM flights f JOIN airlines l ON f.carrier = l.carrier
    WHERE f.origin = 'LGA'
    GROUP BY l.name, f.carrier
    HAVING COUNT(*) > 100
    """
    assert_same_bag(execute(sql, cat), sql, tables)


def test_weather_two_column_join_aggregate(cat, tables):
    sql = """
    SELECT w.origin, w.month, COUNT(*), AVG(f.dep_delay), MAX(w.wind_gust)
    FROM flights f, weather w
    WHERE f.origin = w.origin AND f.time_hour = w.time_hour AND w.precip > 0
    GROUP BY w.origin, w.month
    """
    assert_same_bag(execute(sql, cat, policy="lottery-window"), sql, tables)


def test_planes_null_years_and_string_predicates(cat, tables):
    sql = """
    SELECT p.manufacturer, p.year IS NULL AS no_year, COUNT(*)
    FROM flights f, planes p
    WHERE f.tailnum = p.tailnum AND p.manufacturer LIKE 'AIRBUS%' AND f.dest IN ('BOS', 'ATL')
    GROUP BY p.manufacturer, p.year IS NULL
    """
    assert_same_bag(execute(sql, cat, policy="naive"), sql, tables)


def test_top_delays_order_by_limit(cat, tables):
    sql = """
    SELECT f.dep_delay, f.carrier, f.flight, f.day, a.name
    FROM flights f JOIN airports a ON f.dest = a.faa
    WHERE f.origin = 'JFK' AND f.month = 3
    ORDER BY f.dep_delay DESC NULLS LAST, f.carrier, f.flight, f.day, a.name
    LIMIT 20
    """
    assert_same_ordered(execute(sql, cat), sql, tables, keys=[0, 1, 2, 3, 4])


def test_distinct_routes_self_join_airports(cat, tables):
    # airports used twice (origin and destination), DISTINCT over the result
    sql = """
    SELECT DISTINCT o.name, d.name, f.carrier
    FROM flights f, airports o, airports d
    WHERE f.origin = o.faa AND f.dest = d.faa AND f.distance > 2000 AND f.month = 12
    """
    assert_same_bag(execute(sql, cat, policy="random", seed=4), sql, tables)


FULL_FOUR_WAY_AGG = """
SELECT COUNT(*), COUNT(DISTINCT p.model), AVG(w.temp), MAX(a.alt), SUM(f.distance)
FROM flights f, planes p, airports a, weather w
WHERE f.tailnum = p.tailnum AND f.dest = a.faa
  AND f.origin = w.origin AND f.time_hour = w.time_hour
"""


@pytest.mark.slow
@pytest.mark.parametrize(("policy", "batch_size"), [("lottery-window", 256), ("naive", 2048)])
def test_full_four_way_join_aggregate_batch_sizes(cat, tables, policy, batch_size):
    ours = execute(FULL_FOUR_WAY_AGG, cat, policy=policy, batch_size=batch_size, seed=5)
    assert_same_bag(ours, FULL_FOUR_WAY_AGG, tables, context=f"{policy} bs={batch_size}")


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["static", "lottery"])
def test_four_way_join_small_batches_debug(cat, tables, policy):
    ours = execute(FOUR_WAY, cat, policy=policy, batch_size=64, debug=True, seed=8)
    assert_same_bag(ours, FOUR_WAY, tables, context=f"policy={policy} batch_size=64 debug")
