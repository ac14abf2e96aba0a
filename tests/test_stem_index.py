"""Unit tests for the SteM equality index and the join-key encodings."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eddies.errors import QueryTypeError
from eddies.modules.key_encoding import (
    KIND_DICT,
    KIND_FLOAT,
    KIND_INT,
    KeyDictionary,
    common_kind,
    encode_column,
    mix_codes,
)
from eddies.modules.stem.index import HASH_PROBES, SortedRunIndex
from eddies.modules.stem.storage import GrowableArray


def brute_force(build: list[int], probe: list[int]) -> set[tuple[int, int]]:
    return {(i, j) for i, p in enumerate(probe) for j, b in enumerate(build) if p == b}


@settings(max_examples=200, deadline=None)
@given(
    batches=st.lists(st.lists(st.integers(-50, 50), max_size=30), min_size=1, max_size=6),
    probe=st.lists(st.integers(-60, 60), max_size=40),
    sparse=st.booleans(),
)
def test_sorted_run_index_matches_brute_force(batches, probe, sparse):
    scale = 10**12 if sparse else 1  # sparse keys take the searchsorted path, dense ones CSR
    index = SortedRunIndex()
    build: list[int] = []
    for batch in batches:
        keys = np.array(batch, dtype=np.int64) * scale
        index.insert(keys, np.arange(len(build), len(build) + len(batch), dtype=np.int64))
        build += batch
    probe_idx, pos = index.probe(np.array(probe, dtype=np.int64) * scale)
    got = list(zip(probe_idx.tolist(), pos.tolist(), strict=True))
    assert len(got) == len(set(got))
    assert set(got) == brute_force(build, probe)
    assert len(index) == len(build)


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.integers(-3000, 3000), unique=True, max_size=200),
    cuts=st.lists(st.integers(0, 200), max_size=4),
    probe=st.lists(st.integers(-3100, 3100), max_size=60),
    repeat=st.booleans(),
)
def test_unique_dense_keys_scatter_into_a_run(keys, cuts, probe, repeat):
    """Unique keys (a primary key) build a run by scatter, read off in key order; a key
    repeated across batches (or within one) falls back to counting. Every probe, count
    and ``positions_of`` cursor agrees with brute force either way."""
    build = keys + keys[:3] if repeat else keys
    index = SortedRunIndex()
    bounds = sorted({0, len(build), *(c for c in cuts if c <= len(build))})
    for lo, hi in itertools.pairwise(bounds):
        index.insert(np.array(build[lo:hi], dtype=np.int64), np.arange(lo, hi, dtype=np.int64))
    probe_idx, pos = index.probe(np.array(probe, dtype=np.int64))
    assert set(zip(probe_idx.tolist(), pos.tolist(), strict=True)) == brute_force(build, probe)
    counts = index.counts(np.array(probe, dtype=np.int64))
    assert counts.tolist() == [build.count(k) for k in probe]
    for k in probe[:5]:
        found, more = index.positions_of(k, 0, len(build), limit=len(build))
        assert found.tolist() == [i for i, b in enumerate(build) if b == k] and more is None


def test_growable_array_keeps_values_across_growth():
    arr = GrowableArray(np.int64, capacity=2)
    for start in range(0, 100, 7):
        arr.extend(np.arange(start, start + 7))
    assert arr.view().tolist() == [v for s in range(0, 100, 7) for v in range(s, s + 7)]
    done = GrowableArray(np.uint64, capacity=2)
    done.extend_constant(3, np.uint64(2**63 + 1))
    done.extend(np.array([5], dtype=np.uint64))
    done.extend_constant(4, np.uint64(7))
    assert done.view().tolist() == [2**63 + 1] * 3 + [5] + [7] * 4


def test_float_codes_fold_negative_zero_and_ints_cast():
    floats = encode_column(pa.array([0.0, -0.0, 1.5]), KIND_FLOAT, None, grow=False)
    assert floats[0] == floats[1] != floats[2]
    ints_as_float = encode_column(pa.array([1, 2], pa.int32()), KIND_FLOAT, None, grow=False)
    assert (
        ints_as_float.tolist()
        == encode_column(pa.array([1.0, 2.0]), KIND_FLOAT, None, grow=False).tolist()
    )
    assert encode_column(pa.array([3, None], pa.int8()), KIND_INT, None, False)[0] == 3


@pytest.mark.parametrize(
    "values",
    [pa.array(["a", "b", None, "a"]), pa.array([10**15, 7, 10**15, 3], pa.int64())],
)
def test_key_dictionary_codes_are_dense_and_probe_does_not_grow(values):
    d = KeyDictionary()
    codes = encode_column(values, KIND_DICT, d, grow=True)
    valid = [c for c, v in zip(codes.tolist(), values.to_pylist(), strict=True) if v is not None]
    assert sorted(set(valid)) == list(range(len(set(valid))))
    unseen = pa.array(["zz"]) if pa.types.is_string(values.type) else pa.array([5], pa.int64())
    assert encode_column(unseen, KIND_DICT, d, grow=False).tolist() == [-1]
    again = encode_column(values, KIND_DICT, d, grow=False)
    assert again.tolist()[:2] == codes.tolist()[:2]


def test_mix_codes_is_deterministic_and_order_sensitive():
    a, b = np.array([1, 2, 3]), np.array([3, 2, 1])
    assert (mix_codes([a, b]) == mix_codes([a, b])).all()
    assert mix_codes([a, b])[0] != mix_codes([b, a])[0]
    assert mix_codes([a]) is a


def test_common_kind_rejects_incomparable_types():
    assert common_kind(pa.int32(), pa.float64(), "x") == KIND_FLOAT
    assert common_kind(pa.string(), pa.large_string(), "x") == KIND_DICT
    with pytest.raises(QueryTypeError, match="cannot join"):
        common_kind(pa.string(), pa.int64(), "'a.s = b.i'")
    with pytest.raises(QueryTypeError):
        common_kind(pa.date32(), pa.int64(), "x")


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 2**32 - 1), offset=st.integers(-1000, 1000))
def test_unique_dense_keys_scatter_path_matches_brute_force(n, seed, offset):
    rng = np.random.default_rng(seed)
    keys = rng.permutation(n).astype(np.int64) + offset  # a primary key: dense and unique
    index = SortedRunIndex()
    half = n // 2
    index.insert(keys[:half], np.arange(half, dtype=np.int64))
    index.insert(keys[half:], np.arange(half, n, dtype=np.int64))
    probe = rng.integers(offset - 5, offset + n + 5, size=50).astype(np.int64)
    probe_idx, pos = index.probe(probe)
    got = set(zip(probe_idx.tolist(), pos.tolist(), strict=True))
    assert got == brute_force(keys.tolist(), probe.tolist())


@settings(max_examples=50, deadline=None)
@given(
    batches=st.lists(st.lists(st.integers(-50, 50), max_size=30), min_size=1, max_size=6),
    probe=st.lists(st.integers(-60, 60), min_size=1, max_size=40),
)
def test_hashed_sparse_runs_match_brute_force(batches, probe):
    """A large probe of sparse runs goes through their hash tables (HASH_PROBES keys or
    more): the same pairs as a brute force, counts and shared bounds agreeing."""
    scale = 10**12  # sparse: no CSR offsets (unless a run holds one distinct key)
    index = SortedRunIndex()
    where: dict[int, list[int]] = {}
    n = 0
    for batch in batches:
        keys = np.array(batch, dtype=np.int64) * scale
        index.insert(keys, np.arange(n, n + len(batch), dtype=np.int64))
        for j, k in enumerate(batch):
            where.setdefault(k, []).append(n + j)
        n += len(batch)
    reps = -(-HASH_PROBES // len(probe))
    big = np.tile(np.array(probe, dtype=np.int64), reps) * scale
    assert len(big) >= HASH_PROBES
    bounds = index.bounds(big)
    probe_idx, pos = index.probe(big, bounds)
    got = sorted(zip(probe_idx.tolist(), pos.tolist(), strict=True))
    expected = sorted((i, p) for i, k in enumerate(big // scale) for p in where.get(int(k), []))
    assert got == expected
    counts = index.counts(big, bounds)
    assert counts.tolist() == [len(where.get(int(k), [])) for k in big // scale]
    assert (index.counts(big[:5]) == counts[:5]).all()  # the searchsorted path agrees


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(1, 400),
    spread=st.sampled_from([1, 4, 10, 16, 40]),
    seed=st.integers(0, 2**32 - 1),
    repeat=st.booleans(),
)
def test_spread_unique_keys_are_a_direct_run_up_to_direct_spread(n, spread, seed, repeat):
    """Unique keys over up to DIRECT_SPREAD slots a key (+1024) become a direct-address
    run (a filtered primary key, issue 11); wider ones, or repeated keys, a sorted run.
    Probes agree with brute force either way."""
    from eddies.modules.stem.index import DIRECT_SPREAD

    rng = np.random.default_rng(seed)
    keys = rng.choice(spread * n + 2000, size=n, replace=False).astype(np.int64) - 1000
    if repeat:
        keys = np.concatenate([keys, keys[:1]])
    index = SortedRunIndex()
    index.insert(keys, np.arange(len(keys), dtype=np.int64))
    (run,) = index._runs
    span = int(keys.max() - keys.min()) + 1
    assert run.direct == (not repeat and span <= DIRECT_SPREAD * len(keys) + 1024)
    probe = np.concatenate([keys[: 2 * n // 3], rng.integers(-1100, spread * n + 1100, 40)])
    probe_idx, pos = index.probe(probe)
    got = set(zip(probe_idx.tolist(), pos.tolist(), strict=True))
    assert got == brute_force(keys.tolist(), probe.tolist())
