"""Unit tests of the parts behind index and competitive AMs (stems-2003 §2.1.3–3.4).

* ``modules/key_set.py``: DenseKeys (exact dense ids for multi-column values), KeySet (the
  EOT sets a SteM holds), bind_columns (bind values cast to the index's types);
* ``modules/stem/row_identity.py``: rank_within and RowIdentity (which delivered rows a SteM
  already holds; bags stay exact whatever order the competing AMs deliver in);
* ``router/access_choice.py``: AccessChooser (results per second, stalls, exploration);
* routing-table entries for prior probers, alternatives (hash or index join, mirrors) and
  failed AMs, and the debug constraint checker's rules for them;
* the planner's bind-field check and the catalog's argument errors.
"""

from __future__ import annotations

import math
from collections import Counter
from contextlib import asynccontextmanager

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eddies.engine import Catalog, DataSourceError, UnsupportedQueryError, run_query
from eddies.engine.plan.planner import plan_query
from eddies.modules.key_encoding import KIND_DICT, KIND_FLOAT, KIND_INT, key_kind
from eddies.modules.key_set import DenseKeys, KeySet, bind_columns
from eddies.modules.stem.row_identity import RowIdentity, rank_within
from eddies.router.access_choice import EXPLORE, AccessChooser
from eddies.router.constraints import ConstraintChecker, ConstraintViolation
from eddies.router.routing_table import RoutingTable
from eddies.router.tuple_batch import Signature, TupleBatch, singleton_batch
from eddies.sources.table_store import TableStore

INT64_MIN = np.iinfo(np.int64).min

# ---------------------------------------------------------------------------------------
# DenseKeys and KeySet

COLUMN_TYPES = {KIND_INT: pa.int64(), KIND_FLOAT: pa.float64(), KIND_DICT: pa.string()}
VALUES = {
    KIND_INT: st.one_of(
        st.none(), st.integers(-3, 3), st.sampled_from([2**40, -(2**62), 2**63 - 1])
    ),
    KIND_FLOAT: st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.5, -1.5, 1e300, 2.0**40])),
    KIND_DICT: st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "é"])),
}


def canonical(value):
    """The identity of one value as DenseKeys sees it: -0.0 is 0.0, NULL is a value."""
    return 0.0 if isinstance(value, float) and value == 0.0 else value


@st.composite
def key_columns(draw, max_rows: int = 30):
    kinds = tuple(draw(st.lists(st.sampled_from(list(COLUMN_TYPES)), min_size=1, max_size=3)))
    batches = draw(
        st.lists(
            st.lists(st.tuples(*(VALUES[k] for k in kinds)), max_size=max_rows),
            min_size=1,
            max_size=4,
        )
    )
    return kinds, batches


def as_columns(kinds, rows) -> list[pa.Array]:
    return [pa.array([row[i] for row in rows], COLUMN_TYPES[k]) for i, k in enumerate(kinds)]


@settings(max_examples=150, deadline=None)
@given(case=key_columns(), probe=st.data())
def test_dense_keys_are_exact_dense_ids(case, probe):
    kinds, batches = case
    keys = DenseKeys(kinds)
    reference: dict[tuple, int] = {}
    for rows in batches:
        ids = keys.ids(as_columns(kinds, rows), grow=True)
        for row, got in zip(rows, ids.tolist(), strict=True):
            canon = tuple(canonical(v) for v in row)
            assert reference.setdefault(canon, got) == got, (row, reference)
    # Dense: distinct tuples get distinct ids, exactly 0..n-1.
    assert sorted(reference.values()) == list(range(len(reference)))
    assert keys.size == len(reference)
    # grow=False: known tuples keep their ids, unseen ones get -1, nothing is added.
    rows = probe.draw(st.lists(st.tuples(*(VALUES[k] for k in kinds)), max_size=20))
    ids = keys.ids(as_columns(kinds, rows), grow=False)
    for row, got in zip(rows, ids.tolist(), strict=True):
        assert got == reference.get(tuple(canonical(v) for v in row), -1)
    assert keys.size == len(reference)


def test_dense_keys_do_not_confuse_swapped_or_large_values():
    keys = DenseKeys((KIND_INT, KIND_INT))
    a = pa.array([1, 2, 2**32, 0, 1], pa.int64())
    b = pa.array([2, 1, 0, 1, 2], pa.int64())  # (2**32, 0) vs (0, 1): no (id << 32) clash
    assert keys.ids([a, b], grow=True).tolist() == [0, 1, 2, 3, 0]
    assert DenseKeys(()).ids([], grow=True).tolist() == []


def test_dense_keys_tell_null_from_int64_min():
    ids = DenseKeys((KIND_INT,)).ids([pa.array([None, INT64_MIN, 0], pa.int64())], grow=True)
    assert len(set(ids.tolist())) == 3  # got [0, 0, 1]


def test_null_and_int64_min_rows_stay_distinct_in_a_hybrid():
    s = pa.table({"a": pa.array([1, 1], pa.int64()), "c": pa.array([None, INT64_MIN], pa.int64())})
    r = pa.table({"c": pa.array([INT64_MIN], pa.int64())})

    async def lookup(bind):
        return s.filter(pc.equal(s["c"], bind["c"]))

    cat = Catalog()
    cat.add_table("r", r)
    cat.add_table("s", s, delay=0.1)  # the index answers first
    cat.add_index("s", s.schema, on=["c"], lookup=lookup)
    run = run_query(
        "SELECT * FROM r, s WHERE r.c = s.c",
        cat,
        policy="static",
        order=["lookup:s_by_c@s"],
        debug=True,
    )
    assert run.table.num_rows == 1  # got 2


@settings(max_examples=100, deadline=None)
@given(case=key_columns(max_rows=15), probe=st.data())
def test_key_set_is_a_set_of_tuples(case, probe):
    kinds, batches = case
    keys = KeySet(kinds)
    reference: set[tuple] = set()
    for rows in batches:
        keys.add(as_columns(kinds, rows))
        reference |= {tuple(canonical(v) for v in row) for row in rows}
        assert len(keys) == len(reference)
        rows = probe.draw(st.lists(st.tuples(*(VALUES[k] for k in kinds)), max_size=20))
        got = keys.contains(as_columns(kinds, rows))
        want = [tuple(canonical(v) for v in row) in reference for row in rows]
        assert got.tolist() == want


def test_key_set_on_an_empty_set_and_after_growth():
    keys = KeySet((KIND_INT,))
    assert keys.contains([pa.array([1, None], pa.int64())]).tolist() == [False, False]
    for start in range(0, 5000, 1000):  # grows its presence array several times
        keys.add([pa.array(range(start, start + 1000), pa.int64())])
    assert len(keys) == 5000
    probe = pa.array([0, 4999, 5000, -1], pa.int64())
    assert keys.contains([probe]).tolist() == [True, True, False, False]


def store_of(**columns) -> TableStore:
    return TableStore.preloaded("p", pa.table(columns))


def test_bind_columns_marks_nulls_and_lossy_casts_unusable():
    store = store_of(
        f=pa.array([1.0, 1.5, None, 2.0, -0.0], pa.float64()),
        i=pa.array([1, 2**40, 3, None, 5], pa.int64()),
        s=pa.array(["x", None, "y", "z", ""]),
    )
    rows = np.array([0, 1, 2, 3, 4])
    values, usable = bind_columns(store, ("f",), [pa.int64()], rows)
    assert usable.tolist() == [True, False, False, True, True]  # 1.5 can match no int
    assert values[0].type == pa.int64()
    assert [values[0][k].as_py() for k in (0, 3, 4)] == [1, 2, 0]
    values, usable = bind_columns(store, ("i",), [pa.int32()], rows)
    assert usable.tolist() == [True, False, True, False, True]  # 2**40 overflows int32
    values, usable = bind_columns(store, ("i", "s"), [pa.int64(), pa.string()], rows[[0, 2, 4]])
    assert usable.tolist() == [True, True, True]
    assert values[1].to_pylist() == ["x", "y", ""]
    values, usable = bind_columns(store, ("i", "s"), [pa.int64(), pa.string()], rows)
    assert usable.tolist() == [True, False, True, False, True]  # a NULL in either column


# ---------------------------------------------------------------------------------------
# rank_within and RowIdentity


@given(st.lists(st.integers(0, 6), max_size=60))
def test_rank_within_counts_earlier_equal_entries(ids):
    expected, seen = [], Counter()
    for x in ids:
        expected.append(seen[x])
        seen[x] += 1
    assert rank_within(np.array(ids, dtype=np.int64)).tolist() == expected


ID_SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.string())])
ROW_VALUES = st.tuples(st.one_of(st.none(), st.integers(0, 2)), st.sampled_from([None, "x", "y"]))


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(ROW_VALUES, max_size=14),
    by_key=st.booleans(),
    scans=st.integers(0, 2),
    indexes=st.integers(0, 2),
    data=st.data(),
)
def test_row_identity_keeps_as_many_copies_as_the_most_complete_am(
    rows, by_key, scans, indexes, data
):
    """Scans deliver a (prefix of a) permutation of the table in batches, continuing their
    ordinals; index AMs deliver complete lookup answers (every copy of every row with the
    bind value, in any order; several lookups per batch). Whatever the interleaving, the
    SteM keeps each row as many times as the AM that delivered most copies of it."""
    rows = rows + data.draw(st.lists(st.sampled_from(rows), max_size=4)) if rows else rows
    table = [(i, a, b) for i, (a, b) in enumerate(rows)]  # id: a true key
    columns = ("id",) if by_key else ("a", "b")
    identity = RowIdentity(ID_SCHEMA, columns)

    def ident(row):
        return (row[0],) if by_key else row[1:]

    events: list[tuple[int, bool, list[tuple]]] = []  # per origin, in its own order
    per_origin: list[list[tuple[int, bool, list[tuple]]]] = []
    for origin in range(scans):
        order = data.draw(st.permutations(table))[: data.draw(st.integers(0, len(table)))]
        batches, start = [], 0
        while start < len(order):
            size = data.draw(st.integers(1, 4))
            batches.append((origin, True, order[start : start + size]))
            start += size
        per_origin.append(batches)
    values = sorted({row[1] for row in table if row[1] is not None})
    for origin in range(scans, scans + indexes):
        looked = data.draw(st.lists(st.sampled_from(values), unique=True)) if values else []
        batches = []
        while looked:
            n = data.draw(st.integers(1, len(looked)))
            answer = [row for value in looked[:n] for row in table if row[1] == value]
            batches.append((origin, False, data.draw(st.permutations(answer))))
            looked = looked[n:]
        per_origin.append(batches)
    while any(per_origin):  # a random interleaving that keeps each AM's own order
        queue = data.draw(st.sampled_from([q for q in per_origin if q]))
        events.append(queue.pop(0))

    kept: Counter = Counter()
    delivered: dict[int, Counter] = {}
    for origin, streaming, batch in events:
        delivered.setdefault(origin, Counter()).update(ident(row) for row in batch)
        cols = [
            pa.array([row[ID_SCHEMA.get_field_index(c)] for row in batch], ID_SCHEMA.field(c).type)
            for c in columns
        ]
        fresh = identity.fresh(cols, origin, streaming)
        assert fresh.dtype == bool and len(fresh) == len(batch)
        kept.update(ident(row) for row, keep in zip(batch, fresh.tolist(), strict=True) if keep)
    most = Counter()
    for counts in delivered.values():
        most |= counts  # per row: the max over AMs
    assert kept == most


def test_row_identity_of_a_scan_continues_over_its_batches():
    identity = RowIdentity(ID_SCHEMA, ("a",))
    ones = [pa.array([1, 1], pa.int64())]
    assert identity.fresh(ones, origin=0, streaming=True).tolist() == [True, True]
    assert identity.fresh(ones, origin=0, streaming=True).tolist() == [True, True]  # copies 3-4
    assert identity.fresh(ones * 1, origin=1, streaming=True).tolist() == [False, False]
    three = [pa.array([1, 1, 1], pa.int64())]
    assert identity.fresh(three, origin=2, streaming=False).tolist() == [False] * 3
    five = [pa.array([1] * 5, pa.int64())]
    assert identity.fresh(five, origin=3, streaming=False).tolist() == [False] * 4 + [True]


# ---------------------------------------------------------------------------------------
# AccessChooser


class FixedDraws:
    """An rng whose random() never explores, unless told to."""

    def __init__(self, draw: float = 0.99) -> None:
        self.draw = draw

    def random(self) -> float:
        return self.draw

    def integers(self, n: int) -> int:
        return n - 1


def chooser(draw: float = 0.99):
    now = [100.0]
    c = AccessChooser(FixedDraws(draw), clock=lambda: now[0])
    c.test_now = now
    return c, now


def answered(c: AccessChooser, destination: int, tuples: int, results: int, seconds: float):
    """Route ``tuples`` to ``destination`` and have it answer ``seconds`` later (fake clock)."""
    c.on_routed(destination, tuples)
    now = getattr(c, "test_now", None)
    if now is not None:
        now[0] += seconds
    c.on_returned(destination, tuples, results, seconds)


def everywhere(destination: int) -> bool:
    return True


def test_chooser_tries_an_untried_module_first():
    c, _ = chooser()
    answered(c, 0, 10, 10, 0.001)
    assert c.results_per_second(1, 1, 0.0) == math.inf
    assert c.choose([0, 1], 1, everywhere) == 1


def test_chooser_prefers_more_results_per_second():
    c, _ = chooser()
    answered(c, 0, 10, 1, 1.0)  # index: few results
    answered(c, 1, 10, 10, 1.0)
    assert c.choose([0, 1], 1, everywhere) == 1
    c, _ = chooser()
    answered(c, 0, 10, 5, 1.0)  # same yield, ten times the cost
    answered(c, 1, 10, 5, 0.1)
    assert c.choose([0, 1], 1, everywhere) == 1
    c, _ = chooser()
    answered(c, 0, 10, 0, 1.0)  # neither yields: the cheaper one still wins
    answered(c, 1, 10, 0, 0.1)
    assert c.choose([1, 0], 1, everywhere) == 1


def test_chooser_moves_away_from_a_stalled_module():
    c, now = chooser()
    answered(c, 0, 10, 10, 0.01)  # fast so far
    answered(c, 1, 10, 10, 1.0)  # slow
    assert c.choose([0, 1], 1, everywhere) == 0
    c.on_routed(0, 10)  # ... and then module 0 stops answering
    now[0] += 5.0
    assert c.choose([0, 1], 1, everywhere) == 1
    c.on_returned(0, 0, 0, 0.0)  # an empty partial answer does not end the stall
    assert c.choose([0, 1], 1, everywhere) == 1
    c.on_returned(0, 10, 10, 0.01)  # answered at last, after a 5 s stall ...
    assert c.choose([0, 1], 1, everywhere) == 1
    now[0] += 3.0  # ... the stall fades from the estimate, and fast answers win it back
    for _ in range(5):
        answered(c, 0, 10, 10, 0.01)
    assert c.choose([0, 1], 1, everywhere) == 0


def test_chooser_forgets_old_observations():
    c, now = chooser()
    answered(c, 0, 100, 100, 1.0)  # long ago: great
    now[0] += 10.0
    answered(c, 0, 10, 0, 1.0)  # now: nothing
    answered(c, 1, 10, 5, 1.0)
    assert c.choose([0, 1], 1, everywhere) == 1  # without decay 0 would still win


def test_chooser_respects_room_and_explores():
    c, _ = chooser()
    answered(c, 0, 10, 10, 0.01)
    answered(c, 1, 10, 1, 1.0)
    # The better module is full: wait for it, unless its backlog would take longer.
    assert c.choose([0, 1], 1, lambda d: d == 1) is None
    c.on_routed(0, 100_000)
    assert c.choose([0, 1], 1, lambda d: d == 1) == 1
    assert c.choose([0, 1], 1, lambda d: False) is None
    explorer, _ = chooser(draw=EXPLORE / 2)  # an exploring draw picks at random
    answered(explorer, 0, 10, 10, 0.01)
    answered(explorer, 1, 10, 1, 1.0)
    assert explorer.choose([0, 1], 1, everywhere) == 1
    rng_chooser = AccessChooser(np.random.default_rng(0), clock=lambda: 0.0)
    answered(rng_chooser, 0, 10, 10, 0.01)
    answered(rng_chooser, 1, 10, 1, 1.0)
    picks = Counter(rng_chooser.choose([0, 1], 1, everywhere) for _ in range(4000))
    assert 0.5 * EXPLORE / 2 < picks[1] / 4000 < 2 * EXPLORE / 2


# ---------------------------------------------------------------------------------------
# routing-table entries and constraint checks for index and competing AMs

R = pa.table({"a": [1, 2, None], "b": [1, 1, 2], "v": [0, 5, 9]})
S = pa.table({"a": [1, 1, 3], "b": [2, 2, 1], "w": [7, 8, 9]})
T = pa.table({"a": [1, 2], "c": [0, 1]})


async def no_lookup(bind):  # pragma: no cover - plans only, never run
    raise AssertionError("not called")


def plan(sql: str, s_ams: list, t_ams: list | None = None):
    """Plan ``sql`` with r scanned and s (and t) served by ``"scan"`` or index column lists."""
    cat = Catalog()
    cat.add_table("r", R)
    for name, table, ams in (("s", S, s_ams), ("t", T, t_ams or ["scan"])):
        for i, am in enumerate(ams):
            if am == "scan":
                cat.add_table(name, table, access_name=f"{name}_scan{i}")
            else:
                cat.add_index(name, table.schema, on=am, lookup=no_lookup, access_name=f"{name}{i}")
    p = plan_query(sql, cat)
    return p, RoutingTable(p.graph, p.destinations)


def ids(p) -> dict[str, int]:
    return {d.name: d.id for d in p.destinations}


def access_id(p, name: str) -> int:
    return next(a.id for a in p.graph.access if a.name == name)


def names(p, destinations) -> list[str]:
    return [p.destinations[d].name for d in destinations]


R_BIT, S_BIT = 0b01, 0b10


def test_index_only_table_entries():
    p, table = plan("SELECT * FROM r, s WHERE r.a = s.a AND r.v > 0 AND s.w > 0", [["a"]])
    # r has one scan AM: it may pass its own SM before the build (Table 2's exception) ...
    assert names(p, table.entry(Signature(R_BIT, 0, False)).destinations) == ["build:r", "sm1"]
    # ... s has an index AM: BuildFirst without exception (its own SMs after the build).
    assert names(p, table.entry(Signature(S_BIT, 0, False)).destinations) == ["build:s"]
    assert names(p, table.entry(Signature(S_BIT, 0, True)).destinations) == ["sm2", "probe:r"]
    entry = table.entry(Signature(R_BIT, 0, True))
    assert set(names(p, entry.destinations)) == {"sm1", "probe:s"}
    assert entry.alternatives == {}  # no scan: the SteM probe, then maybe the AM
    prior = table.entry(Signature(R_BIT, 0, True, prior=S_BIT))
    assert set(names(p, prior.destinations)) == {"sm1", "lookup:s0@s"}
    join = next(q.index for q in p.graph.predicates if q.edge is not None)
    assert prior.edge_of(ids(p)["lookup:s0@s"]) == join
    sm_done = table.entry(Signature(R_BIT, 0b01, True, prior=S_BIT))
    assert names(p, sm_done.destinations) == ["lookup:s0@s"]
    assert table.live_lookups(1, join) == [ids(p)["lookup:s0@s"]]


def test_index_mirrors_are_alternatives_until_they_fail():
    p, table = plan("SELECT * FROM r, s WHERE r.a = s.a", [["a"], ["a"], ["b"]])
    d = ids(p)
    prior = Signature(R_BIT, 0, True, prior=S_BIT)
    entry = table.entry(prior)
    # s2 is on b, which the edge does not bind: not a candidate.
    assert names(p, entry.destinations) == ["lookup:s0@s"]
    assert entry.alternatives == {d["lookup:s0@s"]: (d["lookup:s0@s"], d["lookup:s1@s"])}
    assert entry.offers(d["lookup:s1@s"]) and not entry.offers(d["lookup:s2@s"])
    table.mark_failed(access_id(p, "s0"))
    entry = table.entry(prior)
    assert names(p, entry.destinations) == ["lookup:s1@s"] and entry.alternatives == {}
    assert not entry.offers(d["lookup:s0@s"])
    table.mark_failed(access_id(p, "s1"))
    assert table.entry(prior).stranded == "s"


def test_hybrid_offers_hash_or_index_join_as_one_step():
    p, table = plan("SELECT * FROM r, s WHERE r.a = s.a", ["scan", ["a"]])
    d = ids(p)
    entry = table.entry(Signature(R_BIT, 0, True))
    assert names(p, entry.destinations) == ["probe:s"]
    assert entry.alternatives == {d["probe:s"]: (d["probe:s"], d["lookup:s1@s"])}
    # After the direct lookup (index join): only the SteM probe is left for s.
    looked = table.entry(Signature(R_BIT, 0, True, looked=S_BIT))
    assert names(p, looked.destinations) == ["probe:s"] and looked.alternatives == {}
    # A scan: the SteM never bounces prior probers back, so none are ever routed.
    table.mark_failed(access_id(p, "s1"))
    assert table.entry(Signature(R_BIT, 0, True)).alternatives == {}
    assert table.entry(Signature(R_BIT, 0, True)).stranded is None


def test_probes_prefer_the_edge_that_binds_an_index():
    sql = "SELECT * FROM r, s, t WHERE r.b = s.b AND t.a = s.a AND r.a = t.a"
    p, table = plan(sql, [["a"]])
    # r,t spans both s-edges: the one on s.a binds the index AM.
    entry = table.entry(Signature(0b101, 0b100, True))
    probe = ids(p)["probe:s"]
    edge = p.graph.predicates[entry.edges[entry.destinations.index(probe)]].edge
    assert edge.side(1) == ("a",)
    assert table.probe_edge(Signature(0b001, 0, True), 1) == 0  # r alone: only r.b = s.b


def test_checker_enforces_probe_completion_and_lookup_rules():
    p, _ = plan("SELECT * FROM r, s WHERE r.a = s.a", [["a"], ["a"]])
    d = ids(p)
    checker = ConstraintChecker(p.graph, p.destinations)
    rows = {0: np.array([0])}
    prior = TupleBatch(Signature(R_BIT, 0, True, prior=S_BIT), rows, np.array([2]))
    with pytest.raises(ConstraintViolation, match="ProbeCompletion"):
        checker.check_route(prior, d["probe:s"])
    checker.check_route(prior, d["lookup:s1@s"])  # either mirror is fine
    looked = prior.with_signature(Signature(R_BIT, 0, True, looked=S_BIT))
    with pytest.raises(ConstraintViolation, match="BoundedRepetition"):
        checker.check_route(looked, d["lookup:s0@s"])
    spanning = prior.with_signature(Signature(R_BIT | S_BIT, 1, True))
    with pytest.raises(ConstraintViolation, match="BoundedRepetition"):
        checker.check_route(spanning, d["lookup:s0@s"])
    unbuilt = singleton_batch(0, np.array([0]), built=False)
    with pytest.raises(ConstraintViolation, match="BuildFirst"):
        checker.check_route(unbuilt, d["lookup:s0@s"])
    # A probe of alias r may bounce back only prior probers of r.
    wrong = TupleBatch(Signature(S_BIT, 0, True, prior=S_BIT), {1: np.array([0])}, np.array([3]))
    with pytest.raises(ConstraintViolation, match="ProbeCompletion"):
        checker.check_returned(d["probe:r"], 1, [wrong])


def test_checker_allows_dropped_duplicates_but_no_extra_tuples_at_a_build():
    p, _ = plan("SELECT * FROM r, s WHERE r.a = s.a", ["scan", "scan"])
    d = ids(p)
    checker = ConstraintChecker(p.graph, p.destinations)
    n_aliases = len(p.graph.aliases)

    def built(ts: list[int]) -> TupleBatch:
        keys = np.array(ts) * n_aliases + 1
        return TupleBatch(Signature(S_BIT, 0, True), {1: np.arange(len(ts))}, keys)

    checker.check_returned(d["build:s"], 3, [built([1, 2])])  # one duplicate dropped
    with pytest.raises(ConstraintViolation, match="SteM BounceBack"):
        checker.check_returned(d["build:s"], 1, [built([3, 4])])
    unbuilt = singleton_batch(1, np.array([0]), built=False)
    with pytest.raises(ConstraintViolation, match="BuildFirst"):
        checker.check_route(unbuilt, d["sm1"])


def test_unbuilt_singletons_of_competing_scans_build_before_the_output():
    cat = Catalog()
    cat.add_table("s", S)
    cat.add_table("s", S)
    p = plan_query("SELECT * FROM s", cat)
    table = RoutingTable(p.graph, p.destinations)
    assert names(p, table.entry(Signature(1, 0, False)).destinations) == ["build:s"]


def test_checker_flags_unbuilt_tuples_of_competing_ams_at_the_output():
    cat = Catalog()
    cat.add_table("s", S)
    cat.add_table("s", S)
    p = plan_query("SELECT * FROM s", cat)
    checker = ConstraintChecker(p.graph, p.destinations)
    with pytest.raises(ConstraintViolation, match="BuildFirst"):
        checker.check_route(singleton_batch(0, np.array([0]), built=False), ids(p)["output"])


# ---------------------------------------------------------------------------------------
# planner: bind-field constraints (Nail's algorithm)


def test_reachability_follows_bindings_through_index_tables():
    p, _ = plan("SELECT * FROM r, s, t WHERE r.a = s.a AND s.b = t.c", [["a"]], [["c"]])
    assert [a.name for a in p.graph.access] == ["r", "s0", "t0"]
    # An index on a is bound by a multi-column edge that includes a.
    plan("SELECT * FROM r, s WHERE r.a = s.a AND r.b = s.b", [["a"]])
    # Two aliases of one index-only table, the second bound through the first.
    plan("SELECT * FROM r, s s1, s s2 WHERE r.a = s1.a AND s1.b = s2.a", [["a"]])


@pytest.mark.parametrize(
    ("sql", "s_ams", "t_ams", "message"),
    [
        # s and t could bind each other, but nothing binds either first
        (
            "SELECT * FROM r, s, t WHERE r.v = s.w AND s.a = t.a AND s.b = t.c",
            [["b"]],
            [["a"]],
            r"table 's' \(as 's'\).*\[b\] \(s0\); the query binds it only on \['a', 'b', 'w'\]",
        ),
        # an index on two columns bound on one
        (
            "SELECT * FROM r JOIN s ON r.a = s.a",
            [["a", "b"]],
            None,
            r"table 's' \(as 's'\).*\[a, b\] \(s0\); the query binds it only on \['a'\]",
        ),
        # several index AMs: the message lists each one's bindings
        (
            "SELECT * FROM r, s x WHERE r.v = x.w",
            [["a"], ["a", "b"]],
            None,
            r"table 's' \(as 'x'\).*\[a\] \(s0\) or \[a, b\] \(s1\)",
        ),
        # t is bound only through the unreachable s
        (
            "SELECT * FROM r, t, s WHERE r.v = s.w AND s.a = t.a",
            [["b"]],
            [["a"]],
            r"table 't' \(as 't'\)",
        ),
    ],
)
def test_unbindable_queries_name_the_table_alias_and_bindings(sql, s_ams, t_ams, message):
    with pytest.raises(UnsupportedQueryError, match=message):
        plan(sql, s_ams, t_ams)


# ---------------------------------------------------------------------------------------
# catalog argument errors

SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.string())])
DATA = pa.table({"a": [1, 2], "b": ["x", "y"]})


@asynccontextmanager
async def a_session():  # pragma: no cover - never entered
    yield no_lookup


@pytest.mark.parametrize(
    ("add", "message"),
    [
        (lambda c: c.add_index("s", SCHEMA, on=["a"]), "exactly one of lookup= and session="),
        (
            lambda c: c.add_index("s", SCHEMA, on=["a"], lookup=no_lookup, session=a_session),
            "exactly one of lookup= and session=",
        ),
        (lambda c: c.add_index("s", SCHEMA, on=["zz"], lookup=no_lookup), "on= names column 'zz'"),
        (lambda c: c.add_index("s", SCHEMA, on=[], lookup=no_lookup), "at least one column"),
        (lambda c: c.add_index("s", SCHEMA, on="a", lookup=42), "not callable"),
        (
            lambda c: c.add_index("s", SCHEMA, on=["a"], lookup=no_lookup, key=["zz"]),
            "key= names column 'zz'",
        ),
        (lambda c: c.add_table("s", DATA, key=["id"]), "key= names column 'id'"),
        (
            lambda c: c.add_index("s", SCHEMA, on=["a"], lookup=no_lookup, max_concurrency=0),
            "max_concurrency must be a positive integer",
        ),
        (
            lambda c: c.add_index("s", SCHEMA, on=["a"], lookup=no_lookup, max_concurrency=2.5),
            "max_concurrency must be a positive integer",
        ),
        (
            lambda c: c.add_index("s", SCHEMA, on=["a"], lookup=no_lookup, timeout=0),
            "timeout must be > 0",
        ),
        (
            lambda c: c.add_index("s", SCHEMA, on=["a"], lookup=no_lookup, retries=-1),
            "retries and backoff must be >= 0",
        ),
        (
            lambda c: c.add_index("s", SCHEMA, on=["a"], lookup=no_lookup, backoff=-0.1),
            "retries and backoff must be >= 0",
        ),
        (lambda c: c.add_index("s", DATA, on=["a"], lookup=no_lookup), "must be a pyarrow Schema"),
        (lambda c: c.add_scan("s", DATA, lambda: None), "must be a pyarrow Schema"),
        (lambda c: c.add_scan("s", SCHEMA, [DATA]), "pages must be a callable"),
        (lambda c: c.add_index("1s", SCHEMA, on=["a"], lookup=no_lookup), "not a plain SQL"),
    ],
)
def test_catalog_rejects_bad_index_and_scan_arguments(add, message):
    cat = Catalog()
    with pytest.raises(DataSourceError, match=message):
        add(cat)
    assert not cat.tables  # nothing half-added


def test_catalog_rejects_ams_that_disagree_with_the_table():
    cat = Catalog()
    cat.add_table("s", DATA, key=["a"])
    with pytest.raises(DataSourceError, match=r"schema differs.*columns \['a', 'b'\] vs \['a'\]"):
        cat.add_index("s", pa.schema([("a", pa.int64())]), on=["a"], lookup=no_lookup)
    with pytest.raises(DataSourceError, match=r"schema differs.*a: int64 vs int32"):
        cat.add_table("s", DATA.cast(pa.schema([("a", pa.int32()), ("b", pa.string())])))
    with pytest.raises(DataSourceError, match=r"key \['b'\] differs from the table's key \['a'\]"):
        cat.add_index("s", SCHEMA, on=["a"], lookup=no_lookup, key=["b"])
    assert cat.table("s").access_count == 1  # none of the rejected AMs was added


def test_access_names_are_unique_across_the_catalog():
    cat = Catalog()
    cat.add_table("s", DATA)
    cat.add_index("s", SCHEMA, on=["A"], lookup=no_lookup)  # columns resolve case-insensitively
    cat.add_index("s", SCHEMA, on=["a"], lookup=no_lookup)
    cat.add_table("s", DATA)
    entry = cat.table("s")
    assert [s.access_name for s in entry.scans] == ["s", "s_2"]
    assert [(i.name, i.on) for i in entry.indexes] == [("s_by_a", ("a",)), ("s_by_a_2", ("a",))]
    assert entry.deduplicates and entry.access_count == 4 and entry.table is None
    cat.add_index("t", SCHEMA, on=["b"], lookup=no_lookup, access_name="mirror.1")
    for add in (
        lambda: cat.add_table("u", DATA, access_name="mirror.1"),
        lambda: cat.add_index("u", SCHEMA, on=["a"], lookup=no_lookup, access_name="s_by_a"),
        lambda: cat.add_scan("s", SCHEMA, lambda: None, access_name="s_2"),
    ):
        with pytest.raises(DataSourceError, match="is already used"):
            add()


@pytest.mark.parametrize("access_name", ["a b", "s"])
def test_a_rejected_access_name_leaves_no_table_behind(access_name):
    cat = Catalog()
    cat.add_table("s", DATA)
    with pytest.raises(DataSourceError, match="access_name"):
        cat.add_index("u", SCHEMA, on=["a"], lookup=no_lookup, access_name=access_name)
    assert not cat.has_table("u")


def test_an_index_only_table_has_no_known_rows_and_keys_are_kept():
    cat = Catalog()
    cat.add_index("s", SCHEMA, on=["a"], lookup=no_lookup, key=["a"], max_concurrency=3)
    entry = cat.table("s")
    assert entry.table is None and entry.key == ("a",) and not entry.deduplicates
    spec = entry.indexes[0]
    assert (spec.max_concurrency, spec.retries, spec.table) == (3, 2, "s")
    assert key_kind(entry.schema.field("a").type) == KIND_INT
