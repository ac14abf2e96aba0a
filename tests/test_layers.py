"""The layers import downward only: engine -> modules -> router -> sources (docs/concepts.md).

``eddies.errors`` is a leaf any layer may import. Every module must also import on
its own, as the first eddies import of a fresh interpreter: a module that reaches up a
layer, or relies on another module having been imported first, fails there.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import eddies.engine

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["engine", "modules", "router", "sources"]  # each may import those after it
LEAVES = {"eddies.errors", "eddies.settings"}


def _modules() -> list[tuple[str, Path]]:
    """Every module of the layers, subpackages included, as (dotted name, path)."""
    found = []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = [layer, *path.relative_to(ROOT / layer).with_suffix("").parts]
            if parts[-1] in {"__init__", "__main__"}:
                parts.pop()
            found.append(("eddies." + ".".join(parts), path))
    return found


def _imported(path: Path) -> set[str]:
    """Every eddies module ``path`` imports, at any depth of the file (lazy imports too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("eddies."))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("eddies."):
            names.add(node.module)
    return names


@pytest.mark.parametrize(("module", "path"), _modules(), ids=lambda v: str(v))
def test_imports_go_downward(module: str, path: Path) -> None:
    layer = LAYERS.index(module.split(".")[1])
    allowed = set(LAYERS[layer:])
    upward = sorted(
        name for name in _imported(path) if name not in LEAVES and name.split(".")[1] not in allowed
    )
    assert not upward, f"{module} reaches up a layer: imports {upward}"


@pytest.mark.slow
def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    def first_import(module: str) -> tuple[str, str]:
        done = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = done.stderr.strip().splitlines()
        return module, "" if done.returncode == 0 else (lines[-1] if lines else "failed")

    with ThreadPoolExecutor(max_workers=4) as pool:
        failures = [f"{m}: {e}" for m, e in pool.map(first_import, [m for m, _ in _modules()]) if e]
    assert not failures, "modules that fail as the first eddies import:\n" + "\n".join(failures)


def test_errors_module_is_a_leaf() -> None:
    """The error types import nothing of eddies, so any layer can raise them cheaply."""
    path = ROOT / "eddies_main" / "errors.py"
    assert not _imported(path), f"eddies.errors imports {sorted(_imported(path))}"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, eddies.errors; "
            "print(sorted(m for m in sys.modules if m.startswith('eddies.')))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == ["['eddies.errors']"]


def test_engine_exports_load_lazily() -> None:
    """``eddies.engine`` names every export once, and each resolves to a real object."""
    assert sorted(eddies.engine.__all__) == sorted(eddies.engine._EXPORTS)
    for name in eddies.engine.__all__:
        assert getattr(eddies.engine, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = eddies.engine.nope
