"""Faults found by held-out probes (issue 9, "Must have" 4): each test failed before its fix.

No wall-clock assertions: timeouts run under trio's MockClock (autojump), everything else
counts what happened. Servers listen on 127.0.0.1 only.
"""

from __future__ import annotations

import pyarrow as pa

from eddies.engine import Catalog, run_query

# ---------------------------------------------------------------------------------------
# LIMIT over a table with two scan AMs: the eddy must not outlive its modules' queues


def test_limit_over_two_scan_ams_never_breaks_a_module_queue():
    # LIMIT cancels the query while the eddy may hold a message taken just before: it
    # routed it on synchronously into a module whose queue the cancel had closed, and the
    # query raised trio.BrokenResourceError (13 of these 200 seeds).
    te = pa.table({"id": list(range(300)), "v": [i % 7 for i in range(300)]})
    cat = Catalog()
    cat.add_table("te", te)
    cat.add_table("te", te)
    for seed in range(200):
        ids = run_query("SELECT id FROM te LIMIT 10", cat, batch_size=7, seed=seed).table
        values = ids.column("id").to_pylist()
        assert len(values) == 10 and len(set(values)) == 10
        assert set(values) <= set(range(300))
