"""The `eddies` command line: the demo's rows equal DuckDB's; query, explain, output, errors."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from oracle import assert_same_ordered

from eddies.engine import Catalog, run_query
from eddies.engine.cli import DEMO_SQL, DEMO_TABLES, main
from eddies.sources.nycflights import load_table


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lottery", "static"])
def test_demo_query_gives_duckdbs_rows_in_order(policy):
    tables = {name: load_table(name) for name in DEMO_TABLES}
    cat = Catalog()
    for name, table in tables.items():
        cat.add_table(name, table)
    result = run_query(DEMO_SQL, cat, policy=policy, seed=1).table
    assert result.num_rows > 0
    assert_same_ordered(result, DEMO_SQL, tables, keys=[8, 0, 1, 2])


@pytest.mark.slow
def test_demo_command_prints_rows_and_routing(capsys):
    assert main(["demo", "--no-progress", "--limit-print", "3"]) == 0
    out = capsys.readouterr().out
    assert "536" in out  # the row count DuckDB gives for DEMO_SQL
    assert "probe:" in out and "build:" in out


@pytest.fixture
def csv_tables(tmp_path):
    users = pa.table({"id": [1, 2, 3], "name": ["ann", "bob", None]})
    orders = pa.table({"user_id": [1, 2, 2, 4], "amount": [5, 7, 9, 11]})
    pacsv.write_csv(users, tmp_path / "users.csv")
    pq.write_table(orders, tmp_path / "orders.parquet")
    return tmp_path


SQL = (
    "SELECT u.id, sum(o.amount) AS total FROM users u JOIN orders o ON o.user_id = u.id "
    "GROUP BY u.id"
)


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_query_writes_the_result_to_a_file(csv_tables, suffix):
    out = csv_tables / f"out{suffix}"
    code = main(
        [
            "query",
            SQL,
            "--table",
            f"users={csv_tables / 'users.csv'}",
            "--table",
            f"orders={csv_tables / 'orders.parquet'}",
            "--output",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    table = pq.read_table(out) if suffix == ".parquet" else pacsv.read_csv(out)
    assert sorted(zip(*(c.to_pylist() for c in table.columns), strict=True)) == [(1, 5), (2, 16)]


def test_query_explain_and_stats(csv_tables, capsys):
    tables = [
        "--table",
        f"users={csv_tables / 'users.csv'}",
        "--table",
        f"orders={csv_tables / 'orders.parquet'}",
    ]
    assert main(["query", SQL, *tables, "--explain"]) == 0
    assert "stem:users" in capsys.readouterr().out
    assert main(["query", SQL, *tables, "--stats", "--no-progress"]) == 0
    assert "routing choices" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("sql", "table", "message"),
    [
        ("SELECT * FROM t", "t=missing.csv", "no such file"),
        ("SELECT x FROM nope", "users=users.csv", "unknown table"),
        ("SELECT x FROM users", "users=users.csv", "unknown column"),
        ("SELECT * FROM users u LEFT JOIN users v ON u.id = v.id", "users=users.csv", "LEFT"),
    ],
)
def test_errors_exit_2_with_a_message(sql, table, message, capsys, csv_tables):
    name, path = table.split("=")
    assert main(["query", sql, "--table", f"{name}={csv_tables / path}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and message.lower() in err.lower()
    assert "Traceback" not in err
