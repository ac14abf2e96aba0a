"""Joins on composite keys (two and three columns), inner and outer, against DuckDB.

TPC-DS Q93 and Q40 join a fact table to its returns on two columns
(``ss_item_sk = sr_item_sk AND ss_ticket_number = sr_ticket_number``), LEFT OUTER, and
then comma-join dimensions whose equalities are in WHERE. Inner joins in the region
probe the SteMs' index on the whole column list (eddies.modules.stem.column_index); a
JoinStep (outer joins, joins after one) probes one index on the mixed codes of all its
key columns (eddies.modules.join_step.StepIndex); a WHERE equality with a comma-joined
table after an outer join becomes a hashed key of that table's step
(eddies.engine.plan.outer_and_semi_joins.where_into_steps) instead of an SM after a
cross product.

Fixed queries and a hypothesis property test cover 2- and 3-column keys, inner / LEFT /
RIGHT / FULL, NULLs in either key column on either side, duplicate keys, int and string
key columns mixed, under two policies and two batch sizes. Counted checks (not timed):
the step probes its index once per batch and sees only the candidates that match (no
scan of the stored side), and explain shows the hashed keys.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import assert_same_bag, check_all, duckdb_table, make_catalog

from eddies.engine import execute, explain
from eddies.modules.join_step import StepIndex
from eddies.modules.key_encoding import KIND_DICT, KIND_INT
from eddies.router.expressions import ColumnRef

POLICIES = ("hybrid", "static")
BATCH_SIZES = (None, 7)

F = pa.table(
    {
        "a": pa.array([1, 1, 2, 2, None, 3, 3, 4, 1, 2], pa.int64()),
        "b": pa.array(["x", "y", "x", None, "x", "y", "y", "z", "x", "x"]),
        "c": pa.array([10, 10, 20, 20, 30, None, 30, 40, 10, 20], pa.int32()),
        "v": pa.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], pa.int64()),
    }
)
D = pa.table(
    {
        "a": pa.array([1, 1, 1, 2, None, 3, 3, 5, 2], pa.int64()),
        "b": pa.array(["x", "x", "y", "x", "x", None, "y", "x", "x"]),
        "c": pa.array([10, 10, 11, 20, 30, 30, None, 50, 20], pa.int64()),
        "w": pa.array([100, 101, 102, 103, 104, 105, 106, 107, None], pa.int64()),
    }
)
G = pa.table(
    {
        "k": pa.array([100, 101, 103, 105, 107, None, 100], pa.int64()),
        "g": pa.array(["p", "q", "r", "s", "t", "u", "v"]),
    }
)
TABLES = {"f": F, "d": D, "g": G}

ON2 = "f.a = d.a AND f.b = d.b"
ON3 = "d.a = f.a AND f.b = d.b AND f.c = d.c"

QUERIES = [
    *(
        f"SELECT f.v, d.w FROM f {kind} JOIN d ON {on}"
        for kind in ("", "LEFT", "RIGHT", "FULL")
        for on in (ON2, ON3)
    ),
    # a residual term beside the composite key
    f"SELECT f.v, d.w FROM f LEFT JOIN d ON {ON2} AND d.w > f.v * 20",
    f"SELECT f.v, d.w FROM f FULL JOIN d ON {ON3} AND d.w <> 101",
    # Q93's shape: LEFT on two columns, then a comma join through the null-supplied side
    f"SELECT f.v, d.w, g.g FROM f LEFT JOIN d ON {ON2}, g WHERE d.w = g.k",
    f"SELECT f.v, d.w, g.g FROM f LEFT JOIN d ON {ON2}, g WHERE g.k = d.w AND g.g <> 'q'",
    # Q40's shape: the comma join's key reads the preserved side
    f"SELECT f.v, d.w, g.g FROM f LEFT JOIN d ON {ON3}, g WHERE g.k = f.v * 10 + 90",
    "SELECT f.v, d.w, g.g FROM f LEFT JOIN d ON f.a = d.a, g "
    "WHERE g.k = f.v + 99 AND (d.w IS NULL OR d.w > 101)",
    # a later RIGHT join pads the comma join's table: its WHERE term stays in WHERE
    f"SELECT f.v, d.w, g.g, h.k FROM f LEFT JOIN d ON {ON2} CROSS JOIN g "
    "RIGHT JOIN g AS h ON h.k = d.w WHERE g.k = d.w",
    # an inner JOIN ... ON after an outer join, with more of its key in WHERE
    f"SELECT f.v, d.w, g.g FROM f LEFT JOIN d ON {ON2} JOIN g ON g.k = d.w "
    "WHERE g.g = 'p' AND f.v < 9",
    # composite keys in the region (inner joins: SteMs) and a LEFT step after them
    "SELECT f.v, d.w, e.w FROM f JOIN d ON f.a = d.a AND f.c = d.c "
    "LEFT JOIN d AS e ON e.b = f.b AND e.a = f.a",
    # aggregates above, as in Q93
    f"SELECT f.a, sum(CASE WHEN d.w IS NOT NULL THEN f.v - d.w ELSE f.v END), count(d.w) "
    f"FROM f LEFT JOIN d ON {ON3} GROUP BY f.a",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_composite_keys_match_duckdb(sql):
    check_all(sql, TABLES, policies=POLICIES, batch_sizes=BATCH_SIZES)


def test_where_equalities_become_step_keys():
    """The comma-joined tables of Q40's shape are hashed steps, not cross products."""
    sql = (
        f"SELECT f.v, d.w, g.g FROM f LEFT JOIN d ON {ON3}, g, d AS e "
        "WHERE g.k = d.w AND e.a = f.a AND e.b = f.b AND g.g <> 'q'"
    )
    text = explain(sql, make_catalog(TABLES))
    assert "step:d  left (3 hashed key(s))" in text
    assert "step:g  inner (1 hashed key(s), stored filter)" in text
    assert "step:e  inner (2 hashed key(s))" in text
    assert "sm" not in text.split("predicates (SMs; Done bits):")[1].split("join steps")[0]
    check_all(sql, TABLES, policies=POLICIES, batch_sizes=BATCH_SIZES)


def test_where_term_stays_before_a_right_join():
    """A RIGHT join after the comma join NULL-pads it: its WHERE term stays an SM."""
    sql = (
        f"SELECT f.v, g.g, h.k FROM f LEFT JOIN d ON {ON2} CROSS JOIN g "
        "RIGHT JOIN g AS h ON h.k = d.w WHERE g.k = d.w"
    )
    text = explain(sql, make_catalog(TABLES))
    assert "step:g  inner (0 hashed key(s))" in text


def _key_index(n_stored: int, seed: int = 0):
    """A StepIndex on (int, string) keys over ``n_stored`` distinct stored keys."""
    rng = np.random.default_rng(seed)
    ints = rng.permutation(n_stored) * 7
    strings = pa.array([f"s{i % 13}" for i in range(n_stored)])
    keys = (
        (ColumnRef((0, "x"), "p.x"), ColumnRef((1, "x"), "s.x"), KIND_INT),
        (ColumnRef((0, "y"), "p.y"), ColumnRef((1, "y"), "s.y"), KIND_DICT),
    )
    index = StepIndex(keys, np.arange(n_stored), [pa.array(ints), strings])
    return index, ints, strings


def test_step_index_probes_the_whole_key_once():
    """Counted: one lookup per probe batch, and the candidates it returns are exactly the
    matching stored tuples (the whole two-column key is indexed; nothing is scanned)."""
    index, ints, strings = _key_index(5000)
    assert index.run is not None
    rng = np.random.default_rng(1)
    pick = rng.integers(0, 5000, 4000)
    x = ints[pick].copy()
    y = strings.take(pa.array(pick)).to_pylist()
    miss = rng.random(4000) < 0.3
    y = [("nope" if m else v) for m, v in zip(miss, y, strict=True)]  # no match
    x[rng.random(4000) < 0.1] += 1  # no such int key
    expect = {(int(a), b) for a, b in zip(ints, strings.to_pylist(), strict=True)}
    matching = sum((int(a), b) in expect for a, b in zip(x, y, strict=True))
    env = {(0, "x"): pa.array(x), (0, "y"): pa.array(y)}
    lo, hi, codes = index.candidates(env, len(x))
    assert index.lookups == 1
    assert index.candidates_seen == matching == int((hi - lo).sum())
    probe_idx, pos = index.pairs(lo, hi, codes, np.flatnonzero(hi > lo))
    assert len(pos) == matching
    assert all(
        (int(x[i]), y[i]) == (int(ints[p]), strings[int(p)].as_py())
        for i, p in zip(probe_idx, pos, strict=True)
    )


def test_step_index_null_keys_never_match():
    keys = (
        (ColumnRef((0, "x"), "p.x"), ColumnRef((1, "x"), "s.x"), KIND_INT),
        (ColumnRef((0, "y"), "p.y"), ColumnRef((1, "y"), "s.y"), KIND_INT),
    )
    stored = [pa.array([1, None, 2, 2], pa.int64()), pa.array([1, 1, None, 2], pa.int64())]
    index = StepIndex(keys, np.arange(4), stored)
    env = {(0, "x"): pa.array([1, None, 2, 2, 1]), (0, "y"): pa.array([1, 1, None, 2, None])}
    lo, hi, _ = index.candidates(env, 5)
    assert (hi - lo).tolist() == [1, 0, 0, 1, 0]
    only_nulls = StepIndex(keys, np.arange(2), [pa.array([None, 1]), pa.array([1, None])])
    assert only_nulls.run is None
    lo, hi, _ = only_nulls.candidates(env, 5)
    assert not (hi - lo).any()


# -- property test ---------------------------------------------------------------------
_ints = st.one_of(st.none(), st.integers(0, 3))
_strs = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))


def _table(rows: list[tuple]) -> pa.Table:
    a, b, c, v = zip(*rows, strict=True) if rows else ((), (), (), ())
    return pa.table(
        {
            "a": pa.array(list(a), pa.int64()),
            "b": pa.array(list(b), pa.string()),
            "c": pa.array(list(c), pa.int64()),
            "v": pa.array(list(v), pa.int64()),
        }
    )


_rows = st.lists(st.tuples(_ints, _strs, _ints, st.integers(0, 9)), max_size=14)


@settings(max_examples=40, deadline=None)
@given(
    left=_rows,
    right=_rows,
    kind=st.sampled_from(["", "LEFT", "RIGHT", "FULL"]),
    n_keys=st.sampled_from([2, 3]),
    policy=st.sampled_from(POLICIES),
    batch_size=st.sampled_from(BATCH_SIZES),
)
def test_composite_joins_property(left, right, kind, n_keys, policy, batch_size):
    tables = {"l": _table(left), "r": _table(right)}
    on = " AND ".join(f"l.{c} = r.{c}" for c in "abc"[:n_keys])
    sql = f"SELECT l.v, r.v, l.a, r.b FROM l {kind} JOIN r ON {on}"
    expected = duckdb_table(sql, tables)
    ours = execute(sql, make_catalog(tables), policy=policy, batch_size=batch_size)
    assert_same_bag(ours, sql, tables, expected=expected)
