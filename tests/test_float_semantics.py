"""FLOAT, DOUBLE and DECIMAL meeting each other, against DuckDB (the installed release).

Two drifts from DuckDB, both wrong answers without a word before they were fixed:

- Arrow's cast from DECIMAL to DOUBLE can be one ulp off (``0.3`` became
  0.30000000000000004), so ``WHERE h = 0.3`` over a DOUBLE column kept 0.1 + 0.2 and
  dropped 0.3, and a DECIMAL join key missed an equal DOUBLE key
  (``eddies.sources.decimal_float`` converts correctly rounded).
- DuckDB computes FLOAT (single precision) with integers and DECIMALs as FLOAT; the engine
  widened to DOUBLE, so ``g = 0.1`` over a FLOAT column was false and ``g + 0.1`` had
  another value; FLOAT join keys met DECIMAL keys in DOUBLE and missed.
- ``%`` went through DOUBLE: ``0.3 % 0.1`` was 0.09999999999999998 (DuckDB: 0.0, a
  DECIMAL), ``1e300 % 7`` was 0, and a float divided by zero raised where DuckDB gives NaN.

Every query runs under several policies at batch sizes 1, 7 and the default and is
compared with DuckDB as a bag of rows (NULLs and duplicates included).
"""

from __future__ import annotations

import decimal
import os

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import check_all

from eddies.sources.decimal_float import as_double, decimal_to_float

D = decimal.Decimal
POLICIES = ("lottery", "rank", "hybrid", "static")
BATCH_SIZES = (None, 1, 7)
MAX_EXAMPLES = int(os.environ.get("EDDIES_FLOAT_EXAMPLES", "40"))


def _table(rows: list[tuple]) -> pa.Table:
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in range(5)]
    return pa.table(
        {
            "g": pa.array(cols[0], pa.float32()),
            "h": pa.array(cols[1], pa.float64()),
            "m": pa.array(cols[2], pa.decimal128(6, 2)),
            "k": pa.array(cols[3], pa.decimal128(20, 6)),  # too wide for the exact fast path
            "n": pa.array(cols[4], pa.int32()),
        }
    )


ROWS = [
    (0.1, 0.1, D("0.10"), D("0.100000"), 1),
    (0.2, 0.1 + 0.2, D("0.20"), D("0.300000"), 2),
    (0.3, 0.3, D("0.30"), D("12345678901234.300000"), 3),
    (None, None, None, None, None),
    (-0.3, -0.3, D("-0.30"), D("-0.300000"), -3),
    (1.5, 1 / 3, D("1.50"), D("0.333333"), 0),
    (0.3, 0.3, D("0.30"), D("0.300000"), 3),  # a duplicate row
    (16777217.0, 16777217.0, D("9999.99"), D("16777217.000000"), 16777217),
]
T = _table(ROWS)


def _check(sql: str, tables: dict[str, pa.Table]) -> None:
    check_all(sql, tables, policies=POLICIES, batch_sizes=BATCH_SIZES, errors_too=True)


@pytest.mark.parametrize(
    "sql",
    [
        # DOUBLE against DECIMAL literals and columns
        "SELECT h FROM t WHERE h = 0.3",
        "SELECT h FROM t WHERE h > 0.3",
        "SELECT h FROM t WHERE h IN (0.3, 0.1)",
        "SELECT h FROM t WHERE h BETWEEN 0.3 AND 0.3",
        "SELECT h, h = m, h + m, h * m, h / m, h - 0.3 FROM t",
        "SELECT CAST(m AS DOUBLE), CAST(k AS DOUBLE), CAST(m AS FLOAT), CAST(k AS FLOAT) FROM t",
        "SELECT 0.1::DOUBLE + 0.2::DOUBLE = 0.3, (0.1::DOUBLE + 0.2::DOUBLE) - 0.3",
        "SELECT CAST(0.30000000000000004 AS DOUBLE) = 0.3",
        "SELECT avg(m), avg(k), stddev(m), variance(k) FROM t",
        "SELECT sqrt(m), power(m, 2), ln(k + 1) FROM t WHERE m > 0",
        # FLOAT with integers, DECIMALs and DOUBLEs
        "SELECT g, g = 0.1, g = 0.3, g > 0.1, g + 0.1, g * 2, g - n, g * n FROM t",
        "SELECT g / 2, g / n, g % 0.25, g // 1, 1::FLOAT / 3 FROM t",
        "SELECT g FROM t WHERE g BETWEEN 0.1 AND 0.3",
        "SELECT g, m FROM t WHERE g = m",
        "SELECT g, n FROM t WHERE g = n",
        "SELECT g, h FROM t WHERE g = h",
        "SELECT coalesce(g, 0.5), CASE WHEN n > 1 THEN g ELSE m END, greatest(g, m) FROM t",
        "SELECT 0.1::FLOAT = 0.1, 0.1::FLOAT + 0.2, 0.3::DOUBLE = 0.3",
        # join keys and membership across the three types
        "SELECT a.m, b.h FROM t a JOIN t b ON a.m = b.h",
        "SELECT a.k, b.h FROM t a JOIN t b ON a.k = b.h",
        "SELECT a.g, b.m FROM t a JOIN t b ON a.g = b.m",
        "SELECT a.g, b.n FROM t a JOIN t b ON a.g = b.n",
        "SELECT a.g, b.h FROM t a JOIN t b ON a.g = b.h",
        "SELECT h FROM t WHERE h IN (SELECT m FROM t)",
        "SELECT g FROM t WHERE g IN (SELECT m FROM t)",
        "SELECT g FROM t WHERE g NOT IN (SELECT m FROM t WHERE m IS NOT NULL)",
        "SELECT h, count(*) FROM t GROUP BY h",
        "SELECT m FROM t UNION SELECT h FROM t",
        # DECIMALs past 38 digits in Arrow's typing (DuckDB caps at 38, errs on overflow)
        "SELECT k * k, k * 0.5, k + m FROM t WHERE k < 1000",
        "SELECT sum(k) * 1.5, sum(m) - 0.25, sum(k) + sum(k) FROM t",
        "SELECT g FROM t INTERSECT SELECT m FROM t",
        # % : exact over DECIMALs (0.3 % 0.1 was 0.09999999999999998 through DOUBLE), C's
        # fmod over floats (1e300 % 7 is 1), NaN for a float divided by zero
        "SELECT m % 0.1, k % 0.3, m % n, m % -0.07, 0.3 % 0.1, m % 3, -m % 0.3 FROM t WHERE n <> 0",
        "SELECT n % m, k % m, m % k, h % 0.0, g % 0, h % h, 1e300 % h, h % 0.1 FROM t",
        "SELECT m % 0 FROM t",  # a zero DECIMAL divisor is an error, as in DuckDB
        # trunc, floor and ceil typed as DuckDB; CAST to FLOAT out of range is an error
        "SELECT trunc(m), trunc(m, 1), trunc(k, 3), trunc(h), trunc(h, 2), trunc(g) FROM t",
        "SELECT trunc(n), trunc(n, 2) FROM t",
        "SELECT trunc(n, -1), trunc(m, -1), trunc(h, NULL), round(h, NULL), trunc(-2.5) FROM t",
        "SELECT floor(n) + 2147483647, ceil(n), floor(m), ceil(m), floor(g), ceil(k) FROM t",
        "SELECT floor(CAST(-99999.99 AS DECIMAL(7, 2))), ceil(CAST(99999.99 AS DECIMAL(7, 2)))",
        "SELECT trunc(-0.5), trunc(0.5), trunc(0.05, 1), trunc(-9.99, 1)",
        "SELECT CAST(h * 1e300 AS FLOAT) FROM t",
        "SELECT TRY_CAST(h * 1e300 AS FLOAT), CAST(h AS FLOAT) FROM t",
    ],
)
def test_float_decimal_semantics_match_duckdb(sql):
    _check(sql, {"t": T})


@settings(max_examples=200, deadline=None)
@given(
    digits=st.integers(min_value=-(10**38) + 1, max_value=10**38 - 1),
    precision=st.integers(min_value=1, max_value=38),
    scale_fraction=st.floats(min_value=0, max_value=1),
)
def test_decimal_to_float_is_correctly_rounded(digits, precision, scale_fraction):
    """Every decimal converts to the float DuckDB gives (correctly rounded), both widths,
    through the exact fast path (<= 15 digits) and through text."""
    scale = round(scale_fraction * precision)
    unscaled = abs(digits) % (10**precision) * (1 if digits >= 0 else -1)
    value = D(f"{unscaled}E-{scale}")  # exact (arithmetic would round to 28 digits)
    dtype = pa.decimal128(precision, scale)
    negative = value.copy_negate()  # exact (unary minus rounds to 28 digits)
    values = pa.array([value, None, negative], dtype)
    for target, sql_type in ((pa.float64(), "DOUBLE"), (pa.float32(), "FLOAT")):
        expected = duckdb.sql(
            f"SELECT CAST(x AS {sql_type}) FROM (VALUES (?::DECIMAL({precision}, {scale})), "
            f"(NULL), (?::DECIMAL({precision}, {scale}))) v(x)",
            params=[value, negative],
        ).fetchall()
        got = decimal_to_float(values, target).to_pylist()
        assert got == [row[0] for row in expected], (value, dtype, target)
        scalar = decimal_to_float(pa.scalar(value, dtype), target)
        assert scalar.as_py() == expected[0][0]


def test_decimal_to_float_keeps_shapes_and_refuses_other_types():
    values = pa.chunked_array(
        [pa.array([D("0.3")], pa.decimal128(2, 1)), pa.array([], pa.decimal128(2, 1))]
    )
    assert decimal_to_float(values).to_pylist() == [0.3]
    assert decimal_to_float(values.chunk(0).slice(1)).to_pylist() == []
    assert decimal_to_float(pa.scalar(None, pa.decimal128(2, 1))).as_py() is None
    assert as_double(pa.array([1, 2], pa.int32())).to_pylist() == [1.0, 2.0]
    with pytest.raises(TypeError, match="needs a decimal"):
        decimal_to_float(pa.array([1.0]))
    with pytest.raises(TypeError, match="float32 or float64"):
        decimal_to_float(values, pa.int64())


ROW = st.tuples(
    st.one_of(st.none(), st.sampled_from([0.1, 0.2, 0.3, -0.3, 1.5, 0.0, -0.0, 2.5, 1e7 + 1])),
    st.one_of(st.none(), st.sampled_from([0.1, 0.2, 0.3, 0.1 + 0.2, 1 / 3, -0.0, 2.5])),
    st.one_of(st.none(), st.sampled_from([D("0.10"), D("0.30"), D("2.50"), D("-0.30")])),
    st.one_of(st.none(), st.sampled_from([D("0.1"), D("0.3"), D("0.333333"), D("2.5")])),
    st.one_of(st.none(), st.sampled_from([0, 1, 3, -3, 16777217])),
)
TERMS = ["g", "h", "m", "k", "n", "0.1", "0.3", "2.5", "1::FLOAT"]


@st.composite
def _queries(draw) -> str:
    left, right = draw(st.sampled_from(TERMS)), draw(st.sampled_from(TERMS))
    op = draw(st.sampled_from(["+", "-", "*", "/", "%"]))
    cmp_op = draw(st.sampled_from(["=", "<", ">=", "<>"]))
    other = draw(st.sampled_from(TERMS))
    shape = draw(st.sampled_from(["project", "where", "join"]))
    if shape == "project":
        return f"SELECT {left} {op} {right}, {left} {cmp_op} {other} FROM t"
    if shape == "where":
        return f"SELECT g, h, m FROM t WHERE {left} {op} {right} {cmp_op} {other}"
    a, b = draw(st.sampled_from("ghmkn")), draw(st.sampled_from("ghmkn"))
    return f"SELECT x.{a}, y.{b} FROM t x JOIN t y ON x.{a} = y.{b}"


@pytest.mark.slow  # about 15 s at 40 examples
@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(rows=st.lists(ROW, max_size=10), sql=_queries())
def test_mixed_numeric_queries_match_duckdb(rows, sql):
    _check(sql, {"t": _table(rows)})
