"""DuckDB as the runtime of the operators that run above the eddy (the one module using it).

What runs here needs no adaptivity and only starts once its input is complete: window
functions (ROWS and RANGE frames), QUALIFY, DISTINCT ON, ORDER BY ALL, the set
operations UNION, INTERSECT [ALL] and EXCEPT [ALL], and GROUP BY ROLLUP / CUBE /
GROUPING SETS with what follows them. The eddy's Arrow output is handed to
DuckDB zero-copy and the answer comes back as Arrow.

Why DuckDB rather than pyarrow's Acero: Acero has no window functions (no row_number,
rank, lag or framed running aggregates), no DISTINCT ON and no bag INTERSECT/EXCEPT, so we
would write and maintain them ourselves; DuckDB has them all with exactly the semantics the
test oracle checks, and the issue allows it here. Streaming is not lost: every operator
above is blocking by nature (a window needs its whole partition, EXCEPT the whole right
side), while UNION ALL and a bare LIMIT, which can stream, are run without DuckDB by
engine/execution/composite.py so a LIMIT still stops the eddy early.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from eddies.errors import EddiesError, ExpressionError, UnsupportedQueryError

#: DuckDB threads per query: the eddy's own work runs on the trio thread meanwhile.
THREADS = 1


def run_above(sql: str, inputs: Mapping[str, pa.Table]) -> pa.Table:
    """Run ``sql`` (DuckDB dialect) over ``inputs`` (name -> Arrow table, complete).

    Synchronous and CPU-bound: call it from a worker thread. Returns an Arrow table.
    Raises UnsupportedQueryError for a query DuckDB cannot bind (e.g. set operands of
    different widths), ExpressionError for a value error while evaluating, EddiesError for
    any other DuckDB error; never a raw duckdb exception.
    """
    # Imported here: only composite queries need DuckDB, and its import adds ~13k objects
    # that every full garbage collection of the process scans.
    import duckdb

    user_errors = (duckdb.BinderException, duckdb.ParserException, duckdb.CatalogException)
    data_errors = (
        duckdb.ConversionException,
        duckdb.OutOfRangeException,
        duckdb.InvalidInputException,
    )
    con = duckdb.connect(":memory:", config={"threads": THREADS})
    try:
        con.execute("SET TimeZone='UTC'")  # TIMESTAMPTZ as the eddy shows it
        for name, table in inputs.items():
            con.register(name, table)
        return con.sql(sql).to_arrow_table()
    except user_errors as exc:
        raise UnsupportedQueryError(f"{_message(exc)} (in: {sql})") from None
    except data_errors as exc:
        raise ExpressionError(_message(exc)) from None
    except duckdb.Error as exc:
        raise EddiesError(f"running the operators above the eddy failed: {_message(exc)}") from None
    finally:
        con.close()


def _message(exc: BaseException) -> str:
    return str(exc).split("\n\n")[0].strip()
