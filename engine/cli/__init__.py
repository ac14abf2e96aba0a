"""The ``eddies`` command line (:func:`eddies.engine.cli.commands.main`) and how it shows a run."""

from __future__ import annotations

from typing import Any


def main(argv: Any = None) -> int:
    """Run the ``eddies`` command (see :mod:`eddies.engine.cli.commands`); returns the exit code."""
    from eddies.engine.cli.commands import main as run

    return run(argv)
