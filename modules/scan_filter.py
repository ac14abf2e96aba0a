"""Dynamic scan filters: a complete SteM's join keys pushed into another table's file scan.

Sideways information passing (issue 11, item 1), as DataFusion's dynamic filters push a
hash join's build-side keys into the probe side's scan and Robust Predicate Transfer
(Yang et al., SIGMOD 2025) passes key filters along a join graph's edges. Once the SteM of
table B holds every row of B that can qualify (the condition under which its SteM filter
``filter:B@smK`` is offered, :meth:`~eddies.modules.stem.SteM.filter_ready`), a row of a
file-backed table A joined to B by the equi-join edge smK can join only if its key lies
in B's key set. The filter given to A's scan AM is the range ``[min, max]`` of B's keys
(Parquet row-group statistics skip the row groups outside it) and, while B has at most
:data:`MAX_KEY_SET` distinct keys, their set (``isin``, which the statistics also use);
see :class:`~eddies.sources.dataset_source.DynamicFilter` for how the scan applies it.

Exact only where a row that cannot join B can be dropped: inner equi-joins without join
steps (the planner's SteM-filter conditions), A with one alias and one scan AM, not a
stream. And only where pyarrow compares the keys as the engine's join does: both columns
integers, or both DATE (:func:`pushable_pair`); every other pair (decimals, floats,
strings, timestamps, mixed kinds) is left unfiltered. NULL keys never join, so the filter
drops them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: The largest distinct-key count pushed as an ``isin`` set (beyond it, the range only).
MAX_KEY_SET = 10_000


def pushable_pair(build_type: pa.DataType, scan_file_type: pa.DataType) -> bool:
    """Whether keys of ``build_type`` can filter a file column of ``scan_file_type``
    exactly with pyarrow comparisons: both integers (any widths but uint64, whose values
    do not all have int64 codes), or both DATE."""
    if pa.types.is_integer(build_type) and pa.types.is_integer(scan_file_type):
        return not (pa.types.is_uint64(build_type) or pa.types.is_uint64(scan_file_type))
    return pa.types.is_date32(build_type) and pa.types.is_date32(scan_file_type)


def key_filter(
    values: pa.Array | pa.ChunkedArray, column: str, file_type: pa.DataType
) -> tuple[pc.Expression, np.ndarray] | None:
    """The filter on ``column`` (of ``file_type``) keeping the rows whose value is among
    ``values`` (the build side's non-NULL keys; :func:`pushable_pair` holds), and those
    keys as sorted distinct int64 codes (DATE: days since 1970-01-01) for row-group
    statistics; None when no row can match (no key, or every key outside ``file_type``).

    Keys outside ``file_type``'s range are left out (a wider build key cannot be cast, and
    no stored value lies there); the ``isin`` set is kept only while it has
    at most :data:`MAX_KEY_SET` distinct keys and leaves out some value of the range."""
    if not len(values):
        return None
    field = pc.field(column)
    is_date = pa.types.is_date32(file_type)
    keys = pc.unique(values.cast(pa.int32() if is_date else pa.int64()))
    codes = np.sort(keys.to_numpy(zero_copy_only=False).astype(np.int64))
    code_type = pa.int32() if is_date else pa.int64()
    if not is_date:
        bounds = np.iinfo(file_type.to_pandas_dtype())
        codes = codes[(codes >= int(bounds.min)) & (codes <= int(bounds.max))]
        if not len(codes):
            return None
    lo, hi = int(codes[0]), int(codes[-1])
    expr = (field >= pa.scalar(lo, code_type).cast(file_type)) & (
        field <= pa.scalar(hi, code_type).cast(file_type)
    )
    if len(codes) <= MAX_KEY_SET and len(codes) < hi - lo + 1:
        expr = expr & field.isin(pa.array(codes, code_type).cast(file_type))
    return expr, codes
