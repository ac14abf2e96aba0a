"""Unit tests for the estimates (router/estimates.py) and the learning policies
(router/policies/learning.py): synthetic observations, counted in tuples, never wall time."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from eddies.engine import Catalog, explain, run_query
from eddies.engine.options import RunOptions
from eddies.engine.plan.planner import plan_query
from eddies.router.estimates import Estimates
from eddies.router.messages import Returned, Work
from eddies.router.policies import make_policy
from eddies.router.policies.base import HOLD
from eddies.router.policies.learning import (
    HORIZON_SECONDS,
    SMALL_WORK_SECONDS,
    SPLIT_COST_SECONDS,
    BanditPolicy,
    HybridPolicy,
    RankPolicy,
    pilot_size,
)
from eddies.router.policies.lottery import LotteryPolicy
from eddies.router.routing_table import RouteEntry
from eddies.router.tuple_batch import Signature, singleton_batch

SIG = Signature(1, 0, True)


def test_estimate_counts_tuples_and_follows_a_change_by_half_life():
    est = Estimates(half_life=1000)
    for _ in range(20):  # 10% pass, 2 µs a tuple
        assert not est.observe(SIG, 0, 100, 10, 100 * 2e-6)
    e = est.get(SIG, 0)
    assert e.selectivity == pytest.approx(0.1)
    assert e.cost == pytest.approx(2e-6)
    assert e.observations == 20
    # Each observation ages the earlier ones by 0.5 ** (100 / 1000).
    assert e.tuples == pytest.approx(sum(100 * 0.5 ** (m / 10) for m in range(1, 21)))
    # A change too small to be drift (10% -> 16%) is followed by decay, at the half-life.
    for _ in range(2):
        assert not est.observe(SIG, 0, 100, 16, 100 * 2e-6)
    assert est.get(SIG, 0).selectivity < 0.12
    for _ in range(28):
        assert not est.observe(SIG, 0, 100, 16, 100 * 2e-6)
    # 3,000 tuples = 3 half-lives: the old 10% weighs 1/8 of what it did.
    assert 0.15 < est.get(SIG, 0).selectivity < 0.155
    assert est.get(SIG, 0).drifts == 0


def test_estimate_weight_decays_while_siblings_are_observed():
    est = Estimates(half_life=500)
    est.observe(SIG, 0, 200, 20, 1e-4)
    est.observe(SIG, 1, 500, 50, 1e-4)  # 700 tuples at the signature since arm 0 was seen
    assert est.weight(SIG, 0) == pytest.approx(200 * 0.5 ** (700 / 500))
    assert est.get(SIG, 0).selectivity == pytest.approx(0.1)  # ratios survive decay
    assert est.weight(Signature(2, 0, True), 0) == 0.0


def test_drift_restarts_the_estimate_and_is_reported():
    est = Estimates(half_life=10_000)
    for _ in range(10):
        assert not est.observe(SIG, 0, 500, 25, 1e-3)  # 5%
    assert est.observe(SIG, 0, 500, 475, 1e-3)  # 95%: drift
    e = est.get(SIG, 0)
    assert e.drifts == 1 and e.selectivity == pytest.approx(0.95)
    assert e.tuples == pytest.approx(500 * 0.5 ** (500 / 10_000))  # only the new one
    # Noise of a binomial 50% estimate does not count as drift.
    est2 = Estimates()
    rng = np.random.default_rng(0)
    drifts = sum(est2.observe(SIG, 0, 200, int(rng.binomial(200, 0.5)), 1e-3) for _ in range(300))
    assert drifts == 0


def test_partial_answers_count_for_their_work():
    est = Estimates()
    work = object()
    est.add_partial(work, 30)
    est.add_partial(work, 12)
    assert est.pop_partial(work)[0] == 42 and est.pop_partial(work) == (0, 0, 0.0)


def _policy(cls, sql="SELECT * FROM r WHERE r.x > 1 AND r.k < 3"):
    cat = Catalog()
    cat.add_table("r", pa.table({"k": [1, 2, 3], "x": [1, 5, 9]}))
    p = plan_query(sql, cat)
    return cls(p.destinations, np.random.default_rng(0))


def _answer(policy, dest, n, out, seconds):
    """Route and answer one Work of n tuples at SIG (as the eddy does)."""
    batch = singleton_batch(0, np.arange(n), built=True)
    work = Work(dest, batch, None)
    policy.on_routed(dest, n, SIG)
    policy.on_returned(dest, n, out, seconds)
    policy.observe(Returned(dest, [batch.take(np.arange(out))], n, seconds, work=work), 0.0)


ENTRY = RouteEntry((0, 1), (None, None))


def test_rank_pilots_first_then_orders_by_cost_over_one_minus_selectivity():
    policy = _policy(RankPolicy)
    pilot = pilot_size(4096)
    choice = policy.choose(ENTRY, 4096, lambda d: True, SIG)
    assert isinstance(choice, np.ndarray)
    assert (choice == 0).sum() == pilot and (choice == 1).sum() == pilot
    assert (choice == HOLD).sum() == 4096 - 2 * pilot  # no blind commitment
    # While the pilots are out, the rest waits.
    policy.on_routed(0, pilot, SIG)
    assert policy.choose(ENTRY, 100, lambda d: True, SIG) is None
    # Arm 0: 10 µs/tuple, keeps 50% (rank −0.5/1e-5); arm 1: 40 µs, keeps 1% (−0.99/4e-5).
    policy.works_in_flight = 0
    policy.in_flight_at.clear()
    _answer(policy, 0, pilot, pilot // 2, pilot * 1e-5)
    _answer(policy, 1, pilot, 1, pilot * 4e-5)
    assert policy.rank(SIG, 0) < policy.rank(SIG, 1)
    first = np.asarray(policy.choose(ENTRY, 40_960, lambda d: True, SIG))
    sent = first[first != HOLD] if first.ndim else first
    assert np.all(sent == 0)
    # 40,960 tuples at 10 µs: 0.4 s of work, split; the chunk grows with the answers.
    assert 0 < len(sent) < 40_960


def test_cheap_work_goes_whole_and_expensive_work_in_bounded_chunks():
    """Splitting costs module visits: below SMALL_WORK_SECONDS of estimated work, or at a
    free choice (below SPLIT_COST_SECONDS a tuple), a known choice gets the whole batch;
    otherwise at most HORIZON_SECONDS of work per decision."""
    policy = _policy(RankPolicy)
    for arm, cost in ((0, 1e-6), (1, 2e-6)):
        _answer(policy, arm, 512, 100, 512 * cost)
    assert policy.choose(ENTRY, 1000, lambda d: True, SIG) == 0  # 1 ms of work: unsplit
    assert policy.choose(ENTRY, 100_000, lambda d: True, SIG) == 0  # 100 ms, but free
    assert SPLIT_COST_SECONDS > 2e-6
    slow = _policy(RankPolicy)
    for arm, cost in ((0, 1e-4), (1, 2e-4)):
        _answer(slow, arm, 512, 100, 512 * cost)
    for _ in range(10):  # confident: level grown to whole batches, bounded by the horizon
        _answer(slow, 0, 512, 100, 512 * 1e-4)
    choice = slow.choose(ENTRY, 100_000, lambda d: True, SIG)
    assert isinstance(choice, np.ndarray)
    assert (choice == 0).sum() == int(HORIZON_SECONDS / 1e-4) and (choice == 1).sum() == 0
    assert SMALL_WORK_SECONDS < HORIZON_SECONDS


def test_a_continuation_counts_towards_the_work_first_routed():
    """A SteM probe stopped at its output bound answers in parts (Returned.rest): the
    estimate books one observation with all parts' tuples in, tuples out and seconds."""
    policy = _policy(RankPolicy)
    batch = singleton_batch(0, np.arange(100), built=True)
    work = Work(0, batch, None, routed_at=1.0)
    policy.on_routed(0, 100, SIG)
    rest = Work(0, batch.take(slice(40, None)), None, origin=work, routed_at=1.0)
    out = batch.take(np.arange(30))
    policy.observe(Returned(0, [out], 40, 0.25, work=work, rest=rest), 2.0)
    assert policy.estimates.get(SIG, 0) is None and policy.works_in_flight == 1
    policy.observe(Returned(0, [out, out], 60, 0.5, work=rest), 3.0)
    e = policy.estimates.get(SIG, 0)
    assert e.observations == 1 and e.selectivity == pytest.approx(0.9)
    assert e.cost == pytest.approx(0.0075) and e.latency_per_work == pytest.approx(2.0)
    assert policy.works_in_flight == 0 and not policy.in_flight_at


def test_rank_per_tuple_never_holds():
    policy = _policy(RankPolicy)
    picks = [policy.choose(ENTRY, 1, lambda d: True, SIG) for _ in range(2)]
    assert sorted(picks) == [0, 1]  # one pilot tuple each, nothing held
    assert policy.choose(ENTRY, 1, lambda d: True, SIG) in (0, 1)


def _bandit_run(policy, phases, rounds, rng):
    """Feed ``rounds`` pulls per phase; phases: list of {arm: selectivity}; cost 1 µs."""
    history = []
    for sel in phases:
        for _ in range(rounds):
            arm = policy.pick(SIG, (0, 1))
            n = 64
            _answer(policy, arm, n, int(rng.binomial(n, sel[arm])), n * 1e-6)
            history.append(arm)
    return history


def test_bandit_converges_to_the_better_arm_and_adapts_after_a_swap():
    rng = np.random.default_rng(7)
    policy = _policy(BanditPolicy)
    history = _bandit_run(policy, [{0: 0.1, 1: 0.9}, {0: 0.9, 1: 0.1}], 600, rng)
    first, second = np.asarray(history[:600]), np.asarray(history[600:])
    assert (first[300:] == 0).mean() > 0.8  # converged to arm 0
    # After the swap it moves to arm 1 within 200 pulls of 64 tuples (< one half-life).
    assert (second[200:] == 1).mean() > 0.8
    assert (second[100:200] == 1).mean() > 0.3


def test_learning_policies_route_correctly_and_show_estimates():
    rng = np.random.default_rng(1)
    cat = Catalog()
    cat.add_table("r", pa.table({"k": rng.integers(0, 50, 3000), "x": rng.integers(0, 99, 3000)}))
    cat.add_table("s", pa.table({"k": rng.integers(0, 50, 3000), "y": rng.integers(0, 99, 3000)}))
    sql = "SELECT count(*) FROM r, s WHERE r.k = s.k AND r.x < 50 AND s.y < 30"
    expected = None
    for policy in ("rank", "bandit", "lottery"):
        for bs in (None, 7, 500):
            run = run_query(sql, cat, policy=policy, batch_size=bs, seed=3)
            value = run.table.column(0)[0].as_py()
            expected = value if expected is None else expected
            assert value == expected, (policy, bs)
    text = run.stats.format()
    assert "observed estimates" in text and "at span {r}" in text
    sm = run.stats.estimates.by_destination
    assert sum(e.observations for e in sm.values()) > 0
    after = explain(sql, cat, stats=run.stats)
    assert "observed estimates" in after and "probe:" in after.split("observed estimates")[1]


def test_the_rest_stops_waiting_once_an_observed_choice_outranks_a_pilot_still_out():
    """A pilot of k tuples out for t seconds has rank >= -k/t (a censored observation): an
    observed choice with a lower rank gets the rest without waiting for that pilot."""
    policy = _policy(RankPolicy)
    choice = policy.choose(ENTRY, 4096, lambda d: True, SIG)
    assert isinstance(choice, np.ndarray)  # pilots to both, the rest held
    policy.on_routed(0, 16, SIG)
    policy.on_routed(1, 16, SIG)
    _answer(policy, 0, 16, 1, 16 * 1e-6)  # arm 0 answered: 1 µs/tuple, keeps 6%
    state = policy._state[SIG]
    assert set(state.piloting) == {1}
    sent_at, tuples = state.piloting[1]
    state.piloting[1] = (sent_at + 1e9, tuples)  # sent "in the future": no bound yet
    assert policy.choose(ENTRY, 4000, lambda d: True, SIG) is None
    # Out for 1e9 s: arm 1 costs at least 1e9 s / 16 tuples, so whatever it keeps, arm 0
    # (rank -0.94 / 1e-6) goes first.
    state.piloting[1] = (sent_at - 1e9, tuples)
    assert policy.choose(ENTRY, 4000, lambda d: True, SIG) == 0


def _udf_policy(cls, sql="SELECT * FROM r WHERE f(r.x) AND r.k < 3"):
    """A policy over sm1 = f(r.x) (a UDF: may be expensive) and sm2 (default: r.k < 3, a
    free selection); returns it and the ids of sm1 and sm2."""
    cat = Catalog()
    cat.add_table("r", pa.table({"k": [1, 2, 3], "x": [1, 5, 9]}))
    cat.add_function("f", lambda x: pc.greater(x, 1))
    cat.add_function("g", lambda x: pc.less(x, 3))
    p = plan_query(sql, cat)
    names = {d.name: d.id for d in p.destinations}
    return cls(p.destinations, np.random.default_rng(0)), names["sm1"], names["sm2"]


def test_hybrid_is_the_default_policy():
    assert RunOptions().policy == "hybrid"
    assert isinstance(
        make_policy(RunOptions().policy, _policy(RankPolicy).destinations), HybridPolicy
    )


def test_hybrid_draws_free_choices_by_lottery_tickets_until_they_answer():
    """Among UDF-free SMs (free choices) that have not answered yet, and have no prior, the
    hybrid draws as the lottery does with the same seed and the same tickets booked: the
    same picks, one whole batch each, no pilots."""
    hybrid, lottery = _policy(HybridPolicy), _policy(LotteryPolicy)
    assert all(d in hybrid.free for d in ENTRY.destinations)
    for p in (hybrid, lottery):
        p.on_returned(0, 1000, 10)  # arm 0 keeps 1%: 990 tickets
        p.on_returned(1, 1000, 900)  # arm 1 keeps 90%: 100 tickets
    assert hybrid.tickets.tolist() == lottery.tickets.tolist()
    picks = [hybrid.choose(ENTRY, 4096, lambda d: True, SIG) for _ in range(200)]
    same = [lottery.choose(ENTRY, 4096, lambda d: True, SIG) for _ in range(200)]
    assert picks == same
    assert all(isinstance(c, int) for c in picks)  # whole batches, never split or held
    assert 0.8 < np.mean(np.asarray(picks) == 0) < 0.97  # ~990 / 1090 of the draws
    assert not hybrid._state  # rank's per-signature state never entered


def test_hybrid_orders_answered_free_selections_by_rank_every_time():
    """Once both UDF-free SMs have answered, every batch goes whole to the lower rank
    (s − 1) / c: no draw sends a share to the other (the lottery's tickets would, in
    proportion: ~100 / 1090 of the batches here)."""
    hybrid = _policy(HybridPolicy)
    _answer(hybrid, 0, 1000, 10, 1000 * 1e-8)  # keeps 1%, 10 ns a tuple
    _answer(hybrid, 1, 1000, 900, 1000 * 5e-9)  # keeps 90%, 5 ns a tuple
    assert {hybrid.choose(ENTRY, 4096, lambda d: True, SIG) for _ in range(200)} == {0}
    # Cost counts too: the same selectivities at 100× the cost per tuple put arm 1 first.
    hybrid = _policy(HybridPolicy)
    _answer(hybrid, 0, 1000, 10, 1000 * 1e-6)
    _answer(hybrid, 1, 1000, 900, 1000 * 1e-9)
    assert {hybrid.choose(ENTRY, 4096, lambda d: True, SIG) for _ in range(200)} == {1}


def test_hybrid_orders_a_new_filter_by_its_prior_selectivity():
    """A SteM filter that has not answered is ordered by the prior its SteM gave
    (``on_filter_ready``) against an answered selection's observed selectivity, and
    against 1/3 (``UNKNOWN_SELECTIVITY``) for one that has not answered either."""
    cat = Catalog()
    for name in ("r", "s"):
        cat.add_table(name, pa.table({"a": [1, 2, 3], "b": [1, 2, 2]}))
    p = plan_query("SELECT * FROM r, s WHERE r.a = s.a AND s.b < 2", cat)
    names = {d.name: d.id for d in p.destinations}
    f, sm = names["filter:r@sm2"], names["sm1"]  # sm1: s.b < 2; sm2: r.a = s.a
    entry = RouteEntry((names["build:s"], f, sm), (None,) * 3)
    unbuilt = Signature(2, 0, False)
    for prior, first in ((0.01, f), (0.9, sm)):
        hybrid = HybridPolicy(p.destinations, np.random.default_rng(0))
        hybrid.on_filter_ready(f, prior)
        assert {hybrid.choose(entry, 50_000, lambda d: True, unbuilt) for _ in range(50)} == {first}
    # The SM has answered (keeps 40%): a filter expected to keep 50% goes after it.
    hybrid = HybridPolicy(p.destinations, np.random.default_rng(0))
    hybrid.on_filter_ready(f, 0.5)
    _answer(hybrid, sm, 1000, 400, 1000 * 5e-9)
    assert hybrid.choose(entry, 50_000, lambda d: True, unbuilt) == sm
    hybrid.on_filter_ready(f, 0.3)
    assert hybrid.choose(entry, 50_000, lambda d: True, unbuilt) == f


def test_hybrid_sends_free_selections_before_a_udf_whole_and_unpiloted():
    """A UDF-free SM eligible beside an SM calling a UDF takes the whole batch first: no
    pilot, no held tuples (the lottery's first draw might send all of it to the UDF)."""
    hybrid, udf, cheap = _udf_policy(HybridPolicy)
    assert udf not in hybrid.free and cheap in hybrid.free_selections
    entry = RouteEntry((udf, cheap), (None, None))
    assert hybrid.choose(entry, 2000, lambda d: True, SIG) == cheap
    assert hybrid.choose(entry, 1, lambda d: True, SIG) == cheap
    assert not hybrid._state  # nothing piloted
    lottery, udf_l, cheap_l = _udf_policy(LotteryPolicy)
    entry_l = RouteEntry((udf_l, cheap_l), (None, None))
    draws = {lottery.choose(entry_l, 2000, lambda d: True, SIG) for _ in range(50)}
    assert draws == {udf_l, cheap_l}  # blind draws: whole batches to the UDF too


def test_hybrid_pilots_between_expensive_choices_and_ranks_them():
    """Two SMs calling UDFs: the hybrid pilots both and holds the rest (rank's pilots),
    then ranks by (s − 1) / c; tickets are booked from those answers too."""
    hybrid, f, g = _udf_policy(HybridPolicy, "SELECT * FROM r WHERE f(r.x) AND g(r.k)")
    assert f not in hybrid.free and g not in hybrid.free
    entry = RouteEntry((f, g), (None, None))
    choice = hybrid.choose(entry, 2000, lambda d: True, SIG)
    pilot = pilot_size(2000)
    assert isinstance(choice, np.ndarray)
    assert (choice == f).sum() == pilot and (choice == g).sum() == pilot
    assert (choice == HOLD).sum() == 2000 - 2 * pilot
    hybrid.works_in_flight = 0
    hybrid.in_flight_at.clear()
    _answer(hybrid, f, pilot, pilot // 2, pilot * 1e-2)  # 10 ms a tuple, keeps 50%
    _answer(hybrid, g, pilot, 0, pilot * 1e-3)  # 1 ms a tuple, keeps none
    first = np.asarray(hybrid.choose(entry, 2000, lambda d: True, SIG))
    sent = first[first != HOLD] if first.ndim else first
    assert np.all(sent == g)
    assert hybrid.tickets[g] == pilot and hybrid.tickets[f] == pilot - pilot // 2


def test_hybrid_sends_a_built_tuple_through_free_selections_before_probes():
    """Among free choices, a SteM filter (a free selection: it never grows a batch) goes
    before the SteM probes for built tuples, drawn among the selections only; unbuilt
    singletons are left to the lottery's own push-down (SMs and filters before the
    build)."""
    cat = Catalog()
    for name in ("r", "s", "t"):
        cat.add_table(name, pa.table({"a": [1, 1, 2], "b": [1, 2, 2]}))
    p = plan_query("SELECT * FROM r, s, t WHERE r.a = s.a AND s.b = t.b", cat)
    names = {d.name: d.id for d in p.destinations}
    hybrid = HybridPolicy(p.destinations, np.random.default_rng(0))
    probes = (names["probe:r"], names["probe:t"])
    filters = (names["filter:r@sm1"], names["filter:t@sm2"])
    assert all(f in hybrid.free_selections for f in filters)
    entry = RouteEntry((*probes, *filters), (None,) * 4)
    s_sig = Signature(2, 0, True)
    draws = {hybrid.choose(entry, 50_000, lambda d: True, s_sig) for _ in range(100)}
    assert draws == set(filters)  # both filters drawn, never a probe
    probes_only = RouteEntry(probes, (None, None))
    assert {hybrid.choose(probes_only, 50_000, lambda d: True, s_sig) for _ in range(100)} == set(
        probes
    )
    # An unbuilt singleton's entry: its build and the filters of complete SteMs. The
    # lottery's push-down sends it through the filters first, never to the build.
    unbuilt = Signature(2, 0, False)
    before_build = RouteEntry((names["build:s"], *filters), (None,) * 3)
    draws = {hybrid.choose(before_build, 50_000, lambda d: True, unbuilt) for _ in range(200)}
    assert draws == set(filters)


def test_an_expensive_choice_is_not_committed_far_ahead_of_its_answers():
    """An SM calling a vectorized UDF serves one Work at a time (``slots`` 1): once
    HORIZON_SECONDS of estimated work is queued at it, the next decision waits for an
    answer instead of queueing more behind it (a change then redirects the next decision,
    not the one after five queued)."""
    policy, f, g = _udf_policy(RankPolicy, "SELECT * FROM r WHERE f(r.x) AND g(r.k)")
    assert policy.destinations[f].slots == 1 and policy.destinations[g].slots == 1
    entry = RouteEntry((f, g), (None, None))
    # Both observed: f 20 µs a tuple keeping 5%, g 20 µs keeping 95%.
    _answer(policy, f, 2000, 100, 2000 * 2e-5)
    _answer(policy, g, 2000, 1900, 2000 * 2e-5)
    policy._state.clear()
    n = 100_000
    first = np.asarray(policy.choose(entry, n, lambda d: True, SIG))
    sent = int((first == f).sum())
    assert sent == int(HORIZON_SECONDS / 2e-5) and (first == HOLD).sum() == n - sent
    policy.on_routed(f, sent, SIG)  # in flight: one decision, ~HORIZON_SECONDS of work
    second = np.asarray(policy.choose(entry, n - sent, lambda d: True, SIG))
    assert (second == f).sum() == sent  # one more may queue behind it ...
    policy.on_routed(f, sent, SIG)
    assert policy.choose(entry, n - 2 * sent, lambda d: True, SIG) is None  # ... not two
    _answer(policy, f, sent, sent // 20, sent * 2e-5)  # its answer frees the horizon
    policy.tuples_in_flight_to[f] = 0
    again = np.asarray(policy.choose(entry, n - sent, lambda d: True, SIG))
    assert (again == f).sum() > 0


def test_split_by_runs_gives_the_same_parts_as_a_gather():
    from eddies.router.tuple_batch import TupleBatch

    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 60))
        batch = TupleBatch(SIG, {0: rng.permutation(n), 2: rng.permutation(n)}, rng.random(n))
        if rng.random() < 0.5:  # runs, as pilots and chunks are
            inner = rng.choice(np.arange(1, n), size=min(n - 1, 2), replace=False)
            cuts = np.r_[np.sort(inner), n].astype(np.int64)
            choice = np.repeat(rng.permutation(4)[: len(cuts)], np.diff(np.r_[0, cuts]))
        else:
            choice = rng.integers(0, 3, n)
        parts = batch.split_by(choice)
        assert sorted(parts) == sorted(set(choice.tolist()))
        for v, part in parts.items():
            mask = choice == v
            assert part.signature == SIG
            assert np.array_equal(part.ts, batch.ts[mask])
            for alias in batch.rows:
                assert np.array_equal(part.rows[alias], batch.rows[alias][mask])
