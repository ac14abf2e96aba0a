"""Federated queries end to end: local data joined with REST mirrors of the demo server.

Each demo server runs in its own thread with its own trio loop (``add_web_table`` fetches
schemas synchronously, and the query runs ``trio.run`` in the test's thread), so the HTTP
traffic is real. Checked against DuckDB over the same tables read locally:

* a mirror that fails midway (every request 503 after its fifth lookup) leaves the
  result exact, and the failure is reported in ``RunStats.failures``;
* when every mirror has failed the query raises DataSourceError naming the table, without
  waiting for any timeout, and the process goes on (a following query works).
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from oracle import assert_same_bag
from servers import demo_server

from eddies.engine import Catalog, DataSourceError, run_query
from eddies.sources.nycflights import load_table

SQL = (
    "SELECT f.flight, f.tailnum, p.seats, p.manufacturer FROM flights f "
    "JOIN planes p ON f.tailnum = p.tailnum WHERE f.month = 1 AND f.carrier = 'B6'"
)


@pytest.fixture(scope="module")
def data() -> dict[str, pa.Table]:
    flights = load_table("flights")
    flights = flights.filter(pc.equal(flights["month"], 1))
    return {"flights": flights, "planes": load_table("planes")}


def _catalog(data, urls: dict[str, str], **options) -> Catalog:
    cat = Catalog()
    cat.add_table("flights", data["flights"])
    for name, url in urls.items():
        cat.add_web_table(
            "planes", url, scan=False, lookup_on=["tailnum"], access_name=name, **options
        )
    return cat


@pytest.mark.slow
def test_a_mirror_failing_midway_leaves_the_result_exact(data):
    planes = {"planes": data["planes"]}
    with (
        demo_server(planes, latency=["0.002"], fail_after=3600, dies_after_lookups=5) as dying,
        demo_server(planes, latency=["0.02"]) as steady,
    ):
        cat = _catalog(
            data, {"dying": dying, "steady": steady}, timeout=2.0, retries=1, backoff=0.01
        )
        run = run_query(SQL, cat, batch_size=256, debug=True)
    assert_same_bag(run.table, SQL, data)
    assert any("'dying'" in error for error in run.stats.failures)
    looked_up = {
        name: run.stats.modules[f"lookup:{name}@p"].tuples_in for name in ("dying", "steady")
    }
    assert looked_up["steady"] > 0
    # The AMs' own counters: the dying mirror retried before it was given up, and every
    # tailnum the query needs was asked of some mirror (or skipped: delivered already).
    lookups = run.stats.lookups
    assert lookups["dying"].retries >= 1 and lookups["steady"].lookups > 0
    needed = len(
        set(
            data["flights"]
            .filter(pc.equal(data["flights"]["carrier"], "B6"))["tailnum"]
            .drop_null()
            .to_pylist()
        )
    )
    asked = sum(s.lookups + s.skipped for s in lookups.values())
    assert asked >= needed
    assert re.search(r"^index AM\s+lookups\s+retries\s+skipped", run.stats.format(), re.M)


def test_all_mirrors_failing_raises_naming_the_table_without_waiting_for_timeouts(data):
    # A 503 and a dropped connection are failures at once: the message names what each
    # mirror answered, which is not a timeout (a 60 s one that no passing run reaches).
    planes = {"planes": data["planes"]}
    with (
        demo_server(planes, failure_rate=["1.0"]) as first,
        demo_server(planes, drop_rate=["1.0"]) as second,
    ):
        cat = _catalog(data, {"first": first, "second": second}, timeout=60.0, retries=1)
        with pytest.raises(DataSourceError) as failure:
            run_query(SQL, cat, batch_size=256)
    message = str(failure.value)
    assert "table 'planes'" in message and "'first'" in message and "'second'" in message
    assert re.search(r"'first'.*failed after 2 attempts.*HTTP 503: injected failure", message)
    assert re.search(r"'second'.*failed after 2 attempts.*connection dropped", message)
    assert "timed out" not in message
    # The process is fine: the next query runs.
    cat = Catalog()
    cat.add_table("flights", data["flights"])
    assert run_query("SELECT count(*) AS n FROM flights", cat).table["n"][0].as_py() > 0
