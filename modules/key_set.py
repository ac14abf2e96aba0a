"""Exact dense ids for multi-column values: EOT sets and row identities in SteMs.

A SteM on a table with index AMs must know, for a probe, whether an EOT tuple with the
probe's bind values is there (stems-2003 §2.1.4: then it holds all matches), and a SteM on a
table with competing AMs must recognize a row it already holds (§3.2). Both need exact
equality on several columns, vectorized: each column's values become dense codes (a
:class:`~eddies.modules.key_encoding.KeyDictionary` over the kind codes of
:mod:`eddies.modules.key_encoding`), and columns are folded in pairwise, ``(id << 32) |
code`` → dense id, through one more dictionary per step, so no hash can collide. NULL is a
value here (two rows that are both NULL in a column are the same row; its code is odd,
every value's even); EOT keys never hold NULLs, since NULL never joins.
"""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddies.modules.base import gather_nullable
from eddies.modules.key_encoding import (
    KeyDictionary,
    encode_column,
    uses_dictionary,
    validity,
)


class DenseKeys:
    """Dense int64 ids (0, 1, 2, ...) for tuples of values in columns of given kinds."""

    def __init__(self, kinds: tuple[str, ...]) -> None:
        self.kinds = kinds
        self._values = [KeyDictionary() if uses_dictionary(k) else None for k in kinds]
        self._codes = [KeyDictionary() for _ in kinds]
        # Pairs of (id so far, next column's code) -> dense ids; one column: code -> id.
        self._pairs = [KeyDictionary() for _ in kinds[1:]] or [KeyDictionary()]
        self.size = 0  # ids handed out so far

    def ids(self, columns: list[pa.Array], grow: bool) -> np.ndarray:
        """The id of each row of ``columns``; with ``grow=False`` unseen tuples get -1."""
        n = len(columns[0]) if columns else 0
        result: np.ndarray | None = None
        for i, (values, kind) in enumerate(zip(columns, self.kinds, strict=True)):
            raw = encode_column(values, kind, self._values[i], grow)
            valid = validity(values)
            if valid is not None:
                raw = np.where(valid, raw, 0)
            dense = self._codes[i].encode(pa.array(raw, pa.int64()), grow)
            # Even codes for values, odd for NULL: NULL is a value of its own here.
            nulls = 0 if valid is None else ~valid
            dense = np.where(dense < 0, -1, dense * 2 + nulls)
            if result is None:
                result = dense
                if len(self.kinds) == 1:  # odd NULL codes leave gaps: make them dense
                    unknown = result < 0
                    result = self._pairs[0].encode(pa.array(result, pa.int64()), grow)
                    if unknown.any():
                        result = np.where(unknown, -1, result)
                continue
            unknown = (result < 0) | (dense < 0)
            paired = (result << 32) | np.where(dense < 0, 0, dense)
            result = self._pairs[i - 1].encode(pa.array(paired, pa.int64()), grow)
            if unknown.any():
                result = np.where(unknown, -1, result)
        if result is None:
            return np.zeros(n, dtype=np.int64)
        if grow and len(result):
            self.size = max(self.size, int(result.max()) + 1)
        return result


class KeySet:
    """A set of multi-column keys: ``add`` some, then ask which rows are ``contains``-ed."""

    def __init__(self, kinds: tuple[str, ...]) -> None:
        self._keys = DenseKeys(kinds)
        self._present = np.zeros(0, dtype=bool)

    def __len__(self) -> int:
        return int(self._present.sum())

    def add(self, columns: list[pa.Array]) -> None:
        ids = self._keys.ids(columns, grow=True)
        if self._keys.size > len(self._present):
            grown = np.zeros(max(self._keys.size, 2 * len(self._present)), dtype=bool)
            grown[: len(self._present)] = self._present
            self._present = grown
        self._present[ids] = True

    def contains(self, columns: list[pa.Array]) -> np.ndarray:
        ids = self._keys.ids(columns, grow=False)
        found = (ids >= 0) & (ids < len(self._present))
        found[found] = self._present[ids[found]]
        return found


def bind_columns(
    store, columns: tuple[str, ...], types: list[pa.DataType], row_ids: np.ndarray
) -> tuple[list[pa.Array], np.ndarray]:
    """The values of ``columns`` at ``row_ids`` in the bound table's ``types``, and a mask
    of the rows whose values can match at all (no NULL; unchanged by the cast, so an int
    column bound by 1.5 looks nothing up)."""
    n = len(row_ids)
    usable = np.ones(n, dtype=bool)
    out: list[pa.Array] = []
    for col, target in zip(columns, types, strict=True):
        values = gather_nullable(store, col, row_ids)  # -1: a NULL-padded tuple
        valid = validity(values)
        if valid is not None:
            usable &= valid
        if values.type != target:
            if _exact_kind(values.type) and _exact_kind(target):
                values, same = _exact_cast(values, target)
            else:
                cast = pc.cast(values, target, safe=False)
                back = pc.cast(cast, values.type, safe=False)
                same = pc.fill_null(pc.equal(back, values), False)
                values = cast
            usable &= same.to_numpy(zero_copy_only=False)
        out.append(values)
    return out, usable


def _exact_kind(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_decimal(t)


def _exact_cast(values: pa.Array, target: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """Integer/DECIMAL ``values`` in ``target`` and a mask of those that are exactly equal
    there (2.00 binds integer 2; 2.50 and out-of-range values bind nothing).

    Values are compared in DECIMAL(38, s) (s the larger scale), then the usable ones cast
    exactly; the others become 0, masked out by the caller."""
    scale = max(getattr(values.type, "scale", 0), getattr(target, "scale", 0))
    wide_type = pa.decimal128(38, scale)
    wide = values.cast(pa.int64()).cast(pa.decimal128(38, 0)) if _is_int(values) else values
    wide = wide.cast(wide_type)
    if pa.types.is_integer(target):
        info = np.iinfo(target.to_pandas_dtype())
        lo = pa.scalar(decimal.Decimal(int(info.min)), wide_type)
        hi = pa.scalar(decimal.Decimal(int(info.max)), wide_type)
        same = pc.and_(
            pc.equal(pc.floor(wide), wide),
            pc.and_(pc.greater_equal(wide, lo), pc.less_equal(wide, hi)),
        )
    else:
        limit = pa.scalar(decimal.Decimal(10) ** (target.precision - target.scale), wide_type)
        rounded = pc.round(wide, ndigits=target.scale)
        same = pc.and_(pc.equal(rounded, wide), pc.less(pc.abs(wide), limit))
    same = pc.fill_null(same, False)
    zero = pa.scalar(decimal.Decimal(0), wide_type)
    safe = pc.if_else(same, wide, zero)
    if pa.types.is_integer(target):
        return safe.cast(target), same
    return safe.cast(pa.decimal128(38, target.scale)).cast(target), same


def _is_int(values: pa.Array) -> bool:
    return pa.types.is_integer(values.type) or pa.types.is_boolean(values.type)
