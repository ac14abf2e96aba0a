"""engine/runtime/gc_freeze.py: importing the API freezes the import-time heap out of full garbage
collections (issue 10 (a): 40-60 ms pauses in 50 ms queries), EDDIES_GC_FREEZE=0 leaves
the collector alone, and nothing is reported leaked at exit.

Each case runs in a fresh interpreter: the freeze is once per process, and this test
process imported the API long ago. Counts only, no clocks.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from eddies.engine.runtime.gc_freeze import ENV_VAR, freeze_enabled

PROBE = """
import gc, json
import duckdb  # a nanobind extension: it reports instances it still sees at exit as leaks
before = gc.get_freeze_count()
import pyarrow as pa
from eddies.engine import Catalog, execute
cat = Catalog()
cat.add_table("t", pa.table({"a": [1, 2, 3]}))
rows = execute("SELECT t.a FROM t WHERE t.a > 1", cat).num_rows
print(json.dumps({"before": before, "frozen": gc.get_freeze_count(),
                  "tracked": len(gc.get_objects()), "rows": rows}))
"""


def run_probe(value: str | None) -> tuple[dict, str]:
    import json

    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    if value is not None:
        env[ENV_VAR] = value
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_importing_the_api_freezes_the_import_time_heap():
    seen, stderr = run_probe(None)
    assert seen["rows"] == 2
    assert seen["before"] == 0
    # The import-time heap is ~100k objects; what a full collection still scans is what
    # was made after it.
    assert seen["frozen"] > 50_000
    assert seen["tracked"] < seen["frozen"] // 5
    assert "leaked" not in stderr  # unfrozen at exit for the interpreter's last collections


@pytest.mark.parametrize("value", ["0", "false", "OFF", " no "])
def test_the_environment_variable_turns_it_off(value):
    seen, stderr = run_probe(value)
    assert seen["rows"] == 2
    assert seen["frozen"] == 0
    assert "leaked" not in stderr


@pytest.mark.parametrize(
    "environ, wanted",
    [({}, True), ({ENV_VAR: "1"}, True), ({ENV_VAR: "yes"}, True), ({ENV_VAR: "0"}, False)],
)
def test_freeze_enabled_reads_the_variable(environ, wanted):
    assert freeze_enabled(environ) is wanted
