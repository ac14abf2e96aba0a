"""SteM filters: semi-joins by a complete SteM's join keys (issue 11, item 1).

Counted, never timed: a late hub table (its scan delayed on trio's MockClock) arrives
after the other SteMs hold their tables, so the filters are offered to every one of its
tuples; the counts of tuples in and out of each filter are then fixed by the data.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_same_bag, run_virtual

from eddies.engine import POLICIES, Catalog, explain
from eddies.modules.stem.key_filter import KeyFilter

SQL = "SELECT r.v, s.w, t.x FROM r, s, t WHERE r.a = s.a AND s.b = t.b"
FILTERS_FIRST = ("filter:t@sm2", "filter:r@sm1", "probe:r", "probe:t")


def tables() -> dict[str, pa.Table]:
    r = pa.table({"a": pa.array([1, 2, 2, 5, None], pa.int64()), "v": [10, 20, 30, 40, 50]})
    # Keys repeat in r and t (a probe there may multiply tuples), so their filters pay.
    t = pa.table({"b": pa.array(["x", "y", "x", None], pa.string()), "x": [1, 2, 3, 4]})
    i = np.arange(60)
    s = pa.table(
        {
            "a": pa.array(np.where(i % 7 == 0, None, i % 6), pa.int64()),
            "b": pa.array([["x", "y", "z", None][k % 4] for k in i], pa.string()),
            "w": i,
        }
    )
    return {"r": r, "s": s, "t": t}


def catalog(data: dict[str, pa.Table], late: str = "s", batch_size: int = 8) -> Catalog:
    cat = Catalog()
    for name, tab in data.items():
        cat.add_table(name, tab, delay=0.5 if name == late else 0.0, batch_size=batch_size)
    return cat


def expected_counts(data) -> tuple[int, int]:
    """(s tuples whose b is in t, those whose a is in r too): what the filters keep."""
    s = data["s"].to_pydict()
    t_keys = {b for b in data["t"].column("b").to_pylist() if b is not None}
    r_keys = {a for a in data["r"].column("a").to_pylist() if a is not None}
    in_t = [i for i, b in enumerate(s["b"]) if b in t_keys]
    return len(in_t), sum(1 for i in in_t if s["a"][i] in r_keys)


def test_filters_count_what_they_keep_and_drop():
    """Static order with the filters first: every s tuple passes filter t, the survivors
    filter r; the counts are the semi-joins' sizes, and the join stays exact."""
    data = tables()
    table, stats = run_virtual(SQL, catalog(data), policy="static", order=FILTERS_FIRST, debug=True)
    assert_same_bag(table, SQL, data)
    kept_t, kept_both = expected_counts(data)
    f_t, f_r = stats.modules["filter:t@sm2"], stats.modules["filter:r@sm1"]
    assert (f_t.tuples_in, f_t.tuples_out) == (60, kept_t)
    assert (f_r.tuples_in, f_r.tuples_out) == (kept_t, kept_both)
    # The SteMs were never probed by the tuples the filters dropped, and the late table's
    # SteM never stored them: the filters came before the build (BuildFirst allows it).
    assert stats.modules["probe:r"].tuples_in == kept_both
    assert stats.modules["build:s"].tuples_in == kept_both
    # The filters of the late table's own SteM were never offered: it never completed
    # before the others' tuples were done.
    assert stats.modules["filter:s@sm1"].tuples_in == 0
    text = stats.format()
    assert "filter:t@sm2" in text and "filter:r@sm1" in text
    # explain with the run's stats shows the filters' observed cost and selectivity.
    estimates = explain(SQL, catalog(data), stats=stats).split("routing table:")[1]
    assert "filter:t@sm2" in estimates


def test_filters_off_are_never_offered():
    data = tables()
    table, stats = run_virtual(
        SQL, catalog(data), policy="static", order=FILTERS_FIRST, filters=False
    )
    assert_same_bag(table, SQL, data)
    assert all(m.tuples_in == 0 for n, m in stats.modules.items() if n.startswith("filter:"))
    assert stats.modules["probe:r"].tuples_in == 60


def test_unique_key_filters_are_offered_only_before_the_build():
    """A unique key (a foreign-key join from the many side): after the build the probe
    filters as well, so the filter is never offered to built tuples. Before the build
    (it saves storing the tuples that join nothing) it is offered over one integer key,
    a bitmap lookup, and not over string keys, which it would encode as the probe does
    again."""
    data = tables()
    data["t"] = pa.table({"b": pa.array(["x", "y", None], pa.string()), "x": [1, 2, 3]})
    data["r"] = pa.table({"a": pa.array([1, 2, 5, None], pa.int64()), "v": [10, 20, 40, 50]})
    order = ("build:s", *FILTERS_FIRST)  # built first: no filter is offered
    table, stats = run_virtual(SQL, catalog(data), policy="static", order=order, debug=True)
    assert_same_bag(table, SQL, data)
    assert stats.modules["filter:t@sm2"].tuples_in == 0
    assert stats.modules["filter:r@sm1"].tuples_in == 0
    assert stats.modules["build:s"].tuples_in == 60
    table, stats = run_virtual(SQL, catalog(data), policy="static", order=FILTERS_FIRST, debug=True)
    assert_same_bag(table, SQL, data)
    s_a = data["s"].column("a").to_pylist()
    in_r = sum(1 for a in s_a if a in (1, 2, 5))
    assert stats.modules["filter:t@sm2"].tuples_in == 0  # string key: not offered
    assert stats.modules["filter:r@sm1"].tuples_in == 60
    assert stats.modules["build:s"].tuples_in == in_r


@pytest.mark.parametrize("hole", [False, True])
def test_filter_that_cannot_drop_a_tuple_is_not_offered(hole):
    """r holds every integer from the least to the greatest key of s's column: its filter
    would pass every s tuple, so it is not offered even with the filters first in the
    order. With one key missing from that range it is offered and drops those tuples."""
    data = tables()
    keys = [k for k in range(6) if not (hole and k == 3)]
    data["r"] = pa.table({"a": pa.array(keys, pa.int64()), "v": [10 * k for k in keys]})
    i = np.arange(60)
    data["s"] = data["s"].set_column(0, "a", pa.array(i % 6, pa.int64()))  # no NULLs
    table, stats = run_virtual(SQL, catalog(data), policy="static", order=FILTERS_FIRST, debug=True)
    assert_same_bag(table, SQL, data)
    in_t = [k for k in range(60) if k % 4 in (0, 1)]  # s.b is x or y: t's filter first
    dropped = sum(1 for k in in_t if k % 6 == 3)
    f = stats.modules["filter:r@sm1"]
    assert (f.tuples_in, f.tuples_out) == ((len(in_t), len(in_t) - dropped) if hole else (0, 0))


def test_explain_lists_the_filters():
    text = explain(SQL, catalog(tables()))
    assert "SteM filters" in text
    assert "filter:t@sm2: tuples spanning s and not t pass only if stem:t holds" in text


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("batch_size", [None, 1, 7])
def test_filters_in_play_stay_exact(policy, batch_size):
    """Every policy and batch size, the late hub's tuples offered the filters: exact."""
    data = tables()
    order = FILTERS_FIRST if policy == "static" else None
    table, stats = run_virtual(
        SQL,
        catalog(data, batch_size=batch_size or 1024),
        policy=policy,
        order=order,
        batch_size=batch_size,
        seed=1,
        debug=True,
    )
    assert_same_bag(table, SQL, data, context=f"{policy} batch_size={batch_size}")
    if policy == "static":
        assert stats.modules["filter:t@sm2"].tuples_in == 60


def test_key_filter_bitmap_and_sorted():
    dense = KeyFilter(np.array([5, 3, 3, 9]))
    assert dense.kind == "bitmap" and dense.size == 4
    sparse = KeyFilter(np.array([-(2**62), 0, 2**62]))
    assert sparse.kind == "sorted"
    probe = np.array([3, 4, 9, 10, -(2**63), 2**63 - 1, 0, 2**62])
    assert dense.contains(probe).tolist() == [1, 0, 1, 0, 0, 0, 0, 0]
    assert sparse.contains(probe).tolist() == [0, 0, 0, 0, 0, 0, 1, 1]
    assert not KeyFilter(np.array([], dtype=np.int64)).contains(probe).any()
    probe = np.array([7, 8, 1_000_007, 1_000_008, 39_999, 40_000, -(2**63), 2**63 - 1, 6])
    sparse_bytes = KeyFilter(np.array([7, 1_000_007, 1_000_007, 40_000]))  # range ~1 M
    assert sparse_bytes.kind == "bitmap" and sparse_bytes.distinct == 3
    assert not sparse_bytes.unique
    assert sparse_bytes.contains(probe).tolist() == [1, 0, 1, 0, 0, 1, 0, 0, 0]
    packed = KeyFilter(np.array([7, 10_000_007, 10_000_007, 40_000]))  # range ~10 M
    assert packed.kind == "packed" and packed.distinct == 3 and not packed.unique
    probe[2:4] = [10_000_007, 10_000_008]
    assert packed.contains(probe).tolist() == [1, 0, 1, 0, 0, 1, 0, 0, 0]
    edge = KeyFilter(np.array([-(2**63), -(2**63) + 3]))  # dense at the int64 edge
    assert edge.kind == "bitmap"
    assert edge.contains(probe).tolist() == [0, 0, 0, 0, 0, 0, 1, 0, 0]


keys_st = st.lists(
    st.integers(-(2**63), 2**63 - 1)
    | st.integers(-50, 50)
    | st.integers(0, 3_000_000)
    | st.integers(0, 30_000_000)
    | st.integers(2**62 - 100, 2**62 + 100)
    | st.integers(-(2**63), -(2**63) + 100),
    max_size=40,
)


@given(keys_st, keys_st)
@settings(max_examples=200, deadline=None)
def test_key_filter_is_set_membership(stored, probed):
    got = KeyFilter(np.array(stored, dtype=np.int64)).contains(np.array(probed, dtype=np.int64))
    assert got.tolist() == [p in set(stored) for p in probed]


def _value(kind: str):
    return st.none() | (st.integers(0, 5) if kind == "int" else st.sampled_from("pqrs"))


@st.composite
def chain_tables(draw):
    def table(cols: dict[str, str], payload: str, max_rows: int) -> pa.Table:
        n = draw(st.integers(0, max_rows))
        data = {c: [draw(_value(k)) for _ in range(n)] for c, k in cols.items()}
        types = {c: pa.int64() if k == "int" else pa.string() for c, k in cols.items()}
        out = {c: pa.array(v, types[c]) for c, v in data.items()}
        out[payload] = pa.array(range(n), pa.int64())
        return pa.table(out)

    return {
        "r": table({"a": "int"}, "v", 8),
        "s": table({"a": "int", "b": "str"}, "w", 25),
        "t": table({"b": "str"}, "x", 8),
    }


#: With the tables' own predicates: a row built before its SM (the default static order
#: builds first) is in the SteM, and the filter's key set must leave it out only if the
#: predicate rejects it (SteM._key_filter).
SQL_WHERE = SQL + " AND r.v > 1 AND t.x < 5 AND s.w <> 3"


@given(
    chain_tables(),
    st.sampled_from(POLICIES),
    st.sampled_from([None, 1, 7]),
    st.sampled_from([SQL, SQL_WHERE]),
    st.booleans(),
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_differential_with_filters(data, policy, batch_size, sql, builds_first):
    """Random chains r ⋈ s ⋈ t, the hub s late: equal to DuckDB under every policy."""
    cat = catalog(data, batch_size=batch_size or 1024)
    order = None
    if policy == "static":  # the filters first, after the builds or after the SMs
        line = explain(sql, cat).split("destinations (default static order): ")[1]
        names = line.splitlines()[0].split(", ")
        first = [n for n in names if n.startswith("build:")] if builds_first else []
        order = first + [n for n in names if n.startswith("filter:")]
    table, _ = run_virtual(
        sql,
        cat,
        policy=policy,
        order=order,
        batch_size=batch_size,
        debug=True,
    )
    assert_same_bag(table, sql, data, context=f"{policy} batch_size={batch_size}")


def test_filter_leaves_out_rows_that_fail_their_own_predicate():
    """r's rows are built before r.v > 25 is checked (builds first in the order): the
    SteM holds a = 1, 2, 2, 5, but the filter's key set holds only 2 and 5."""
    data = tables()
    sql = SQL + " AND r.v > 25"
    cat = catalog(data)
    names = explain(sql, cat).split("destinations (default static order): ")[1]
    names = names.splitlines()[0].split(", ")
    r_filter = next(n for n in names if n.startswith("filter:r@"))
    order = ["build:r", "build:t", r_filter]
    table, stats = run_virtual(sql, cat, policy="static", order=order, debug=True)
    assert_same_bag(table, sql, data)
    s_a = data["s"].column("a").to_pylist()
    f = stats.modules[r_filter]
    assert (f.tuples_in, f.tuples_out) == (60, sum(a in (2, 5) for a in s_a))
    assert stats.modules["build:r"].tuples_in == 5  # every r row was stored


TPCH_SHAPE = (
    "SELECT count(*) FROM c, o, l WHERE c.ck = o.ck AND o.ok = l.ok AND c.n < {kept} AND l.d > 40"
)


def tpch_shape() -> dict[str, pa.Table]:
    """customer ⋈ orders ⋈ lineitem in small: 40 customers (n = i % 10), 200 orders, 600
    line items whose d > 40 holds for 59% of them (TPC-H's l_shipdate predicate)."""
    i = np.arange(600)
    return {
        "c": pa.table({"ck": np.arange(40), "n": np.arange(40) % 10}),
        "o": pa.table({"ok": np.arange(200), "ck": np.arange(200) % 40}),
        "l": pa.table({"ok": (i * 7) % 200, "d": i % 100}),
    }


@pytest.mark.parametrize("kept, filter_first", [(1, True), (9, False)])
def test_a_new_filter_is_ordered_by_its_prior_selectivity(kept, filter_first):
    """Before a free selection has answered, the default policy orders by selectivity: a
    SteM filter's prior (its SteM's qualifying keys over its table's rows) against 1/3 for
    an SM it knows nothing of. Orders arrive after customers (the customer filter keeps
    them out of their SteM), line items last, in one batch: with 1 customer nation in 10
    the orders filter (prior 20/200) takes every line item first and the date predicate
    only its survivors; with 9 in 10 (prior 180/200) the date predicate goes first. The
    same for every seed; the lottery's tickets had made it a draw."""
    data = tpch_shape()
    cat = Catalog()
    for name, delay in (("c", 0.0), ("o", 0.5), ("l", 1.0)):
        cat.add_table(name, data[name], delay=delay, batch_size=1024)
    sql = TPCH_SHAPE.format(kept=kept)
    for seed in range(5):
        table, stats = run_virtual(sql, cat, seed=seed)
        assert_same_bag(table, sql, data)
        assert stats.modules["build:o"].tuples_in == 20 * kept  # the filter of c went first
        date, f = stats.modules["sm2"], stats.modules["filter:o@sm4"]  # l.d > 40; o.ok = l.ok
        if filter_first:
            assert (f.tuples_in, date.tuples_in) == (600, f.tuples_out), seed
        else:
            assert (date.tuples_in, f.tuples_in) == (600, date.tuples_out), seed


def _routing_rows(text: str) -> list[tuple[str, str, int, dict[str, int]]]:
    """The printed routing choices: (span, done, tuples, {destination: tuples})."""
    lines = text.split("routing choices per signature")[1].splitlines()[3:]
    rows = []
    for line in lines:
        if not line.startswith("{"):
            break
        span, done, tuples, sent = re.match(
            r"(\{.*?\})\s+(\{.*?\})\s+([\d,]+)\s+(.*)", line
        ).groups()
        shares = {
            dest: int(n.replace(",", ""))
            for dest, n in re.findall(r"(\S+) ([\d,]+) \(\d+%\)", sent)
        }
        rows.append((span, done, int(tuples.replace(",", "")), shares))
    return rows


def test_routing_shares_count_each_tuple_once():
    """A filter's pass sets its own Done bit: the tuples that passed are a signature of
    their own, not a second share of the one they came from. So every printed row's shares
    sum to its tuples, and the late table's 60 fresh tuples are counted once."""
    data = tables()
    _, stats = run_virtual(SQL, catalog(data), policy="static", order=FILTERS_FIRST)
    kept_t, _ = expected_counts(data)
    rows = _routing_rows(stats.format())
    assert rows and all(sum(shares.values()) == tuples for _, _, tuples, shares in rows)
    fresh = {
        done: (tuples, shares) for span, done, tuples, shares in rows if span == "{s (unbuilt)}"
    }
    assert fresh["{}"] == (60, {"filter:t@sm2": 60})
    assert fresh["{filter:t@sm2}"] == (kept_t, {"filter:r@sm1": kept_t})
    assert stats.routing_summary()[("s (unbuilt)", "-")] == {"filter:t@sm2": 60}
