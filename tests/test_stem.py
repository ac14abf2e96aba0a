"""Unit tests for SteMs: BounceBack, the TimeStamp rule, NULL keys, self-joins."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from eddies.engine import Catalog
from eddies.engine.plan.planner import plan_query
from eddies.modules.stem import BuildClock, SteM
from eddies.router.messages import Work
from eddies.router.routing_table import DestinationKind
from eddies.router.tuple_batch import Signature, TupleBatch, singleton_batch


def make_stems(sql: str, tables: dict[str, pa.Table]):
    cat = Catalog()
    for name, table in tables.items():
        cat.add_table(name, table)
    plan = plan_query(sql, cat)
    stores = {t: src.new_store() for t, src in plan.tables.items()}
    alias_stores = {a.index: stores[a.table] for a in plan.graph.aliases}
    clock = BuildClock()
    stems = {}
    for table in plan.graph.stem_tables:
        dests = [d for d in plan.destinations if d.table == table]
        build = next(d.id for d in dests if d.kind is DestinationKind.BUILD)
        probes = {d.id: d.target_alias for d in dests if d.kind is DestinationKind.PROBE}
        stems[table] = SteM(
            table, plan.graph, alias_stores, clock, plan.index_kinds[table], build, probes
        )
    return plan, stems


def build(stem: SteM, alias: int, rows: list[int]) -> list[TupleBatch]:
    batch = singleton_batch(alias, np.array(rows, dtype=np.int64), built=False)
    return stem.build(batch, stem.clock.take(len(rows)))


def edge_of(plan) -> int:
    return next(p.index for p in plan.graph.predicates if p.edge is not None)


R = pa.table({"k": [1, 2, None, 2]})
S = pa.table({"k": [2, 2, 3, None]})


def test_build_bounces_back_every_tuple_with_increasing_timestamps():
    _plan, stems = make_stems("SELECT * FROM r, s WHERE r.k = s.k", {"r": R, "s": S})
    out = build(stems["r"], 0, [0, 1, 2, 3])
    assert len(out) == 1 and out[0].signature == Signature(1, 0, True)
    assert out[0].rows[0].tolist() == [0, 1, 2, 3]
    assert (np.diff(out[0].ts) > 0).all()


def test_timestamp_rule_finds_only_older_matches():
    plan, stems = make_stems("SELECT * FROM r, s WHERE r.k = s.k", {"r": R, "s": S})
    (r_built,) = build(stems["r"], 0, [0, 1, 2, 3])  # r first: older
    (s_built,) = build(stems["s"], 1, [0, 1, 2, 3])
    edge = edge_of(plan)
    # s tuples probe r: they are newer, so they find r's matches (NULLs never join).
    joined = stems["r"].probe(s_built, target=0, predicate=plan.graph.predicates[edge])
    pairs = sorted(zip(joined[0].rows[0].tolist(), joined[0].rows[1].tolist(), strict=True))
    assert pairs == [(1, 0), (1, 1), (3, 0), (3, 1)]
    assert joined[0].signature.span == 0b11
    assert joined[0].signature.done & plan.graph.predicates[edge].bit
    # r tuples probe s: s is newer, so nothing — the result was produced once, above.
    assert stems["s"].probe(r_built, target=1, predicate=plan.graph.predicates[edge]) == []


def test_self_join_produces_each_pair_once_across_both_aliases():
    t = pa.table({"a": [1, 1, 2], "b": [1, 2, 1]})
    plan, stems = make_stems("SELECT * FROM t x, t y WHERE x.a = y.b", {"t": t})
    stem = stems["t"]
    out = build(stem, 0, [0, 1, 2])
    assert sorted(next(iter(b.rows)) for b in out) == [0, 1]  # one copy per alias
    pred = plan.graph.predicates[edge_of(plan)]
    pairs = []
    for b in out:
        (alias,) = b.rows
        for res in stem.probe(b, target=1 - alias, predicate=pred):
            pairs += list(zip(res.rows[0].tolist(), res.rows[1].tolist(), strict=True))
    expected = [(i, j) for i in range(3) for j in range(3) if t["a"][i] == t["b"][j]]
    assert sorted(pairs) == sorted(expected)


def test_cross_product_probe_matches_all_older_tuples():
    _plan, stems = make_stems("SELECT * FROM r, s", {"r": R, "s": S})
    build(stems["r"], 0, [0, 1])
    (s_built,) = build(stems["s"], 1, [0, 1, 2])
    build(stems["r"], 0, [2, 3])  # newer than every s tuple
    (res,) = stems["r"].probe(s_built, target=0, predicate=None)
    assert len(res) == 3 * 2
    assert set(res.rows[0].tolist()) == {0, 1}


def test_stored_done_bits_are_carried_into_results():
    plan, stems = make_stems("SELECT * FROM r, s WHERE r.k = s.k AND r.k > 0", {"r": R, "s": S})
    sm = next(p for p in plan.graph.predicates if p.edge is None)
    r_batch = singleton_batch(0, np.array([1, 3], dtype=np.int64), built=False)
    r_batch = r_batch.with_signature(Signature(1, sm.bit, False))  # passed its SM first
    stems["r"].build(r_batch, stems["r"].clock.take(2))
    (s_built,) = build(stems["s"], 1, [0])
    (res,) = stems["r"].probe(s_built, 0, plan.graph.predicates[edge_of(plan)])
    assert res.signature.done & sm.bit


@pytest.mark.trio
async def test_process_routes_build_and_probe_by_destination():
    _plan, stems = make_stems("SELECT * FROM r, s WHERE r.k = s.k", {"r": R, "s": S})
    stem = stems["r"]
    batch = singleton_batch(0, np.array([0, 1], dtype=np.int64), built=False)
    out = await stem.process(Work(stem.build_destination, batch))
    assert out[0].signature.built and len(stem) == 2
