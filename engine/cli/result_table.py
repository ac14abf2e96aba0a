"""How the command line prints a query's result: the first rows as a table, then a footer.

Columns that do not fit the console are left out and named below (as DuckDB's shell
does); the footer gives the row count, the elapsed time and the policy, once.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import sys
from typing import Any

import pyarrow as pa
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from eddies.router.stats import RunStats
from eddies.router.stats_report import duration

__all__ = ["MAX_COLUMN_WIDTH", "print_result", "result_footer", "stdout_console"]

#: Widest a result column is printed; longer values end in an ellipsis.
MAX_COLUMN_WIDTH = 40


class _PipeConsole(Console):
    """A console whose closed pipe (``eddies ... | head``) raises BrokenPipeError, which
    the entry point turns into a quiet exit 0 (rich's default exits with status 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def stdout_console() -> Console:
    """A rich console on stdout: the terminal's width, or (a pipe, a file, a test) as
    wide as a line needs, up to COLUMNS or 200."""
    if sys.stdout.isatty():
        return _PipeConsole(highlight=False)
    # Not a terminal: rich would assume 80 columns and fold every wide table.
    try:
        width = int(os.environ.get("COLUMNS", "200"))
    except ValueError:
        width = 200
    return _PipeConsole(highlight=False, width=width)


def _format_cell(value: Any) -> Text:
    if value is None:
        return Text("NULL", style="dim")
    if isinstance(value, float):
        return Text(format(value, ".6g"))
    if isinstance(value, dt.datetime):
        return Text(value.isoformat(sep=" "))
    if isinstance(value, decimal.Decimal | dt.date | dt.time | dt.timedelta):
        return Text(str(value))
    if isinstance(value, bytes):
        return Text(value.hex())
    return Text(str(value))


def _is_numeric(type_: pa.DataType) -> bool:
    return pa.types.is_integer(type_) or pa.types.is_floating(type_) or pa.types.is_decimal(type_)


def _columns_that_fit(widths: list[int], console_width: int) -> list[int]:
    """The leading columns whose widths (plus padding and separators) fit the console;
    at least the first."""
    keep: list[int] = []
    used = 0
    for i, width in enumerate(widths):
        need = width + (3 if keep else 0)  # padding, separator, padding
        if keep and used + need > console_width:
            break
        keep.append(i)
        used += need
    return keep


def _print_rows(console: Console, table: pa.Table, shown: pa.Table) -> list[str]:
    """Print ``shown`` (the first rows of ``table``); return the columns left out."""
    names = table.column_names
    cells = [[_format_cell(v) for v in col.to_pylist()] for col in shown.columns]
    widths = [
        min(MAX_COLUMN_WIDTH, max([len(name), *(c.cell_len for c in col)]))
        for name, col in zip(names, cells, strict=True)
    ]
    keep = _columns_that_fit(widths, console.width)
    out = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for i in keep:
        out.add_column(
            names[i],
            justify="right" if _is_numeric(table.schema.field(i).type) else "left",
            no_wrap=True,
            overflow="ellipsis",
            max_width=MAX_COLUMN_WIDTH,
        )
    for r in range(shown.num_rows):
        out.add_row(*(cells[i][r] for i in keep))
    console.print(out)
    return names[len(keep) :]


def print_result(console: Console, table: pa.Table, limit: int, *, footer: str = "") -> None:
    """Print the first ``limit`` rows of ``table`` as a rich table, then the row count.

    Columns that do not fit the console's width are left out and named below the table
    (as DuckDB's shell does) rather than folded into unreadable slivers.
    """
    shown = table.slice(0, limit) if limit < table.num_rows else table
    hidden = _print_rows(console, table, shown) if table.num_columns and limit > 0 else []
    count = f"{table.num_rows:,} row{'s' if table.num_rows != 1 else ''}"
    if 0 < shown.num_rows < table.num_rows:
        count += f" (first {shown.num_rows:,} shown)"
    console.print(Text(count + (f" · {footer}" if footer else ""), style="bold"))
    if hidden:
        console.print(
            Text(
                f"{len(hidden)} more column{'s' if len(hidden) != 1 else ''} not shown: "
                + ", ".join(hidden)
                + " (use a wider terminal or --output)",
                style="dim",
            )
        )


def result_footer(stats: RunStats, policy: str) -> str:
    """``"60.1 ms · policy hybrid"``: the run's elapsed time (said only here) and policy."""
    return f"{duration(stats.elapsed_seconds)} · policy {policy}"
