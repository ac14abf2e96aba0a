"""Direct-address tables built in a worker thread as a SteM's builds arrive (issue 11).

The unit tests compare :class:`DirectBuild`'s run with a brute-force map of keys to
positions; the differential tests lower ``Tuning.direct_build_background_min_rows`` (with
``eddies.settings.tuned``) so that every table of a small query is indexed this way, and
compare the results with DuckDB under every policy and batch sizes 1, 7 and the default,
with repeated and NULL keys, filtered builds, and probes that arrive while a table is
still being built. Nothing is timed: which batches the worker has scattered when the eddy
asks does not change the answer, so the tests hold however the threads interleave.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_same_bag, run_virtual

from eddies.engine import POLICIES, Catalog, execute
from eddies.modules.stem.direct_build import DirectBuild
from eddies.modules.stem.index import DIRECT_SPREAD
from eddies.settings import tuned


def _brute(keys: np.ndarray) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for pos, k in enumerate(keys.tolist()):
        out.setdefault(k, []).append(pos)
    return out


def _build(whole: np.ndarray, row_ids: np.ndarray, cuts: list[int]) -> DirectBuild:
    builder = DirectBuild(whole)
    start = 0
    for end in [*sorted(set(cuts)), len(row_ids)]:
        if start < end <= len(row_ids):
            builder.add(row_ids[start:end], start)
            start = end
    return builder


@given(
    st.integers(1, 300),
    st.integers(-50, 50),
    st.integers(0, 2**32),
    st.lists(st.integers(0, 300), max_size=6),
    st.booleans(),
    st.integers(0, 3),
)
@settings(max_examples=150, deadline=None)
def test_direct_run_maps_each_key_to_its_position(n, low, seed, cuts, shuffle_rows, repeats):
    """Unique keys give the run Run.of would (every probe finds its one position, keys
    outside the range none); a repeated key gives None, so the SteM indexes the usual way."""
    rng = np.random.default_rng(seed)
    whole = rng.permutation(n).astype(np.int64) + low
    if repeats:
        whole[rng.integers(0, n, repeats)] = whole[0]
    row_ids = rng.permutation(n).astype(np.int64) if shuffle_rows else np.arange(n)
    run = _build(whole, row_ids, cuts).finish()
    keys = whole[row_ids]
    if len(np.unique(keys)) < n:
        assert run is None
        return
    assert run is not None and run.direct and run.size == n
    truth = _brute(keys)
    probes = np.arange(low - 3, low + n + 3, dtype=np.int64)
    hit, pos = run.lookup(probes)
    got = {int(probes[i]): [int(p)] for i, p in zip(hit, pos, strict=True)}
    assert got == truth


def test_few_keys_over_a_wide_range_never_allocate_a_table():
    """A SteM that keeps few rows of a table whose keys span far more slots (TPC-H orders
    after a customer filter) gets no table: the worker waits for enough keys, never
    allocates, and finish() answers None."""
    whole = np.arange(0, 1_000_000, 7, dtype=np.int64)  # 142,858 keys over 1 M slots
    few = np.arange(0, 2000, dtype=np.int64)
    builder = _build(whole, few, [500, 1000])
    assert builder.finish() is None
    assert DIRECT_SPREAD * 2000 + 1024 < 1_000_000


def test_abandoned_build_is_never_read():
    whole = np.arange(10_000, dtype=np.int64)
    builder = _build(whole, np.arange(10_000, dtype=np.int64), [2500, 5000])
    builder.abandon()
    assert builder.finish() is None  # nothing waited for, nothing returned


def test_batches_must_come_in_build_order():
    builder = DirectBuild(np.arange(10, dtype=np.int64))
    builder.add(np.arange(3, dtype=np.int64), 0)
    with pytest.raises(RuntimeError, match="expected 3"):
        builder.add(np.arange(3, 6, dtype=np.int64), 4)
    builder.abandon()


@pytest.fixture
def every_table_in_background(direct_build_finishes):
    """Every preloaded table's integer key indexes are built by the worker; yields the
    list of runs the builds finished with (None where the SteM fell back)."""
    with tuned(direct_build_background_min_rows=1):
        yield direct_build_finishes


STAR = """SELECT a.v, b.w, c.x FROM a, b, c
          WHERE a.k = b.k AND a.j = c.j AND b.w < 40"""


def star_tables(n: int, seed: int, dup_c: bool, nulls: bool) -> dict[str, pa.Table]:
    rng = np.random.default_rng(seed)
    k = rng.permutation(n)
    j = rng.integers(0, n, n)
    a_k = pa.array(np.where(rng.random(n) < 0.1, None, k) if nulls else k, pa.int64())
    c_j = rng.integers(0, n, n) if dup_c else rng.permutation(n)
    return {
        "a": pa.table({"k": a_k, "j": pa.array(j, pa.int64()), "v": np.arange(n)}),
        "b": pa.table({"k": rng.permutation(n), "w": rng.integers(0, 100, n)}),
        "c": pa.table({"j": pa.array(c_j, pa.int32()), "x": np.arange(n)}),
    }


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("batch_size", [None, 1, 7])
def test_star_with_background_indexes_matches_duckdb(every_table_in_background, policy, batch_size):
    """b's key is unique (a direct run), c's repeats (a fallback): equal to DuckDB."""
    data = star_tables(60, seed=3, dup_c=True, nulls=True)
    cat = Catalog()
    for name, table in data.items():
        cat.add_table(name, table, batch_size=batch_size or 1024)
    ours = execute(STAR, cat, policy=policy, batch_size=batch_size, seed=0, debug=True)
    assert_same_bag(ours, STAR, data, context=f"{policy} batch_size={batch_size}")
    assert any(run is not None for run in every_table_in_background)


@given(
    st.integers(1, 80),
    st.integers(0, 1000),
    st.booleans(),
    st.booleans(),
    st.sampled_from(POLICIES),
    st.sampled_from([None, 1, 7]),
    st.sampled_from(["a", "b", "c", None]),
)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_differential_with_background_indexes(
    every_table_in_background, n, seed, dup_c, nulls, policy, batch_size, late
):
    """Random stars, one table late (its scan delayed on trio's MockClock, so the others'
    tables are complete or not when it comes): equal to DuckDB."""
    data = star_tables(n, seed, dup_c, nulls)
    cat = Catalog()
    for name, table in data.items():
        cat.add_table(
            name, table, batch_size=batch_size or 1024, delay=0.5 if name == late else 0.0
        )
    table, _ = run_virtual(STAR, cat, policy=policy, batch_size=batch_size, seed=0, debug=True)
    assert_same_bag(table, STAR, data, context=f"{policy} batch_size={batch_size} late={late}")


def test_turned_off_by_the_environment(every_table_in_background, monkeypatch):
    monkeypatch.setenv("EDDIES_BACKGROUND_INDEX", "0")
    data = star_tables(50, seed=1, dup_c=False, nulls=False)
    cat = Catalog()
    for name, table in data.items():
        cat.add_table(name, table)
    assert_same_bag(execute(STAR, cat), STAR, data)
    assert every_table_in_background == []
