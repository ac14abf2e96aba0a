"""The `eddies` command line: the demo's rows equal DuckDB's; query, explain, output, errors."""

from __future__ import annotations

import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from oracle import assert_same_ordered
from rich.console import Console

from eddies.engine import Catalog, run_query
from eddies.engine.cli import commands as cli
from eddies.engine.cli.commands import DEMO_SQL, DEMO_TABLES, main
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
    # Readable to a newcomer: modules named by what they do, idle ones explained, a glossary.
    assert re.search(r"sm\d\s+w\.wind_speed > 25\s", out)
    assert "0 tuples because SteM probes apply these joins" in out
    assert "glossary" in out and "SteM" in out and "signature" in out


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
        ("SELECT * FROM users u FULL JOIN users v USING (id)", "users=users.csv", "FULL"),
    ],
)
def test_errors_exit_2_with_a_message(sql, table, message, capsys, csv_tables):
    name, path = table.split("=")
    assert main(["query", sql, "--table", f"{name}={csv_tables / path}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and message.lower() in err.lower()
    assert "Traceback" not in err


# --------------------------------------------------------------------------------------
# python -m eddies, and mistakes: one line on stderr, exit 2, never a traceback


def _python_m_eddies(*args: str, cwd) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "eddies", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=300)


def test_python_m_eddies_is_the_eddies_command(csv_tables):
    # From a directory outside the repository, as after `pip install`.
    done = _python_m_eddies("--help", cwd=csv_tables)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: eddies") and "query" in done.stdout
    done = _python_m_eddies("query", "SELEC id FROM users", "-t", "users.csv", cwd=csv_tables)
    assert done.returncode == 2
    assert done.stderr.startswith("error: SQL syntax error at line 1, column")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["query", "SELEC id FROM users", "-t", "{dir}/users.csv"], "error: SQL syntax error"),
        (["query", "SELECT * FROM nope", "-t", "{dir}/users.csv"], "unknown table 'nope'"),
        (["query", "SELECT * FROM t", "-t", "t={dir}/missing.csv"], "no such file"),
        (["query", "SELECT * FROM t", "-t", "t={dir}/out.txt"], "cannot read"),
        (["query", "SELECT 1", "--policy", "bogus"], "invalid choice: 'bogus'"),
        (["query", "SELECT 1", "--batch-size", "0"], "--batch-size: must be at least 1"),
        (["query", "SELECT 1", "--output", "x.json"], "expected a .parquet or .csv"),
        (["demo", "--policy", "x"], "eddies demo: error: argument --policy"),
        (["query"], "required: SQL"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_mistakes_exit_2_with_one_line(args, message, csv_tables, capsys):
    (csv_tables / "out.txt").write_bytes(b"\xff\xfe not a table")
    args = [arg.replace("{dir}", str(csv_tables)) for arg in args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.count("\n") == 1, err  # one line (argparse would print its usage block)


def test_an_internal_error_is_one_line_exit_1(monkeypatch, capsys, csv_tables):
    # Not an EddiesError: a bug. One line by default, the traceback on request.
    def broken(args):
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(cli, "_cmd_query", broken)
    assert main(["query", "SELECT 1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("internal error: RuntimeError: something broke (a bug in eddies")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert main(["--log-level", "debug", "query", "SELECT 1"]) == 1
    assert "Traceback" in capsys.readouterr().err


# --------------------------------------------------------------------------------------
# the routing statistics a newcomer reads


def test_routing_stats_say_what_each_module_does_and_why_some_saw_nothing(capsys):
    cat = Catalog()
    cat.add_table("r", pa.table({"a": [1, 2, 3, 3], "b": [0, 5, 6, 7]}))
    cat.add_table("s", pa.table({"a": [3, 3, 4], "c": ["x", "y", "z"]}))
    run = run_query("SELECT * FROM r JOIN s ON r.a = s.a WHERE r.b > 1", cat, seed=0)
    assert run.table.num_rows == 4
    cli.print_routing_stats(Console(file=sys.stdout, width=200), run.stats)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(re.match(r"sm\d\s+r\.b > 1\s", line) for line in lines), out
    join = next(line for line in lines if re.match(r"sm\d\s+r\.a = s\.a  \(a join\)", line))
    idle = join.split()[0]  # the join's SM: the SteM probes applied it
    assert re.search(rf"^{idle}: 0 tuples because SteM probes apply these joins", out, re.M)
    assert re.search(r"probe:s\s+join with s: probe its SteM", out)
    assert re.search(r"build:r\s+add r rows to its SteM", out)
    for term, meaning in cli.GLOSSARY:
        assert re.search(rf"^{term}\s+{re.escape(meaning)}", out, re.M)
