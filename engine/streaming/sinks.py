"""Sinks: where a continuous query's results go, one increment per commit point.

A query over streams hands its results on in increments: the results between two commit
points (see :mod:`eddies.engine.streaming.commit_points`), tagged with what was committed — for a
Spark attachment, ``(stream name, batch_id)`` of the micro-batch. A sink is any object
with ``write(table, tag)`` and ``close()``; ``write`` is called from the thread that
committed (Spark's ``foreachBatch`` thread), never from the eddy's, so a slow sink slows
the producer, not the routing. The last increment (results after the last commit point,
e.g. an aggregate's, which exists only when the input ends) has the tag ``"final"``.

Inside trio, the results are also an async iterator: ``async with open_query(...) as r:
async for batch in r`` while other threads push into the streams.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from eddies.errors import EddiesError

#: The tag of the increment written when the query ends.
FINAL = "final"


class Sink(Protocol):
    """Receives a continuous query's results, one increment per commit point."""

    def write(self, table: pa.Table, tag: Hashable) -> None: ...

    def close(self) -> None: ...


class MemorySink:
    """Keeps every increment in memory; :meth:`table` concatenates them."""

    def __init__(self) -> None:
        self.increments: list[tuple[Hashable, pa.Table]] = []
        self._lock = threading.Lock()

    def write(self, table: pa.Table, tag: Hashable) -> None:
        with self._lock:
            self.increments.append((tag, table))

    def close(self) -> None:
        pass

    def table(self, schema: pa.Schema) -> pa.Table:
        with self._lock:
            tables = [t for _, t in self.increments]
        return pa.concat_tables(tables) if tables else schema.empty_table()


class CallbackSink:
    """Calls ``fn(table, tag)`` for every increment (empty ones included)."""

    def __init__(self, fn: Callable[[pa.Table, Hashable], Any]) -> None:
        if not callable(fn):
            raise EddiesError(f"CallbackSink needs a callable, got {fn!r}")
        self.fn = fn

    def write(self, table: pa.Table, tag: Hashable) -> None:
        self.fn(table, tag)

    def close(self) -> None:
        pass


class ParquetSink:
    """Writes each non-empty increment as one Parquet file in ``folder``.

    The file is named after the tag (``flights-batch-000042.parquet`` for the tag
    ``("flights", 42)``) and written to a temporary name first, then renamed: a replayed
    micro-batch, even after a restart, replaces its file instead of adding one, and
    readers never see half a file. Raises EddiesError if ``folder`` exists as a file.
    """

    def __init__(self, folder: str | os.PathLike, *, compression: str = "zstd") -> None:
        self.folder = Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise EddiesError(f"ParquetSink: {self.folder} exists and is not a folder")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.compression = compression
        self.files: list[Path] = []
        self.rows_written = 0

    def write(self, table: pa.Table, tag: Hashable) -> None:
        if table.num_rows == 0:
            return
        path = self.folder / f"{file_stem(tag)}.parquet"
        partial = path.with_suffix(".parquet.partial")
        pq.write_table(table, partial, compression=self.compression)
        os.replace(partial, path)
        self.files.append(path)
        self.rows_written += table.num_rows

    def close(self) -> None:
        pass


class SparkSink:
    """Hands each increment to ``fn(spark_dataframe, tag)`` as a Spark DataFrame.

    spark: the SparkSession to create the DataFrames in (``createDataFrame`` from Arrow).
    Empty increments are passed on too (an empty DataFrame with the result's columns),
    so ``fn`` sees every micro-batch.
    """

    def __init__(self, spark: Any, fn: Callable[[Any, Hashable], Any]) -> None:
        if not callable(fn):
            raise EddiesError(f"SparkSink needs a callable, got {fn!r}")
        self.spark = spark
        self.fn = fn

    def write(self, table: pa.Table, tag: Hashable) -> None:
        self.fn(self.spark.createDataFrame(spark_ready(table)), tag)

    def close(self) -> None:
        pass


def spark_ready(table: pa.Table) -> pa.Table:
    """``table`` with column names Spark accepts (``f.dep_delay`` -> ``f_dep_delay``):
    a dot in a Spark column name means a struct field."""
    return table.rename_columns([name.replace(".", "_") for name in table.column_names])


def file_stem(tag: Hashable) -> str:
    """A file name for a commit tag: ``("flights", 7)`` -> ``flights-batch-000007``."""
    if isinstance(tag, tuple) and len(tag) == 2 and isinstance(tag[1], int):
        name, number = tag
        return f"{_safe(str(name))}-batch-{number:06d}"
    return _safe(str(tag))


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "batch"
