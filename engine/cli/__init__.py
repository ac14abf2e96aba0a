"""The ``eddies`` command line (:func:`main`, :mod:`eddies.engine.cli.entry_point`).

One module per concern: :mod:`~eddies.engine.cli.parser` (arguments and their help; light,
so ``eddies --help`` imports no engine), :mod:`~eddies.engine.cli.exit_codes` (one line on
stderr and an exit code per failure), one module per subcommand
(:mod:`~eddies.engine.cli.query_command`, :mod:`~eddies.engine.cli.demo_command`,
:mod:`~eddies.engine.cli.serve_demo_command`), :mod:`~eddies.engine.cli.query_runner` (a
query under trio with the progress line, :mod:`~eddies.engine.cli.progress`), and how a
run is shown: :mod:`~eddies.engine.cli.result_table` (the result rows) and
:mod:`~eddies.engine.cli.run_stats_view` (the report of :mod:`eddies.router.stats_report`,
framed).
"""

from __future__ import annotations

from typing import Any


def main(argv: Any = None) -> int:
    """Run the ``eddies`` command (see :mod:`eddies.engine.cli.entry_point`); returns the
    exit code. Imports the command line only when called."""
    from eddies.engine.cli.entry_point import main as run

    return run(argv)
