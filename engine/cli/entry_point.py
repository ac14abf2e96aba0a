"""The ``eddies`` command line: run SQL over Parquet/CSV files, explain a plan, run the demo.

::

    eddies query "SELECT ..." --table users=users.parquet --table orders=orders.csv
    eddies query "SELECT ..." --table t=data.csv --explain
    eddies query "SELECT count(*) FROM events" --table events=events_dir/
    eddies query "SELECT * FROM 'data/**/*.parquet' WHERE year = 2024"
    eddies query "SELECT ..." --table t=data.csv --join-state stairs --stats
    eddies demo --policy lottery
    eddies serve-demo --port 8080 --latency lookup=0.05 --failure-rate 0.1

:func:`main` parses the arguments (:mod:`eddies.engine.cli.parser`, which imports nothing
heavy, so ``eddies --help`` answers at once), then imports and runs the chosen
subcommand: :mod:`~eddies.engine.cli.query_command`, :mod:`~eddies.engine.cli.demo_command`
or :mod:`~eddies.engine.cli.serve_demo_command`. Failures become one line on stderr and an
exit code (:mod:`eddies.engine.cli.exit_codes`: 0 success, 2 usage or query error, 1
internal error, 130 interrupted; ``serve-demo`` also stops on SIGTERM, exit 143).
``python -m eddies`` runs the same command.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

from eddies.engine.cli.exit_codes import exit_code_of
from eddies.engine.cli.parser import build_parser
from eddies.engine.runtime.logging_setup import configure_logging

__all__ = ["SUBCOMMANDS", "main", "subcommand"]

#: Subcommand -> (module, function) that runs it with the parsed arguments and returns
#: the exit code; the module is imported only when its subcommand runs.
SUBCOMMANDS = {
    "query": ("eddies.engine.cli.query_command", "run_query_command"),
    "demo": ("eddies.engine.cli.demo_command", "run_demo_command"),
    "serve-demo": ("eddies.engine.cli.serve_demo_command", "run_serve_demo_command"),
}


def subcommand(name: str) -> Callable:
    """The function that runs subcommand ``name`` (its module imported now)."""
    module, function = SUBCOMMANDS[name]
    return getattr(importlib.import_module(module), function)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``eddies`` command with ``argv`` (default ``sys.argv[1:]``); return the
    exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        configure_logging(args.log_format, args.log_level)
        return int(subcommand(args.command)(args))
    except (KeyboardInterrupt, Exception, BaseExceptionGroup) as exc:  # not SystemExit
        return exit_code_of(exc, getattr(args, "log_level", None))


if __name__ == "__main__":
    sys.exit(main())
