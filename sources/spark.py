"""Spark Structured Streaming as a source: micro-batches fed to a running eddy.

``foreachBatch`` hands each micro-batch to a Python callback on the Spark driver with its
``batch_id``; :func:`feed_stream` makes that callback turn the batch into Arrow
(``DataFrame.toArrow``) and push it into a :class:`~eddies.sources.stream.StreamTable`,
which blocks until the eddy's scan AM has taken it — so the eddy's back-pressure reaches
Spark: the next trigger does not start before the eddy has taken this batch.

Exactly-once at the eddy: Spark may run a ``batch_id`` again (a failed attempt of the
callback, or the last uncommitted batch when a query restarts from its checkpoint
location). Within one running attachment, the StreamTable ignores a batch id it has
taken before, so a replay adds no rows and no results. The eddy's own state (its SteMs)
lives in memory: after a restart of the Python process the query starts over, and Spark's
checkpoint decides which batches it is fed again.
"""

from __future__ import annotations

from typing import Any

from eddies.sources.stream import StreamTable


def feed_stream(
    streaming_df: Any,
    stream: StreamTable,
    *,
    checkpoint_location: str,
    trigger: dict[str, Any] | None = None,
    query_name: str | None = None,
) -> Any:
    """Start a Spark streaming query that pushes each micro-batch of ``streaming_df`` into
    ``stream``; returns the ``pyspark.sql.streaming.StreamingQuery``.

    checkpoint_location: Spark's checkpoint folder for this query (required: it is what
    lets Spark resume, and replay, by ``batch_id``); trigger: keyword arguments for
    ``DataStreamWriter.trigger`` (e.g. ``{"availableNow": True}`` or
    ``{"processingTime": "5 seconds"}``). Close the stream (``stream.close()``) after the
    streaming query has terminated to let the eddy finish.
    """

    def push(batch_df: Any, batch_id: int) -> None:
        stream.push(batch_df.toArrow(), (stream.name, int(batch_id)))

    writer = streaming_df.writeStream.foreachBatch(push).option(
        "checkpointLocation", checkpoint_location
    )
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()
