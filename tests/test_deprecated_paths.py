"""The engine's old module paths still import for one release (issue 25, item 8).

Each old path (``eddies.engine.sinks``, ``eddies.engine.partitioned``, ...) gives the module
at its new place — the same object, so a monkeypatch through either name reaches both —
with a DeprecationWarning that names the new path. Checked in fresh interpreters, where
no old name has been imported yet.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from eddies.engine.deprecated_paths import MOVED

PROBE = """
import importlib, sys, warnings
old, new = sys.argv[1], sys.argv[2]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    module = importlib.import_module(old)
assert module is importlib.import_module(new), (module, new)
assert module.__name__ == new and module.__spec__.name == new
assert sys.modules[old] is module
messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
assert any(old in m and new in m for m in messages), messages
print("ok")
"""


def test_every_new_path_exists() -> None:
    for new in MOVED.values():
        importlib.import_module(new)


@pytest.mark.parametrize(
    "old", ["eddies.engine.sinks", "eddies.engine.partitioned", "eddies.engine.errors"]
)
def test_an_old_path_gives_the_new_module_with_a_warning(old: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import eddies.engine\n" + PROBE, old, MOVED[old]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_from_import_of_an_old_path_works() -> None:
    code = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n    from eddies.engine.partitioned import run_partitioned\n"
        "except DeprecationWarning as w:\n    print('warned:', w)\n"
        "import warnings; warnings.simplefilter('ignore')\n"
        "from eddies.engine.partitioned import run_partitioned\n"
        "from eddies.engine.spark.partitioned import run_partitioned as new\n"
        "assert run_partitioned is new\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "moved to eddies.engine.spark.partitioned" in done.stdout
