"""Shared helpers for the benchmark scripts: best-of-n timing and rich tables.

The scripts import this module as ``common`` (run them as ``python bench/<script>.py``;
Python puts the script's folder first on ``sys.path``).
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

# Piped output (a log file, CI) gets a wide fixed width instead of rich's 80 columns.
# emoji=False: module names such as "probe:a:" must not turn into emoji codes.
console = Console(
    width=None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", 160)), emoji=False
)


@dataclass
class Timing:
    """Wall-clock times of repeated calls, in seconds; ``value`` is the last call's result."""

    runs: list[float] = field(default_factory=list)
    value: Any = None

    @property
    def best(self) -> float:
        return min(self.runs)

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def best_ms(self) -> float:
        return self.best * 1e3


def time_call(fn: Callable[[], Any]) -> tuple[float, Any]:
    """One call of ``fn``: (seconds, result), timed with ``perf_counter``."""
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def best_of(fn: Callable[[], Any], *, repeat: int = 5, warmup: int = 1) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then ``repeat`` times timed; keep every time.

    A garbage collection runs before each timed call (and the collector stays on during
    it), so one call's garbage is not charged to the next.
    """
    for _ in range(warmup):
        fn()
    timing = Timing()
    for _ in range(max(1, repeat)):
        gc.collect()
        seconds, timing.value = time_call(fn)
        timing.runs.append(seconds)
    return timing


def fmt_ms(seconds: float | None, digits: int = 1) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:,.{digits}f}"


def fmt_s(seconds: float | None, digits: int = 2) -> str:
    return "–" if seconds is None else f"{seconds:.{digits}f}"


def fmt_ratio(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}×"


def fmt_pct(x: float | None, digits: int = 0) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}%"


def print_table(
    title: str,
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    right_from: int = 1,
    caption: str | None = None,
) -> None:
    """A rich table; columns from index ``right_from`` on are right-aligned (numbers)."""
    table = Table(
        title=title,
        caption=caption,
        title_justify="left",
        caption_justify="left",
        min_width=len(title) + 2,
    )
    for i, header in enumerate(headers):
        table.add_column(header, justify="right" if i >= right_from else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    console.print(table)


def verdict(label: str, ok: bool, detail: str = "") -> bool:
    """Print one target check as PASS/FAIL and return ``ok``."""
    mark = "[bold green]PASS[/]" if ok else "[bold red]FAIL[/]"
    console.print(f"  {mark}  {label}" + (f"  [dim]({detail})[/]" if detail else ""))
    return ok


def progress() -> Progress:
    """A rich progress bar (description, bar, done/total, elapsed); use as a context manager."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=not sys.stdout.isatty(),  # keep logs free of redraw noise
        disable=not sys.stdout.isatty(),
    )


def busy_summary(stats: Any, top: int = 6) -> str:
    """The modules of a RunStats that were busiest, e.g. ``sm1 1.20s (60%), ...``."""
    modules = list(getattr(stats, "modules", {}).values())
    total = sum(m.busy_seconds for m in modules) or 1.0
    modules.sort(key=lambda m: m.busy_seconds, reverse=True)
    return ", ".join(
        f"{m.name} {m.busy_seconds:.3f}s ({100 * m.busy_seconds / total:.0f}%)"
        for m in modules[:top]
    )


def engine_or_exit() -> None:
    """Exit with a clear message when the engine's public API is not importable yet."""
    try:
        from eddies.engine import execute  # noqa: F401
    except ImportError as exc:  # the engine is being written
        console.print(f"[red]eddies.engine is not usable yet: {exc}[/]")
        raise SystemExit(2) from exc
    from eddies.engine.runtime.logging_setup import configure_logging

    configure_logging(level="warning")  # keep info lines about each query out of the report
