"""Spark and Arrow schemas: how a Spark DataFrame's rows look in Arrow, and back.

Spark hands Python its rows as Arrow (``DataFrame.toArrow``, ``mapInArrow``,
``applyInArrow``) in the Arrow types its own types map to — timestamps in the session's
time zone, strings as large strings when ``spark.sql.execution.arrow.useLargeVarTypes``
is set — and wants a Python function's output in exactly those types. The conversions
the driver and the executors' functions need live here, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import pyarrow as pa

from eddies.sources.arrow_source import plain_schema

#: A pyarrow Table or RecordBatch (cast_columns returns the kind it is given).
Rows = TypeVar("Rows", pa.Table, pa.RecordBatch)


def arrow_schema(frame: Any) -> pa.Schema:
    """The Arrow schema of a Spark DataFrame, as ``DataFrame.toArrow`` produces it
    (timestamps in the session's time zone)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    timezone = frame.sparkSession.conf.get("spark.sql.session.timeZone")
    return to_arrow_schema(frame.schema, timezone=timezone)


def plain_arrow_schemas(frames: Mapping[str, Any]) -> dict[str, pa.Schema]:
    """Table name (lowercased) -> the plain Arrow schema (:func:`plain_schema`) of its
    Spark DataFrame, as the eddies see its rows."""
    return {name.lower(): plain_schema(arrow_schema(df)) for name, df in frames.items()}


def spark_schema(spark: Any, schema: pa.Schema) -> tuple[Any, pa.Schema]:
    """Spark's StructType for the Arrow ``schema`` and the Arrow schema Spark expects
    back from a ``mapInArrow``/``applyInArrow`` function that returns such rows (the
    session's time zone and large-types setting applied)."""
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    struct = from_arrow_schema(schema)
    large = str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower()
    expected = to_arrow_schema(
        struct,
        timezone=spark.conf.get("spark.sql.session.timeZone"),
        prefers_large_types=large == "true",
    )
    return struct, expected


def positional_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with its columns named ``_c0``, ``_c1``, ...: a query's result may
    repeat a column name, which a Spark StructType handed to ``mapInArrow`` may not."""
    return pa.schema([pa.field(f"_c{i}", f.type) for i, f in enumerate(schema)])


def cast_columns(rows: Rows, schema: pa.Schema) -> Rows:
    """``rows`` (a Table or a RecordBatch) with its columns, by position, cast to
    ``schema``'s types and named as in ``schema``; ValueError if the column counts
    differ."""
    arrays = [
        c if c.type == f.type else c.cast(f.type) for c, f in zip(rows.columns, schema, strict=True)
    ]
    if isinstance(rows, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
    return pa.Table.from_arrays(arrays, schema=schema)
