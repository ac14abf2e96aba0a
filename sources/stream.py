"""Stream tables: input pushed into a running query from another thread, batch by batch.

A data engineer's micro-batches (Spark Structured Streaming's ``foreachBatch`` hands one
DataFrame per trigger to a callback on a driver thread) must reach an eddy that runs under
trio in a thread of its own. A :class:`StreamTable` is a table whose scan AM reads a trio
memory channel; :meth:`StreamTable.push` — called from any thread but the query's —
sends one Arrow batch into it and blocks until the scan AM has taken it, so the eddy's
back-pressure reaches the producer. Micro-batches carry ids: a batch whose id was already
taken is ignored (a producer that replays a batch after a failure adds no rows).
:meth:`StreamTable.close` ends the input; the query then finishes like any other.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Hashable
from typing import Any

import pyarrow as pa
import trio

from eddies.errors import DataSourceError
from eddies.sources.arrow_source import conform, plain_schema

#: Seconds ``push`` waits for a query to start reading the stream (after the query's static
#: tables are read in full) before it gives up.
DEFAULT_START_TIMEOUT = 300.0


class StreamTable:
    """A table fed by :meth:`push` while one query reads it (register it with
    ``Catalog.add_stream``). Thread-safe. One query reads a stream; once closed, it stays
    closed (a later query sees no rows)."""

    def __init__(self, name: str, schema: pa.Schema) -> None:
        self.name = name
        self.schema = plain_schema(schema)
        self._lock = threading.Lock()
        self._open = threading.Event()  # set while a query reads the stream
        self._token: trio.lowlevel.TrioToken | None = None
        self._send: trio.MemorySendChannel | None = None
        self._taken: set[Hashable] = set()
        # The ids of the batches the scan AM has taken in full, kept in the query's trio
        # thread (a commit point's checkpoint reads them while the dataflow is quiescent).
        self.processed: set[Hashable] = set()
        self._closed = False
        self._ended = False  # the query reading it has ended: pushes fail at once
        self._error: BaseException | None = None  # ... with this error, if it failed
        self.rows_taken = 0
        self.batches_ignored = 0
        # Set while the scan AM waits for the next batch: everything pushed before has
        # been handed on to the eddy. ``on_wait`` (set by the running query) is told.
        self.waiting = False
        self.drained = False  # the scan AM has read the end of the stream
        self.on_wait: Callable[[], None] | None = None
        # Called with each batch the scan AM takes, before the eddy sees it (set by the
        # running query: a streaming aggregate's watermark tracks the event times here).
        self.on_take: Callable[[pa.RecordBatch], None] | None = None

    @property
    def claimed(self) -> bool:
        """True once a query reads this stream (or its query has ended)."""
        with self._lock:
            return self._send is not None or self._ended

    async def pages(self) -> AsyncIterator[pa.RecordBatch]:
        """The scan AM's side: yields pushed batches until :meth:`close` (trio only)."""
        send, receive = trio.open_memory_channel[tuple[pa.RecordBatch, Hashable]](0)
        with self._lock:
            if self._send is not None:
                raise DataSourceError(f"stream {self.name!r} is already read by a query")
            self._token = trio.lowlevel.current_trio_token()
            self._send = send
            self._open.set()
            if self._closed:
                send.close()
        try:
            async with receive:
                while True:
                    self.waiting = True
                    if self.on_wait is not None:
                        self.on_wait()
                    try:
                        batch, batch_id = await receive.receive()
                    except trio.EndOfChannel:
                        return
                    finally:
                        self.waiting = False
                    if batch_id is not None:  # the micro-batch's last piece
                        self.processed.add(batch_id)
                    if self.on_take is not None:
                        self.on_take(batch)
                    yield batch
        finally:
            self.waiting = False
            self.drained = True  # nothing more will come: as good as waiting
            if self.on_wait is not None:
                self.on_wait()
            with self._lock:
                self._send = None
                self._token = None
                self._open.clear()

    def push(
        self,
        data: Any,
        batch_id: Hashable | None = None,
        *,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> bool:
        """Send one micro-batch into the running query; blocks until the query takes it.

        data: a pyarrow Table or RecordBatch (or pandas DataFrame) in the stream's schema.
        batch_id: the micro-batch's id (e.g. Spark's ``batch_id``); a batch whose id was
        taken before is ignored and False returned. Raises DataSourceError when the data
        does not fit the schema, the stream is closed, or no query reads it within
        ``start_timeout`` seconds; raises the query's own error, at once, when the query
        that reads it failed (also when it failed to start: see :meth:`query_failed`).
        Must not be called from the query's own trio thread.
        """
        table = conform(data, self.schema, f"stream {self.name!r}: a pushed batch")
        if batch_id is not None and batch_id in self._taken:
            self.batches_ignored += 1
            return False
        if not self._open.wait(start_timeout):
            raise DataSourceError(
                f"stream {self.name!r}: no query read it within {start_timeout} s"
            )
        with self._lock:
            if self._error is not None:
                raise self._error
            if batch_id is not None and batch_id in self._taken:  # restored meanwhile
                self.batches_ignored += 1
                return False
            if self._closed:
                raise DataSourceError(f"stream {self.name!r} is closed")
            if self._ended:
                raise DataSourceError(f"stream {self.name!r}: its query has ended")
            send, token = self._send, self._token
        if send is None or token is None:
            raise DataSourceError(f"stream {self.name!r}: its query has ended")
        pieces = table.combine_chunks().to_batches()
        for i, batch in enumerate(pieces):
            last = batch_id if i == len(pieces) - 1 else None
            try:
                trio.from_thread.run(self._hand_over, send, batch, last, trio_token=token)
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.RunFinishedError):
                if self._error is not None:
                    raise self._error from None
                raise DataSourceError(f"stream {self.name!r}: its query has ended") from None
        if batch_id is not None:
            self._taken.add(batch_id)
        self.rows_taken += table.num_rows
        return True

    def query_ended(self) -> None:
        """Called when the query that reads this stream ends (normally or not): a push
        waiting for it, or any later push, fails at once instead of waiting."""
        with self._lock:
            self._ended = True
        self._open.set()

    def query_failed(self, error: BaseException) -> None:
        """The query that reads (or was to read) this stream failed with ``error``, maybe
        before it started: a push waiting for it, and every later push, raises ``error``."""
        with self._lock:
            self._ended = True
            self._error = error
        self._open.set()

    async def _hand_over(
        self, send: trio.MemorySendChannel, batch: pa.RecordBatch, batch_id: Hashable
    ) -> None:
        # Not waiting from now on, before the scan AM resumes: a commit point requested
        # right after this push must not be granted before the batch is processed.
        self.waiting = False
        await send.send((batch, batch_id))

    def restore_taken(self, batch_ids: set[Hashable]) -> None:
        """Batch ids a checkpoint says were taken and committed before a restart: pushes
        with these ids are ignored from now on (exactly-once across restarts). Call
        before the query reads the stream."""
        with self._lock:
            self._taken |= batch_ids
            self.processed |= batch_ids

    def close(self) -> None:
        """End the stream: the query sees the end of its input once it took every batch."""
        with self._lock:
            self._closed = True
            send, token = self._send, self._token
        if send is not None and token is not None:
            with contextlib.suppress(trio.RunFinishedError):  # the query already ended
                trio.from_thread.run_sync(send.close, trio_token=token)
