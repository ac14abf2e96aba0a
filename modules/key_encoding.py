"""Join keys to int64 codes, so SteM indexes can sort and search them with NumPy.

An equi-join edge compares columns of two tables; both sides must map equal values to equal
codes. Integers, booleans, dates and timestamps are their own codes (after a cast to a
common type), floats are their IEEE bits (with -0.0 folded onto 0.0), and strings and other
types go through a :class:`KeyDictionary` that grows as the build side sees new values.
NULL never joins: nulls come back in a validity mask and are neither built nor probed.
Multi-column keys combine the per-column codes with a 64-bit mix; the SteM then checks
each column's code, so a hash collision cannot produce a wrong match.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from eddies.errors import QueryTypeError, describe
from eddies.sources.decimal_float import as_double, decimal_to_float
from eddies.sources.table_store import TableStore

#: How a column's values become codes.
KIND_INT, KIND_FLOAT, KIND_DICT, KIND_TIMESTAMP = "int", "float", "dict", "timestamp"
#: Integers and DECIMALs joined together: exact values (DECIMAL(38, 18)) in a dictionary, so
#: 2 = 2.00 matches and 2 = 2.50 or 12345678901234567 = 12345678901234567.01 does not.
KIND_DECIMAL = "decimal"
DECIMAL_KEY_TYPE = pa.decimal128(38, 18)
#: FLOAT (single precision) keys, alone or joined with integers or DECIMALs: DuckDB
#: compares those as FLOAT, so both sides are rounded to FLOAT before they are coded (as
#: KIND_FLOAT codes); joined with a DOUBLE they compare as DOUBLE (KIND_FLOAT).
KIND_FLOAT32 = "float32"
#: Numeric kinds from narrowest to widest: a join of two kinds codes both in the wider.
_NUMERIC_RANK = {KIND_INT: 0, KIND_DECIMAL: 1, KIND_FLOAT32: 2, KIND_FLOAT: 3}


def uses_dictionary(kind: str) -> bool:
    """Whether codes of this kind come from a :class:`KeyDictionary` (one per key column)."""
    return kind in (KIND_DICT, KIND_DECIMAL)


def wider_kind(a: str, b: str) -> str:
    """The wider of two numeric kinds (int < decimal < float32 < float); ``a`` if either is
    not."""
    if a in _NUMERIC_RANK and b in _NUMERIC_RANK:
        return a if _NUMERIC_RANK[a] >= _NUMERIC_RANK[b] else b
    return a


def key_kind(dtype: pa.DataType) -> str:
    """The coding family of an Arrow type used in an equi-join."""
    if pa.types.is_integer(dtype) or pa.types.is_boolean(dtype) or pa.types.is_date(dtype):
        return KIND_INT
    if pa.types.is_decimal(dtype):
        fits = dtype.scale <= DECIMAL_KEY_TYPE.scale and (
            dtype.precision - dtype.scale <= DECIMAL_KEY_TYPE.precision - DECIMAL_KEY_TYPE.scale
        )
        return KIND_DECIMAL if fits else KIND_FLOAT
    if pa.types.is_float32(dtype):
        return KIND_FLOAT32
    if pa.types.is_floating(dtype):
        return KIND_FLOAT
    if pa.types.is_timestamp(dtype):
        return KIND_TIMESTAMP
    return KIND_DICT


def common_kind(left: pa.DataType, right: pa.DataType, where: object) -> str:
    """The kind both sides of an equi-join are coded in; QueryTypeError if incomparable.

    ``where`` names the join in the error (a string, or a sqlglot node described lazily).
    """
    lk, rk = key_kind(left), key_kind(right)
    if lk == rk:
        if lk == KIND_DICT and not _same_dict_family(left, right):
            raise QueryTypeError(f"cannot join {left} with {right} in {_place(where)}")
        if lk == KIND_INT and pa.types.is_date(left) != pa.types.is_date(right):
            raise QueryTypeError(f"cannot join {left} with {right} in {_place(where)}")
        if lk == KIND_INT and _ubigint_meets_signed(left, right):
            return KIND_DECIMAL  # UBIGINT above 2**63 meets a signed key: exact values
        return lk
    if (
        lk in _NUMERIC_RANK
        and rk in _NUMERIC_RANK
        and not (pa.types.is_date(left) or pa.types.is_date(right))
    ):
        return wider_kind(lk, rk)
    raise QueryTypeError(f"cannot join {left} with {right} in {_place(where)}")


def _ubigint_meets_signed(left: pa.DataType, right: pa.DataType) -> bool:
    """Whether a UBIGINT key meets a signed one. KIND_INT codes a UBIGINT by wrapping it
    around into BIGINT: a key above 2**63 becomes negative, which no unsigned value equals
    but a signed one could; smaller unsigned types never wrap."""
    return (pa.types.is_uint64(left) and pa.types.is_signed_integer(right)) or (
        pa.types.is_uint64(right) and pa.types.is_signed_integer(left)
    )


def _place(where: object) -> str:
    return where if isinstance(where, str) else describe(where)


def _same_dict_family(a: pa.DataType, b: pa.DataType) -> bool:
    def family(t: pa.DataType) -> str:
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return "string"
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return "binary"
        return str(t)

    return family(a) == family(b)


class KeyDictionary:
    """Dense int codes for values of a join column that are not dense themselves.

    The build side calls :meth:`encode` with ``grow=True`` and new values get the next
    codes; the probe side uses ``grow=False`` and values never built get code -1 (they can
    match nothing). Integer keys (e.g. the mixed keys of multi-column joins) use a pandas
    Index, whose hash table persists between lookups; other types use pyarrow's
    ``index_in``, which hashes the known values on each call.
    """

    def __init__(self) -> None:
        self._values: pa.Array | None = None
        self._int_index: pd.Index | None = None

    def encode(self, values: pa.Array, grow: bool) -> np.ndarray:
        if pa.types.is_int64(values.type) and values.null_count == 0:
            return self._encode_ints(values.to_numpy(), grow)
        if pa.types.is_large_string(values.type):
            values = values.cast(pa.string())
        if grow:
            distinct = pc.unique(values.drop_null())
            if self._values is None:
                self._values = distinct
            else:
                known = pc.is_in(distinct, value_set=self._values)
                fresh = distinct.filter(pc.invert(known))
                if len(fresh):
                    self._values = pa.concat_arrays([self._values, fresh])
        if self._values is None or len(self._values) == 0:
            return np.full(len(values), -1, dtype=np.int64)
        codes = pc.index_in(values, value_set=self._values)
        return _filled(codes, -1).astype(np.int64, copy=False)

    def _encode_ints(self, values: np.ndarray, grow: bool) -> np.ndarray:
        index = self._int_index
        if grow:
            if index is None:
                index = pd.Index(pd.unique(values))
            else:
                unseen = values[index.get_indexer(values) < 0]
                if len(unseen):
                    index = index.append(pd.Index(pd.unique(unseen)))
            self._int_index = index
        if index is None:
            return np.full(len(values), -1, dtype=np.int64)
        return index.get_indexer(values).astype(np.int64, copy=False)


def validity(values: pa.Array) -> np.ndarray | None:
    """Boolean mask of non-null entries, or None when there are no nulls."""
    if values.null_count == 0:
        return None
    return pc.is_valid(values).to_numpy(zero_copy_only=False)


def encode_column(
    values: pa.Array, kind: str, dictionary: KeyDictionary | None, grow: bool
) -> np.ndarray:
    """int64 codes for one key column (nulls get an arbitrary code; mask them separately)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if kind == KIND_INT:
        if pa.types.is_date(values.type):
            values = values.cast(pa.date32()).cast(pa.int32())
        return _filled(values.cast(pa.int64(), safe=not pa.types.is_uint64(values.type)), 0)
    if kind == KIND_TIMESTAMP:
        values = values.cast(pa.timestamp("us", tz=values.type.tz)).cast(pa.int64())
        return _filled(values, 0)
    if kind == KIND_DECIMAL:
        assert dictionary is not None
        if pa.types.is_uint64(values.type):
            values = values.cast(pa.decimal128(38, 0))
        elif pa.types.is_integer(values.type) or pa.types.is_boolean(values.type):
            values = values.cast(pa.int64()).cast(pa.decimal128(38, 0))
        return dictionary.encode(values.cast(DECIMAL_KEY_TYPE), grow)
    if kind == KIND_FLOAT32:
        if pa.types.is_decimal(values.type):
            values = decimal_to_float(values, pa.float32())
        values = pc.cast(pc.cast(values, pa.float32(), safe=False), pa.float64())
        kind = KIND_FLOAT
    if kind == KIND_FLOAT:
        as_float = _filled(as_double(values), 0.0).copy()
        as_float[as_float == 0.0] = 0.0  # -0.0 == 0.0 in SQL
        return as_float.view(np.int64)
    assert dictionary is not None
    return dictionary.encode(values, grow)


def _filled(values: pa.Array, fill) -> np.ndarray:
    """NumPy values with nulls replaced (their rows are masked out by the caller)."""
    if values.null_count:
        values = values.fill_null(fill)
    return values.to_numpy(zero_copy_only=False)


def mix_codes(columns: list[np.ndarray]) -> np.ndarray:
    """Combine per-column int64 codes into one int64 hash (splitmix64-style mixing)."""
    if len(columns) == 1:
        return columns[0]
    with np.errstate(over="ignore"):
        h = np.full(len(columns[0]), 0x9E3779B97F4A7C15, dtype=np.uint64)
        for col in columns:
            x = col.view(np.uint64) ^ h
            x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            h = x ^ (x >> np.uint64(31))
    return h.view(np.int64)


def encode_rows(
    store: TableStore,
    columns: tuple[str, ...],
    row_ids: np.ndarray,
    kinds: tuple[str, ...],
    dictionaries: list[KeyDictionary | None],
    grow: bool,
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray | None]:
    """Join keys of the rows ``row_ids`` (int64) of ``store``: ``(mixed keys, per-column
    codes, validity mask or None)``, each of ``len(row_ids)``; one ``kinds`` entry and one
    dictionary (or None) per column. With ``grow=False`` a dictionary value never inserted
    gets code -1 and matches nothing. Shared by SteM indexes and STAIRs."""
    codes: list[np.ndarray] = []
    valid: np.ndarray | None = None
    for col, kind, dictionary in zip(columns, kinds, dictionaries, strict=True):
        if kind == KIND_INT:
            # No NULLs: NumPy indexing, or a zero-copy slice for a range of ids (a scan's
            # batch, a SteM of a whole table), where a gather wrote 8 bytes a row.
            values = store.int64_values(col, row_ids)
            if values is not None:
                codes.append(values)
                continue
        values = store.gather(col, row_ids)
        mask = validity(values)
        if mask is not None:
            valid = mask if valid is None else valid & mask
        codes.append(encode_column(values, kind, dictionary, grow))
    return mix_codes(codes), codes, valid
