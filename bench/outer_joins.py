"""Outer joins and subqueries (JoinSteps) vs. inner joins, eddies vs. DuckDB.

A fact table ``f`` (300k rows, keys 0..150k) and a dimension ``d`` (100k unique keys):
an inner join, ``LEFT``, ``FULL`` with a residual ON term, ``NOT EXISTS`` and an
uncorrelated ``NOT IN``, each ``count(*)``-style. And steps the eddy may reorder: a
``LEFT`` join that fans out (``m``: 4 rows per key of ``f.g``) written before a
selective ``NOT EXISTS`` (``s`` holds 95% of f's keys): in ``FROM`` order every f row
makes 4 joined tuples that the anti-join then probes; anti-join first, 5% of the rows
reach the ``LEFT`` join. eddies runs ``execute()`` with ``--policies`` (default: the
default policy, and ``static``, which keeps the steps in ``FROM`` order); DuckDB an
in-memory connection over the registered Arrow tables. Min of ``--repeat`` runs; the
answers must agree. Run: ``python bench/outer_joins.py``.
"""

from __future__ import annotations

import argparse
import time

import duckdb
import numpy as np
import pyarrow as pa

from eddies.engine import Catalog, execute
from eddies.router.run_choices import DEFAULT_POLICY

QUERIES = {
    "inner": "SELECT count(*), sum(d.w) FROM f JOIN d ON f.k = d.k",
    "left": "SELECT count(*), sum(d.w) FROM f LEFT JOIN d ON f.k = d.k",
    "full+residual": "SELECT count(*), sum(d.w) FROM f FULL JOIN d ON f.k = d.k AND f.v < d.w",
    "not exists": "SELECT count(*) FROM f WHERE NOT EXISTS (SELECT 1 FROM d WHERE d.k = f.k)",
    "not in": "SELECT count(*) FROM f WHERE f.k NOT IN (SELECT k FROM d)",
    "left fan-out + not exists": "SELECT count(*), sum(m.w) FROM f LEFT JOIN m ON f.g = m.g "
    "WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.k = f.k)",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--policies", default=f"{DEFAULT_POLICY},static")
    parser.add_argument("--only", default=None, help="run only the query of this name")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    f = pa.table(
        {
            "k": rng.integers(0, 150_000, 300_000),
            "v": rng.integers(0, 100, 300_000),
            "g": rng.integers(0, 50_000, 300_000),
        }
    )
    d = pa.table({"k": np.arange(100_000), "w": rng.integers(0, 100, 100_000)})
    m = pa.table({"g": np.repeat(np.arange(50_000), 4), "w": rng.integers(0, 100, 200_000)})
    s = pa.table({"k": np.arange(142_500)})
    cat = Catalog()
    con = duckdb.connect()
    for name, table in {"f": f, "d": d, "m": m, "s": s}.items():
        cat.add_table(name, table)
        con.register(name, table)
    policies = args.policies.split(",")
    for name, sql in QUERIES.items():
        if args.only is not None and name != args.only:
            continue
        ours: dict[str, list[float]] = {p: [] for p in policies}
        theirs = []
        for _ in range(args.repeat):
            for policy in policies:  # in turns, so that load drifts hit each alike
                start = time.perf_counter()
                got = execute(sql, cat, policy=policy)
                ours[policy].append(time.perf_counter() - start)
                assert list(got.to_pylist()[0].values()) == list(expected_of(con, sql)[0]), (
                    name,
                    policy,
                    got,
                )
            start = time.perf_counter()
            con.execute(sql).fetchall()
            theirs.append(time.perf_counter() - start)
        times = "  ".join(f"{p} {min(t) * 1e3:6.0f} ms" for p, t in ours.items())
        print(f"{name:26s} eddies {times}   duckdb {min(theirs) * 1e3:5.0f} ms")


def expected_of(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple]:
    """DuckDB's answer (outside the timed part)."""
    return con.execute(sql).fetchall()


if __name__ == "__main__":
    main()
