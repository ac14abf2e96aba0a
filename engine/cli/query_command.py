"""``eddies query``: run SQL over Parquet/CSV files (or explain it) and print the result.

Tables come from ``--table NAME=PATH`` (a file, a directory of files with hive partitions,
or a quoted glob); the result is printed (:mod:`eddies.engine.cli.result_table`) or
written to ``--output FILE.parquet|FILE.csv``; ``--stats`` adds the run's report
(:mod:`eddies.engine.cli.run_stats_view`).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import pyarrow as pa

from eddies.engine import Catalog, explain
from eddies.engine.cli.exit_codes import UsageError
from eddies.engine.cli.query_runner import run_from_args
from eddies.engine.cli.result_table import print_result, result_footer, stdout_console
from eddies.engine.cli.run_stats_view import print_run_stats
from eddies.sources.dataset_source import is_glob

__all__ = ["OUTPUT_FORMATS", "parse_table_spec", "run_query_command"]

#: Result file suffix -> format written by --output.
OUTPUT_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


def parse_table_spec(spec: str) -> tuple[str, str]:
    """``NAME=PATH`` or ``PATH`` (the table named after the file or directory); PATH is a
    file, a directory of Parquet/CSV files (hive partitions too) or a quoted glob.
    Returns ``(name, path)``; UsageError for a bad name or a missing path."""
    if "=" in spec and not pathlib.Path(spec).exists():
        name, _, path = spec.partition("=")
        name = name.strip()
    else:
        path = spec
        name = pathlib.Path(spec.rstrip("/")).name.split(".", 1)[0]
    if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
        raise UsageError(f"--table {spec!r}: expected NAME=PATH with NAME a plain identifier")
    if not is_glob(path) and not pathlib.Path(path).expanduser().exists():
        raise UsageError(f"--table {name}: no such file or directory: {path}")
    return name, str(pathlib.Path(path).expanduser()) if not is_glob(path) else path


def _output_format(path: str) -> str:
    suffix = pathlib.Path(path).suffix.lower()
    if suffix not in OUTPUT_FORMATS:
        raise UsageError(f"--output {path}: expected a .parquet or .csv file name")
    return OUTPUT_FORMATS[suffix]


def _write_output(table: pa.Table, path: str, fmt: str) -> None:
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, path)
        else:
            import pyarrow.csv as pacsv

            pacsv.write_csv(table, path)
    except (OSError, pa.ArrowException) as exc:
        raise UsageError(f"--output {path}: {exc}") from exc


def _catalog(specs: list[str]) -> Catalog:
    """The tables of the ``--table`` options; UsageError for a repeated or unreadable one."""
    catalog = Catalog()
    seen: set[str] = set()
    for spec in specs:
        name, path = parse_table_spec(spec)
        if name in seen:
            raise UsageError(f"--table {name} given twice")
        seen.add(name)
        try:
            catalog.add_table(name, path)
        except (OSError, ValueError, pa.ArrowException) as exc:  # e.g. not UTF-8
            raise UsageError(f"--table {name}: cannot read {path}: {exc}") from exc
    return catalog


def run_query_command(args: argparse.Namespace) -> int:
    """``eddies query``: explain, or run and print (or write) the result; exit code 0."""
    out_format = _output_format(args.output) if args.output else None
    catalog = _catalog(args.table)
    console = stdout_console()
    if args.explain:
        print(explain(args.sql, catalog, join_state=args.join_state))
        return 0

    table, stats = run_from_args(args.sql, catalog, args, label="query", debug=args.debug)
    if out_format is not None:
        _write_output(table, args.output, out_format)
        print(f"wrote {table.num_rows:,} rows to {args.output}", file=sys.stderr)
    else:
        print_result(console, table, args.limit_print, footer=result_footer(stats, args.policy))
    if args.stats:
        console.print()
        print_run_stats(console, stats)
    return 0
