"""Composite-key joins (issue 26, item 4): TPC-DS Q93 and Q40 shapes, eddies vs. DuckDB.

Synthetic tables shaped like TPC-DS: ``store_sales`` (``--rows``, default 1 M; SF1 has
2.9 M) whose ``ss_ticket_number`` repeats over 10 items, ``store_returns`` holding 10% of
its (item, ticket) keys, ``reason`` (35 rows); ``catalog_sales`` / ``catalog_returns``
alike on (order number, item), with ``warehouse``, ``item`` (18k) and ``date_dim``
(1,800 days). Queries: the reduced Q93 (``store_sales LEFT JOIN store_returns`` on two
columns, grouped), its inner-join variant, Q93 itself (the LEFT join, then a comma join
to ``reason`` through the null-supplied side) and Q40 (the LEFT join on two columns,
then three comma joins whose equalities are in WHERE). eddies runs ``execute()`` under
the default policy, DuckDB an in-memory connection with 2 threads over the registered
Arrow tables; best of ``--repeat`` runs after a warm-up; the answers must agree (as
bags, floats to 6 digits). Run: ``python bench/composite_keys.py [--rows N] [--only Q]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections import Counter

import duckdb
import numpy as np
import pyarrow as pa
from common import best_of, engine_or_exit, fmt_ms, fmt_ratio, print_table, verdict

from eddies.engine import Catalog, execute

_LEFT = (
    "store_sales LEFT JOIN store_returns "
    "ON sr_item_sk = ss_item_sk AND sr_ticket_number = ss_ticket_number"
)
QUERIES = {
    "reduced Q93 (LEFT, 2 cols)": "SELECT ss_customer_sk, sum(CASE WHEN sr_return_quantity "
    "IS NOT NULL THEN (ss_quantity - sr_return_quantity) * ss_sales_price "
    f"ELSE ss_quantity * ss_sales_price END) FROM {_LEFT} GROUP BY ss_customer_sk",
    "inner, 2 cols": "SELECT ss_customer_sk, sum((ss_quantity - sr_return_quantity) * "
    "ss_sales_price) FROM store_sales JOIN store_returns ON sr_item_sk = ss_item_sk "
    "AND sr_ticket_number = ss_ticket_number GROUP BY ss_customer_sk",
    "Q93": "SELECT ss_customer_sk, sum(act_sales) sumsales FROM (SELECT ss_item_sk, "
    "ss_ticket_number, ss_customer_sk, CASE WHEN sr_return_quantity IS NOT NULL THEN "
    "(ss_quantity - sr_return_quantity) * ss_sales_price ELSE (ss_quantity * ss_sales_price) "
    "END act_sales FROM store_sales LEFT OUTER JOIN store_returns ON (sr_item_sk = "
    "ss_item_sk AND sr_ticket_number = ss_ticket_number), reason WHERE sr_reason_sk = "
    "r_reason_sk AND r_reason_desc = 'reason 28') t GROUP BY ss_customer_sk "
    "ORDER BY sumsales, ss_customer_sk LIMIT 100",
    "Q40": "SELECT w_state, i_item_id, sum(CASE WHEN (CAST(d_date AS DATE) < "
    "CAST('2000-03-11' AS DATE)) THEN cs_sales_price - coalesce(cr_refunded_cash, 0) "
    "ELSE 0 END) AS sales_before, sum(CASE WHEN (CAST(d_date AS DATE) >= "
    "CAST('2000-03-11' AS DATE)) THEN cs_sales_price - coalesce(cr_refunded_cash, 0) "
    "ELSE 0 END) AS sales_after FROM catalog_sales LEFT OUTER JOIN catalog_returns ON "
    "(cs_order_number = cr_order_number AND cs_item_sk = cr_item_sk), warehouse, item, "
    "date_dim WHERE i_current_price BETWEEN 0.99 AND 1.49 AND i_item_sk = cs_item_sk AND "
    "cs_warehouse_sk = w_warehouse_sk AND cs_sold_date_sk = d_date_sk AND d_date BETWEEN "
    "(CAST('2000-03-11' AS DATE) - INTERVAL 30 DAY) AND (CAST('2000-03-11' AS DATE) + "
    "INTERVAL 30 DAY) GROUP BY w_state, i_item_id ORDER BY w_state, i_item_id LIMIT 100",
}
N_ITEMS = 18_000
FIRST_DAY = 2_450_000
N_DAYS = 1_800


def _sales_keys(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(group number, item): each group (ticket, order) holds 10 distinct items."""
    group = np.repeat(np.arange(1, n // 10 + 2), 10)[:n]
    item = (group * 7919 + np.arange(n) % 10 * 131) % N_ITEMS + 1
    return group, item


def tables(n: int, seed: int = 0) -> dict[str, pa.Table]:
    """The synthetic TPC-DS tables (see the module docstring), ``n`` sales rows each."""
    rng = np.random.default_rng(seed)
    ticket, item = _sales_keys(n)
    returned = rng.choice(n, n // 10, replace=False)
    out = {
        "store_sales": pa.table(
            {
                "ss_item_sk": item,
                "ss_ticket_number": ticket,
                "ss_customer_sk": rng.integers(1, 10_000, n),
                "ss_quantity": rng.integers(1, 100, n),
                "ss_sales_price": rng.integers(1, 10_000, n) / 100.0,
            }
        ),
        "store_returns": pa.table(
            {
                "sr_item_sk": item[returned],
                "sr_ticket_number": ticket[returned],
                "sr_return_quantity": rng.integers(1, 10, len(returned)),
                "sr_reason_sk": rng.integers(1, 36, len(returned)),
            }
        ),
        "reason": pa.table(
            {
                "r_reason_sk": np.arange(1, 36),
                "r_reason_desc": [f"reason {i}" for i in range(1, 36)],
            }
        ),
    }
    order, item = _sales_keys(n)
    out["catalog_sales"] = pa.table(
        {
            "cs_order_number": order,
            "cs_item_sk": item,
            "cs_warehouse_sk": rng.integers(1, 6, n),
            "cs_sold_date_sk": rng.integers(FIRST_DAY, FIRST_DAY + N_DAYS, n),
            "cs_sales_price": rng.integers(1, 10_000, n) / 100.0,
        }
    )
    out["catalog_returns"] = pa.table(
        {
            "cr_order_number": order[returned],
            "cr_item_sk": item[returned],
            "cr_refunded_cash": rng.integers(0, 5_000, len(returned)) / 100.0,
        }
    )
    out["warehouse"] = pa.table(
        {"w_warehouse_sk": np.arange(1, 6), "w_state": ["TN", "TN", "GA", "SD", "OH"]}
    )
    out["item"] = pa.table(
        {
            "i_item_sk": np.arange(1, N_ITEMS + 1),
            "i_item_id": [f"AAAA{i:08d}" for i in range(1, N_ITEMS + 1)],
            "i_current_price": rng.integers(9, 10_000, N_ITEMS) / 100.0,
        }
    )
    first = dt.date(1996, 1, 1)
    out["date_dim"] = pa.table(
        {
            "d_date_sk": np.arange(FIRST_DAY, FIRST_DAY + N_DAYS),
            "d_date": pa.array([first + dt.timedelta(days=i) for i in range(N_DAYS)]),
        }
    )
    return out


def _bag(rows) -> Counter:
    return Counter(tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default=None, help="run only the queries whose name has this")
    args = parser.parse_args()
    engine_or_exit()
    data = tables(args.rows)
    cat = Catalog()
    con = duckdb.connect(config={"threads": 2})
    for name, table in data.items():
        cat.add_table(name, table)
        con.register(name, table)
    rows, ok = [], True
    for name, sql in QUERIES.items():
        if args.only is not None and args.only not in name:
            continue
        ours = best_of(lambda sql=sql: execute(sql, cat), repeat=args.repeat)
        theirs = best_of(lambda sql=sql: con.execute(sql).fetchall(), repeat=args.repeat)
        same = _bag(tuple(r.values()) for r in ours.value.to_pylist()) == _bag(theirs.value)
        ok &= verdict(f"{name}: same answer as DuckDB", same)
        rows.append(
            [name, fmt_ms(ours.best), fmt_ms(theirs.best), fmt_ratio(ours.best / theirs.best)]
        )
    print_table(
        f"composite-key joins, {args.rows:,} sales rows (best of {args.repeat})",
        ["query", "eddies ms", "DuckDB ms", "ratio"],
        rows,
    )
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
