"""Row stores keep a registered table's chunks (issue 11, item 4: zero-copy registration).

``Catalog.add_table`` used to ``combine_chunks()`` every table, copying a multi-chunk one
(a Parquet file read with ``pq.read_table`` has one chunk per row group): +1.0 GB for the
TPC-H SF1 catalog. Registration now allocates nothing for the rows; a gather takes from
the one chunk its row ids lie in, and only a gather across chunks copies that one column.
Bytes are counted with ``pa.total_allocated_bytes()`` (Arrow's memory pool), not timed.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import assert_same_bag

from eddies.engine import Catalog, execute
from eddies.router.run_choices import POLICIES
from eddies.sources.table_store import TableStore


def chunked(table: pa.Table, sizes: list[int]) -> pa.Table:
    """``table`` cut into chunks of ``sizes`` rows (zero-copy slices), empty ones kept."""
    parts, start = [], 0
    for size in sizes:
        parts.append(table.slice(start, size))
        start += size
    return pa.concat_tables(parts)


def test_add_table_does_not_copy_a_multi_chunk_table():
    n = 400_000
    rng = np.random.default_rng(1)
    data = pa.table({"k": np.arange(n), "v": rng.random(n), "w": rng.integers(0, 9, n)})
    table = chunked(data, [n // 8] * 8)
    assert table.column("k").num_chunks == 8
    before = pa.total_allocated_bytes()
    cat = Catalog()
    cat.add_table("t", table)
    grown = pa.total_allocated_bytes() - before
    assert grown < table.nbytes // 100, f"add_table allocated {grown:,} bytes"
    # A query over it reads from the chunks (and gives the right answer).
    out = execute("SELECT count(*), sum(w) FROM t WHERE v < 0.5", cat)
    assert_same_bag(out, "SELECT count(*), sum(w) FROM t WHERE v < 0.5", {"t": data})


VIEWS = "SELECT r.k, r.s, r.d, t.x FROM r JOIN t ON r.s = t.s WHERE r.d LIKE 'd%' AND r.k % 3 <> 1"


def test_view_and_dictionary_columns_are_cast_when_first_read():
    """Polars' strings (string_view) and pandas categoricals / Parquet dictionaries are
    registered as they come: add_table allocates nothing (it used to cast every such
    column: 336 MB for the TPC-H SF1 tables). A query casts the columns it reads, once
    for all queries; a column no query reads is never cast. Results as DuckDB's over the
    plain data, NULLs and duplicates included, across chunks (empty ones too)."""
    n = 60_000
    i = np.arange(n)
    s = pa.array([None if j % 13 == 5 else f"key{j % 50}" for j in i], pa.string())
    d = pa.array([None if j % 7 == 2 else f"d{j % 9}" if j % 2 else f"e{j % 4}" for j in i])
    u = pa.array([f"unused-{j}" for j in i], pa.string())
    plain = pa.table({"k": i, "s": s, "d": d, "u": u})
    r = chunked(
        pa.table(
            {
                "k": i,
                "s": s.cast(pa.string_view()),
                "d": d.dictionary_encode(),
                "u": u.cast(pa.string_view()),
            }
        ),
        [20_000, 0, 25_000, 15_000],
    )
    t = pa.table({"s": pa.array(["key1", "key7", "key7", None, "nope"]).cast(pa.string_view())})
    t = t.append_column("x", pa.array([1, 2, 3, 4, 5]))
    before = pa.total_allocated_bytes()
    cat = Catalog()
    cat.add_table("r", r)
    cat.add_table("t", t)
    assert pa.total_allocated_bytes() - before < 4096  # nothing cast, nothing combined
    schema = cat.table("r").schema
    assert (schema.field("s").type, schema.field("d").type) == (pa.string(), pa.string())
    source = cat.table("r").scans[0]
    data = {"r": plain, "t": t.cast(pa.schema([("s", pa.string()), ("x", pa.int64())]))}
    for policy in ("hybrid", "static"):
        assert_same_bag(execute(VIEWS, cat, policy=policy), VIEWS, data, context=policy)
    assert set(source._plain) == {"k", "s", "d"}  # "u" was never read, so never cast
    cast_once = source._plain["s"]
    assert_same_bag(execute(VIEWS, cat), VIEWS, data)
    assert source._plain["s"] is cast_once
    star = "SELECT * FROM r WHERE k < 5 OR u = 'unused-59999'"
    assert_same_bag(execute(star, cat), star, data)
    assert "u" in source._plain


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 7) | st.integers(20, 60), min_size=1, max_size=8),
    ids=st.lists(st.integers(0, 10_000), max_size=40),
    ranged=st.booleans(),
)
def test_gather_across_chunks_equals_one_array(sizes, ids, ranged):
    n = sum(sizes)
    values = pa.array([None if i % 5 == 3 else f"s{i}" for i in range(n)], pa.string())
    table = chunked(pa.table({"s": values}), sizes)
    store = TableStore.preloaded("t", table)
    assert len(store) == n
    if n == 0:
        return
    row_ids = (
        np.arange(ids[0] % n, n, dtype=np.int64)
        if ranged and ids
        else np.array([i % n for i in ids], dtype=np.int64)
    )
    got = store.gather("s", row_ids)
    assert got.to_pylist() == values.take(pa.array(row_ids, pa.int64())).to_pylist()


def test_gather_within_one_chunk_copies_nothing_else():
    """Ids in one chunk take from that chunk: the column is never combined."""
    table = chunked(pa.table({"k": np.arange(1000)}), [250] * 4)
    store = TableStore.preloaded("t", table)
    ids = np.array([260, 499, 251, 300], dtype=np.int64)
    assert store.gather("k", ids).to_pylist() == [260, 499, 251, 300]
    assert store._columns == {}  # no combined copy was made
    # A few ids spanning chunks: taken chunk by chunk, in their order, still no copy.
    assert store.gather("k", np.array([999, 3, 500, 4])).to_pylist() == [999, 3, 500, 4]
    assert store._columns == {}
    # Many ids (a quarter of the rows or more) spanning chunks: combined once, reused.
    many = np.arange(999, 0, -3, dtype=np.int64)
    assert store.gather("k", many).to_pylist() == many.tolist()
    assert len(store._columns["k"]) == 1000


JOIN = "SELECT r.v, s.w FROM r JOIN s ON r.a = s.a WHERE s.w < 50"


@pytest.mark.parametrize("policy", POLICIES)
def test_join_over_multi_chunk_tables_matches_duckdb(policy):
    rng = np.random.default_rng(7)
    r = pa.table({"a": rng.integers(0, 300, 3000), "v": rng.integers(0, 100, 3000)})
    s = pa.table({"a": rng.permutation(400), "w": rng.integers(0, 100, 400)})
    tables = {"r": chunked(r, [1000, 0, 700, 1300]), "s": chunked(s, [100] * 4)}
    cat = Catalog()
    for name, table in tables.items():
        cat.add_table(name, table, batch_size=256)
    out = execute(JOIN, cat, policy=policy, seed=1)
    assert_same_bag(out, JOIN, {"r": r, "s": s}, context=policy)


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 7) | st.integers(20, 60), min_size=1, max_size=8),
    ids=st.lists(st.integers(0, 10_000), max_size=40),
    shape=st.sampled_from(["range", "handed range", "ascending", "any"]),
    nulls=st.booleans(),
    width=st.sampled_from([pa.int32(), pa.int64(), pa.uint16()]),
)
def test_int64_values_equal_a_gather(sizes, ids, shape, nulls, width):
    """Join keys read as NumPy (a SteM's codes): the values at the ids, for ranges (O(1)
    when handed out by row_range), ascending ids across chunks (split by binary search)
    and any ids; None where a chunk has NULLs (the caller then gathers through Arrow)."""
    n = sum(sizes)
    if n == 0:
        return
    raw = np.arange(n) * 3 % 97
    values = pa.array([None if nulls and i % 11 == 4 else int(v) for i, v in enumerate(raw)], width)
    store = TableStore.preloaded("t", chunked(pa.table({"k": values}), sizes))
    picked = [i % n for i in ids]
    if shape == "range" and picked:
        row_ids = np.arange(min(picked), n, dtype=np.int64)
    elif shape == "handed range" and picked:
        row_ids = store.row_range(min(picked), n)
    elif shape == "ascending":
        row_ids = np.array(sorted(set(picked)), dtype=np.int64)
    else:
        row_ids = np.array(picked, dtype=np.int64)
    got = store.int64_values("k", row_ids)
    expected = values.take(pa.array(row_ids, pa.int64())).to_pylist()
    if got is None:
        assert nulls or not len(row_ids) or shape == "any"
        return
    assert got.dtype == np.int64
    assert got.tolist() == expected


def test_handed_range_is_known_without_looking_at_its_ids():
    store = TableStore.preloaded("t", pa.table({"k": np.arange(10)}))
    handed = store.row_range(2, 8)
    assert store.range_start(handed) == 2
    assert store.range_start(np.array([2, 3, 4], dtype=np.int64)) == 2  # checked id by id
    assert store.range_start(np.array([2, 4, 4], dtype=np.int64)) is None
    assert store.range_start(np.array([4, 3, 5], dtype=np.int64)) is None
