"""The rooms of the house (issue 25): sizes and boundaries a newcomer can find their way in.

Over every module of the four layers, subpackages included: no function over
:data:`MAX_FUNCTION_LINES` lines (docstring included: split it by what each part decides),
no file over :data:`MAX_FILE_LINES`, and no ``from eddies.x import _private`` from another
module (what two modules share lives in a module of its own, under a public name).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["engine", "modules", "router", "sources"]
MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 900


def _files() -> list[Path]:
    return [p for layer in LAYERS for p in sorted((ROOT / layer).rglob("*.py"))]


def _trees() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for p in _files()]


def test_the_walk_sees_subpackages() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _files()}
    assert "engine/expr/__init__.py" in names and "engine/api.py" in names


def test_no_function_over_the_limit() -> None:
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)"
        for path, tree in _trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES
    ]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_no_file_over_the_limit() -> None:
    big = [
        f"{p.relative_to(ROOT)} ({n} lines)"
        for p in _files()
        if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES
    ]
    assert not big, f"files over {MAX_FILE_LINES} lines:\n" + "\n".join(big)


def test_no_private_name_crosses_a_module_boundary() -> None:
    crossing = [
        f"{path.relative_to(ROOT)}:{node.lineno} imports {node.module}.{alias.name}"
        for path, tree in _trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("eddies.")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert not crossing, "private names imported from another module:\n" + "\n".join(crossing)
