"""Smoke test of examples/streaming.py: a small bounded run on the shared Spark session.

Four files of 500 flights, two a micro-batch, airports looked up over HTTP from the
in-process demo server (5 ms a request); the example's own DuckDB check must pass, in
both trigger modes, and with the eddies inside Spark's executors (``--placement
executors``: the airports web source looked up from the Python workers). Select with
``-m spark``.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[dev]')")
if shutil.which("java") is None:  # pragma: no cover - environment
    pytest.skip("Spark needs Java 17 on PATH", allow_module_level=True)

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "streaming.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("streaming_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.mark.parametrize(
    ("trigger", "placement"),
    [("availableNow", "driver"), ("continuous", "driver"), ("availableNow", "executors")],
)
def test_streaming_example_equals_duckdb(example, spark, tmp_path, capsys, trigger, placement):
    args = example.parse_args(
        [
            f"--placement={placement}",
            "--files=4",
            "--rows-per-file=500",
            "--rate=0",
            "--files-per-trigger=2",
            "--latency=0.005",
            f"--trigger={trigger}",
            "--interval=0.2 seconds",
            "--no-plot",
        ]
    )
    status = example.run(args, tmp_path, session=spark)
    out = capsys.readouterr().out
    assert status == 0, out
    assert "equal to DuckDB: True" in out
    assert "batch 0:" in out and "batch 1:" in out
    assert not spark.streams.active  # the example stopped its streaming query
