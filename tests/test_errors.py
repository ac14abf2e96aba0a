"""Clear errors: every user mistake raises a subclass of EddiesError naming the construct.

Covers SQL syntax errors, unknown tables/columns, ambiguous columns, unsupported constructs
(outer joins, subqueries, CTEs, set operations, window functions), type errors, bad input
data (DataSourceError) and failing UDFs (UdfError). Where the construct sits on a known line
of the SQL text, the message must give that line and a column inside the construct.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from oracle import make_catalog

from eddies.engine import Catalog, EddiesError, execute, explain, run_query
from eddies.errors import (
    DataSourceError,
    QueryTypeError,
    SqlSyntaxError,
    UdfError,
    UnknownColumnError,
    UnknownTableError,
    UnsupportedQueryError,
)

R = pa.table(
    {
        "id": pa.array([1, 2, 3], pa.int64()),
        "k": pa.array([1, None, 2], pa.int64()),
        "v": pa.array([10, 20, None], pa.int64()),
        "s": pa.array(["a", "b", None], pa.string()),
    }
)
S = pa.table(
    {
        "id": pa.array([1, 2], pa.int64()),
        "k": pa.array([1, 2], pa.int64()),
        "w": pa.array([5, 6], pa.int64()),
    }
)
TABLES = {"r": R, "s": S}

POS = re.compile(r"line\s*:?\s*(\d+)\D{1,12}?(\d+)", re.IGNORECASE)


def raises(sql: str, cls: type[EddiesError] = EddiesError) -> EddiesError:
    """Execute ``sql`` over r and s; return the EddiesError it raises (it must raise one)."""
    with pytest.raises(EddiesError) as info:
        execute(sql, make_catalog(TABLES))
    err = info.value
    assert isinstance(err, cls), f"expected {cls.__name__}, got {type(err).__name__}: {err}"
    return err


def assert_names(err: Exception, *alternatives: str) -> None:
    msg = str(err).lower()
    assert any(a.lower() in msg for a in alternatives), (
        f"message does not name the construct (any of {alternatives}): {err}"
    )


def assert_position(err: Exception, sql: str, construct: str) -> None:
    """The message gives the construct's line and a column within the construct's span."""
    lines = sql.split("\n")
    line_no = next(i for i, line in enumerate(lines, 1) if construct in line)
    start = lines[line_no - 1].index(construct) + 1  # 1-based
    end = start + len(construct) - 1
    m = POS.search(str(err))
    assert m, f"message has no line/column: {err}"
    line, col = int(m.group(1)), int(m.group(2))
    assert line == line_no, f"expected line {line_no}, message says {line}: {err}"
    assert start - 1 <= col <= end + 1, (
        f"expected a column in {start}..{end} (for {construct!r}), message says {col}: {err}"
    )


# ---------------------------------------------------------------------------- syntax
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT r.id FROM r WHERE",
        "SELECT (r.id FROM r",
        "SELECT r.id FROM r WHERE r.k IN (1, 2",
        "SELEC r.id FROM r",
        "SELECT r.id FROM r WHERE r.k = = 3",
    ],
)
def test_syntax_error(sql):
    err = raises(sql, SqlSyntaxError)
    assert POS.search(str(err)), f"syntax error without line/column: {err}"


def test_syntax_error_reports_line():
    sql = "SELECT r.id\nFROM r\nWHERE r.k = = 3"
    err = raises(sql, SqlSyntaxError)
    m = POS.search(str(err))
    assert m and int(m.group(1)) == 3, f"expected line 3: {err}"


@pytest.mark.parametrize("sql", ["", "   ", "-- only a comment"])
def test_empty_query(sql):
    raises(sql)


def test_multiple_statements():
    err = raises("SELECT r.id FROM r; SELECT s.id FROM s")
    assert str(err)


@pytest.mark.parametrize(
    ("sql", "word"),
    [
        ("INSERT INTO r VALUES (1, 2, 3, 'x')", "INSERT"),
        ("DROP TABLE r", "DROP"),
        ("UPDATE r SET v = 1", "UPDATE"),
    ],
)
def test_not_a_select(sql, word):
    err = raises(sql, UnsupportedQueryError)
    assert_names(err, word)


# ---------------------------------------------------------------------------- names
def test_unknown_table():
    sql = "SELECT x.id\nFROM r, nosuchtable x\nWHERE r.id = x.id"
    err = raises(sql, UnknownTableError)
    assert_names(err, "nosuchtable")
    assert_position(err, sql, "nosuchtable")


def test_unknown_table_single():
    err = raises("SELECT * FROM missing_tbl", UnknownTableError)
    assert_names(err, "missing_tbl")


def test_unknown_table_in_explain():
    with pytest.raises(UnknownTableError, match="nosuchtable"):
        explain("SELECT * FROM nosuchtable", make_catalog(TABLES))


def test_explain_refuses_run_options_by_name():
    with pytest.raises(EddiesError, match="unexpected keyword 'policy'"):
        explain("SELECT * FROM r", make_catalog(TABLES), policy="rank")


def test_unknown_table_in_run_query():
    with pytest.raises(UnknownTableError, match="nosuchtable"):
        run_query("SELECT * FROM nosuchtable", make_catalog(TABLES))


def test_unknown_column_qualified():
    sql = "SELECT r.id\nFROM r\nWHERE r.zzzz = 1"
    err = raises(sql, UnknownColumnError)
    assert_names(err, "zzzz")
    assert_position(err, sql, "r.zzzz")


def test_unknown_column_unqualified_in_select():
    sql = "SELECT id,\n       nocol\nFROM r"
    err = raises(sql, UnknownColumnError)
    assert_names(err, "nocol")
    assert_position(err, sql, "nocol")


def test_unknown_column_in_group_by():
    err = raises("SELECT COUNT(*) FROM r GROUP BY r.nope", UnknownColumnError)
    assert_names(err, "nope")


def test_unknown_column_in_join_on():
    err = raises("SELECT r.id FROM r JOIN s ON r.k = s.nokey", UnknownColumnError)
    assert_names(err, "nokey")


def test_unknown_alias_qualifier():
    # 'q' is neither a table nor an alias in FROM
    with pytest.raises((UnknownColumnError, UnknownTableError)) as info:
        execute("SELECT q.id FROM r", make_catalog(TABLES))
    assert_names(info.value, "q.id", "'q'", '"q"', " q ")


def test_column_of_table_not_in_from():
    with pytest.raises((UnknownColumnError, UnknownTableError)) as info:
        execute("SELECT s.w FROM r", make_catalog(TABLES))
    assert_names(info.value, "s.w", "'s'")


def test_alias_hides_table_name():
    # once aliased, the table name itself is not a valid qualifier
    with pytest.raises((UnknownColumnError, UnknownTableError)) as info:
        execute("SELECT r.id FROM r AS x", make_catalog(TABLES))
    assert_names(info.value, "r.id", "'r'")


def test_ambiguous_column_in_select():
    sql = "SELECT id\nFROM r, s\nWHERE r.k = s.k"
    err = raises(sql, UnknownColumnError)
    assert_names(err, "ambiguous")
    assert_names(err, "id")
    assert_position(err, sql, "id")


def test_ambiguous_column_in_where():
    sql = "SELECT r.id\nFROM r JOIN s ON r.id = s.id\nWHERE k = 1"
    err = raises(sql, UnknownColumnError)
    assert_names(err, "ambiguous")
    assert_position(err, sql, "k = 1")


def test_ambiguous_column_in_self_join():
    err = raises("SELECT v FROM r a, r b WHERE a.id = b.id", UnknownColumnError)
    assert_names(err, "ambiguous")


def test_duplicate_alias():
    raises("SELECT x.id FROM r x, s x")


def test_unknown_function():
    err = raises("SELECT nosuchfn(r.v) FROM r")
    assert_names(err, "nosuchfn")


# ---------------------------------------------------------------------------- unsupported
@pytest.mark.parametrize(
    ("join", "words"),
    [
        ("RIGHT OUTER JOIN", ("RIGHT JOIN with USING",)),
        ("RIGHT JOIN", ("RIGHT JOIN with USING",)),
        ("FULL JOIN", ("FULL JOIN with USING",)),
        ("FULL OUTER JOIN", ("FULL JOIN with USING",)),
    ],
)
def test_outer_join_with_using_unsupported(join, words):
    sql = f"SELECT r.id\nFROM r\n{join} s USING (k)"
    err = raises(sql, UnsupportedQueryError)
    assert_names(err, *words)
    m = POS.search(str(err))
    assert m and int(m.group(1)) == 3, f"expected line 3: {err}"


@pytest.mark.parametrize(
    "sql",
    [
        # correlated (uncorrelated, these run: tests/test_membership_bodies.py)
        "SELECT r.id\nFROM r\nWHERE r.k = 1 OR r.k IN "
        "(SELECT s.k FROM s WHERE s.w > r.id GROUP BY s.k)",
        "SELECT r.id\nFROM r\nWHERE NOT (r.k = 1 AND EXISTS "
        "(SELECT s.k FROM s WHERE s.k = r.k LIMIT 1))",
    ],
)
def test_subquery_in_where_unsupported(sql):
    err = raises(sql, UnsupportedQueryError)
    assert_names(err, "subquer", "exists")
    m = POS.search(str(err))
    assert m and int(m.group(1)) == 3, f"expected line 3: {err}"


def test_scalar_subquery_with_two_rows_fails():
    # Scalar subqueries, derived tables, CTEs, set operations and window functions run
    # (tests/test_composite_differential.py); what DuckDB refuses fails with an EddiesError.
    err = raises("SELECT r.id, (SELECT s.w FROM s) FROM r", EddiesError)
    assert_names(err, "more than one row")


def test_recursive_cte_unsupported():
    err = raises(
        "WITH RECURSIVE x AS (SELECT r.id FROM r) SELECT x.id FROM x", UnsupportedQueryError
    )
    assert_names(err, "WITH RECURSIVE")


def test_union_by_name_unsupported():
    err = raises("SELECT r.id FROM r UNION BY NAME SELECT s.id FROM s", UnsupportedQueryError)
    assert_names(err, "UNION BY NAME")


@pytest.mark.parametrize(
    ("window", "name"),
    [
        ("VAR_POP(r.v) OVER (PARTITION BY r.k)", "window function"),
        ("STDDEV(r.v) OVER (ORDER BY r.id)", "window function"),
        ("MEDIAN(r.v) OVER (PARTITION BY r.k ORDER BY r.v)", "window function"),
    ],
)
def test_window_function_unsupported(window, name):
    sql = f"SELECT r.id,\n       {window}\nFROM r"
    err = raises(sql, UnsupportedQueryError)
    assert_names(err, name)
    m = POS.search(str(err))
    assert m and int(m.group(1)) == 2, f"expected line 2: {err}"


# ---------------------------------------------------------------------------- types
@pytest.mark.parametrize(
    ("sql", "construct"),
    [
        ("SELECT r.id,\n       'a' + 1\nFROM r", "'a' + 1"),
        ("SELECT r.id\nFROM r\nWHERE r.s + r.v > 3", "r.s + r.v"),
        ("SELECT r.id\nFROM r\nWHERE r.s = 1", "r.s = 1"),
        ("SELECT r.id\nFROM r\nWHERE r.v < 'abc'", "r.v < 'abc'"),
        ("SELECT r.id\nFROM r, s\nWHERE r.s = s.k", "r.s = s.k"),
        ("SELECT r.id,\n       r.s * 2\nFROM r", "r.s * 2"),
    ],
)
def test_type_errors(sql, construct):
    err = raises(sql, QueryTypeError)
    # the message names the construct: its operator or operands
    pieces = re.findall(r"'[^']*'|[\w.]+|[-+*/<>=]+", construct)
    assert_names(err, construct, *[p for p in pieces if len(p) > 1 or p in "+-*/<>="])
    m = POS.search(str(err))
    assert m, f"type error without line/column: {err}"
    line_no = next(i for i, line in enumerate(sql.split("\n"), 1) if construct in line)
    assert int(m.group(1)) == line_no, f"expected line {line_no}: {err}"


def test_sum_of_strings_is_a_type_error():
    err = raises("SELECT SUM(r.s) FROM r", QueryTypeError)
    assert_names(err, "sum")


# ---------------------------------------------------------------------------- data sources
@pytest.mark.parametrize("obj", [42, object(), 3.5, None])
def test_add_table_unsupported_object(obj):
    with pytest.raises(DataSourceError):
        Catalog().add_table("x", obj)


def _add_and_run(name: str, data) -> None:
    """add_table may reject the source at once or when the query first reads it."""
    cat = Catalog()
    cat.add_table(name, data)
    execute(f"SELECT * FROM {name}", cat)


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_missing_file(tmp_path, suffix):
    path = tmp_path / f"does_not_exist{suffix}"
    with pytest.raises(DataSourceError) as info:
        _add_and_run("x", str(path))
    assert_names(info.value, "does_not_exist")


def test_missing_file_pathlike(tmp_path):
    with pytest.raises(DataSourceError):
        _add_and_run("x", tmp_path / "nope.parquet")


def test_corrupt_parquet(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"this is not a parquet file at all")
    with pytest.raises(DataSourceError):
        _add_and_run("x", str(path))


def test_unsupported_file_extension(tmp_path):
    # .csv/.tsv/.txt are read as delimited text and .parquet/.pq as Parquet; .json is neither
    path = tmp_path / "data.json"
    path.write_text('[{"a": 1, "b": 2}]')
    with pytest.raises(DataSourceError):
        _add_and_run("x", str(path))


def test_valid_parquet_still_works(tmp_path):
    # guard for the tests above: a real file with the same code path must load
    path = tmp_path / "good.parquet"
    pq.write_table(R, path)
    cat = Catalog()
    cat.add_table("x", str(path))
    assert execute("SELECT x.id FROM x", cat).num_rows == 3


# ---------------------------------------------------------------------------- UDFs
def test_udf_raising_is_udf_error():
    def boom(a):
        raise ValueError("kaboom")

    cat = make_catalog(TABLES)
    cat.add_function("boom", boom)
    with pytest.raises(UdfError) as info:
        execute("SELECT r.id FROM r WHERE boom(r.v)", cat)
    assert_names(info.value, "boom")


def test_udf_per_row_raising_is_udf_error():
    def boom(a):
        raise ValueError("kaboom")

    cat = make_catalog(TABLES)
    cat.add_function("boom", boom, vectorized=False)
    with pytest.raises(UdfError) as info:
        execute("SELECT r.id FROM r WHERE boom(r.v)", cat)
    assert_names(info.value, "boom")


def test_async_udf_raising_is_udf_error():
    async def boom(a):
        raise ValueError("kaboom")

    cat = make_catalog(TABLES)
    cat.add_function("boom", boom)
    with pytest.raises(UdfError):
        execute("SELECT r.id FROM r WHERE boom(r.v)", cat)


def test_udf_wrong_length_is_udf_error():
    def short(a):
        return pa.array([True])  # one value for a 3-row input

    cat = make_catalog(TABLES)
    cat.add_function("short", short)
    with pytest.raises(UdfError) as info:
        execute("SELECT r.id FROM r WHERE short(r.v)", cat, batch_size=None)
    assert_names(info.value, "short")


def test_udf_wrong_arity_is_an_error():
    cat = make_catalog(TABLES)
    cat.add_function("one_arg", lambda a: pa.array([True] * len(a)))
    with pytest.raises(EddiesError):
        execute("SELECT r.id FROM r WHERE one_arg(r.v, r.k)", cat)


def test_record_batch_reader_scanned_twice():
    cat = Catalog()
    cat.add_table("x", pa.RecordBatchReader.from_batches(R.schema, R.to_batches()))
    assert execute("SELECT x.id FROM x", cat).num_rows == 3
    with pytest.raises(DataSourceError):
        execute("SELECT x.id FROM x", cat)
