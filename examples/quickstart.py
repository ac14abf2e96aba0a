"""eddies quickstart: two small in-memory tables, a join and a Python UDF predicate.

Run it with ``.venv/bin/python examples/quickstart.py``. It shows

1. :func:`run_query`: the whole result as a pyarrow Table, plus run statistics (how many
   tuples each module saw and where the eddy routed them);
2. :func:`open_query` under trio: the same join streamed batch by batch as the eddy
   produces results, with one table arriving slowly (a rate-limited scan).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import trio

from eddies.engine import Catalog, open_query, run_query
from eddies.engine.runtime.logging_setup import configure_logging

# Weather stations and their hourly temperature readings (seeded, so runs repeat).
rng = np.random.default_rng(7)
STATIONS = pa.table(
    {
        "id": [1, 2, 3, 4, 5],
        "name": ["Harbour", "Airport", "Summit", "Valley", "Ridge"],
        "elevation_m": [5, 30, 1450, 220, 880],
    }
)
N = 5_000
READINGS = pa.table(
    {
        "station_id": rng.integers(1, 6, N),
        "hour": np.arange(N) % 24,
        "temp_c": np.round(rng.normal(12.0, 6.0, N), 1),
    }
)


def is_extreme(temp: pa.Array) -> pa.Array:
    """Vectorized UDF: readings more than 12 °C away from 12 °C (gets a whole batch)."""
    return pc.greater(pc.abs(pc.subtract(temp, 12.0)), 12.0)


def is_night(hour: int | None) -> bool | None:
    """Per-row UDF (vectorized=False): called once per tuple with a Python value."""
    return None if hour is None else hour < 6 or hour >= 22


def make_catalog(*, slow_readings: bool = False) -> Catalog:
    catalog = Catalog()
    catalog.add_table("stations", STATIONS)
    if slow_readings:
        # rate= makes the scan AM deliver that many rows per second, in batches of
        # batch_size rows: a slow remote source.
        catalog.add_table("readings", READINGS, rate=10_000, batch_size=250)
    else:
        catalog.add_table("readings", READINGS)
    catalog.add_function("is_extreme", is_extreme)  # vectorized=True, returns boolean
    catalog.add_function("is_night", is_night, vectorized=False)
    return catalog


SQL = """
SELECT s.name, s.elevation_m, r.hour, r.temp_c
FROM readings r JOIN stations s ON r.station_id = s.id
WHERE s.elevation_m > 100 AND is_extreme(r.temp_c) AND is_night(r.hour)
ORDER BY r.temp_c DESC, s.name, r.hour
"""


def batch_at_a_time() -> None:
    run = run_query(SQL, make_catalog(), policy="lottery", seed=1)
    print(f"{run.table.num_rows} extreme night-time readings above 100 m; the first 10:")
    print(run.table.slice(0, 10).to_pandas().to_string(index=False))
    print()
    print(run.stats.format())


async def streaming() -> None:
    # No ORDER BY, so results can leave the eddy as soon as they are complete.
    sql = SQL.split("ORDER BY")[0]
    start = trio.current_time()
    async with open_query(sql, make_catalog(slow_readings=True), policy="lottery") as results:
        async for batch in results:
            print(f"  {trio.current_time() - start:5.2f} s: +{batch.num_rows} rows")
    stats = results.stats  # complete once the iteration has ended
    print(f"streamed {stats.rows_out} rows in {stats.elapsed_seconds:.2f} s")


if __name__ == "__main__":
    configure_logging("console", "warning")  # eddies' structured logs: stderr, warnings up
    print("== run_query")
    batch_at_a_time()
    print()
    print("== open_query (trio), readings arriving at 10,000 rows/s")
    trio.run(streaming)
