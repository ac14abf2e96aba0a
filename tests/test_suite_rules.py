"""The suite's own rules, checked on its source: tests share the DuckDB oracle through
``tests/oracle.py`` (never ``from conftest import``), and no test reads the wall clock, so
a loaded machine cannot fail one (trio's MockClock, or counts of what happened, instead)."""

from __future__ import annotations

import ast
import pathlib

import pytest

TESTS = pathlib.Path(__file__).parent
MODULES = sorted(TESTS.glob("*.py"))
WALL_CLOCKS = {("time", "time"), ("time", "monotonic"), ("time", "perf_counter")}
VIRTUAL_CLOCKS = {"autojump_clock", "mock_clock"}


def _calls(node: ast.AST) -> list[tuple[str, str, int]]:
    """``(module, function, line)`` of each ``module.function(...)`` call under ``node``."""
    return [
        (call.func.value.id, call.func.attr, call.lineno)
        for call in ast.walk(node)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
    ]


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_no_module_imports_from_conftest(path):
    tree = ast.parse(path.read_text(), str(path))
    bad = [
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.ImportFrom) and node.module == "conftest")
        or (isinstance(node, ast.Import) and any(a.name == "conftest" for a in node.names))
    ]
    assert not bad, f"{path.name} line(s) {bad}: import helpers from oracle, not conftest"


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_no_test_reads_the_wall_clock(path):
    tree = ast.parse(path.read_text(), str(path))
    wall = [line for mod, fn, line in _calls(tree) if (mod, fn) in WALL_CLOCKS]
    assert not wall, f"{path.name} line(s) {wall}: tests must not measure wall time"
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if not node.name.startswith("test"):
            continue
        params = {a.arg for a in node.args.args + node.args.kwonlyargs}
        clock = [line for mod, fn, line in _calls(node) if (mod, fn) == ("trio", "current_time")]
        assert not clock or params & VIRTUAL_CLOCKS, (
            f"{path.name}::{node.name} line(s) {clock}: trio.current_time() without "
            "autojump_clock/mock_clock is wall time"
        )
