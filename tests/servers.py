"""Servers the tests run on 127.0.0.1: the demo web server in a thread of its own."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pyarrow as pa
import trio

from eddies.sources.demo_server import DemoServerConfig, open_demo_server


@contextlib.contextmanager
def demo_server(tables: dict[str, pa.Table], **faults) -> Iterator[str]:
    """A demo server in a thread of its own, for the duration of the block; yields its URL."""
    started = threading.Event()
    url: list[str] = []
    stop: list = []

    async def serve() -> None:
        config = DemoServerConfig.from_flags(**faults)
        async with open_demo_server(tables, {"planes": ["tailnum"]}, config) as handle:
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
