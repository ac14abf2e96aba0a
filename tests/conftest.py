"""Fixtures and settings shared by the whole suite: hypothesis profiles and the Spark session.

The DuckDB oracle (run SQL in eddies and in DuckDB, compare as bags of rows) lives in
``tests/oracle.py``: ``from oracle import assert_same_bag, ...``. This file holds fixtures
only, which pytest injects by name.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

# ---------------------------------------------------------------------------------------
# hypothesis profiles: derandomized in CI so that failures reproduce.
settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "ci",
    parent=settings.get_profile("default"),
    derandomize=True,
    database=None,
)
settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "default")


# ---------------------------------------------------------------------------------------
# Spark: one local[2] session for every test that asks for it (it takes ~6 s to start).
@pytest.fixture(scope="session")
def spark():
    """A Spark ``local[2]`` session shared by the whole run; stopped at the end."""
    from pyspark.sql import SparkSession

    # Python workers (mapInArrow, applyInArrow) must run this interpreter, which has eddies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("eddies-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# ---------------------------------------------------------------------------------------
# SteM direct-address builds in the worker thread, counted as they finish.
@pytest.fixture
def direct_build_finishes(monkeypatch):
    """The list of runs each background direct build finished with (None where the SteM
    fell back), appended as they finish; the environment's opt-out is cleared."""
    from eddies.modules.stem.direct_build import DirectBuild

    monkeypatch.delenv("EDDIES_BACKGROUND_INDEX", raising=False)
    finished: list = []
    real = DirectBuild.finish

    def finish(self):
        run = real(self)
        finished.append(run)
        return run

    monkeypatch.setattr(DirectBuild, "finish", finish)
    return finished
