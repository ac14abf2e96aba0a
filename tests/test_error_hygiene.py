"""Every error a user can cause arrives as an EddiesError subclass, as itself.

Never a raw TypeError/KeyError/OverflowError from deep inside, never an ExceptionGroup with
a BrokenResourceError beside the real error; run options are checked at the API edge with
a message naming the option and the bad value (issue 9, item 3).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import trio

from eddies.engine import (
    POLICIES,
    Catalog,
    DataSourceError,
    EddiesError,
    RunOptions,
    UdfError,
    execute,
    open_query,
    run_query,
)
from eddies.engine.streaming.thread_runner import BackgroundQuery

T = pa.table({"a": list(range(60)), "b": list(range(60))})
U = pa.table({"a": list(range(60)), "c": list(range(60))})


def _catalog() -> Catalog:
    cat = Catalog()
    cat.add_table("t", T)
    cat.add_table("u", U)
    return cat


# ---------------------------------------------------------------------------------------
# A failing UDF is a UdfError, every time
# ---------------------------------------------------------------------------------------


def _fail_sync(x):
    raise ValueError("boom")


async def _fail_async(x):
    raise ValueError("boom")


def _fail_vectorized(x):
    raise ValueError("boom")


UDFS = {
    "sync": (_fail_sync, False),
    "async": (_fail_async, False),
    "vectorized": (_fail_vectorized, True),
}
QUERIES = [
    "SELECT * FROM t JOIN u ON t.a = u.a WHERE f(t.b)",  # in an SM, beside SteMs
    "SELECT * FROM t WHERE f(t.b)",
    "SELECT f(t.b) FROM t JOIN u ON t.a = u.a",  # in the SELECT list: the finalizer
    "SELECT f(b) AS x FROM t ORDER BY x",
]


@pytest.mark.parametrize("kind", sorted(UDFS))
def test_failing_udf_is_exactly_udf_error_under_every_schedule(kind):
    """Before the fix, up to ~15% of these runs ended in an ExceptionGroup holding the
    UdfError and a BrokenResourceError: a module that failed closed its inbox (or a module
    cancelled by the failure did, or the consumer closed the result channel under the
    output module's pending send), and the eddy's next send hit it before the cancellation
    reached the eddy."""
    fn, vectorized = UDFS[kind]
    cat = _catalog()
    cat.add_function("f", fn, vectorized=vectorized)
    outcomes: dict[str, int] = {}
    for sql in QUERIES:
        for seed in range(3):
            for policy in POLICIES:
                for batch_size in (1, 7, None):
                    try:
                        execute(sql, cat, seed=seed, policy=policy, batch_size=batch_size)
                        outcome = "no error"
                    except Exception as exc:
                        outcome = type(exc).__name__
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert set(outcomes) == {"UdfError"}, outcomes


def test_failing_udf_inside_open_query_is_udf_error():
    cat = _catalog()
    cat.add_function("f", _fail_sync, vectorized=False)

    async def main() -> None:
        async with open_query("SELECT f(t.b) FROM t JOIN u ON t.a = u.a", cat) as results:
            async for _ in results:
                pass

    with pytest.raises(UdfError) as info:
        trio.run(main)
    assert type(info.value) is UdfError


# ---------------------------------------------------------------------------------------
# Run options: one RunOptions, checked at the edge
# ---------------------------------------------------------------------------------------

BAD_OPTIONS = [
    ("seed", True),
    ("seed", "7"),
    ("seed", 1.5),
    ("seed", -1),
    ("batch_size", True),
    ("batch_size", 0),
    ("batch_size", 2.0),
    ("batch_size", "100"),
    ("queue_capacity", True),
    ("queue_capacity", 0),
    ("queue_capacity", "4"),
    ("debug", "yes"),
    ("debug", 1),
    ("policy", "fastest"),
    ("policy", None),
]


@pytest.mark.parametrize(("name", "value"), BAD_OPTIONS)
def test_bad_option_is_refused_naming_it(name, value):
    with pytest.raises(EddiesError) as info:
        execute("SELECT a FROM t", _catalog(), **{name: value})
    message = str(info.value)
    assert name in message or "policy" in message
    assert repr(value) in message


@pytest.mark.parametrize("value", [True, 0, -0.5, math.nan, math.inf, "1"])
def test_bad_window_is_refused(value):
    with pytest.raises(EddiesError, match="window") as info:
        execute("SELECT a FROM t", _catalog(), policy="lottery-window", window=value)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("order", ["build:t", [1, 2], 5])
def test_bad_order_is_refused(order):
    with pytest.raises(EddiesError, match="order"):
        execute("SELECT * FROM t JOIN u ON t.a = u.a", _catalog(), policy="static", order=order)


def test_order_naming_no_destination_is_refused():
    with pytest.raises(EddiesError, match="nope"):
        execute("SELECT * FROM t JOIN u ON t.a = u.a", _catalog(), policy="static", order=["nope"])


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(EddiesError) as info:
        execute("SELECT a FROM t", _catalog(), batchsize=10)
    message = str(info.value)
    assert "'batchsize'" in message
    for name in RunOptions.names():
        assert name in message


def test_options_object_and_keywords_build_the_same_run():
    cat = _catalog()
    sql = "SELECT t.a, u.c FROM t JOIN u ON t.a = u.a"
    given = RunOptions(policy="static", batch_size=7, seed=3)
    a = run_query(sql, cat, options=given)
    b = run_query(sql, cat, policy="static", batch_size=7, seed=3)
    assert a.table.sort_by("a").equals(b.table.sort_by("a"))
    assert a.stats.modules.keys() == b.stats.modules.keys()
    # keywords replace the object's values, and are checked as well
    with pytest.raises(EddiesError, match="batch_size"):
        execute(sql, cat, options=given, batch_size=True)
    with pytest.raises(EddiesError, match="RunOptions"):
        execute(sql, cat, options={"policy": "static"})


def test_run_options_are_frozen_and_normalized():
    opts = RunOptions(batch_size=np.int64(5), order=["build:t"], policy="static")
    assert opts.batch_size == 5 and type(opts.batch_size) is int
    assert opts.order == ("build:t",)
    assert RunOptions(order=[], policy="static").order is None
    with pytest.raises(AttributeError):
        opts.seed = 3  # type: ignore[misc]


def test_open_query_refuses_bad_option_before_starting():
    async def main() -> None:
        async with open_query("SELECT a FROM t", _catalog(), batch_size=True):
            pytest.fail("the query must not start")

    with pytest.raises(EddiesError, match="batch_size"):
        trio.run(main)


def test_background_query_refuses_bad_option_in_the_callers_thread():
    with pytest.raises(EddiesError, match="queue_capacity"):
        BackgroundQuery("SELECT a FROM t", _catalog(), queue_capacity=0)


@pytest.mark.parametrize("timeout", [True, -1, 0, math.nan, "5"])
def test_background_query_refuses_bad_timeouts(timeout):
    query = BackgroundQuery("SELECT a FROM t", _catalog())
    with pytest.raises(EddiesError, match="timeout"):
        query.result(timeout)
    assert query.result(30).num_rows == T.num_rows


@pytest.mark.parametrize(
    ("sql", "catalog", "words"),
    [
        (42, None, "str"),
        (b"SELECT a FROM t", None, "str"),
        ("SELECT a FROM t", {"t": T}, "Catalog"),
    ],
)
def test_wrong_typed_query_arguments(sql, catalog, words):
    with pytest.raises(EddiesError, match=words):
        execute(sql, catalog if catalog is not None else _catalog())


# ---------------------------------------------------------------------------------------
# Catalog arguments and input data
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"]),
        pa.table({"A": [1], "a": [2]}),  # case-insensitive names: the same column in SQL
        pd.DataFrame([[1, 2]], columns=["a", "a"]),
    ],
    ids=["arrow", "case", "pandas"],
)
def test_duplicate_column_names_are_refused_at_add_table(data):
    """Before: the Arrow table failed later with a KeyError, pandas with a ValueError, and
    ``A``/``a`` silently answered ``SELECT A`` with column ``a``."""
    with pytest.raises(DataSourceError) as info:
        Catalog().add_table("dup", data)
    message = str(info.value)
    assert "'dup'" in message and "'a'" in message


@pytest.mark.parametrize(
    ("option", "value"),
    [("batch_size", "5"), ("batch_size", True), ("delay", "x"), ("rate", "fast")],
)
def test_add_table_wrong_typed_options(option, value):
    with pytest.raises(DataSourceError, match=option):
        Catalog().add_table("t", T, **{option: value})


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [({"return_type": "int"}, "return_type"), ({"vectorized": "yes"}, "vectorized")],
)
def test_add_function_wrong_typed_options(kwargs, words):
    with pytest.raises(UdfError, match=words):
        Catalog().add_function("f", lambda x: x, **kwargs)


def test_udf_returning_an_int_too_large_is_udf_error():
    cat = _catalog()
    cat.add_function("big", lambda x: 2**80, vectorized=False, return_type=pa.int64())
    with pytest.raises(UdfError, match="big"):
        execute("SELECT big(a) FROM t", cat)


def test_a_csv_whose_header_is_not_utf8_is_a_data_source_error(tmp_path):
    # pyarrow reads such a header without complaint; its names then fail to decode
    # (was a raw UnicodeDecodeError from deep in the catalog).
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"\xff\xfea,b\n1,2\n")
    with pytest.raises(DataSourceError, match="not UTF-8"):
        Catalog().add_table("t", path)


def test_a_kernel_that_changes_the_row_count_fails_loudly():
    # pyarrow 26's binary_join_element_wise(null_handling="skip") drops all-NULL rows; any
    # such kernel must fail the expression, never shorten a batch (rows lost silently).
    from eddies.errors import ExpressionError
    from eddies.router.expressions import Call, ColumnRef, evaluate

    shortened = Call(lambda v: v.slice(1), [ColumnRef("x", "x")], "drop_first(x)")
    with pytest.raises(ExpressionError, match=r"drop_first\(x\) gave 2 values for 3 rows"):
        evaluate(shortened, {"x": pa.array([1, 2, 3])}, 3)


@pytest.mark.parametrize(
    ("fn", "return_type", "vectorized"),
    [
        (lambda x: pc.multiply(x, 2), None, True),  # ints where booleans were declared
        (lambda x: x * 2, None, False),
        (lambda x: str(x), pa.int64(), False),  # strings for an int64
        (lambda x: pc.cast(x, pa.string()), pa.timestamp("us"), True),
    ],
)
def test_udf_result_of_another_kind_is_an_error_not_a_cast(fn, return_type, vectorized):
    # A cast across kinds (2 -> true, 7 -> '7') was a silent wrong answer.
    cat = Catalog()
    cat.add_table("t", pa.table({"x": [1, 2, 3]}))
    cat.add_function("f", fn, vectorized=vectorized, return_type=return_type)
    with pytest.raises(UdfError, match=r"'f'.*register it with return_type"):
        execute("SELECT f(x) FROM t", cat)


def test_udf_result_within_its_kind_is_cast():
    cat = Catalog()
    cat.add_table("t", pa.table({"x": [1, 2, None]}))
    cat.add_function("f", lambda x: pc.multiply(x, 2), return_type=pa.float64())
    cat.add_function("g", lambda x: None, vectorized=False, return_type=pa.int64())
    out = execute("SELECT f(x) AS a, g(x) AS b FROM t", cat)
    assert out.column("a").to_pylist() == [2.0, 4.0, None]
    assert out.column("b").to_pylist() == [None, None, None]
