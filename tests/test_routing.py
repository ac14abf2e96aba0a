"""Unit tests for the routing table, the constraint checker, the policies, and debug mode."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import trio

from eddies.engine import Catalog, EddiesError, execute, open_query, run_query
from eddies.engine.plan.planner import plan_query
from eddies.modules.stem import SteM
from eddies.router.constraints import ConstraintChecker, ConstraintViolation
from eddies.router.policies import make_policy
from eddies.router.policies.base import HOLD
from eddies.router.policies.learning import RankPolicy
from eddies.router.policies.lottery import LotteryPolicy, WindowedLotteryPolicy
from eddies.router.policies.simple import NaivePolicy, StaticPolicy
from eddies.router.routing_table import RouteEntry, RoutingTable
from eddies.router.tuple_batch import Signature, TupleBatch, singleton_batch

T = {
    "r": pa.table({"k": [1, 2, 3], "x": [1, 5, 9]}),
    "s": pa.table({"k": [1, 2, 2], "j": [7, 8, 9]}),
    "u": pa.table({"j": [7, 9, 9]}),
}


def plan(sql: str):
    cat = Catalog()
    for name, table in T.items():
        cat.add_table(name, table)
    p = plan_query(sql, cat)
    return p, RoutingTable(p.graph, p.destinations)


def names(p, entry: RouteEntry) -> set[str]:
    return {p.destinations[d].name for d in entry.destinations}


def test_unbuilt_singletons_build_first_or_pass_their_own_sms():
    p, table = plan("SELECT * FROM r, s WHERE r.k = s.k AND r.x > 2")
    assert names(p, table.entry(Signature(0b01, 0, False))) == {"build:r", "sm1"}
    assert names(p, table.entry(Signature(0b10, 0, False))) == {"build:s"}
    assert names(p, table.entry(Signature(0b10, 0, True))) == {"probe:r"}
    done = p.graph.all_predicates
    assert table.entry(Signature(0b11, done, True)).complete


def test_multi_alias_tables_must_build_before_anything_else():
    p, table = plan("SELECT * FROM r a, r b WHERE a.k = b.k AND a.x > 2")
    assert names(p, table.entry(Signature(0b01, 0, False))) == {"build:r"}


def test_probes_follow_join_edges_and_cross_products_only_when_disconnected():
    p, table = plan("SELECT * FROM r, s, u WHERE r.k = s.k AND s.j = u.j")
    assert names(p, table.entry(Signature(0b001, 0, True))) == {"probe:s"}
    assert names(p, table.entry(Signature(0b010, 0, True))) == {"probe:r", "probe:u"}
    p, table = plan("SELECT * FROM r, u")
    assert names(p, table.entry(Signature(0b01, 0, True))) == {"probe:u"}
    assert table.entry(Signature(0b01, 0, True)).edges == (None,)


def test_cycle_closing_edge_becomes_an_sm():
    p, table = plan("SELECT * FROM r, s, u WHERE r.k = s.k AND s.j = u.j AND r.x = u.j")
    rs = next(q for q in p.graph.predicates if q.alias_mask == 0b011)
    entry = table.entry(
        Signature(
            0b111, rs.bit | next(q.bit for q in p.graph.predicates if q.alias_mask == 0b110), True
        )
    )
    assert names(p, entry) == {next(q.name for q in p.graph.predicates if q.alias_mask == 0b101)}


def test_checker_flags_each_broken_constraint():
    p, _table = plan("SELECT * FROM r, s WHERE r.k = s.k")
    checker = ConstraintChecker(p.graph, p.destinations)
    dest = {d.name: d.id for d in p.destinations}
    unbuilt = singleton_batch(0, np.array([0]), built=False)
    with pytest.raises(ConstraintViolation, match="BuildFirst"):
        checker.check_route(unbuilt, dest["probe:s"])
    built = unbuilt.with_signature(Signature(1, 0, True))
    with pytest.raises(ConstraintViolation, match="BoundedRepetition"):
        checker.check_route(built, dest["build:r"])
    with pytest.raises(ConstraintViolation, match="BoundedRepetition"):
        checker.check_route(built, dest["probe:r"])
    with pytest.raises(ConstraintViolation, match="completeness"):
        checker.check_route(built, dest["output"])
    with pytest.raises(ConstraintViolation, match="SteM BounceBack"):
        checker.check_returned(dest["build:r"], 1, [])
    # TimeStamp: a probe result whose matched tuple is newer than the probe tuple.
    checker.check_returned(
        dest["build:r"],
        1,
        [TupleBatch(Signature(1, 0, True), {0: np.array([0])}, np.array([10 * 2 + 0]))],
    )
    checker.check_returned(
        dest["build:s"],
        1,
        [TupleBatch(Signature(2, 0, True), {1: np.array([0])}, np.array([5 * 2 + 1]))],
    )
    bad = TupleBatch(
        Signature(3, 1, True), {0: np.array([0]), 1: np.array([0])}, np.array([5 * 2 + 1])
    )
    with pytest.raises(ConstraintViolation, match="TimeStamp"):
        checker.check_returned(dest["probe:r"], 1, [bad])


def test_debug_mode_catches_a_steM_that_breaks_the_timestamp_rule(monkeypatch):
    cat = Catalog()
    cat.add_table("r", pa.table({"k": [1, 1, 2] * 5}))
    cat.add_table("s", pa.table({"k": [1, 2, 2] * 5}))
    sql = "SELECT * FROM r, s WHERE r.k = s.k"
    assert execute(sql, cat, debug=True, batch_size=2).num_rows == 5 * 5 * 4

    def no_timestamp_rule(self, batch, target, predicate, horizon=None, keyed=None):
        # Every stored tuple with the key, whatever its build TimeStamp (no NULL keys here).
        index, keys, _, _ = self._probe_keys(batch, target, predicate)
        probe_idx, pos = index.index.probe(keys)
        rows = {a: ids[probe_idx] for a, ids in batch.rows.items()}
        rows[target] = self.row_ids.view()[pos]
        sig = Signature(
            batch.signature.span | 1 << target, batch.signature.done | predicate.bit, True
        )
        return [TupleBatch(sig, rows, batch.ts[probe_idx])] if len(pos) else []

    monkeypatch.setattr(SteM, "probe", no_timestamp_rule)
    # A broken probe shows only when a prober meets a tuple built after it. Visited
    # inline, returned tuples go first, so every batch probes before any newer tuple is
    # built: go through the modules' queues, where it depends on the task schedule the
    # seed gives; count the seeds whose run debug mode stopped, out of ten fixed ones.
    caught = 0
    for seed in range(10):
        try:
            execute(sql, cat, debug=True, batch_size=2, inline_visits=False, seed=seed)
        except ConstraintViolation as violation:
            assert "TimeStamp" in str(violation)
            caught += 1
    assert caught > 0


def _entry(*dests: int) -> RouteEntry:
    return RouteEntry(dests, (None,) * len(dests))


def test_static_policy_follows_the_given_order():
    p, _ = plan("SELECT * FROM r WHERE r.x > 1 AND r.k < 3")
    policy = StaticPolicy(p.destinations, np.random.default_rng(0), order=["sm2", "sm1"])
    assert p.destinations[policy.choose(_entry(0, 1), 1, lambda d: True)].name == "sm2"
    with pytest.raises(EddiesError, match="unknown destinations"):
        StaticPolicy(p.destinations, np.random.default_rng(0), order=["nope"])


def test_naive_policy_offers_only_to_queues_with_room():
    p, _ = plan("SELECT * FROM r WHERE r.x > 1 AND r.k < 3")
    policy = NaivePolicy(p.destinations, np.random.default_rng(0))
    assert all(policy.choose(_entry(0, 1), 1, lambda d: d == 1) == 1 for _ in range(20))
    assert policy.choose(_entry(0, 1), 1, lambda d: False) is None


def test_lottery_favours_the_module_that_returns_fewer_tuples():
    p, _ = plan("SELECT * FROM r WHERE r.x > 1 AND r.k < 3")
    policy = LotteryPolicy(p.destinations, np.random.default_rng(0))
    for _ in range(100):  # destination 0 drops 90% of its tuples, destination 1 drops 10%
        policy.on_returned(0, 10, 1)
        policy.on_returned(1, 10, 9)
    picks = [policy.choose(_entry(0, 1), 1, lambda d: True) for _ in range(2000)]
    assert 0.85 < picks.count(0) / len(picks) < 0.95  # 900 vs 100 tickets


def test_windowed_lottery_forgets_old_windows():
    p, _ = plan("SELECT * FROM r WHERE r.x > 1 AND r.k < 3")
    now = [0.0]
    policy = WindowedLotteryPolicy(
        p.destinations, np.random.default_rng(0), window=1.0, clock=lambda: now[0]
    )
    policy.on_returned(0, 1000, 0)  # escrow of window 1
    now[0] = 1.5
    policy.choose(_entry(0, 1), 1, lambda d: True)
    assert policy.tickets[0] == 1000  # banked for window 2
    policy.on_returned(1, 50, 0)
    now[0] = 3.0
    policy.choose(_entry(0, 1), 1, lambda d: True)
    assert policy.tickets.tolist()[:2] == [0, 50]  # window 1 forgotten


def test_make_policy_rejects_bad_names_and_options():
    p, _ = plan("SELECT * FROM r")
    with pytest.raises(EddiesError, match="unknown routing policy"):
        make_policy("fastest", p.destinations)
    with pytest.raises(EddiesError, match="order"):
        make_policy("lottery", p.destinations, order=["sm1"])
    with pytest.raises(EddiesError, match="window"):
        make_policy("lottery-window", p.destinations, window=0)


@pytest.mark.parametrize("policy", ["random", "naive", "lottery"])
def test_a_seed_makes_routing_repeatable(policy):
    rng = np.random.default_rng(0)
    cat = Catalog()
    cat.add_table("r", pa.table({"k": rng.integers(0, 50, 2000), "x": rng.integers(0, 99, 2000)}))
    cat.add_table("s", pa.table({"k": rng.integers(0, 50, 2000), "y": rng.integers(0, 99, 2000)}))
    sql = "SELECT count(*) FROM r, s WHERE r.k = s.k AND r.x < 50 AND s.y < 30"

    def routing():
        run = run_query(sql, cat, policy=policy, seed=7, batch_size=64)
        log = run.stats.routing_table()
        return [log[c].to_pylist() for c in ("span", "built", "done", "destination", "tuples")]

    first = routing()
    assert len(first[0]) > 50
    assert routing() == first


async def test_execute_inside_trio_names_open_query():
    cat = Catalog()
    cat.add_table("r", T["r"])
    with pytest.raises(EddiesError, match="open_query"):
        execute("SELECT * FROM r", cat)


async def test_held_parts_are_rerouted_after_an_inline_answer(monkeypatch, autojump_clock):
    # A policy that sends one tuple on and holds the rest (a pilot): the tuple goes to an
    # inline SM, which answers at once and drops it, so no message will ever come. The
    # eddy must route the held part again rather than wait on its inbox (a deadlock seen
    # under rank: MockClock's autojump makes such a hang end the test at once).
    def one_then_hold(self, entry, n, has_room, signature=None):
        if n == 1:
            return entry.destinations[0]
        choice = np.full(n, HOLD, dtype=np.int64)
        choice[0] = entry.destinations[0]
        return choice

    monkeypatch.setattr(RankPolicy, "choose", one_then_hold)
    cat = Catalog()
    cat.add_table("r", pa.table({"x": list(range(40)), "y": list(range(40))}))
    sql = "SELECT * FROM r WHERE r.x > 100 AND r.y > 100"
    with trio.fail_after(3600):  # virtual seconds
        async with open_query(sql, cat, policy="rank", batch_size=40) as results:
            rows = sum([b.num_rows async for b in results])
    assert rows == 0
    # Every tuple reached an SM: none was left behind in the eddy.
    assert sum(m.tuples_in for name, m in results.stats.modules.items() if "sm" in name) >= 40


@pytest.mark.parametrize("kept", [0.0, 0.01, 0.5, 0.875, 0.9, 1.0])
def test_take_by_mask_equals_take_by_positions(kept):
    """TupleBatch.take turns most masks into positions first (issue 11): same tuples."""
    rng = np.random.default_rng(7)
    n = 1000
    batch = TupleBatch(
        Signature(0b11, 0b1, True),
        {0: rng.permutation(n), 1: rng.integers(0, 50, n)},
        rng.integers(0, 10**6, n),
        lmts=rng.integers(0, 10, n),
    )
    mask = rng.random(n) < kept
    by_mask, by_positions = batch.take(mask), batch.take(np.flatnonzero(mask))
    assert len(by_mask) == int(mask.sum())
    assert by_mask.signature == batch.signature
    for alias in (0, 1):
        assert np.array_equal(by_mask.rows[alias], by_positions.rows[alias])
        assert np.array_equal(by_mask.rows[alias], batch.rows[alias][mask])
    assert np.array_equal(by_mask.ts, batch.ts[mask])
    assert np.array_equal(by_mask.lmts, batch.lmts[mask])
