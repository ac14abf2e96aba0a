"""Bounded intermediate results (issue 9): a SteM probe returns at most
``Tuning.stem_max_output_rows`` tuples per Work and hands its rest back as a continuation,
which the eddy sends again only while its backlog is below ``Tuning.eddy_max_buffered_tuples``.

Checked here: the backlog of a cross join whose WHERE keeps nothing stays bounded (it held
4.3 million of 9 million pairs at once before); results stay DuckDB's when probes are cut
into many parts (small bounds set with ``eddies.settings.tuned``), under every policy and
batch size, with NULLs, duplicates, self-joins, 3-way joins, floating tuples and index
AMs; LIMIT still stops early.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from oracle import assert_same_bag, duckdb_table

from eddies.engine import Catalog, run_query
from eddies.engine.execution.run import DEFAULT_QUEUE_CAPACITY
from eddies.router.run_choices import POLICIES
from eddies.settings import current, tuned

ALWAYS_FALSE = "SELECT * FROM a, b WHERE a.x + b.y < -1"


def _cross_tables(n: int) -> dict[str, pa.Table]:
    rng = np.random.default_rng(0)
    return {
        "a": pa.table({"x": rng.integers(0, 100, n)}),
        "b": pa.table({"y": rng.integers(0, 100, n)}),
    }


def _catalog(tables: dict[str, pa.Table], **kwargs) -> Catalog:
    cat = Catalog()
    for name, table in tables.items():
        cat.add_table(name, table, **kwargs)
    return cat


def _slack(n_stems: int) -> int:
    """What may arrive beyond the backlog bound: the answers of the fresh (not resumed)
    probe Works in flight, at most ``Tuning.stem_max_output_rows`` each (the knob in
    force), one being processed and a full queue per SteM."""
    return n_stems * (DEFAULT_QUEUE_CAPACITY + 1) * current().stem_max_output_rows


def test_cross_join_keeping_nothing_buffers_a_bounded_backlog():
    """The issue's case: 3000 x 3000 pairs, none kept. Before the fix the eddy held up to
    4,275,000 pairs at once (peak_buffered_tuples); now at most the bound plus slack."""
    tables = _cross_tables(3000)
    run = run_query(ALWAYS_FALSE, _catalog(tables), seed=0)
    assert run.table.num_rows == 0
    probed = sum(s.tuples_out for n, s in run.stats.modules.items() if n.startswith("probe:"))
    assert probed == 3000 * 3000  # every pair was made, and looked at by the WHERE
    bound = (1 << 18) + _slack(2)  # the default eddy_max_buffered_tuples, plus the slack
    peak = run.stats.peak_buffered_tuples
    assert 0 < peak <= bound


@pytest.mark.parametrize("policy", POLICIES)
def test_backlog_bound_holds_when_probes_are_cut_into_hundreds_of_parts(policy):
    """Small bounds: 360,000 pairs in parts of 1,000; the backlog stays under 4,000 plus
    the slack, under every policy."""
    with tuned(eddy_max_buffered_tuples=4000, stem_max_output_rows=1000):
        tables = _cross_tables(600)
        run = run_query(ALWAYS_FALSE, _catalog(tables), policy=policy, seed=1, debug=True)
        assert run.table.num_rows == 0
        probes = [s for n, s in run.stats.modules.items() if n.startswith("probe:")]
        assert sum(s.tuples_out for s in probes) == 600 * 600
        # Each tuple probes the other SteM once, counted in once however many parts it took.
        assert sum(s.tuples_in for s in probes) == 600 + 600
        peak = run.stats.peak_buffered_tuples
        assert peak <= 4000 + _slack(2)


def _bag_tables() -> dict[str, pa.Table]:
    """Small tables with NULLs and duplicates; keys from a tiny domain, so one probe tuple
    has more matches than the (patched) output bound and the many-to-many joins explode."""
    rng = np.random.default_rng(7)

    def column(n: int, high: int, nulls: float = 0.15) -> pa.Array:
        values = rng.integers(0, high, n)
        return pa.array(values, pa.int64(), mask=rng.random(n) < nulls)

    def table(n: int) -> pa.Table:
        return pa.table({"k": column(n, 3), "j": column(n, 2), "v": column(n, 10, 0.1)})

    return {"a": table(40), "b": table(30), "c": table(12)}


QUERIES = {
    "cross": "SELECT a.v, b.v FROM a, b",
    "cross-filtered": "SELECT a.k, b.v FROM a, b WHERE a.v + b.v < 6",
    "many-to-many": "SELECT a.v, b.v FROM a JOIN b ON a.k = b.k",
    "two-columns": "SELECT a.v, b.v FROM a JOIN b ON a.k = b.k AND a.j = b.j",
    "self-join": "SELECT x.v, y.v FROM a x JOIN a y ON x.k = y.k",
    "self-cross": "SELECT x.v, y.k FROM a x, a y WHERE x.v < y.v",
    "three-way": "SELECT a.v, b.v, c.v FROM a JOIN b ON a.k = b.k JOIN c ON b.j = c.j",
    "three-way-cross": "SELECT a.v, b.k, c.v FROM a, b, c WHERE a.k = b.k AND c.v > a.v",
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_results_equal_duckdb_when_probes_exceed_the_bound(name):
    """Output bound 7, backlog bound 20: probes go in many parts, single tuples' matches
    are sliced, continuations are held; every policy, batch sizes 1, 7 and the default."""
    with tuned(eddy_max_buffered_tuples=20, stem_max_output_rows=7):
        sql = QUERIES[name]
        tables = _bag_tables()
        used = {t: tables[t] for t in tables if f" {t} " in sql + " " or f" {t}," in sql}
        expected = duckdb_table(sql, used)
        assert expected.num_rows > 7
        cat = _catalog(used)
        for policy in POLICIES:
            for batch_size in (1, 7, None):
                run = run_query(sql, cat, policy=policy, batch_size=batch_size, seed=2, debug=True)
                ctx = f"policy={policy} batch_size={batch_size}"
                assert_same_bag(run.table, sql, used, context=ctx, expected=expected)


@pytest.mark.parametrize("name", ["many-to-many", "three-way", "cross-filtered"])
def test_floating_tuples_probed_in_parts_find_every_match_once(name):
    """Relaxed BuildFirst (stems-2003 §3.5): a never-built table's tuples probe SteMs
    that are still filling, in parts; each part is bounded by the horizon its probe began
    with, so a floating tuple bounced back neither misses nor repeats a match."""
    with tuned(eddy_max_buffered_tuples=12, stem_max_output_rows=5):
        sql = QUERIES[name]
        tables = _bag_tables()
        used = {t: tables[t] for t in tables if f" {t} " in sql + " " or f" {t}," in sql}
        expected = duckdb_table(sql, used)
        for policy in POLICIES:
            cat = Catalog()
            for t, table in used.items():
                cat.add_table(
                    t, table, build=t != "a", rate=None if t == "a" else 3000.0, batch_size=4
                )
            run = run_query(sql, cat, policy=policy, seed=4, debug=True)
            assert_same_bag(run.table, sql, used, context=policy, expected=expected)


def test_index_am_joins_probed_in_parts():
    """An index-only table (stems-2003 §3.3-3.4): prior probers are bounced once per
    probe, when it begins, even when the probe's matches come in many parts."""
    with tuned(eddy_max_buffered_tuples=15, stem_max_output_rows=6):
        tables = _bag_tables()
        b = tables["b"]

        async def lookup(bind: dict) -> pa.Table:
            return b.filter(pa.compute.equal(b["k"], bind["k"]))

        sql = "SELECT a.v, b.v, c.v FROM a JOIN b ON a.k = b.k JOIN c ON a.j = c.j"
        expected = duckdb_table(sql, tables)
        for policy in POLICIES:
            for batch_size in (1, 7, None):
                cat = Catalog()
                cat.add_table("a", tables["a"])
                cat.add_table("c", tables["c"])
                cat.add_index("b", b.schema, on=["k"], lookup=lookup)
                run = run_query(sql, cat, policy=policy, batch_size=batch_size, seed=5, debug=True)
                ctx = f"policy={policy} batch_size={batch_size}"
                assert_same_bag(run.table, sql, tables, context=ctx, expected=expected)


def test_limit_stops_a_huge_cross_join_early():
    """LIMIT over 9 million pairs: the query stops after a few probe parts, long before
    the pairs are all made (each part is at most ``Tuning.stem_max_output_rows``)."""
    tables = _cross_tables(3000)
    run = run_query("SELECT * FROM a, b LIMIT 5", _catalog(tables), seed=0)
    assert run.table.num_rows == 5
    made = sum(s.tuples_out for n, s in run.stats.modules.items() if n.startswith("probe:"))
    assert made <= 8 * current().stem_max_output_rows, made
