"""How rows reach the pieces: the shipped columns, and hash buckets on join keys.

A partitioned input (:class:`~eddies.engine.spark.partitioned.ShippedInput`) ships only
the columns the query reads (:func:`projected`). Several inputs that must meet are hashed
on their column of one equivalence class of equi-join columns (the Exchange / Flux
hash partitioning, Graefe 1990; Shah et al. 2003; not an eddy idea) into
:data:`BUCKET`, each input's rows packed into a struct column ``INPUT<i>`` so inputs of
different schemas share one Spark shuffle (:func:`hashed_union`); a bucket's task splits
them back apart (:func:`input_rows`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from eddies.engine.spark.partitioned import ShippedInput

#: Column of the Spark shuffle that holds a row's bucket number.
BUCKET = "_eddies_bucket"
#: Prefix of the struct column holding one shipped input's rows in the shuffle.
INPUT = "_eddies_in"


def quoted(name: str) -> str:
    """``name`` as a Spark SQL identifier (backquoted)."""
    return "`" + name.replace("`", "``") + "`"


def projected(frame: Any, one: ShippedInput) -> Any:
    """The Spark DataFrame ``frame`` with only the columns ``one`` ships."""
    from pyspark.sql import functions as F

    return frame.select(*[F.col(quoted(c)) for c in one.project])


def hashed_union(
    frames: Mapping[str, Any],
    inputs: Sequence[ShippedInput],
    buckets: int,
    *,
    drop_null_keys: bool,
) -> Any:
    """One Spark DataFrame of every input's rows (``frames``: table name -> DataFrame):
    per row its bucket, ``pmod(hash(keys), buckets)`` in :data:`BUCKET`, and its shipped
    columns in the struct column ``INPUT<i>`` of its input ``i`` (NULL for the others).
    Keys are cast to the input's hash type first, so values the join finds equal hash
    alike. ``drop_null_keys``: leave out rows with a NULL key (they never join)."""
    from pyspark.sql import functions as F

    shuffled = None
    for i, one in enumerate(inputs):
        df = frames[one.table]
        keys = [
            F.col(quoted(c)).cast(t) if t else F.col(quoted(c))
            for c, t in zip(one.columns, one.hash_types, strict=True)
        ]
        if drop_null_keys:
            df = df.where(_keys_set(one.columns))
        piece = df.select(
            F.pmod(F.hash(*keys), F.lit(buckets)).alias(BUCKET),
            F.struct(*[F.col(quoted(c)) for c in one.project]).alias(f"{INPUT}{i}"),
        )
        shuffled = (
            piece if shuffled is None else shuffled.unionByName(piece, allowMissingColumns=True)
        )
    return shuffled


def _keys_set(columns: Sequence[str]) -> Any:
    """The Spark condition "every column of ``columns`` is not NULL"."""
    from pyspark.sql import functions as F

    keep = None
    for c in columns:
        cond = F.col(quoted(c)).isNotNull()
        keep = cond if keep is None else keep & cond
    return keep


def input_rows(table: pa.Table, i: int) -> pa.Table:
    """Input ``i``'s rows of a bucket's table (its struct column ``INPUT<i>``, where
    set), as a flat Table of the input's shipped columns."""
    column = table.column(f"{INPUT}{i}").combine_chunks()
    rows = column.filter(column.is_valid())
    return pa.Table.from_arrays(rows.flatten(), names=[f.name for f in rows.type])
