"""Servers the tests run on 127.0.0.1: the demo web server in a thread of its own."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pyarrow as pa
import trio

from eddies.sources.demo_server import DemoServerConfig, open_demo_server


@contextlib.contextmanager
def demo_server(
    tables: dict[str, pa.Table], *, dies_after_lookups: int | None = None, **faults
) -> Iterator[str]:
    """A demo server in a thread of its own, for the duration of the block; yields its URL.

    ``dies_after_lookups=k``: once it has answered k lookups, its ``fail_after`` (which
    must be set) counts as passed, so it answers 503 from then on: a mirror that dies
    midway after a count of answers, not after a time a loaded machine may overrun.
    """
    started = threading.Event()
    url: list[str] = []
    stop: list = []

    async def serve() -> None:
        config = DemoServerConfig.from_flags(**faults)
        async with open_demo_server(tables, {"planes": ["tailnum"]}, config) as handle:
            if dies_after_lookups is not None:
                app, faults_of = handle.app, handle.app._faults

                async def dying(endpoint: str, table: str):
                    if endpoint == "lookup" and app.counts["lookup 200"] >= dies_after_lookups:
                        app.started_at -= config.fail_after  # fail_after has passed
                    return await faults_of(endpoint, table)

                app._faults = dying
            url.append(handle.url)
            stop.append((trio.lowlevel.current_trio_token(), trio.Event()))
            started.set()
            await stop[0][1].wait()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    assert started.wait(10), "demo server did not start"
    try:
        yield url[0]
    finally:
        token, done = stop[0]
        trio.from_thread.run_sync(done.set, trio_token=token)
        thread.join(10)
