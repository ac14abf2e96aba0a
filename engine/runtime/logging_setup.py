"""Structured logging for eddies: structlog over the standard library, to stderr.

Engine modules log through ``structlog.get_logger("eddies.<part>")`` (for example
``"eddies.router"``, ``"eddies.modules.stem"``). :func:`configure_logging` routes every
logger under ``eddies`` to one stderr handler that renders either a human-readable
console line or one JSON object per line; it may be called any number of times and the
last call wins (no duplicated handlers).

Until something configures logging, :func:`ensure_configured` can be used to install the
default (console, level ``warning``) so a library user never sees debug chatter on stdout.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog
import structlog.tracebacks

__all__ = ["FORMATS", "LEVELS", "configure_logging", "ensure_configured", "get_logger"]

FORMATS = ("console", "json")
LEVELS = ("debug", "info", "warning", "error", "critical")

_ROOT = "eddies"
_configured = False


class _StderrHandler(logging.StreamHandler):
    """A stream handler that writes to whatever ``sys.stderr`` is at the time of writing.

    rich's live displays temporarily replace ``sys.stderr`` so that other output lands
    above the progress bar; resolving the stream late keeps log lines out of its way.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._fixed = stream
        super().__init__(stream)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return self._fixed if self._fixed is not None else sys.stderr

    @stream.setter
    def stream(self, value: TextIO | None) -> None:
        # logging.StreamHandler.__init__ assigns self.stream; keep only explicit streams.
        self._fixed = value if value is not sys.stderr else None


def _level_number(level: str | int) -> int:
    if isinstance(level, int):
        return level
    name = str(level).strip().lower()
    if name not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; expected one of {', '.join(LEVELS)}")
    return logging.getLevelName(name.upper())


def configure_logging(
    fmt: str = "console", level: str | int = "warning", *, stream: TextIO | None = None
) -> None:
    """Send eddies' structured logs to stderr (or ``stream``) as console text or JSON lines.

    ``fmt`` is ``"console"`` or ``"json"``; ``level`` a name from :data:`LEVELS` (any case)
    or a :mod:`logging` level number. Idempotent: calling it again replaces the previous
    configuration instead of stacking handlers.
    """
    global _configured
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; expected one of {', '.join(FORMATS)}")
    level_no = _level_number(level)

    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Engine modules create their loggers at import time; caching would pin them to
        # the configuration in force at first use, so a later call could not change it.
        cache_logger_on_first_use=False,
    )

    out = stream if stream is not None else sys.stderr
    if fmt == "json":
        final: list[Any] = [
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            ),
            structlog.processors.JSONRenderer(),
        ]
    else:
        colors = bool(getattr(out, "isatty", lambda: False)())
        final = [structlog.dev.ConsoleRenderer(colors=colors)]
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final],
    )

    handler = _StderrHandler(stream)
    handler.setFormatter(formatter)
    handler._eddies_handler = True  # type: ignore[attr-defined]

    root = logging.getLogger(_ROOT)
    for old in [h for h in root.handlers if getattr(h, "_eddies_handler", False)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level_no)
    root.propagate = False
    _configured = True


def ensure_configured() -> None:
    """Install the default configuration unless :func:`configure_logging` already ran."""
    if not _configured:
        configure_logging()


def get_logger(part: str) -> Any:
    """``structlog.get_logger("eddies.<part>")`` (``part`` may already start with eddies.)."""
    name = part if part == _ROOT or part.startswith(_ROOT + ".") else f"{_ROOT}.{part}"
    return structlog.get_logger(name)
