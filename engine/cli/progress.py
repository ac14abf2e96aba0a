"""A quiet progress line for long query runs: rows out and elapsed time, on stderr.

The display appears only once a run has lasted ``delay`` seconds (1 s by default) and only
when its console is a terminal, so short runs, pipes, CI logs and tests see nothing.
It is thread-based (a timer shows it, rich's refresh thread redraws it), so it keeps
ticking while the trio loop is busy and works the same from sync or async callers::

    with QueryProgress("demo") as progress:
        async with open_query(sql, catalog) as results:
            progress.watch(results.stats)      # optional: also show rows scanned so far
            async for batch in results:
                progress.add_rows(batch.num_rows)
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

from rich.console import Console, RenderableType
from rich.live import Live
from rich.spinner import Spinner

__all__ = ["QueryProgress"]


class QueryProgress:
    """Shows ``<label>: N rows out · 12.3 s`` on stderr while a query runs longer than ``delay``.

    With :meth:`watch` it also shows the rows the scan AMs have delivered so far, which
    keeps moving for queries whose results only appear at the end (ORDER BY, GROUP BY).

    ``enabled=None`` means "when the console is a terminal". Update it with
    :meth:`add_rows` or :meth:`set_rows` from any thread; :meth:`stop` (or leaving the
    ``with`` block) removes the line (the display is transient).
    """

    def __init__(
        self,
        label: str = "running query",
        *,
        console: Console | None = None,
        delay: float = 1.0,
        enabled: bool | None = None,
        refresh_per_second: float = 8.0,
    ) -> None:
        self.label = label
        self.console = console if console is not None else Console(stderr=True)
        self.enabled = self.console.is_terminal if enabled is None else enabled
        self.delay = delay
        self.refresh_per_second = refresh_per_second
        self.rows = 0
        self.batches = 0
        self._start: float | None = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._live: Live | None = None
        self._stopped = False
        self._spinner = Spinner("dots", style="cyan")
        self._stats: Any = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> QueryProgress:
        """Start the clock; the display shows up after ``delay`` seconds if enabled."""
        self._start = time.monotonic()
        if self.enabled:
            self._timer = threading.Timer(self.delay, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def stop(self) -> None:
        """Remove the display (if shown) and stop the timer. Safe to call twice."""
        with self._lock:
            self._stopped = True
            timer, live = self._timer, self._live
            self._timer = self._live = None
        if timer is not None:
            timer.cancel()
        if live is not None:
            live.stop()

    def __enter__(self) -> QueryProgress:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- updates ---------------------------------------------------------------------

    def add_rows(self, n: int, batches: int = 1) -> None:
        """Count ``n`` more result rows (from ``batches`` more batches)."""
        self.rows += int(n)
        self.batches += batches

    def watch(self, stats: Any) -> None:
        """Also report ``stats.modules``' scan counters (a live :class:`RunStats`)."""
        self._stats = stats

    def scanned(self) -> int | None:
        """Rows delivered by the scan AMs so far, if a RunStats is being watched."""
        if self._stats is None:
            return None
        try:
            modules = list(self._stats.modules.values())
        except (AttributeError, RuntimeError):  # RuntimeError: dict resized while copying
            return None
        return sum(m.tuples_out for m in modules if m.kind == "scan")

    def set_rows(self, rows: int) -> None:
        """Set the number of result rows so far (for callbacks that report totals)."""
        self.rows = int(rows)

    @property
    def elapsed(self) -> float:
        """Seconds since :meth:`start` (0 before it)."""
        return 0.0 if self._start is None else time.monotonic() - self._start

    @property
    def visible(self) -> bool:
        """Whether the progress line is on screen right now."""
        return self._live is not None

    # -- rendering -------------------------------------------------------------------

    def _show(self) -> None:
        with self._lock:
            if self._stopped or self._live is not None:
                return
            live = Live(
                self,
                console=self.console,
                transient=True,
                refresh_per_second=self.refresh_per_second,
                redirect_stdout=False,
                redirect_stderr=True,
            )
            live.start()
            self._live = live

    def describe(self) -> str:
        """The progress text without the spinner, e.g. ``'demo: 1,024 rows out · 2.5 s'``."""
        scanned = self.scanned()
        read = f"{scanned:,} rows scanned · " if scanned is not None else ""
        return f"{self.label}: {read}{self.rows:,} rows out · {self.elapsed:.1f} s"

    def __rich__(self) -> RenderableType:
        self._spinner.update(text=self.describe())
        return self._spinner
