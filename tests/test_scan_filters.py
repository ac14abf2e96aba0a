"""Dynamic scan filters: a complete SteM's keys skip a Parquet table's row groups (issue 11).

Counted, never timed. The exact counts come from trio's MockClock: the dimension tables
are in memory (their scans never wait on a thread) and the Parquet fact table's scan is
delayed, so every dimension's SteM holds its table, and its keys are pushed, before the
fact table's first row group is read. The expected counts then follow from the files'
own row-group statistics and the dimensions' qualifying keys.
"""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_same_bag, run_virtual

from eddies.engine import Catalog, explain

POLICIES = ("lottery", "rank", "hybrid")
BATCH_SIZES = (1, 7, None)
ROW_GROUP = 16

STAR = (
    "SELECT f.v, d1.x, d2.y FROM f, d1, d2 "
    "WHERE f.k1 = d1.k AND f.k2 = d2.k AND d1.tag < 3 AND f.v < 380"
)
# A chain d1 - f - g with f in the middle; g's key is a DATE.
CHAIN = "SELECT d1.x, f.v, g.z FROM d1, f, g WHERE d1.k = f.k1 AND f.day = g.day AND g.z % 3 = 0"


def fact(n: int = 400, seed: int = 0) -> pa.Table:
    """k1 ascending (narrow row-group ranges) with NULLs and repeats; k2 random with NULLs;
    day a DATE ascending, with NULLs."""
    rng = np.random.default_rng(seed)
    i = np.arange(n)
    k1 = np.sort(rng.integers(0, 200, n))
    k2 = rng.integers(0, 40, n)
    days = np.datetime64("2024-01-01") + (i // 8).astype("timedelta64[D]")
    return pa.table(
        {
            "k1": pa.array(k1, pa.int32(), mask=i % 17 == 5),
            "k2": pa.array(k2, pa.int64(), mask=i % 13 == 0),
            "day": pa.array(days, pa.date32(), mask=i % 29 == 3),
            "v": pa.array(i, pa.int64()),
            "s": pa.array(k1.astype(str)),
        }
    )


def dims() -> dict[str, pa.Table]:
    d1 = pa.table(
        {
            "k": pa.array([30, 31, 31, 40, 90, 95, None, 500, 41], pa.int64()),
            "tag": [0, 1, 2, 2, 5, 1, 0, 0, 9],
            "x": [1, 2, 3, 4, 5, 6, 7, 8, 9],
        }
    )
    d2 = pa.table({"k": pa.array([3, 7, 7, 11, None, 39], pa.int64()), "y": [1, 2, 3, 4, 5, 6]})
    days = np.datetime64("2024-01-01") + np.array([2, 3, 3, 20, 21, 49], "timedelta64[D]")
    g = pa.table(
        {
            "day": pa.array(days, pa.date32(), mask=np.array([0, 0, 0, 0, 0, 1], bool)),
            "z": [0, 3, 6, 9, 1, 12],
        }
    )
    return {"d1": d1, "d2": d2, "g": g}


def catalog(path, tables: dict[str, pa.Table], late: str = "f") -> Catalog:
    cat = Catalog()
    cat.add_table("f", str(path), delay=0.5 if late == "f" else 0.0)
    for name, tab in tables.items():
        cat.add_table(name, tab)
    return cat


@pytest.fixture
def fact_file(tmp_path):
    path = tmp_path / "f.parquet"
    pq.write_table(fact(), path, row_group_size=ROW_GROUP)
    return path


def scan_of(stats, name: str = "scan:f"):
    return stats.modules[name]


def keys_of(table: pa.Table, column: str, mask=None) -> np.ndarray:
    """Sorted distinct non-NULL codes of ``column`` over the rows ``mask`` keeps."""
    col = table.column(column)
    if mask is not None:
        col = col.filter(pa.array(mask))
    if pa.types.is_date32(col.type):
        col = col.cast(pa.int32())
    return np.unique(col.drop_null().to_numpy().astype(np.int64))


def expected_scan(path, pushes: dict[str, np.ndarray], static=None) -> tuple[int, int, int]:
    """(row groups the dynamic filter skips, rows the scan keeps, rows the dynamic filter
    removes) for a scan of ``path`` given the qualifying key codes per fact column, from
    the file's row-group statistics. ``static``: the rows a pushed selection keeps (a row
    group where it keeps none is skipped by that filter first)."""
    pf = pq.ParquetFile(path)
    meta = pf.metadata
    table = pf.read()
    pushed = static is not None
    static = np.ones(table.num_rows, bool) if static is None else static
    member = np.ones(table.num_rows, bool)
    for column, codes in pushes.items():
        col = table.column(column)
        col = col.cast(pa.int32()) if pa.types.is_date32(col.type) else col
        values = col.fill_null(0).to_numpy().astype(np.int64)
        member &= np.isin(values, codes) & col.is_valid().to_numpy(zero_copy_only=False)
    skipped = filtered = 0
    start = 0
    for g in range(meta.num_row_groups):
        rows = slice(start, start + meta.row_group(g).num_rows)
        start = rows.stop
        if pushed and not static[rows].any():
            continue
        refuted = False
        for column, codes in pushes.items():
            values = keys_of(table.slice(rows.start, rows.stop - rows.start), column)
            refuted |= (
                not len(values) or not ((codes >= values.min()) & (codes <= values.max())).any()
            )
        skipped += refuted
        if not refuted:
            filtered += int((static[rows] & ~member[rows]).sum())
    return skipped, int((static & member).sum()), filtered


def star_pushes(data) -> dict[str, np.ndarray]:
    d1 = data["d1"]
    tag = np.array(d1.column("tag").to_pylist())
    return {"k1": keys_of(d1, "k", tag < 3), "k2": keys_of(data["d2"], "k")}


def chain_pushes(data) -> dict[str, np.ndarray]:
    g = data["g"]
    z = np.array(g.column("z").to_pylist())
    return {"k1": keys_of(data["d1"], "k"), "day": keys_of(g, "day", z % 3 == 0)}


def duck_tables(path, data) -> dict[str, pa.Table]:
    return {"f": pq.read_table(path), **data}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("batch_size", BATCH_SIZES)
@pytest.mark.parametrize("shape", ["star", "chain"])
def test_dynamic_filters_skip_row_groups_and_stay_exact(fact_file, policy, batch_size, shape):
    data = dims()
    sql, pushes = (STAR, star_pushes(data)) if shape == "star" else (CHAIN, chain_pushes(data))
    table, stats = run_virtual(
        sql, catalog(fact_file, data), policy=policy, batch_size=batch_size, seed=0
    )
    assert_same_bag(table, sql, duck_tables(fact_file, data), context=f"{policy} {batch_size}")
    # f.v < 380 (the star's) is pushed into the scan too, and applies first.
    static = np.arange(400) < 380 if shape == "star" else None
    skipped, kept, filtered = expected_scan(fact_file, pushes, static)
    scan = scan_of(stats)
    total = pq.ParquetFile(fact_file).metadata.num_row_groups
    assert 0 < skipped < total
    assert scan.row_groups == total
    assert scan.row_groups_skipped == (1 if shape == "star" else 0)  # v in 384..399
    assert scan.dynamic_row_groups_skipped == skipped
    assert (scan.tuples_out, scan.dynamic_rows_filtered) == (kept, filtered)


def test_filters_off_read_every_row_group(fact_file):
    data = dims()
    table, stats = run_virtual(STAR, catalog(fact_file, data), filters=False, seed=0)
    assert_same_bag(table, STAR, duck_tables(fact_file, data))
    scan = scan_of(stats)
    assert (scan.dynamic_row_groups_skipped, scan.dynamic_rows_filtered) == (0, 0)
    assert scan.tuples_out == 380


def test_no_qualifying_key_skips_every_row_group(fact_file):
    data = dims()
    sql = STAR.replace("d1.tag < 3", "d1.tag < 0")
    table, stats = run_virtual(sql, catalog(fact_file, data), seed=0)
    assert table.num_rows == 0
    assert_same_bag(table, sql, duck_tables(fact_file, data))
    scan = scan_of(stats)
    assert scan.dynamic_row_groups_skipped + scan.row_groups_skipped == scan.row_groups > 0
    assert scan.tuples_out == 0


def test_explain_shows_the_dynamic_filters_and_their_counts(fact_file):
    data = dims()
    cat = catalog(fact_file, data)
    text = explain(STAR, cat)
    assert "dynamic scan filters" in text
    assert "scan:f skips by the keys of stem:d1 on sm" in text
    _, stats = run_virtual(STAR, cat, seed=0)
    text = explain(STAR, cat, stats=stats)
    static = np.arange(400) < 380
    skipped, _, _ = expected_scan(fact_file, star_pushes(data), static)
    assert f"1 skipped by the pushed filter, {skipped} by the dynamic filter" in text


@pytest.mark.parametrize(
    "sql",
    [
        # a self-join: f has two aliases
        "SELECT a.v, b.v FROM f a, f b, d1 WHERE a.k1 = d1.k AND a.k2 = b.k2",
        # an outer join: a join step keeps what a filter would drop
        "SELECT f.v, d1.x FROM f LEFT JOIN d1 ON f.k1 = d1.k",
        "SELECT d1.x, f.v FROM d1 LEFT JOIN f ON f.k1 = d1.k AND f.k2 > 20",
        # subqueries: semi- and anti-joins
        "SELECT f.v FROM f WHERE f.k1 IN (SELECT k FROM d1)",
        "SELECT f.v FROM f WHERE NOT EXISTS (SELECT 1 FROM d2 WHERE d2.k = f.k2)",
        # a DECIMAL key against an INTEGER column
        "SELECT f.v, dd.x FROM f, dd WHERE f.k1 = dd.k",
        # string keys
        "SELECT f.v, ds.x FROM f, ds WHERE f.s = ds.k",
    ],
)
def test_no_dynamic_filter_where_it_could_be_wrong(fact_file, sql):
    data = dims()
    data["dd"] = pa.table(
        {
            "k": pa.array([decimal.Decimal("30"), decimal.Decimal("31.5")], pa.decimal128(5, 1)),
            "x": [1, 2],
        }
    )
    data["ds"] = pa.table({"k": ["30", "31"], "x": [1, 2]})
    cat = catalog(fact_file, data)
    table, stats = run_virtual(sql, cat, seed=0)
    assert_same_bag(table, sql, duck_tables(fact_file, data))
    scan = scan_of(stats)
    assert (scan.dynamic_row_groups_skipped, scan.dynamic_rows_filtered) == (0, 0)
    assert "dynamic scan filters" not in explain(sql, cat)


def test_every_table_from_parquet_stays_exact(tmp_path):
    """No delays: the dimensions' files are read in threads beside the fact table's, so
    where the filters arrive is up to the scheduler; the results are exact either way."""
    data = dims()
    paths = {"f": tmp_path / "f.parquet"}
    pq.write_table(fact(), paths["f"], row_group_size=ROW_GROUP)
    for name, tab in data.items():
        paths[name] = tmp_path / f"{name}.parquet"
        pq.write_table(tab, paths[name], row_group_size=2)
    cat = Catalog()
    for name, path in paths.items():
        cat.add_table(name, str(path))
    tables = {name: pq.read_table(path) for name, path in paths.items()}
    for sql in (STAR, CHAIN):
        for policy in POLICIES:
            for batch_size in BATCH_SIZES:
                table, stats = run_virtual(sql, cat, policy=policy, batch_size=batch_size, seed=1)
                assert_same_bag(table, sql, tables, context=f"{policy} {batch_size}")
                for name, scan in stats.modules.items():
                    if name.startswith("scan:"):
                        assert scan.dynamic_row_groups_skipped <= scan.row_groups


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    n=st.integers(0, 120),
    key_range=st.integers(1, 60),
    row_group=st.integers(1, 20),
    null_every=st.integers(2, 9),
    dim_keys=st.lists(st.one_of(st.none(), st.integers(-5, 70)), max_size=12),
    sorted_keys=st.booleans(),
    policy=st.sampled_from(POLICIES),
    batch_size=st.sampled_from(BATCH_SIZES),
)
def test_dynamic_filters_match_duckdb(
    tmp_path_factory,
    n,
    key_range,
    row_group,
    null_every,
    dim_keys,
    sorted_keys,
    policy,
    batch_size,
):
    rng = np.random.default_rng(n * 31 + key_range)
    keys = rng.integers(0, key_range, n)
    if sorted_keys:
        keys = np.sort(keys)
    i = np.arange(n)
    f = pa.table(
        {
            "k1": pa.array(keys, pa.int16(), mask=i % null_every == 1),
            "k2": pa.array(rng.integers(0, 5, n), pa.int64()),
            "day": pa.array(np.zeros(n, "datetime64[D]"), pa.date32()),
            "v": pa.array(i, pa.int64()),
        }
    )
    path = tmp_path_factory.mktemp("hyp") / "f.parquet"
    pq.write_table(f, path, row_group_size=row_group)
    d1 = pa.table(
        {
            "k": pa.array(dim_keys, pa.int64()),
            "tag": list(range(len(dim_keys))),
            "x": list(range(len(dim_keys))),
        }
    )
    data = {"d1": d1, "d2": pa.table({"k": pa.array([1, 3], pa.int64()), "y": [1, 2]})}
    sql = "SELECT f.v, d1.x FROM f, d1 WHERE f.k1 = d1.k AND d1.tag % 2 = 0"
    table, stats = run_virtual(sql, catalog(path, data), policy=policy, batch_size=batch_size)
    assert_same_bag(table, sql, duck_tables(path, data))
    tag = np.arange(len(dim_keys))
    skipped, kept, filtered = expected_scan(path, {"k1": keys_of(d1, "k", tag % 2 == 0)})
    scan = scan_of(stats)
    assert (scan.dynamic_row_groups_skipped, scan.tuples_out, scan.dynamic_rows_filtered) == (
        skipped,
        kept,
        filtered,
    )


def test_view_columns_and_required_fields_are_filtered(tmp_path):
    """Files written with string_view columns and required (non-NULL) fields, as
    tpchgen-cli writes them: a pushed selection and a dynamic filter both filter rows
    of batches pyarrow cannot filter as read (no string_view kernel)."""
    n = 300
    i = np.arange(n)
    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            pa.field("s", pa.string_view(), nullable=False),
            pa.field("w", pa.int64(), nullable=False),
        ]
    )
    f = pa.table([i // 3, pa.array([f"s{j % 7}" for j in i], pa.string_view()), i], schema=schema)
    path = tmp_path / "views.parquet"
    pq.write_table(f, path, row_group_size=20)
    assert pq.read_schema(path).field("s").type == pa.string_view()
    d = pa.table({"k": pa.array([5, 6, 50, 51], pa.int64()), "x": [1, 2, 3, 4]})
    cat = Catalog()
    cat.add_table("f", str(path), delay=0.5)
    cat.add_table("d", d)
    tables = {
        "f": pq.read_table(path).cast(
            pa.schema([("k", pa.int64()), ("s", pa.string()), ("w", pa.int64())])
        ),
        "d": d,
    }
    for sql in (
        "SELECT f.s, f.w FROM f WHERE f.w < 100 AND f.s <> 's1'",
        "SELECT f.s, d.x FROM f, d WHERE f.k = d.k",
        "SELECT f.s, d.x FROM f, d WHERE f.k = d.k AND f.w > 10",
    ):
        table, stats = run_virtual(sql, cat, seed=0)
        assert_same_bag(table, sql, tables)
    scan = scan_of(stats)
    # keys 5, 6 (rows 15..20) and 50, 51 (rows 150..155): row groups 0, 1, 7 are read;
    # of their 60 rows, w > 10 removes 11 first
    assert (scan.dynamic_row_groups_skipped, scan.dynamic_rows_filtered) == (12, 60 - 11 - 12)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_a_filter_arriving_mid_scan_skips_no_more_than_it_may(fact_file, policy, batch_size):
    """The dimensions start late (0.5 s of trio's virtual clock), while the fact table is
    being read: the filter arrives after some row groups, wherever the scheduler puts it.
    It never skips a row group that holds a joining key, nor drops a joining row."""
    data = dims()
    cat = Catalog()
    cat.add_table("f", str(fact_file))
    for name, tab in data.items():
        cat.add_table(name, tab, delay=0.5)
    table, stats = run_virtual(STAR, cat, policy=policy, batch_size=batch_size, seed=0)
    assert_same_bag(table, STAR, duck_tables(fact_file, data), context=f"{policy} {batch_size}")
    skipped, kept, _ = expected_scan(fact_file, star_pushes(data), np.arange(400) < 380)
    scan = scan_of(stats)
    assert scan.dynamic_row_groups_skipped <= skipped
    assert scan.tuples_out >= kept


def test_key_filter_parts():
    """Keys outside the scan column's type are left out; a small set adds ``isin``; a
    dense one is its range; uint64 and mixed kinds are not pushed."""
    from eddies.modules.scan_filter import key_filter, pushable_pair

    expr, codes = key_filter(pa.array([5, 3, 3, 900, -200], pa.int64()), "k", pa.int8())
    assert codes.tolist() == [3, 5]
    assert "is_in" in str(expr)
    assert key_filter(pa.array([500], pa.int64()), "k", pa.int8()) is None
    assert key_filter(pa.array([], pa.int64()), "k", pa.int64()) is None
    expr, codes = key_filter(pa.array(range(100), pa.int64()), "k", pa.int32())
    assert "is_in" not in str(expr) and len(codes) == 100
    assert pushable_pair(pa.int16(), pa.int64()) and pushable_pair(pa.date32(), pa.date32())
    assert not pushable_pair(pa.uint64(), pa.int64())
    assert not pushable_pair(pa.decimal128(5, 1), pa.int64())
    assert not pushable_pair(pa.string(), pa.string())
    assert not pushable_pair(pa.date32(), pa.int32())
