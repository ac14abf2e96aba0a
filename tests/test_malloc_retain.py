"""engine/runtime/malloc_retain.py: importing the API keeps freed NumPy memory mapped (glibc), so
arrays made again after a query reuse pages instead of faulting fresh ones in (issue 11
item 3: page faults were half the time of the Wisconsin 5x1M star); EDDIES_MALLOC_RETAIN=0
leaves glibc's defaults alone.

Each case runs in a fresh interpreter (the settings are per process). Counts only (minor
page faults from getrusage, rows), no clocks.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from eddies.engine.runtime.malloc_retain import DEFAULT_MB, ENV_VAR, retain_megabytes

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")

# Twelve 3 MB arrays alive at once (36 MB: below the retained 256 MB, above glibc's
# adaptive trim threshold), freed, then made again: retained pages fault no second time.
PROBE = """
import json, resource
import numpy as np
import pyarrow as pa
from eddies.engine import Catalog, execute
from eddies.engine.runtime.malloc_retain import retain_freed_memory

def make():
    arrays = [np.ones(3 << 17) for _ in range(12)]  # 3 MB each: below NumPy's hugepages
    return sum(float(a[-1]) for a in arrays)

make()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
make()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
cat = Catalog()
cat.add_table("t", pa.table({"a": [1, 2, 3]}))
rows = execute("SELECT t.a FROM t WHERE t.a > 1", cat).num_rows
print(json.dumps({"retained": retain_freed_memory(), "faults": faults, "rows": rows}))
"""


def run_probe(value: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    if value is not None:
        env[ENV_VAR] = value
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@glibc
def test_freed_arrays_are_reused_without_page_faults():
    on, off = run_probe(None), run_probe("0")
    assert on["rows"] == off["rows"] == 2
    assert on["retained"] == DEFAULT_MB and off["retained"] == 0
    # 36 MB made again: ~9,200 fresh 4 KB pages without retention; a few with it.
    assert off["faults"] > 4_000
    assert on["faults"] < off["faults"] // 10


@pytest.mark.parametrize(
    ("value", "mb"), [(None, DEFAULT_MB), ("0", 0), ("off", 0), (" 64 ", 64), ("No", 0)]
)
def test_the_environment_variable_sets_the_megabytes(value, mb):
    env = {} if value is None else {ENV_VAR: value}
    assert retain_megabytes(env) == mb


@pytest.mark.parametrize("value", ["-1", "lots"])
def test_a_bad_value_is_refused_by_the_parser(value):
    with pytest.raises(ValueError):
        retain_megabytes({ENV_VAR: value})
