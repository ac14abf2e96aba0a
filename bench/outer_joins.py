"""Outer joins and subqueries (JoinSteps) vs. inner joins, eddies vs. DuckDB.

A fact table ``f`` (300k rows, keys 0..150k) and a dimension ``d`` (100k unique keys):
an inner join, ``LEFT``, ``FULL`` with a residual ON term, ``NOT EXISTS`` and an
uncorrelated ``NOT IN``, each ``count(*)``-style. eddies runs ``execute()`` with its
defaults; DuckDB an in-memory connection over the registered Arrow tables. Min of
``--repeat`` runs; the answers must agree. Run: ``python bench/outer_joins.py``.
"""

from __future__ import annotations

import argparse
import time

import duckdb
import numpy as np
import pyarrow as pa

from eddies.engine import Catalog, execute

QUERIES = {
    "inner": "SELECT count(*), sum(d.w) FROM f JOIN d ON f.k = d.k",
    "left": "SELECT count(*), sum(d.w) FROM f LEFT JOIN d ON f.k = d.k",
    "full+residual": "SELECT count(*), sum(d.w) FROM f FULL JOIN d ON f.k = d.k AND f.v < d.w",
    "not exists": "SELECT count(*) FROM f WHERE NOT EXISTS (SELECT 1 FROM d WHERE d.k = f.k)",
    "not in": "SELECT count(*) FROM f WHERE f.k NOT IN (SELECT k FROM d)",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    f = pa.table({"k": rng.integers(0, 150_000, 300_000), "v": rng.integers(0, 100, 300_000)})
    d = pa.table({"k": np.arange(100_000), "w": rng.integers(0, 100, 100_000)})
    cat = Catalog()
    cat.add_table("f", f)
    cat.add_table("d", d)
    con = duckdb.connect()
    con.register("f", f)
    con.register("d", d)
    for name, sql in QUERIES.items():
        ours, theirs = [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            got = execute(sql, cat)
            ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            expected = con.execute(sql).fetchall()
            theirs.append(time.perf_counter() - start)
        assert list(got.to_pylist()[0].values()) == list(expected[0]), (name, got, expected)
        print(f"{name:14s} eddies {min(ours) * 1e3:7.0f} ms   duckdb {min(theirs) * 1e3:6.0f} ms")


if __name__ == "__main__":
    main()
