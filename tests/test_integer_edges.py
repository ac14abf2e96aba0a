"""Integers at the edges of BIGINT, against DuckDB.

- Arrow's sum kernels wrap around: ``SUM`` of three 2**62 came back negative, without a
  word. A sum whose bound (largest magnitude x count) reaches 2**63 is now summed exactly
  (relational.widen_risky_sums): the answer is exact whenever it fits BIGINT, and an
  ExpressionError naming the aggregate when it does not (DuckDB gives a HUGEINT there).
- UBIGINT values above 2**63 met signed operands through a BIGINT cast: comparisons failed
  and a UBIGINT = TINYINT join raised a raw ArrowInvalid.
- An integer literal took INTEGER, so ``u8 + 1`` gave 256 where DuckDB (whose literal takes
  the column's type when it fits) raises an overflow; ``MIN // -1`` and ``MIN % -1``
  wrapped around without a word.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import check_all, make_catalog

from eddies.engine import EddiesError, execute
from eddies.errors import ExpressionError

POLICIES = ("lottery", "rank", "hybrid", "static")
BIG = 2**62

T = pa.table(
    {
        "a": pa.array([BIG, BIG, -BIG, 5, None, -(2**63), 2**63 - 1], pa.int64()),
        "g": pa.array([1, 1, 2, 1, 1, 3, 3], pa.int64()),
        "n": pa.array([7, 8, 9, 10, 11, 12, 13], pa.int32()),
    }
)
X = pa.table(
    {
        "u": pa.array([0, 2**63 + 5, 7, None, 2**64 - 1], pa.uint64()),
        "i": pa.array([-128, 127, 7, None, 0], pa.int8()),
        "s": pa.array([0, 255, 7, None, 200], pa.uint8()),
    }
)
TABLES = {"t": T, "x": X}


@pytest.mark.parametrize(
    "sql",
    [
        # the bound is reached but each answer fits BIGINT: exact
        "SELECT sum(a) FROM t WHERE g = 1 OR g = 2",
        "SELECT g, sum(a) FROM t WHERE g >= 2 GROUP BY g",
        "SELECT g, sum(a), count(a) FROM t WHERE g = 3 GROUP BY g",
        "SELECT sum(a) FROM t WHERE g = 3",
        "SELECT sum(n), sum(a) FILTER (WHERE g = 2) FROM t",
        # UBIGINT above 2**63 with signed and unsigned operands
        "SELECT u, u > 5, u = 7, u < i, u = s FROM x",
        "SELECT least(u, 3), greatest(u, i) FROM x",
        "SELECT a.u, b.i FROM x a JOIN x b ON a.u = b.i",
        "SELECT a.u, b.s FROM x a JOIN x b ON a.u = b.s",
        "SELECT a.u, b.u FROM x a JOIN x b ON a.u = b.u",
        "SELECT a.s, b.i FROM x a JOIN x b ON a.s = b.i",  # UTINYINT never wraps: int codes
        "SELECT u FROM x WHERE u IN (SELECT i FROM x)",
        "SELECT u, count(*) FROM x GROUP BY u",
    ],
)
def test_integer_edges_match_duckdb(sql):
    check_all(sql, TABLES, policies=POLICIES, batch_sizes=(None, 1, 7))


@pytest.mark.parametrize(
    "expr",
    [
        "s + 0",
        "s - 0",
        "0 + s",
        "s * 1",
        "s + (-1)",  # -1 is no UTINYINT: INTEGER arithmetic, no overflow
        "s + 300",
        "s - (-1)",  # INTEGER again: 255 - (-1) is 256
        "i + 0 + 0",
        "s // 2",
        "s % 3",
        "i // 1",
        "u + 0",
        "s + CAST(1 AS INTEGER)",  # a CAST is no literal
        "1 + 1 + s",  # nor is a folded sum
        "s + NULL",
    ],
)
def test_integer_literals_take_the_other_operands_type_as_in_duckdb(expr):
    check_all(f"SELECT {expr} AS v FROM x", TABLES, policies=("hybrid",), batch_sizes=(None,))


@pytest.mark.parametrize(
    "sql",
    [
        # round keeps a signed integer's type and makes an unsigned one a BIGINT
        "SELECT round(s), round(s, -1), round(s, -2) * 256, round(n, -1), round(g, 2) FROM x, t",
        "SELECT round(i, -1) FROM x",  # 127 rounds to 130: TINYINT overflow, both engines
        "SELECT round(a, -1) FROM t",  # 2**63 - 1 rounds past BIGINT
        # integers beyond 2**53 reach stddev/variance rounded, as DuckDB casts them (Arrow's
        # safe cast raised a raw ArrowInvalid)
        "SELECT stddev_samp(a), var_pop(a), stddev_pop(a), variance(a) FROM t",
        "SELECT g, stddev_samp(a) FROM t GROUP BY g",
        # no arithmetic on BOOLEAN in DuckDB
        "SELECT (s > 1) / 2 FROM x",
        "SELECT (s > 1) % 2, 2 // (s > 1) FROM x",
    ],
)
def test_round_and_boolean_arithmetic_as_in_duckdb(sql):
    check_all(sql, TABLES, policies=("hybrid",), batch_sizes=(None,), errors_too=True)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT s + 1 FROM x",  # 255 + 1 overflows UTINYINT (DuckDB: an Out of Range error)
        "SELECT 1 - s FROM x",
        "SELECT s * 2 FROM x",
        "SELECT i - 1 FROM x",  # -128 - 1 overflows TINYINT
        "SELECT i * -1 FROM x",
        "SELECT u + 1 FROM x",  # 2**64 - 1 + 1
        "SELECT i // -1 FROM x",  # -128 // -1: the quotient does not fit
        "SELECT i % -1 FROM x",
        "SELECT a // -1 FROM t",  # BIGINT's minimum
        "SELECT a % -1 FROM t",
    ],
)
def test_integer_overflow_is_an_error_as_in_duckdb(sql):
    """Each overflows in DuckDB too (checked here, so the test follows its rules)."""
    import duckdb

    con = duckdb.connect()
    for name, table in TABLES.items():
        con.register(name, table)
    with pytest.raises(duckdb.OutOfRangeException):
        con.sql(sql).fetchall()
    with pytest.raises(ExpressionError, match="overflow"):
        execute(sql, make_catalog(TABLES))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT sum(a) FROM t WHERE g = 1",
        "SELECT g, sum(a) FROM t GROUP BY g",
        "SELECT sum(u) FROM x",
    ],
)
def test_a_sum_out_of_bigint_range_is_an_error_naming_it(sql):
    with pytest.raises(ExpressionError, match=r"SUM\(.*is out of BIGINT range"):
        execute(sql, make_catalog(TABLES))


def test_streaming_sums_are_checked_too():
    """The incremental aggregate merges partial sums batch by batch: each partial sum
    fits, their merge does not, and that is the same clear error."""
    from eddies.engine import Catalog
    from eddies.engine.streaming.sinks import CallbackSink
    from eddies.engine.streaming.thread_runner import BackgroundQuery

    cat = Catalog()
    stream = cat.add_stream("s", pa.schema([("a", pa.int64()), ("g", pa.int64())]))
    query = BackgroundQuery(
        "SELECT s.g, sum(s.a) FROM s GROUP BY s.g", cat, sink=CallbackSink(lambda t, tag: None)
    )
    stream.push(pa.table({"a": pa.array([BIG, BIG], pa.int64()), "g": [1, 1]}), 0)
    query.commit(0, timeout=60)
    stream.push(pa.table({"a": pa.array([BIG, 1], pa.int64()), "g": [1, 2]}), 1)
    stream.close()
    with pytest.raises(EddiesError, match="out of BIGINT range"):
        query.result(timeout=60)


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.none(), st.integers(-(2**63), 2**63 - 1), st.sampled_from([BIG, -BIG, 2**63 - 1])
        ),
        min_size=1,
        max_size=6,
    ),
    groups=st.lists(st.integers(0, 2), min_size=6, max_size=6),
)
def test_sums_are_exact_or_refused(values, groups):
    """Either DuckDB's exact HUGEINT sum, when it fits BIGINT, or our ExpressionError."""
    import duckdb
    from oracle import assert_same_bag

    table = pa.table(
        {"a": pa.array(values, pa.int64()), "g": pa.array(groups[: len(values)], pa.int64())}
    )
    sql = "SELECT g, sum(a) FROM t GROUP BY g"
    con = duckdb.connect()
    con.register("t", table)
    sums = [row[1] for row in con.sql(sql).fetchall()]
    fits = all(s is None or -(2**63) <= s < 2**63 for s in sums)
    if fits:
        assert_same_bag(execute(sql, make_catalog({"t": table})), sql, {"t": table})
    else:
        with pytest.raises(ExpressionError):
            execute(sql, make_catalog({"t": table}))
