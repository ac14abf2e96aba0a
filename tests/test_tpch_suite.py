"""The 22 TPC-H queries at scale factor 0.01, each compared with DuckDB (issue 26, item 6).

The data comes from ``tpchgen-cli`` (the ``dev`` extra; a Rust generator in a wheel, so it
runs offline), written as Parquet once per session and loaded with pyarrow into one eddies
Catalog and into the DuckDB oracle: both engines read the same Arrow tables (decimal128
money columns, date32 dates, string_view text, as the generator writes them). Each query
(``tests/tpch_queries.py``: the specification's text with its validation parameters) runs
under the default policy and ``lottery`` and must equal DuckDB's answer as a bag of rows,
with its ORDER BY keys in DuckDB's order.

Status at SF 0.01 when this file was written (issue 26): all 22 queries exact under
``hybrid`` (the default) and ``lottery``, whole-table and 97-row batches (and, checked by
hand, under every other policy); none refused, none wrong, none slow (each runs in well
under a second), so none is marked ``slow`` and none is left out. With STAIRs
(``join_state="stairs"``, stairs-2004) the 11 queries of ``STAIRS_QUERIES`` are exact too;
the other 11 are refused by design with an UnsupportedQueryError naming the construct:
Q2, Q4, Q13, Q16, Q17, Q18, Q20, Q21, Q22 have join steps (outer join, [NOT] IN / [NOT]
EXISTS subqueries) that need SteMs, and Q7, Q8 join ``nation`` twice (a self-join).
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from oracle import assert_same_bag, assert_same_ordered, check_all, duckdb_table, make_catalog
from tpch_queries import ORDER_KEYS, QUERIES

from eddies.engine import Catalog, execute

SCALE_FACTOR = 0.01
TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
POLICIES = ("hybrid", "lottery")  # hybrid is DEFAULT_POLICY (eddies.router.run_choices)
BATCH_SIZES = (None, 97)  # whole scan batches, and small ones that split every table
# The queries STAIRs run: inner equi-joins of distinct tables only (see the module docstring).
STAIRS_QUERIES = (1, 3, 5, 6, 9, 10, 11, 12, 14, 15, 19)


def _generator() -> str:
    """The ``tpchgen-cli`` next to this interpreter (a venv's bin/), else the one on PATH."""
    beside = pathlib.Path(sys.executable).with_name("tpchgen-cli")
    found = str(beside) if beside.exists() else shutil.which("tpchgen-cli")
    if found is None:
        pytest.skip("tpchgen-cli is not installed (pip install -e '.[dev]')")
    return found


@pytest.fixture(scope="module")
def tpch(tmp_path_factory) -> dict[str, pa.Table]:
    """The 8 TPC-H tables at ``SCALE_FACTOR``, generated once for this module."""
    where = tmp_path_factory.mktemp("tpch")
    cmd = [_generator(), "parquet", "-s", f"{SCALE_FACTOR:g}", f"--output-dir={where}", "-q"]
    subprocess.run(cmd, check=True, capture_output=True)
    return {name: pq.read_table(where / f"{name}.parquet") for name in TABLES}


@pytest.fixture(scope="module")
def catalog(tpch) -> Catalog:
    return make_catalog(tpch)


def test_the_generator_wrote_every_table_at_the_scale_factor(tpch):
    # Row counts the specification (clause 4.2.5) fixes at SF 0.01; lineitem has 1..7 lines
    # per order, so only its bounds are fixed.
    fixed = {"region": 5, "nation": 25, "supplier": 100, "customer": 1500, "part": 2000}
    fixed |= {"partsupp": 8000, "orders": 15000}
    assert {name: tpch[name].num_rows for name in fixed} == fixed
    assert 15000 <= tpch["lineitem"].num_rows <= 7 * 15000


def test_every_query_has_order_keys():
    assert sorted(QUERIES) == list(range(1, 23)) == sorted(ORDER_KEYS)


@pytest.mark.parametrize("number", sorted(QUERIES), ids=[f"q{n}" for n in sorted(QUERIES)])
def test_tpch_query_matches_duckdb(number, tpch, catalog):
    keys = ORDER_KEYS[number]
    expected = check_all(
        QUERIES[number],
        tpch,
        policies=POLICIES,
        batch_sizes=BATCH_SIZES,
        ordered_keys=keys or None,
        catalog=catalog,
    )
    # Every query has an answer at SF 0.01 with these parameters (an empty result would make
    # the comparison vacuous).
    assert expected.num_rows > 0


@pytest.mark.parametrize("number", STAIRS_QUERIES, ids=[f"q{n}" for n in STAIRS_QUERIES])
def test_tpch_query_under_stairs_matches_duckdb(number, tpch, catalog):
    sql, keys = QUERIES[number], ORDER_KEYS[number]
    expected = duckdb_table(sql, tpch)
    ours = execute(sql, catalog, join_state="stairs", seed=0)
    if keys:
        assert_same_ordered(ours, sql, tpch, keys, expected=expected, context="stairs")
    else:
        assert_same_bag(ours, sql, tpch, expected=expected, context="stairs")
