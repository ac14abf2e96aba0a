"""Inputs (issue 14, item 6) against DuckDB: directories, globs, hive-partitioned datasets
with filter pushdown, ``FROM 'path'`` / read_parquet / read_csv, Polars DataFrames, DuckDB
relations, RecordBatchReaders and pyarrow Datasets.

Every query runs in eddies and in DuckDB over the same files and must give the same bag of
rows. The pushdown tests also count what the scan AM skipped (files pruned by partition
values, Parquet row groups pruned by statistics) and compare the counts with the ones
computed independently from the files' paths and Parquet metadata: counting, not timing.
"""

from __future__ import annotations

import datetime as dt
import os
import pathlib
import re

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_same_bag

from eddies.engine import Catalog, EddiesError, execute, run_query
from eddies.errors import DataSourceError, UnsupportedQueryError

POLICIES = ("static", "lottery", "rank", "bandit", "random", "hybrid")
BATCH_SIZES = (None, 1, 7)
ROW_GROUP = 4  # rows per Parquet row group: small, so statistics can skip some

YEARS = [2021, 2022, None]
REGIONS = ["eu", "us west", "a/b"]  # a space and a '/' are %-encoded in the path
DAYS = [dt.date(2024, 1, 1), dt.date(2024, 2, 29)]


def _part(key: str, value) -> str:
    if value is None:
        return f"{key}=__HIVE_DEFAULT_PARTITION__"
    return f"{key}={str(value).replace('/', '%2F').replace(' ', '%20')}"


def _rows(seed: int, n: int) -> pa.Table:
    """n rows sorted by id (so row-group statistics are tight), with NULLs and NaN."""
    ids = list(range(seed * 100, seed * 100 + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array(
                [None if i % 7 == 0 else float("nan") if i % 11 == 0 else i / 4 for i in ids],
                pa.float64(),
            ),
            "s": pa.array([None if i % 5 == 0 else f"s{i % 6}" for i in ids], pa.string()),
            "d": pa.array([dt.date(2023, 1, 1) + dt.timedelta(days=i % 40) for i in ids]),
            "n": pa.array([None if i % 9 == 0 else i % 4 for i in ids], pa.int32()),
        }
    )


@pytest.fixture(scope="module")
def hive(tmp_path_factory) -> pathlib.Path:
    """year=/region=/day= partitions (one NULL year), 2 files in some leaves."""
    root = tmp_path_factory.mktemp("hive") / "events"
    seed = 0
    for year in YEARS:
        for region in REGIONS:
            for day in DAYS:
                leaf = root / _part("year", year) / _part("region", region) / _part("day", day)
                leaf.mkdir(parents=True)
                for k in range(1 + seed % 2):
                    pq.write_table(
                        _rows(seed, 9 + seed % 5), leaf / f"part-{k}.parquet", row_group_size=4
                    )
                    seed += 1
    return root


@pytest.fixture(scope="module")
def flat(tmp_path_factory) -> pathlib.Path:
    """A directory of plain Parquet files (no partitions), a _SUCCESS marker beside them."""
    root = tmp_path_factory.mktemp("flat")
    for k in range(3):
        pq.write_table(_rows(50 + k, 10), root / f"f{k}.parquet", row_group_size=ROW_GROUP)
    (root / "_SUCCESS").write_text("")
    return root


def _duck(sql: str, views: dict[str, str], extra: dict | None = None) -> pa.Table:
    """DuckDB's answer, each of ``views`` read whole by DuckDB (its file reader, its hive
    typing) and then queried in memory: DuckDB 2.0's own Parquet filter pushdown drops
    NaN rows that its in-memory semantics keep (``x > 100`` with x NaN), so the oracle's
    semantics are taken without it."""
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone='UTC'")
        for name, source in views.items():
            con.register(name, con.sql(f"SELECT * FROM {source}").to_arrow_table())
        for name, data in (extra or {}).items():
            con.register(name, data)
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def _every_run(sql: str, catalog: Catalog, expected: pa.Table, sizes=BATCH_SIZES) -> None:
    for policy in POLICIES:
        for bs in sizes:
            ours = execute(sql, catalog, policy=policy, batch_size=bs, seed=0)
            assert_same_bag(ours, sql, {}, context=f"{policy} bs={bs}", expected=expected)


def _glob(root: pathlib.Path) -> str:
    return f"{root}/**/*.parquet"


# ------------------------------------------------------------------------ hive and pushdown
def test_hive_columns_are_typed_as_duckdb_types_them(hive):
    cat = Catalog()
    cat.add_table("events", str(hive))
    ours = execute("SELECT * FROM events", cat)
    theirs = _duck(f"SELECT * FROM read_parquet('{_glob(hive)}')", {})
    assert ours.schema.names == theirs.schema.names
    assert [f.type for f in ours.schema] == [f.type for f in theirs.schema]
    assert_same_bag(ours, "SELECT *", {}, expected=theirs)


CONSTANTS = {
    "id": ["0", "5", "105", "1399", "-1"],
    "n": ["0", "2", "3"],
    "s": ["'s1'", "'s3'", "'zz'", "''"],
    "d": [
        "DATE '2023-01-05'",
        "'2023-02-01'",
        "DATE '2023-01-05' + INTERVAL 1 MONTH",
        "DATE '2023-01-20' - 3",
    ],
    "x": ["2.5", "'NaN'::DOUBLE", "0"],
    "year": ["2021", "2022", "0"],
    "region": ["'eu'", "'a/b'", "'us west'"],
    "day": ["DATE '2024-02-29'", "'2024-01-01'"],
}
OPS = ["=", "<>", "<", "<=", ">", ">="]


@st.composite
def condition(draw, depth: int = 0) -> str:
    column = draw(st.sampled_from(sorted(CONSTANTS)))
    const = st.sampled_from(CONSTANTS[column])
    kinds = ["cmp", "cmp", "between", "in", "null"] + (["and", "or", "not"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "cmp":
        return f"{column} {draw(st.sampled_from(OPS))} {draw(const)}"
    if kind == "between":
        return f"{column} BETWEEN {draw(const)} AND {draw(const)}"
    if kind == "in":
        items = draw(st.lists(st.one_of(const, st.just("NULL")), min_size=1, max_size=3))
        return f"{column} IN ({', '.join(items)})"
    if kind == "null":
        return f"{column} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == "not":
        return f"NOT ({draw(condition(depth + 1))})"
    word = " AND " if kind == "and" else " OR "
    return f"({draw(condition(depth + 1))}{word}{draw(condition(depth + 1))})"


@pytest.mark.slow  # about 8 s at 15 examples on a loaded machine
@settings(
    max_examples=int(os.environ.get("EDDIES_INPUT_EXAMPLES", "15")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(where=st.lists(condition(), min_size=1, max_size=3))
def test_pushed_filters_keep_results_exact(hive, where):
    """Selections over data and partition columns (NULLs, NaN, dates, %-encoded values):
    whatever is pushed into the scan, the result is DuckDB's."""
    sql = f"SELECT id, x, s, year, region FROM events WHERE {' AND '.join(where)}"
    expected = _duck(sql, {"events": f"read_parquet('{_glob(hive)}')"})
    cat = Catalog()
    cat.add_table("events", str(hive))
    for policy, bs in (("static", None), ("lottery", 7), ("bandit", 1)):
        ours = execute(sql, cat, policy=policy, batch_size=bs, seed=0)
        assert_same_bag(ours, sql, {}, context=f"{policy} bs={bs}", expected=expected)


def _scan_counts(stats) -> tuple[int, int, int, int]:
    (scan,) = [m for name, m in stats.modules.items() if name.startswith("scan:")]
    return scan.fragments, scan.fragments_skipped, scan.row_groups, scan.row_groups_skipped


def test_partition_pruning_skips_the_other_files(hive):
    files = sorted(hive.rglob("*.parquet"))
    in_2022 = [f for f in files if "year=2022" in str(f) and "region=eu" in str(f)]
    sql = "SELECT id, region, day FROM events WHERE year = 2022 AND region = 'eu'"
    expected = _duck(sql, {"events": f"read_parquet('{_glob(hive)}')"})
    cat = Catalog()
    cat.add_table("events", str(hive))
    for policy in POLICIES:
        run = run_query(sql, cat, policy=policy, seed=0)
        assert_same_bag(run.table, sql, {}, expected=expected)
        read, skipped, _, _ = _scan_counts(run.stats)
        assert (read, skipped) == (len(in_2022), len(files) - len(in_2022))


def test_row_group_statistics_skip_row_groups(flat):
    """``id BETWEEN 5005 AND 5012`` reads only the row groups whose [min, max] of id meets
    [5005, 5012], as the files' own metadata says."""
    lo, hi = 5005, 5012
    files = sorted(flat.glob("*.parquet"))
    total = kept = 0
    for f in files:
        meta = pq.ParquetFile(f).metadata
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(0).statistics
            total += 1
            kept += stats.max >= lo and stats.min <= hi
    assert 0 < kept < total
    sql = f"SELECT id, s FROM flat WHERE id BETWEEN {lo} AND {hi}"
    expected = _duck(sql, {"flat": f"read_parquet('{flat}/*.parquet')"})
    cat = Catalog()
    cat.add_table("flat", str(flat))
    for policy in POLICIES:
        for bs in BATCH_SIZES:
            run = run_query(sql, cat, policy=policy, batch_size=bs, seed=0)
            assert_same_bag(run.table, sql, {}, expected=expected)
            assert _scan_counts(run.stats) == (len(files), 0, total, total - kept)


def test_float_selections_are_not_pushed_but_still_exact(flat):
    # NaN is above every number in DuckDB, not in pyarrow: nothing may be skipped.
    sql = "SELECT id, x FROM flat WHERE x > 100"
    cat = Catalog()
    cat.add_table("flat", str(flat))
    run = run_query(sql, cat, seed=0)
    expected = _duck(sql, {"flat": f"read_parquet('{flat}/*.parquet')"})
    assert_same_bag(run.table, sql, {}, expected=expected)
    assert pc.sum(pc.is_nan(expected.column("x"))).as_py() > 0  # DuckDB keeps NaN rows
    assert _scan_counts(run.stats)[3] == 0


def test_join_with_a_file_table_reads_the_columns_it_needs(hive):
    dims = pa.table({"region": ["eu", "a/b", "mars"], "label": ["Europe", "AB", "Mars"]})
    sql = (
        "SELECT e.id, r.label, e.d FROM events e JOIN dims r ON e.region = r.region "
        "WHERE e.n >= 2 AND e.year <> 2021"
    )
    expected = _duck(sql, {"events": f"read_parquet('{_glob(hive)}')"}, {"dims": dims})
    cat = Catalog()
    cat.add_table("events", str(hive))
    cat.add_table("dims", dims)
    _every_run(sql, cat, expected)


def test_self_join_of_a_file_table_is_not_filtered(flat):
    sql = "SELECT a.id, b.id FROM flat a JOIN flat b ON a.n = b.n WHERE a.id < 5003"
    expected = _duck(sql, {"flat": f"read_parquet('{flat}/*.parquet')"})
    cat = Catalog()
    cat.add_table("flat", str(flat))
    _every_run(sql, cat, expected, sizes=(None, 7))


# ------------------------------------------------------------------- paths, globs, SQL
def test_directory_glob_and_file_paths(flat, hive):
    cat = Catalog()
    cat.add_table("by_dir", str(flat))
    cat.add_table("by_glob", f"{flat}/f[01].parquet")
    cat.add_table("one", str(flat / "f2.parquet"))
    cat.add_table("deep", _glob(hive))
    for sql, views in [
        ("SELECT n, count(*), sum(id) FROM by_dir GROUP BY n", {"by_dir": f"'{flat}/*.parquet'"}),
        ("SELECT * FROM by_glob WHERE s = 's1'", {"by_glob": f"'{flat}/f[01].parquet'"}),
        ("SELECT id, d FROM one", {"one": f"'{flat}/f2.parquet'"}),
        ("SELECT year, count(*) FROM deep GROUP BY year", {"deep": f"'{_glob(hive)}'"}),
        ("SELECT count(*) FROM deep", {"deep": f"'{_glob(hive)}'"}),  # reads no column
    ]:
        _every_run(sql, cat, _duck(sql, views), sizes=(None, 7))


def test_from_path_and_read_functions_in_sql(flat, tmp_path):
    csv_path = tmp_path / "people.csv"
    pacsv.write_csv(pa.table({"id": [5000, 5001, 999], "name": ["ann", None, "cy"]}), csv_path)
    glob = f"{flat}/*.parquet"
    queries = [
        f"SELECT * FROM '{flat}/f0.parquet' WHERE id > 5002",
        f"SELECT f0.id FROM '{flat}/f0.parquet'",
        f"SELECT count(*), min(id) FROM read_parquet('{glob}') WHERE s <> 's2'",
        f"SELECT p.name, t.s FROM read_csv('{csv_path}') p JOIN '{glob}' t ON p.id = t.id",
        f"SELECT read_parquet.id FROM read_parquet('{flat}/f1.parquet') WHERE n = 1",
        f"SELECT a.id, b.id FROM '{flat}/f0.parquet' a JOIN '{flat}/f0.parquet' b "
        "ON a.n = b.n WHERE a.id < 5003",
    ]
    cat = Catalog()
    for sql in queries:
        _every_run(sql, cat, _duck(sql, {}), sizes=(None, 7))


def test_csv_directory_with_partitions(tmp_path):
    root = tmp_path / "csv"
    for k, rows in ((1, [(1, "a"), (2, None)]), (2, [(3, "c"), (4, "d"), (5, "")])):
        (root / f"k={k}").mkdir(parents=True)
        table = pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows]})
        pacsv.write_csv(table, root / f"k={k}" / "part.csv")
    sql = "SELECT id, name, k FROM people WHERE k = 2 OR name IS NULL"
    expected = _duck(sql, {"people": f"read_csv('{root}/**/*.csv')"})
    cat = Catalog()
    cat.add_table("people", str(root))
    _every_run(sql, cat, expected, sizes=(None, 1))
    _every_run(sql.replace("people", f"read_csv('{root}/**/*.csv')"), Catalog(), expected)


def test_read_functions_refuse_options_they_do_not_handle(flat):
    for sql in (
        f"SELECT * FROM read_parquet('{flat}/f0.parquet', hive_partitioning = false)",
        f"SELECT * FROM read_csv('{flat}/x.csv', header = false)",
        f"SELECT * FROM read_parquet(['{flat}/f0.parquet'])",
    ):
        with pytest.raises(UnsupportedQueryError):
            execute(sql, Catalog())
    with pytest.raises(DataSourceError, match="not CSV"):
        execute(f"SELECT * FROM read_csv('{flat}/f0.parquet')", Catalog())


def test_cli_query_reads_a_directory(hive, tmp_path):
    from eddies.engine.cli import main

    out = tmp_path / "out.parquet"
    sql = "SELECT region, year, count(*) AS n FROM events WHERE day = '2024-02-29' "
    sql += "GROUP BY region, year"
    code = main(["query", sql, "-t", f"events={hive}", "-o", str(out), "--no-progress"])
    assert code == 0
    expected = _duck(sql, {"events": f"read_parquet('{_glob(hive)}')"})
    assert_same_bag(pq.read_table(out), sql, {}, expected=expected)
    assert main(["query", "SELECT * FROM t", "-t", f"t={tmp_path}/none-*.parquet"]) == 2


# ------------------------------------------------------------------ Arrow stream objects
def test_polars_dataframe(flat):
    pl = pytest.importorskip("polars")
    frame = pl.read_parquet(str(flat / "f0.parquet"))
    sql = "SELECT s, count(*), sum(n) FROM t WHERE id % 2 = 0 GROUP BY s"
    expected = _duck(sql, {}, {"t": frame.to_arrow()})
    cat = Catalog()
    cat.add_table("t", frame)
    _every_run(sql, cat, expected)


def test_duckdb_relation_is_rescanned_per_query():
    con = duckdb.connect()
    relation = con.sql("SELECT i, i % 3 AS g, 'v' || i AS s FROM range(40) t(i)")
    sql = "SELECT g, count(*), max(s) FROM rel WHERE i > 4 GROUP BY g"
    expected = con.sql(
        "SELECT g, count(*), max(s) FROM (SELECT i, i % 3 AS g, 'v' || i AS s FROM "
        "range(40) t(i)) WHERE i > 4 GROUP BY g"
    ).to_arrow_table()
    cat = Catalog()
    cat.add_table("rel", relation)
    _every_run(sql, cat, expected, sizes=(None, 7))  # every run scans the relation again


def test_record_batch_reader_is_scanned_once():
    data = pa.table({"a": [1, 2, 2, None], "b": ["x", "y", None, "z"]})
    reader = pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=2))
    cat = Catalog()
    cat.add_table("r", reader)
    sql = "SELECT a, b FROM r WHERE a >= 2 OR b IS NULL"
    assert_same_bag(execute(sql, cat), sql, {"r": data})
    with pytest.raises(DataSourceError, match="scanned once"):
        execute(sql, cat)


def test_generic_arrow_c_stream_object_is_a_one_shot_stream():
    data = pa.table({"a": [3, 1, 2]})

    class Producer:  # any object speaking the Arrow PyCapsule stream protocol
        def __arrow_c_stream__(self, requested_schema=None):
            return data.__arrow_c_stream__(requested_schema)

    cat = Catalog()
    cat.add_table("p", Producer())
    assert sorted(execute("SELECT a FROM p", cat).column(0).to_pylist()) == [1, 2, 3]
    with pytest.raises(DataSourceError, match="scanned once"):
        execute("SELECT a FROM p", cat)


def test_pyarrow_dataset_object(hive):
    dataset = ds.dataset(str(hive), format="parquet", partitioning="hive")
    sql = "SELECT id, region, year FROM t WHERE year = 2021 AND id < 700"
    # pyarrow's own hive typing (int32 year) is kept for a Dataset the caller built.
    expected = _duck(sql, {"t": f"read_parquet('{_glob(hive)}')"})
    cat = Catalog()
    cat.add_table("t", dataset)
    for policy in POLICIES:
        run = run_query(sql, cat, policy=policy, seed=0)
        assert_same_bag(run.table, sql, {}, expected=expected)
        assert _scan_counts(run.stats)[1] > 0


def test_pyarrow_dataset_with_dictionary_partitions(hive):
    """Dictionary-typed partition columns are decoded; they are not pushed (their type
    differs from the plain one the query sees), yet projection still works."""
    partitioning = ds.HivePartitioning.discover(infer_dictionary=True)
    dataset = ds.dataset(str(hive), format="parquet", partitioning=partitioning)
    sql = "SELECT id, region FROM t WHERE region = 'us west' AND n = 1"
    expected = _duck(sql, {"t": f"read_parquet('{_glob(hive)}')"})
    cat = Catalog()
    cat.add_table("t", dataset)
    assert cat.table("t").schema.field("region").type == pa.string()
    _every_run(sql, cat, expected, sizes=(None, 7))


# --------------------------------------------------------------------------------- errors
def test_errors_name_the_path(tmp_path):
    cat = Catalog()
    with pytest.raises(DataSourceError, match=r"nothing-\*\.parquet. matches no file"):
        cat.add_table("t", f"{tmp_path}/nothing-*.parquet")
    with pytest.raises(DataSourceError, match="no such file or directory"):
        cat.add_table("t", str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataSourceError, match="holds no data file"):
        cat.add_table("t", str(empty))

    mixed = tmp_path / "mixed"
    mixed.mkdir()
    pq.write_table(pa.table({"a": [1]}), mixed / "one.parquet")
    pq.write_table(pa.table({"a": ["x"]}), mixed / "two.parquet")
    with pytest.raises(DataSourceError, match=r"incompatible schemas: .*two\.parquet"):
        cat.add_table("t", str(mixed))

    bad = tmp_path / "bad"
    bad.mkdir()
    pq.write_table(pa.table({"a": [1]}), bad / "good.parquet")
    (bad / "broken.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataSourceError, match=r"cannot read .*broken\.parquet"):
        cat.add_table("t", str(bad))

    parts = tmp_path / "parts"
    (parts / "k=1").mkdir(parents=True)
    pq.write_table(pa.table({"a": [1]}), parts / "k=1" / "x.parquet")
    pq.write_table(pa.table({"a": [2]}), parts / "y.parquet")
    with pytest.raises(DataSourceError, match="mixed hive partitioning"):
        cat.add_table("t", str(parts))

    both = tmp_path / "both"
    both.mkdir()
    pq.write_table(pa.table({"a": [1]}), both / "x.parquet")
    pacsv.write_csv(pa.table({"a": [1]}), both / "y.csv")
    with pytest.raises(DataSourceError, match="mixes Parquet and CSV"):
        cat.add_table("t", str(both))
    with pytest.raises(EddiesError, match="matches no file"):
        execute(f"SELECT * FROM '{tmp_path}/none-*.parquet'", cat)
    assert cat.tables == []


def test_docs_inputs_example_runs(capsys):
    """docs/inputs.md's code blocks run as written and print what the page says."""
    text = (pathlib.Path(__file__).parent.parent / "docs" / "inputs.md").read_text()
    namespace: dict = {}
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        exec(block, namespace)
    out = capsys.readouterr().out
    assert "files read 2, skipped 2; row groups read 4 of 8" in out
    assert "files read 2, skipped 2; row groups read 4 of 8" in text
    assert "filter pushed into the scan" in out
