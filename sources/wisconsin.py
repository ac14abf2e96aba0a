"""Wisconsin benchmark relations as pyarrow Tables.

The relations of DeWitt's Wisconsin benchmark (D. Bitton, D. J. DeWitt, C. Turbyfill,
"Benchmarking Database Systems: A Systematic Approach", VLDB 1983; D. J. DeWitt, "The
Wisconsin Benchmark: Past, Present, and Future", in J. Gray (ed.), *The Benchmark Handbook*,
1993). A relation of ``n`` rows has 16 columns:

=================  ==========  ===============================================================
column             type        definition (``u1`` = unique1, ``u2`` = unique2)
=================  ==========  ===============================================================
unique1            int64       a random permutation of 0..n-1 (seeded ``numpy.random.Generator``)
unique2            int64       0..n-1 in order (the tuple's position; the classic key)
two                int64       u1 mod 2
four               int64       u1 mod 4
ten                int64       u1 mod 10
twenty             int64       u1 mod 20
onePercent         int64       u1 mod 100   (100 values: each selects 1% of the rows)
tenPercent         int64       u1 mod 10    (10 values: 10% each)
twentyPercent      int64       u1 mod 5     (5 values: 20% each)
fiftyPercent       int64       u1 mod 2     (2 values: 50% each)
unique3            int64       u1
evenOnePercent     int64       onePercent * 2
oddOnePercent      int64       onePercent * 2 + 1
stringu1           string      52 chars: u1 written in base 26 over A..Z in the first 7
                               characters (least significant letter first, so 0 -> "AAAAAAA",
                               1 -> "BAAAAAA", 26 -> "ABAAAAA"), then 45 ``x``; unique
stringu2           string      the same from u2 (so it sorts like nothing useful; unique)
string4            string      52 chars cycling over "AAAA", "HHHH", "OOOO", "VVVV" by u2 mod 4,
                               then 48 ``x`` (4 distinct values, 25% each)
=================  ==========  ===============================================================

Column names keep the benchmark's mixed case (``onePercent``); SQL front ends that fold
identifiers to lower case still resolve them case-insensitively. Integers are int64 so
they join with the other int64 sources without casts. The whole table is built with
vectorized NumPy (strings as one ``(n, 52)`` uint8 matrix turned into an Arrow string
array through its buffers): about 20 ms for 100,000 rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["COLUMNS", "STRING_WIDTH", "wisconsin_table", "wisconsin_tables"]

COLUMNS = (
    "unique1",
    "unique2",
    "two",
    "four",
    "ten",
    "twenty",
    "onePercent",
    "tenPercent",
    "twentyPercent",
    "fiftyPercent",
    "unique3",
    "evenOnePercent",
    "oddOnePercent",
    "stringu1",
    "stringu2",
    "string4",
)

STRING_WIDTH = 52  # every string attribute is 52 bytes long
_SIGNIFICANT = 7  # leading letters that carry the value in stringu1/stringu2
_STRING4_LETTERS = np.frombuffer(b"AHOV", dtype=np.uint8)
_A, _X = ord("A"), ord("x")


def _fixed_width_strings(chars: np.ndarray) -> pa.StringArray:
    """An Arrow string array whose i-th value is the ASCII bytes ``chars[i, :]``."""
    n, width = chars.shape
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    data = np.ascontiguousarray(chars, dtype=np.uint8).reshape(-1)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _unique_strings(values: np.ndarray) -> pa.StringArray:
    """stringu1/stringu2: base-26 letters of ``values`` (least significant first) + x padding."""
    if values.size and int(values.max()) >= 26**_SIGNIFICANT:
        raise ValueError(f"Wisconsin string attributes hold values below 26**{_SIGNIFICANT}")
    chars = np.full((values.size, STRING_WIDTH), _X, dtype=np.uint8)
    place = values.astype(np.int64, copy=True)
    for k in range(_SIGNIFICANT):  # 7 vectorized steps, not a loop over rows
        chars[:, k] = _A + place % 26
        place //= 26
    return _fixed_width_strings(chars)


def _string4(positions: np.ndarray) -> pa.StringArray:
    chars = np.full((positions.size, STRING_WIDTH), _X, dtype=np.uint8)
    chars[:, :4] = _STRING4_LETTERS[positions % 4][:, None]
    return _fixed_width_strings(chars)


def wisconsin_table(
    n: int,
    *,
    seed: int | np.random.Generator | None = 0,
    columns: list[str] | tuple[str, ...] | None = None,
) -> pa.Table:
    """One Wisconsin relation of ``n`` rows (shape ``(n, 16)``, or ``(n, len(columns))``).

    ``seed`` seeds the ``numpy.random.Generator`` that draws the ``unique1`` permutation
    (pass a Generator to share one stream between relations); equal seeds give equal
    tables. ``columns`` selects (and orders) a subset of :data:`COLUMNS`; the strings,
    the only costly part, are built only when asked for.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    wanted = tuple(COLUMNS if columns is None else columns)
    unknown = [c for c in wanted if c not in COLUMNS]
    if unknown:
        raise ValueError(f"unknown Wisconsin columns {unknown}; the columns are {COLUMNS}")

    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    unique1 = rng.permutation(n).astype(np.int64)
    unique2 = np.arange(n, dtype=np.int64)
    one_percent = unique1 % 100

    makers = {
        "unique1": lambda: unique1,
        "unique2": lambda: unique2,
        "two": lambda: unique1 % 2,
        "four": lambda: unique1 % 4,
        "ten": lambda: unique1 % 10,
        "twenty": lambda: unique1 % 20,
        "onePercent": lambda: one_percent,
        "tenPercent": lambda: unique1 % 10,
        "twentyPercent": lambda: unique1 % 5,
        "fiftyPercent": lambda: unique1 % 2,
        "unique3": lambda: unique1.copy(),
        "evenOnePercent": lambda: one_percent * 2,
        "oddOnePercent": lambda: one_percent * 2 + 1,
        "stringu1": lambda: _unique_strings(unique1),
        "stringu2": lambda: _unique_strings(unique2),
        "string4": lambda: _string4(unique2),
    }
    return pa.table({name: makers[name]() for name in wanted})


def wisconsin_tables(
    count: int,
    n: int,
    *,
    seed: int = 0,
    columns: list[str] | tuple[str, ...] | None = None,
) -> list[pa.Table]:
    """``count`` independent relations of ``n`` rows each (seeds ``seed``, ``seed + 1``, ...).

    Independent ``unique1`` permutations make joins on ``unique1`` between two relations
    (or ``unique1`` of one with ``unique2`` of another) one-to-one but unaligned in scan order.
    """
    return [wisconsin_table(n, seed=seed + i, columns=columns) for i in range(count)]
