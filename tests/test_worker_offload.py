"""Vectorized work in worker threads (``Tuning.offload_rows``, modules/base.py, issue 11 item 3).

Off by default (it measured slower on 2 cores; see bench/README.md), but a supported knob:
with it every SteM build and probe and every UDF-free SM runs through
``trio.to_thread`` and is visited through its queue, so these tests set it to 1 (every
batch offloaded) and compare with DuckDB as bags under every policy and batch sizes 1, 7
and the default: hypothesis scenarios of test_differential, and a 5-way star.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import check_all
from test_differential import run_everywhere, scenarios

import eddies.modules.base as base
from eddies.engine import POLICIES
from eddies.settings import tuned
from eddies.sources.wisconsin import wisconsin_table


@pytest.fixture
def offload_everything():
    with tuned(offload_rows=1):
        assert not base.vectorized_inline()
        yield


@pytest.mark.parametrize("n_refs", [2, 3])
# The fixture only sets a knob, the same for every input.
@settings(
    max_examples=8,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_offloaded_scenarios_equal_duckdb(offload_everything, n_refs, data):
    run_everywhere(data.draw(scenarios(n_refs), label="scenario"))


def test_offloaded_star_equals_duckdb(offload_everything):
    tables: dict[str, pa.Table] = {
        t: wisconsin_table(120, seed=s).select(["unique1", "unique2", "onePercent", "twenty"])
        for s, t in enumerate("abcde", start=1)
    }
    sql = """
        SELECT count(*), sum(a.unique1) FROM a, b, c, d, e
        WHERE a.unique1 = b.unique1 AND a.unique2 = c.unique1 AND a.unique1 = d.unique2
          AND a.unique2 = e.unique2 AND b.onePercent < 10 AND d.twenty < 10
    """
    check_all(sql, tables, policies=POLICIES, batch_sizes=(None, 1, 7), debug_per_tuple=False)
