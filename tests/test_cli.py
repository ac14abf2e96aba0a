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
from eddies.engine.cli import main, query_command, query_runner, run_stats_view
from eddies.engine.cli.demo_command import DEMO_SQL, DEMO_TABLES
from eddies.router.stats_report import MISSING, duration
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
def test_demo_command_prints_rows_and_routing(capsys, monkeypatch):
    runs = _capture_runs(monkeypatch)
    assert main(["demo", "--no-progress", "--limit-print", "3"]) == 0
    out = capsys.readouterr().out
    # The same report as RunStats.format() and `eddies query --stats` print.
    (stats,) = runs
    assert _report_then_glossary(stats) in out
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

    monkeypatch.setattr(query_command, "run_query_command", broken)
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
    run_stats_view.print_run_stats(Console(file=sys.stdout, width=200), run.stats)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(re.match(r"sm\d\s+r\.b > 1\s", line) for line in lines), out
    join = next(line for line in lines if re.match(r"sm\d\s+r\.a = s\.a  \(a join\)", line))
    idle = join.split()[0]  # the join's SM: the SteM probes applied it
    assert re.search(rf"^{idle}: 0 tuples because SteM probes apply these joins", out, re.M)
    assert re.search(r"probe:s\s+join with s: probe its SteM", out)
    assert re.search(r"build:r\s+add r rows to its SteM", out)
    for term, meaning in run_stats_view.GLOSSARY:
        assert re.search(rf"^{term}\s+{re.escape(meaning)}", out, re.M)


# --------------------------------------------------------------------------------------
# one report of a run, wherever it is shown


def _capture_runs(monkeypatch) -> list:
    """Record the RunStats of every query the command line runs."""
    runs: list = []
    run = query_runner.run_with_progress

    def recording(*args, **kwargs):
        table, stats = run(*args, **kwargs)
        runs.append(stats)
        return table, stats

    monkeypatch.setattr(query_runner, "run_with_progress", recording)
    return runs


def _report_then_glossary(stats) -> str:
    """What the command line prints under a result: the report, then the glossary."""
    return "\n" + stats.format(summary=False) + "\n\nglossary\n"


def _table_columns_all_missing(text: str) -> list[str]:
    """Headers of the aligned tables in ``text`` whose every cell is MISSING or '?'."""
    lines = text.splitlines()
    empty = []
    for i, rule in enumerate(lines):
        if i == 0 or not rule or set(rule) != {"-"} or len(rule) != len(lines[i - 1]):
            continue
        header = lines[i - 1]
        rows = []
        for line in lines[i + 1 :]:
            if not line.strip():
                break
            if not line.startswith("at "):  # a heading inside the estimates table
                rows.append(line)
        for m in re.finditer(r"\S+(?: \S+)*", header):
            cells = {row[m.start() : m.end()].strip() for row in rows}
            if rows and cells <= {MISSING, "?"}:
                empty.append(m.group())
    return empty


def test_query_stats_print_the_report_of_run_stats_format(csv_tables, capsys, monkeypatch):
    """`eddies query --stats` prints RunStats.format()'s report (its summary line left
    out: the result's footer gave the rows and the elapsed time, once), then the glossary;
    RunStats.format() is that report under its summary line."""
    runs = _capture_runs(monkeypatch)
    tables = [
        "--table",
        f"users={csv_tables / 'users.csv'}",
        "--table",
        f"orders={csv_tables / 'orders.parquet'}",
    ]
    assert main(["query", SQL, *tables, "--stats", "--no-progress"]) == 0
    out = capsys.readouterr().out
    (stats,) = runs
    assert _report_then_glossary(stats) in out
    summary = f"{stats.rows_out:,} rows out in {duration(stats.elapsed_seconds)}"
    assert stats.format() == summary + "\n\n" + stats.format(summary=False)
    # The elapsed time is said once, in the result's footer.
    assert f"2 rows · {duration(stats.elapsed_seconds)} · policy hybrid" in out
    assert summary not in out and out.count(duration(stats.elapsed_seconds)) == 1
    run_stats_view.print_run_stats(Console(file=sys.stdout, width=200), stats)
    assert capsys.readouterr().out.startswith(_report_then_glossary(stats)[1:])


def test_no_column_of_the_report_is_all_unknown():
    """One routed batch per module: no cost has a standard error (it needs two Works),
    so that ± column is left out, as is any column without a measured value."""
    cat = Catalog()
    cat.add_table("r", pa.table({"a": [1, 2, 3, 3], "b": [0, 5, 6, 7]}))
    cat.add_table("s", pa.table({"a": [3, 3, 4], "c": ["x", "y", "z"]}))
    run = run_query("SELECT * FROM r JOIN s ON r.a = s.a WHERE r.b > 1", cat, seed=0)
    text = run.stats.format()
    assert "?" not in text
    assert _table_columns_all_missing(text) == [], text
    estimates = text.split("observed estimates")[1].splitlines()[1]
    assert re.match(r"destination\s+µs/tuple\s+selectivity\s+±", estimates), estimates
    # The check sees a column of only MISSING when there is one.
    assert _table_columns_all_missing("x  y\n----\n1  –\n2  –\n") == ["y"]


@pytest.mark.parametrize(
    "args",
    [["--help"], ["query", "--help"], ["demo", "--help"], ["serve-demo", "--help"], []],
)
def test_help_imports_neither_the_engine_nor_pyarrow_nor_trio(args):
    """`eddies --help` builds its parser from names alone: no planner, policies, pyarrow,
    trio or numpy (checked in a fresh interpreter; not timed)."""
    code = (
        "import contextlib, io, sys\n"
        "from eddies.engine.cli import main\n"
        "out, err = contextlib.redirect_stdout, contextlib.redirect_stderr\n"
        "with out(io.StringIO()), err(io.StringIO()):\n"
        f"    code = main({args!r})\n"
        "heavy = ('pyarrow', 'trio', 'numpy', 'sqlglot', 'duckdb', 'pandas', 'rich.live',\n"
        "         'eddies.engine.api', 'eddies.engine.plan', 'eddies.engine.options',\n"
        "         'eddies.router.policies', 'eddies.router.stats', 'eddies.sources')\n"
        "print(code, sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(" ", 1) == [str(2 if not args else 0), "[]\n"], done.stdout
