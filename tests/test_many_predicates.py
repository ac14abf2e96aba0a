"""Any number of predicates and aliases (issue 26, item 1).

A Done bit per predicate and per SteM filter, a span bit per alias: Signatures hold them
as Python ints, and what stores them per tuple or per routing decision must too (the
JOB queries with the most predicates, 27a-30c, passed 64 Done bits). Each query here
has more bits than a signed 64-bit word and is compared with DuckDB under every policy,
batch sizes 1 (with the routing constraints checked), 7 and the default, and every join
state; its report, plan and routing summary must account for every tuple.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import assert_same_bag, check_all, make_catalog

from eddies.engine import explain, run_query
from eddies.engine.plan.query_graph_build import MAX_PREDICATES
from eddies.modules.stem.storage import DoneBits
from eddies.router.run_choices import JOIN_STATES, POLICIES
from eddies.settings import Tuning

ALIASES = "abcd"


def tables(n: int = 16, seed: int = 0) -> dict[str, pa.Table]:
    """Four small tables joined on ``k``; ``x`` and ``y`` for the selections, with NULLs
    (a NULL ``x`` fails every ``x <> c``) and duplicate rows."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in ALIASES:
        x = rng.integers(0, 200, n)
        out[name] = pa.table(
            {
                "k": pa.array(rng.integers(0, 6, n)),
                "x": pa.array(x, mask=x % 17 == 0),
                "y": pa.array(rng.integers(0, 40, n)),
            }
        )
        out[name] = pa.concat_tables([out[name], out[name].slice(0, 3)])  # duplicates
    return out


def many_predicates_sql(n: int) -> str:
    """A 4-table join with ``n`` predicates in all: the 3 join edges, then single-table
    ``x <> c`` and ``y < c`` conjuncts spread over the aliases (each its own SM), so the
    Done bits of the later ones lie past bit 63."""
    conds = ["a.k = b.k", "b.k = c.k", "c.k = d.k"]
    i = 0
    while len(conds) < n:
        alias = ALIASES[i % len(ALIASES)]
        conds.append(f"{alias}.x <> {3 * i}" if i % 5 else f"{alias}.y < {36 - i % 7}")
        i += 1
    return "SELECT a.x, b.y, c.x, d.y FROM a, b, c, d WHERE " + " AND ".join(conds)


@pytest.mark.parametrize("n", [70, 130])
def test_many_predicates_match_duckdb_under_every_policy(n):
    sql = many_predicates_sql(n)
    check_all(sql, tables(), policies=POLICIES, batch_sizes=(None, 1, 7))


@pytest.mark.parametrize("join_state", JOIN_STATES)
def test_many_predicates_match_duckdb_under_every_join_state(join_state):
    data = tables(seed=1)
    sql = many_predicates_sql(130)
    cat = make_catalog(data)
    for bs in (None, 7):
        ours = run_query(sql, cat, join_state=join_state, batch_size=bs, seed=0).table
        assert_same_bag(ours, sql, data, context=f"join_state={join_state} batch_size={bs}")


def many_aliases_sql(n: int) -> str:
    """A chain of ``n`` aliases of one table (``n`` span bits), each with a selection."""
    names = [f"t{i}" for i in range(n)]
    conds = [f"{a}.k = {b}.k" for a, b in itertools.pairwise(names)]
    conds += [f"{a}.x <> {7 * i}" for i, a in enumerate(names)]
    return (
        f"SELECT t0.x, t{n - 1}.y FROM "
        + ", ".join(f"t AS {a}" for a in names)
        + (" WHERE " + " AND ".join(conds))
    )


def test_more_than_64_aliases_match_duckdb():
    """70 aliases (span bits past 63) and 139 predicates; k is a key (with one NULL), so
    the chain of joins stays small."""
    k = pa.array([*range(11), None])
    data = {"t": pa.table({"k": k, "x": np.arange(12) * 3, "y": np.arange(12)})}
    sql = many_aliases_sql(70)
    check_all(sql, data, policies=("static", "random", "hybrid"), batch_sizes=(None, 7))


def routed(stats) -> int:
    return sum(sum(per.values()) for per in stats.routing_summary().values())


@pytest.mark.parametrize("policy", ["static", "random", "hybrid"])
def test_report_plan_and_routing_summary_of_a_wide_query(policy):
    """``stats.format()`` and ``explain()`` work past 64 bits, and the routing summary
    counts every tuple a module took in, also once the log is folded into totals."""
    data = tables(seed=2)
    sql = many_predicates_sql(130)
    cat = make_catalog(data)
    tuning = Tuning(route_log_max_records=50)
    run = run_query(sql, cat, policy=policy, batch_size=3, seed=1, tuning=tuning)
    assert_same_bag(run.table, sql, data, context=f"policy={policy}")
    stats = run.stats
    assert stats.decisions > len(stats.routing)  # folded
    assert routed(stats) == sum(m.tuples_in for m in stats.modules.values() if m.kind != "scan")
    summary = stats.routing_summary()
    assert sum(n.get("output", 0) for n in summary.values()) == run.table.num_rows
    assert any("sm130" in done for _, done in summary)  # a Done bit past 64, by name
    text = stats.format()
    assert "sm130" in text and "routing" in text
    table = stats.routing_table()
    assert table.num_rows == len(stats.routing)
    plan = explain(sql, cat)
    assert "sm130" in plan


def test_wide_routing_log_keeps_every_decision():
    """Unfolded, the log replays every decision with its full span and Done bits."""
    data = tables(seed=3)
    sql = many_predicates_sql(100)
    run = run_query(sql, make_catalog(data), policy="random", batch_size=5, seed=2)
    stats = run.stats
    events = stats.routing
    assert len(events) == stats.decisions
    assert sum(e.tuples for e in events) == routed(stats)
    assert max(len(e.done) for e in events) > 64
    assert {len(e.span) for e in events} >= {1, 4}


def test_predicates_past_the_limit_are_grouped_per_table_set():
    """Past MAX_PREDICATES the single-table conjuncts of each set of tables become one SM
    (a long AND chain still runs), and the answer stays exact."""
    data = tables(seed=4)
    sql = many_predicates_sql(MAX_PREDICATES + 40)
    run = run_query(sql, make_catalog(data), seed=0)
    assert_same_bag(run.table, sql, data)
    assert len(run.stats.graph.predicates) == 3 + len(ALIASES)  # the edges, one SM a table


def test_more_join_edges_than_the_limit_are_planned():
    """Join edges between distinct pairs cannot be grouped: a 24-alias clique has 276 of
    them, each its own Done bit, and is planned (no refusal). Not run: every one of its
    2**24 sets of aliases is a span some tuple may take."""
    n = 24
    names = [f"t{i}" for i in range(n)]
    conds = [f"{a}.k = {b}.k" for i, a in enumerate(names) for b in names[i + 1 :]]
    assert len(conds) > MAX_PREDICATES
    sql = "SELECT t0.k, t23.v FROM " + ", ".join(f"t AS {a}" for a in names) + " WHERE "
    sql += " AND ".join(conds)
    plan = explain(sql, make_catalog({"t": pa.table({"k": [1, 2, 2, None], "v": [1, 2, 3, 4]})}))
    assert f"sm{len(conds)}" in plan and f"sm{len(conds) + 1}" not in plan


masks = st.one_of(st.integers(0, 7), st.integers(0, 3).map(lambda i: 1 << (60 + 20 * i)))


@given(st.lists(st.tuples(st.integers(0, 5), masks), max_size=12), st.booleans())
@settings(max_examples=200, deadline=None)
def test_wide_done_bits_read_back_as_stored(batches, restore_first):
    """DoneBits interns its sets: wide ones read back exactly, as Python ints."""
    done = DoneBits(2)
    plain: list[int] = []
    if restore_first:
        done.extend(np.array([1 << 70, 1], dtype=object))
        plain += [1 << 70, 1]
    for n, bits in batches:
        done.extend_constant(n, bits)
        plain += [bits] * n
        assert [int(m) for m in done.view().tolist()] == plain
        assert [done.masks[c] for c in done.codes().tolist()] == plain
        for bit in (1, 1 << 60, 1 << 100):
            assert done.lacking(bit).tolist() == [not m & bit for m in plain]
    if done.constant is not None:
        assert len(set(plain)) <= 1 and done.constant == (plain[0] if plain else 0)
