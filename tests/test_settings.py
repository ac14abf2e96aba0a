"""eddies.settings: the knobs reach the objects of a query, are validated, and tuned()
restores them.

The eddy's backlog bound (``eddy_max_buffered_tuples``) is read when the eddy is made,
the route-log bound (``route_log_max_records``) when the run's statistics are: both from
``RunOptions(tuning=...)`` as from a :func:`eddies.settings.tuned` block. What is counted
is tuples and records, never time.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from oracle import assert_same_bag

from eddies.engine import Catalog, EddiesError, RunOptions, run_query
from eddies.settings import DEFAULT, Tuning, current, tuned

#: A cross join of 1,000 x 1,000: each SteM probe of a source batch matches 1,000 tuples
#: a row, so probes end at their output bound and hand continuations back to the eddy.
CROSS = "SELECT count(*) FROM a, b"
TABLES = {"a": pa.table({"x": list(range(1000))}), "b": pa.table({"y": list(range(1000))})}


def _catalog() -> Catalog:
    cat = Catalog()
    for name, table in TABLES.items():
        cat.add_table(name, table)
    return cat


def test_run_options_tuning_reaches_the_eddy_and_the_answer_stays_duckdbs():
    """A backlog bound of one tuple holds every continuation while anything is in flight:
    the eddy buffers fewer tuples at its peak than under the default bound (2**18), and
    the count is DuckDB's either way."""
    loose = run_query(CROSS, _catalog(), seed=1)
    tight = run_query(
        CROSS, _catalog(), options=RunOptions(seed=1, tuning=Tuning(eddy_max_buffered_tuples=1))
    )
    for run in (loose, tight):
        assert_same_bag(run.table, CROSS, TABLES)
    assert 0 < tight.stats.peak_buffered_tuples < loose.stats.peak_buffered_tuples


def test_a_tuned_block_reaches_the_eddy_and_run_options_win_over_it():
    """Without RunOptions.tuning a query runs with the knobs in force where it starts; with
    it, with those it names (a whole Tuning: the block's changes do not leak in)."""
    with tuned(eddy_max_buffered_tuples=1):
        tight = run_query(CROSS, _catalog(), seed=1)
        loose = run_query(CROSS, _catalog(), seed=1, tuning=DEFAULT)
    for run in (loose, tight):
        assert_same_bag(run.table, CROSS, TABLES)
    assert 0 < tight.stats.peak_buffered_tuples < loose.stats.peak_buffered_tuples


def test_run_options_tuning_bounds_the_route_log_of_the_run_statistics():
    """The statistics are made before the query's knobs are put in force for its run: the
    route-log bound still comes from RunOptions.tuning, and the log folds beyond it."""
    run = run_query(
        "SELECT * FROM a JOIN b ON a.x = b.y",
        _catalog(),
        batch_size=5,
        seed=3,
        tuning=Tuning(route_log_max_records=50),
    )
    stats = run.stats
    assert stats.max_route_records == 50
    assert len(stats.routing) <= 51 < stats.decisions
    routed = sum(sum(per.values()) for per in stats.routing_summary().values())
    assert routed == sum(m.tuples_in for m in stats.modules.values() if m.kind != "scan")
    default = run_query("SELECT * FROM a JOIN b ON a.x = b.y", _catalog(), batch_size=5, seed=3)
    assert default.stats.max_route_records == DEFAULT.route_log_max_records
    assert len(default.stats.routing) == default.stats.decisions  # nothing folded


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"eddy_max_buffered_tuples": 0}, r"eddy_max_buffered_tuples must be an int >= 1"),
        ({"eddy_max_buffered_tuples": True}, r"eddy_max_buffered_tuples .*got True"),
        ({"route_log_max_records": "many"}, r"route_log_max_records .*got 'many'"),
        ({"route_log_max_records": 2.5}, r"route_log_max_records .*got 2.5"),
        ({"offload_rows": -1}, r"offload_rows must be an int >= 1 or None"),
        ({"stair_migration_cost": -1}, r"stair_migration_cost must be an int >= 0"),
        ({"stair_greedy_routing": 1}, r"stair_greedy_routing must be True or False"),
        ({"stair_look_again": 1}, r"stair_look_again must be a number > 1"),
    ],
)
def test_a_bad_knob_value_raises_an_eddies_error_naming_it(changes, words):
    with pytest.raises(EddiesError, match=words):
        Tuning(**changes)
    with pytest.raises(EddiesError, match=words):
        DEFAULT.replace(**changes)
    with pytest.raises(EddiesError, match=words), tuned(**changes):
        pass  # pragma: no cover - tuned() refuses before the block
    assert current() is DEFAULT


def test_an_unknown_knob_raises_an_eddies_error_naming_it():
    with pytest.raises(EddiesError, match=r"unknown knob\(s\) eddy_max_buffer\b"):
        DEFAULT.replace(eddy_max_buffer=5)
    with pytest.raises(EddiesError, match=r"unknown knob\(s\) nope"), tuned(nope=1):
        pass  # pragma: no cover
    with pytest.raises(EddiesError, match=r"tuning must be an eddies.settings.Tuning"):
        RunOptions(tuning={"eddy_max_buffered_tuples": 5})


def test_tuned_restores_the_knobs_on_exit_exceptions_included():
    assert current() is DEFAULT
    with tuned(eddy_max_buffered_tuples=7) as outer:
        assert current() is outer and outer.eddy_max_buffered_tuples == 7
        with tuned(route_log_max_records=3) as inner:  # changes the knobs in force
            assert (inner.eddy_max_buffered_tuples, inner.route_log_max_records) == (7, 3)
        assert current() is outer
        with pytest.raises(ZeroDivisionError), tuned(Tuning(stair_check_every=2)):
            assert current().stair_check_every == 2
            assert current().eddy_max_buffered_tuples == DEFAULT.eddy_max_buffered_tuples
            1 / 0  # noqa: B018
        assert current() is outer
    assert current() is DEFAULT
