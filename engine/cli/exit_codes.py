"""How the ``eddies`` command reports a failure: one line on stderr and an exit code.

Exit codes: 0 success, 2 usage or query error (``error: <message>``, or argparse's
``eddies <command>: error: <message>``; no traceback), 1 internal error (an exception that
is not an EddiesError: a bug; one line, the traceback with ``--log-level debug``), 130
interrupted (Ctrl-C), 128 + the signal's number when ``serve-demo`` is stopped by one.
"""

from __future__ import annotations

import os
import sys
import traceback

from eddies.errors import EddiesError, find_error

__all__ = ["UsageError", "exit_code_of", "internal_error", "report"]


class UsageError(EddiesError):
    """A command-line argument is malformed (reported like any other EddiesError)."""


def report(message: str) -> None:
    """Write ``message`` as one line on stderr, at once."""
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()


def internal_error(exc: BaseException, log_level: str | None) -> int:
    """Report an exception that is not an EddiesError: a bug in eddies, not the user's
    mistake. One line (exit 1); the traceback only with ``--log-level debug``."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    detail = " ".join(str(exc).split()) or "(no message)"
    if log_level == "debug":
        traceback.print_exception(exc)
    report(
        f"internal error: {type(exc).__name__}: {detail} (a bug in eddies; "
        "--log-level debug shows the traceback)"
    )
    return 1


def _quiet_stdout() -> None:
    """The reader (e.g. ``| head``) went away: send the rest of stdout nowhere."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def exit_code_of(exc: BaseException, log_level: str | None) -> int:
    """The exit code for ``exc`` raised by a subcommand, after reporting it: 130 for
    Ctrl-C, 2 for an EddiesError (also inside an exception group), 0 for a closed pipe
    (stop quietly, as command-line tools do), 1 for anything else (a bug)."""
    if isinstance(exc, KeyboardInterrupt):
        report("interrupted")
        return 130
    if isinstance(exc, EddiesError):
        report(f"error: {exc}")
        return 2
    if isinstance(exc, BrokenPipeError):
        _quiet_stdout()
        return 0
    if isinstance(exc, BaseExceptionGroup):
        if find_error(exc, KeyboardInterrupt) is not None:
            report("interrupted")
            return 130
        found = find_error(exc, EddiesError)
        if found is not None:
            report(f"error: {found}")
            return 2
    return internal_error(exc, log_level)
