"""The one list of SQL constructs eddies runs: sqlglot node types and the arguments of each.

:func:`validate` walks a parsed statement once (iteratively, so a 5,000-term AND chain
does not recurse) and refuses, with :class:`UnsupportedQueryError` naming the construct
and its line and column, every node whose type is not in :data:`ALLOWED` and every node
with a non-empty argument not listed for its type. A construct nobody wrote code for
therefore never reaches the planner, where it could be silently ignored: adding support
for one means adding it here *and* handling it in sql.py / planner.py / compile.py.

Arguments in :data:`REQUIRED` must be present and non-empty (sqlglot accepts
``SELECT FROM t`` and ``GROUP BY`` with nothing after it; DuckDB does not). Arguments in
:data:`VALUES` may only take the listed values (``JOIN`` kinds and methods).
"""

from __future__ import annotations

from collections.abc import Collection

from sqlglot import exp

from eddies.errors import SqlSyntaxError, UnsupportedQueryError, describe

_BINARY = frozenset({"this", "expression"})
_UNARY = frozenset({"this"})
_NEGATABLE = frozenset({"this", "expression", "negate"})  # NOT LIKE: compile_expr reads it

#: Node type -> the argument names the front end handles. Context rules (where a node may
#: appear) are checked by sql.py and planner.py; this table says what exists at all.
ALLOWED: dict[type[exp.Expression], frozenset[str]] = {
    # statement and clauses (sql.py, planner.py)
    exp.Select: frozenset(
        {"expressions", "from_", "joins", "where", "group", "having", "order", "limit"}
        | {"offset", "distinct", "with_", "qualify"}  # WITH, QUALIFY: composite.py
    ),
    exp.From: _UNARY,
    exp.Join: frozenset({"this", "on", "using", "kind", "method", "side"}),  # side: outer joins
    exp.Table: frozenset({"this", "alias"}),
    # FROM read_parquet('path') / read_csv('path'): one string, no options (sql.py)
    exp.ReadParquet: frozenset({"expressions"}),
    exp.ReadCSV: _UNARY,
    exp.TableAlias: _UNARY,
    exp.Where: _UNARY,
    exp.Having: _UNARY,
    exp.Group: frozenset({"expressions", "all"}),  # GROUP BY ALL: composite.py
    exp.Order: frozenset({"this", "expressions"}),  # this: string_agg(s ORDER BY k)
    exp.Ordered: frozenset({"this", "desc", "nulls_first"}),
    exp.Limit: frozenset({"expression"}),
    exp.Offset: frozenset({"expression"}),
    exp.Distinct: frozenset({"expressions", "on"}),  # SELECT DISTINCT [ON], COUNT(DISTINCT x)
    exp.Alias: frozenset({"this", "alias"}),
    exp.Star: frozenset({"except_", "replace"}),  # * EXCLUDE (...) REPLACE (...)
    exp.Column: frozenset({"this", "table"}),
    exp.Identifier: frozenset({"this", "quoted"}),
    # scalar expressions (compile.py)
    exp.Paren: _UNARY,
    exp.Literal: frozenset({"this", "is_string"}),
    exp.Boolean: _UNARY,
    exp.Null: frozenset(),
    exp.Neg: _UNARY,
    exp.Not: _UNARY,
    exp.Is: _NEGATABLE,
    exp.Add: _BINARY,
    exp.Sub: _BINARY,
    exp.Mul: _BINARY,
    exp.Div: _BINARY,
    exp.Mod: _BINARY,
    exp.IntDiv: _BINARY,
    exp.EQ: _BINARY,
    exp.NEQ: _BINARY,
    exp.GT: _BINARY,
    exp.GTE: _BINARY,
    exp.LT: _BINARY,
    exp.LTE: _BINARY,
    exp.And: _BINARY,
    exp.Or: _BINARY,
    exp.DPipe: frozenset({"this", "expression", "safe"}),  # safe: DuckDB's NULL-propagating ||
    exp.Between: frozenset({"this", "low", "high"}),
    exp.In: frozenset({"this", "expressions", "query"}),  # query: [NOT] IN (SELECT ...)
    exp.Subquery: _UNARY,  # only as IN's query: sql.py refuses it elsewhere
    exp.Exists: _UNARY,  # [NOT] EXISTS (SELECT ...) as a WHERE conjunct (sql.py)
    exp.Like: _NEGATABLE,
    exp.ILike: _NEGATABLE,
    exp.Escape: _BINARY,  # [NOT] [I]LIKE ... ESCAPE 'c': compile.py checks its operands
    exp.Case: frozenset({"this", "ifs", "default"}),
    exp.If: frozenset({"this", "true", "false"}),
    exp.Cast: frozenset({"this", "to"}),
    exp.TryCast: frozenset({"this", "to", "safe"}),
    exp.DataType: frozenset({"this", "expressions", "nested"}),
    exp.DataTypeParam: _UNARY,
    exp.Abs: _UNARY,
    exp.Lower: _UNARY,
    exp.Upper: _UNARY,
    exp.Length: _UNARY,
    exp.Coalesce: frozenset({"this", "expressions"}),
    exp.Round: frozenset({"this", "decimals"}),
    exp.Trunc: frozenset({"this", "decimals"}),
    exp.Reverse: _UNARY,
    exp.Repeat: frozenset({"this", "times"}),
    exp.Floor: _UNARY,
    exp.Ceil: _UNARY,
    exp.Sqrt: _UNARY,
    exp.Ln: _UNARY,
    exp.Nullif: _BINARY,
    exp.NullSafeEQ: _BINARY,  # IS NOT DISTINCT FROM
    exp.NullSafeNEQ: _BINARY,  # IS DISTINCT FROM
    exp.Substring: frozenset({"this", "start", "length"}),
    exp.Trim: frozenset({"this", "expression", "position"}),
    exp.Concat: frozenset({"expressions", "safe", "coalesce"}),  # DuckDB's: NULLs skipped
    exp.ConcatWs: frozenset({"expressions", "safe", "coalesce"}),
    exp.Replace: frozenset({"this", "expression", "replacement"}),
    exp.Left: _BINARY,
    exp.Right: _BINARY,
    exp.Pad: frozenset({"this", "expression", "fill_pattern", "is_left"}),
    exp.SplitPart: frozenset({"this", "delimiter", "part_index"}),
    exp.StrPosition: frozenset({"this", "substr"}),  # strpos, instr, position(a IN b)
    exp.StartsWith: _BINARY,
    exp.Contains: _BINARY,
    exp.RegexpLike: frozenset({"this", "expression", "flag"}),  # regexp_matches
    exp.RegexpReplace: frozenset({"this", "expression", "replacement", "modifiers"})
    | {"single_replace"},
    exp.RegexpExtract: frozenset({"this", "expression", "group", "null_if_pos_overflow"}),
    exp.Pow: _BINARY,
    exp.Log: _BINARY,  # log(x) = log10(x), log(b, x)
    exp.Exp: _UNARY,
    exp.Sign: _UNARY,
    exp.Var: _UNARY,  # a unit name (EXTRACT, date_trunc, date_diff); compile.py checks it
    exp.TimeToUnix: _UNARY,  # epoch(x)
    exp.Extract: _BINARY,  # EXTRACT(part FROM x); date_part('part', x) is Anonymous
    exp.Year: _UNARY,
    exp.Quarter: _UNARY,
    exp.Month: _UNARY,
    exp.Day: _UNARY,
    exp.DayOfMonth: _UNARY,
    exp.Hour: _UNARY,
    exp.Minute: _UNARY,
    exp.Second: _UNARY,
    exp.DayOfWeek: _UNARY,
    exp.DayOfWeekIso: _UNARY,
    exp.DayOfYear: _UNARY,
    exp.Week: _UNARY,
    exp.TimestampTrunc: frozenset({"this", "unit"}),  # date_trunc
    exp.DateTrunc: frozenset({"this", "unit"}),  # date_trunc of a CAST(... AS DATE)
    exp.DateDiff: frozenset({"this", "expression", "unit", "date_part_boundary"}),
    exp.TimeToStr: frozenset({"this", "format"}),  # strftime
    exp.DateFromParts: frozenset({"year", "month", "day"}),  # make_date
    exp.StrToTime: frozenset({"this", "format"}),  # strptime; try_strptime is Anonymous
    # x ± INTERVAL: a constant quantity and unit (compile.py, engine/expr/datetime_arith.py)
    exp.Interval: frozenset({"this", "unit"}),
    exp.Greatest: frozenset({"this", "expressions", "ignore_nulls"}),
    exp.Least: frozenset({"this", "expressions", "ignore_nulls"}),
    # registered Python functions, and window(ts, size[, slide]) (sql.py reads the WINDOW
    # token before "(" as a name; compile.py/finalize_plan.py allow it as a GROUP BY key only)
    exp.Anonymous: frozenset({"this", "expressions"}),
    # aggregates (aggregate_calls.py): one argument each; COUNT(*) and COUNT(DISTINCT x)
    exp.Count: frozenset({"this", "big_int"}),
    exp.Sum: _UNARY,
    exp.Avg: _UNARY,
    exp.Min: _UNARY,
    exp.Max: _UNARY,
    exp.Stddev: _UNARY,
    exp.StddevSamp: _UNARY,
    exp.StddevPop: _UNARY,
    exp.Variance: _UNARY,  # var_samp, variance
    exp.VariancePop: _UNARY,
    exp.LogicalAnd: _UNARY,  # bool_and
    exp.LogicalOr: _UNARY,  # bool_or
    exp.AnyValue: _UNARY,
    exp.IgnoreNulls: _UNARY,  # sqlglot wraps any_value(x) in it; aggregate_calls.py unwraps
    exp.Filter: _BINARY,
    exp.Median: _UNARY,
    exp.PercentileCont: _BINARY,  # quantile_cont(x, q)
    exp.ArgMin: _BINARY,
    exp.ArgMax: _BINARY,
    exp.GroupConcat: frozenset({"this", "separator"}),  # string_agg, ORDER BY as this
    # agg FILTER (WHERE ...): aggregate_calls.py rewrites it
    # Composite queries (composite.py splits them into eddy queries and what runs above
    # them; sql.refuse_composite keeps them out of a single eddy's QueryBlock).
    exp.With: frozenset({"expressions"}),
    exp.CTE: frozenset({"this", "alias"}),
    exp.Subquery: frozenset({"this", "alias"}),  # FROM (SELECT ...) AS d, (SELECT avg(x) ...)
    exp.Union: frozenset({"this", "expression", "distinct", "with_", "order", "limit", "offset"}),
    exp.Intersect: frozenset(
        {"this", "expression", "distinct", "with_", "order", "limit", "offset"}
    ),
    exp.Except: frozenset({"this", "expression", "distinct", "with_", "order", "limit", "offset"}),
    exp.Qualify: _UNARY,
    exp.Tuple: frozenset({"expressions"}),  # DISTINCT ON (a, b), VALUES rows, grouping sets
    exp.Values: frozenset({"expressions", "alias"}),  # composite.py: a UNION ALL of rows
    exp.Window: frozenset({"this", "partition_by", "order", "spec", "over"}),
    exp.WindowSpec: frozenset({"kind", "start", "start_side", "end", "end_side"}),
    exp.RowNumber: frozenset(),
    exp.Rank: frozenset(),
    exp.DenseRank: frozenset(),
    exp.Lag: frozenset({"this", "offset", "default"}),
    exp.Lead: frozenset({"this", "offset", "default"}),
    exp.FirstValue: _UNARY,
    exp.LastValue: _UNARY,
    exp.PercentRank: frozenset(),
    exp.CumeDist: frozenset(),
    exp.Ntile: _UNARY,
    exp.NthValue: frozenset({"this", "offset"}),
    exp.DateBin: _BINARY,  # time_bucket(INTERVAL w, ts); no origin or time zone
    # GROUP BY ROLLUP / CUBE / GROUPING SETS and grouping(): run above the eddy, in DuckDB
    # (composite.py, engine/plan/grouping_split.py); a Tuple is a set of keys there
    exp.Rollup: frozenset({"expressions"}),
    exp.Cube: frozenset({"expressions"}),
    exp.GroupingSets: frozenset({"expressions"}),
    exp.Grouping: frozenset({"expressions"}),
    exp.GroupingId: frozenset({"expressions"}),
}

#: Functions allowed with OVER (the aggregates among them as running aggregates).
WINDOW_FUNCTIONS: tuple[type[exp.Expression], ...] = (
    exp.RowNumber,
    exp.Rank,
    exp.DenseRank,
    exp.Lag,
    exp.Lead,
    exp.FirstValue,
    exp.LastValue,
    exp.PercentRank,
    exp.CumeDist,
    exp.Ntile,
    exp.NthValue,
    exp.Sum,
    exp.Avg,
    exp.Count,
    exp.Min,
    exp.Max,
)

#: Functions that exist only with OVER.
_ONLY_WINDOW = (exp.RowNumber, exp.Rank, exp.DenseRank, exp.Lag, exp.Lead)
_ONLY_WINDOW += (exp.FirstValue, exp.LastValue, exp.PercentRank, exp.CumeDist, exp.Ntile)
_ONLY_WINDOW += (exp.NthValue,)

#: Node types whose one operand (``this``) must be present: a clause keyword, a column,
#: an operator, a subquery or window with nothing in it.
_ONE_OPERAND = (exp.From, exp.Join, exp.Table, exp.Where, exp.Having, exp.Ordered, exp.Column)
_ONE_OPERAND += (exp.Paren, exp.Neg, exp.Not, exp.Interval, exp.Subquery, exp.Qualify)
_ONE_OPERAND += (exp.Window, exp.In)

#: Arguments that must be present and non-empty (a missing one is a syntax error in DuckDB;
#: a SELECT without FROM, which DuckDB runs, is refused by sql.py).
REQUIRED: dict[type[exp.Expression], frozenset[str]] = {
    **dict.fromkeys(_ONE_OPERAND, _UNARY),
    exp.Select: frozenset({"expressions"}),
    exp.Group: frozenset({"expressions"}),  # or ALL
    exp.Order: frozenset({"expressions"}),
    exp.Limit: frozenset({"expression"}),
    exp.Offset: frozenset({"expression"}),
    exp.Alias: frozenset({"this", "alias"}),
    exp.Between: frozenset({"this", "low", "high"}),
    exp.Case: frozenset({"ifs"}),
    exp.If: frozenset({"this", "true"}),
    exp.Cast: frozenset({"this", "to"}),
    exp.TryCast: frozenset({"this", "to"}),
    exp.Escape: _BINARY,
    exp.Pad: frozenset({"this", "expression", "fill_pattern"}),  # lpad(s, n) has no default
    exp.TimestampTrunc: frozenset({"this", "unit"}),
    exp.DateTrunc: frozenset({"this", "unit"}),
    exp.DateDiff: frozenset({"this", "expression", "unit"}),
    exp.DateFromParts: frozenset({"year", "month", "day"}),
    exp.StrToTime: frozenset({"this", "format"}),
    exp.With: frozenset({"expressions"}),
    exp.CTE: frozenset({"this", "alias"}),
    exp.DateBin: _BINARY,
}

#: Arguments whose values are restricted (compared upper-case).
VALUES: dict[tuple[type[exp.Expression], str], frozenset[str]] = {
    (exp.Join, "kind"): frozenset({"INNER", "CROSS", "OUTER"}),
    (exp.Join, "side"): frozenset({"LEFT", "RIGHT", "FULL"}),
    (exp.Join, "method"): frozenset({"NATURAL"}),
}

#: How a refused node type is named in the error (default: its SQL keyword-ish name).
_NODE_NAMES: dict[type[exp.Expression], str] = {
    exp.Subquery: "a subquery",
    exp.Exists: "EXISTS (a subquery)",
    exp.Window: "a window function (OVER)",
    exp.Union: "UNION",
    exp.Intersect: "INTERSECT",
    exp.Except: "EXCEPT",
    exp.With: "WITH (common table expressions)",
    exp.CTE: "a common table expression",
    exp.Qualify: "QUALIFY",
    exp.Tuple: "a row value (a, b)",
    exp.Pivot: "PIVOT / UNPIVOT",
    exp.TableSample: "USING SAMPLE / TABLESAMPLE",
    exp.Lateral: "LATERAL",
    exp.Unnest: "UNNEST",
    exp.Values: "VALUES",
    exp.Columns: "COLUMNS(...)",
    exp.Lambda: "a lambda",
    exp.Placeholder: "a parameter placeholder",
    exp.Rollup: "ROLLUP",
    exp.Cube: "CUBE",
    exp.GroupingSets: "GROUPING SETS",
    exp.Grouping: "grouping()",
    exp.GroupingId: "grouping_id()",
}

#: How a refused argument is named in the error.
_ARG_NAMES: dict[tuple[type[exp.Expression], str], str] = {
    (exp.Select, "with_"): "WITH (common table expressions)",
    (exp.Select, "sample"): "USING SAMPLE",
    (exp.Select, "qualify"): "QUALIFY",
    (exp.Select, "windows"): "WINDOW",
    (exp.Select, "laterals"): "LATERAL",
    (exp.Select, "pivots"): "PIVOT / UNPIVOT",
    (exp.Select, "into"): "SELECT ... INTO",
    (exp.Select, "locks"): "FOR UPDATE / FOR SHARE",
    (exp.Select, "kind"): "SELECT AS STRUCT / VALUE",
    (exp.Table, "sample"): "TABLESAMPLE",
    (exp.Table, "pivots"): "PIVOT / UNPIVOT",
    (exp.Table, "db"): "a qualified table name (schema.table)",
    (exp.Table, "catalog"): "a qualified table name (catalog.schema.table)",
    (exp.Table, "version"): "time travel (AT / FOR SYSTEM_TIME)",
    (exp.TableAlias, "columns"): "column aliases on a table (t AS x(a, b))",
    (exp.Column, "db"): "a column qualified by schema (schema.table.column)",
    (exp.Column, "catalog"): "a column qualified by catalog",
    (exp.Join, "match_condition"): "ASOF JOIN ... MATCH_CONDITION",
    (exp.Limit, "limit_options"): "LIMIT ... PERCENT / WITH TIES",
    (exp.Limit, "offset"): "LIMIT offset, count",
    (exp.Group, "rollup"): "GROUP BY ROLLUP",
    (exp.Group, "cube"): "GROUP BY CUBE",
    (exp.Group, "grouping_sets"): "GROUP BY GROUPING SETS",
    (exp.Group, "all"): "GROUP BY ALL",
    (exp.With, "recursive"): "WITH RECURSIVE",
    (exp.CTE, "materialized"): "AS [NOT] MATERIALIZED",
    (exp.Union, "by_name"): "UNION BY NAME",
    (exp.Window, "alias"): "a named window (OVER w)",
    (exp.Window, "first"): "KEEP (DENSE_RANK FIRST/LAST)",
    (exp.WindowSpec, "exclude"): "a window frame EXCLUDE clause",
    (exp.Subquery, "order"): "ORDER BY on a parenthesized query",
    (exp.Subquery, "limit"): "LIMIT on a parenthesized query",
    (exp.Subquery, "offset"): "OFFSET on a parenthesized query",
    (exp.Order, "siblings"): "ORDER SIBLINGS BY",
    (exp.Ordered, "with_fill"): "ORDER BY ... WITH FILL",
    (exp.Distinct, "on"): "DISTINCT ON",
    (exp.Star, "except_"): "* EXCLUDE",
    (exp.Star, "replace"): "* REPLACE",
    (exp.Star, "rename"): "* RENAME",
    (exp.Star, "ilike"): "* ILIKE",
    (exp.Between, "symmetric"): "BETWEEN SYMMETRIC",
    (exp.DateBin, "unit"): "time_bucket's origin or time zone argument",
    (exp.In, "unnest"): "IN UNNEST",
    (exp.Min, "count"): "min(x, n) (the n smallest values)",
    (exp.Max, "count"): "max(x, n) (the n largest values)",
    (exp.Round, "truncate"): "round(x, d, mode)",
    (exp.Floor, "decimals"): "floor(x, d)",
    (exp.Ceil, "decimals"): "ceil(x, d)",
    (exp.Cast, "format"): "CAST ... FORMAT",
}

#: Deepest expression nesting accepted (an n-ary AND/OR chain counts as one level):
#: compiling and evaluating recurse once per level, and DuckDB itself stops at 1,000.
MAX_EXPRESSION_DEPTH = 200


_CLAUSES = (exp.Select, exp.Where, exp.Having, exp.Group, exp.Order, exp.Ordered, exp.Join)


def node_name(node: exp.Expression) -> str:
    """A readable name for a node type, as used in error messages."""
    name = _NODE_NAMES.get(type(node))
    if name is not None:
        return name
    if isinstance(node, exp.Func):
        return f"function {node.sql_name().upper()}"
    if isinstance(node, exp.Join):
        return "JOIN"
    return type(node).__name__.upper()


def arg_name(node: exp.Expression, key: str, value: object) -> str:
    """A readable name for argument ``key`` of ``node`` (``value`` its value)."""
    if isinstance(node, exp.Join) and key in ("kind", "method", "side"):
        return f"{str(value).upper()} JOIN"
    if isinstance(node, exp.Count) and key == "expressions":
        return "count(a, b) (COUNT takes one argument)"
    if isinstance(node, exp.AggFunc) and key in ("expressions", "count"):
        return f"{node.sql_name().lower()}(a, b) ({node.sql_name().upper()} takes one argument)"
    name = _ARG_NAMES.get((type(node), key))
    if name is not None:
        return name
    return f"{key.rstrip('_').upper()} in {node_name(node)}"


def _empty(value: object) -> bool:
    return value is None or value is False or (isinstance(value, list) and not value)


def refuse(node: exp.Expression, what: str) -> UnsupportedQueryError:
    """The error for construct ``what`` at ``node`` (which gives the position)."""
    return UnsupportedQueryError(f"{what} is not supported: {describe(node)}")


def _values_columns(node: exp.Expression, key: str) -> bool:
    """``(VALUES ...) AS v(a, b)``, ``(SELECT ...) AS d(a, b)`` and ``WITH t(a, b) AS``:
    the places a table alias may name columns (values_rows.py, alias_lists.py)."""
    if not isinstance(node, exp.TableAlias) or key != "columns":
        return False
    owner = node.parent
    if isinstance(owner, exp.Subquery):
        return isinstance(owner.parent, exp.From | exp.Join)
    return isinstance(owner, exp.Values | exp.CTE)


def validate(root: exp.Expression, functions: Collection[str] = ()) -> None:
    """Refuse any node or argument outside :data:`ALLOWED` (see the module docstring).

    ``functions`` are the (lower-case) names of registered Python functions: a call of one
    is allowed whatever sqlglot node it parsed into (``Catalog.add_function`` may register
    a name sqlglot knows, such as ``contains``); compile.py passes all its arguments.
    Raises UnsupportedQueryError (a refused construct, too deep nesting) or SqlSyntaxError
    (a missing operand).
    """
    stack: list[tuple[exp.Expression, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        kind = type(node)
        allowed = ALLOWED.get(kind)
        if allowed is None:
            if isinstance(node, exp.Func) and node.sql_name().lower() in functions:
                allowed = frozenset(node.args)
            else:
                raise refuse(node, node_name(node))
        if kind is exp.Concat and not node.args.get("safe"):
            # sqlglot reads 'a' 'b' as concat('a', 'b'); DuckDB's parser rejects it.
            raise SqlSyntaxError(
                f"SQL syntax error: adjacent string literals need || between them: {describe(node)}"
            )
        if depth > MAX_EXPRESSION_DEPTH:
            top = node  # name the whole expression, not its deepest leaf
            while top.parent is not None and not isinstance(top.parent, _CLAUSES):
                top = top.parent
            raise UnsupportedQueryError(
                f"the expression nests more than {MAX_EXPRESSION_DEPTH} levels deep: "
                f"{describe(top)}"
            )
        for key, value in node.args.items():
            if _empty(value):
                continue
            # Point at the refused argument itself where it is a node (USING SAMPLE's 10%).
            at = value[0] if isinstance(value, list) else value
            at = at if isinstance(at, exp.Expression) else node
            if key not in allowed and not _values_columns(node, key):
                raise refuse(at, arg_name(node, key, value))
            permitted = VALUES.get((kind, key))
            if permitted is not None and str(value).upper() not in permitted:
                raise refuse(node, arg_name(node, key, value))
        for key in REQUIRED.get(kind, ()):
            if _empty(node.args.get(key)) and not (kind is exp.Group and node.args.get("all")):
                what = "select list" if kind is exp.Select else key.rstrip("_")
                raise SqlSyntaxError(
                    f"SQL syntax error: {node_name(node)} is missing its {what}: {describe(node)}"
                )
        for child in node.iter_expressions():
            # An n-ary AND/OR chain is one level: compile.py flattens it.
            same_chain = isinstance(node, exp.And | exp.Or) and type(child) is kind
            stack.append((child, depth if same_chain else depth + 1))
    _refuse_misplaced(root)


# ------------------------------------------------------------------- composite queries
def _in_subquery(node: exp.Subquery) -> bool:
    """``x IN (SELECT ...)``: a semi-join inside the eddy, not a composite construct."""
    return isinstance(node.parent, exp.In) and node.arg_key == "query"


def is_where_conjunct(node: exp.Expression) -> bool:
    """Whether ``node`` (under NOT / parentheses) is a top-level AND term of its SELECT's
    WHERE: where the eddy takes [NOT] IN / [NOT] EXISTS subqueries as semi-/anti-joins."""
    while isinstance(node.parent, exp.Not | exp.Paren):
        node = node.parent
    while isinstance(node.parent, exp.And | exp.Paren):
        node = node.parent
    where = node.parent
    return isinstance(where, exp.Where) and isinstance(where.parent, exp.Select)


#: The clauses of a subquery that is a filter over its FROM: one row per qualifying row.
FILTER_BODY_ARGS = frozenset({"expressions", "from_", "joins", "where", "distinct"})


def is_aggregate_only(query: exp.Expression) -> bool:
    """Whether ``query`` is a SELECT without GROUP BY that aggregates — an aggregate in
    its SELECT list (not inside a window or a nested subquery), or a HAVING: one group,
    so one row before HAVING, whatever its FROM holds."""
    if not isinstance(query, exp.Select) or query.args.get("group") is not None:
        return False
    if query.args.get("having") is not None:
        return True
    return any(
        agg.find_ancestor(exp.Window, exp.Subquery, exp.Select) is query
        for item in query.expressions
        for agg in item.find_all(exp.AggFunc)
    )


def is_filter_body(query: exp.Expression) -> bool:
    """Whether a [NOT] IN / EXISTS subquery's ``query`` yields one row per qualifying row
    of its FROM (no GROUP BY, HAVING, aggregate, ORDER BY, LIMIT, DISTINCT ON, set
    operation, window): the shapes a semi-/anti-join step or a count can answer
    (engine/rewrite/membership_bodies.py rewrites the others)."""
    if not isinstance(query, exp.Select) or is_aggregate_only(query):
        return False
    if any(value for key, value in query.args.items() if key not in FILTER_BODY_ARGS):
        return False
    distinct = query.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        return False
    return not any(
        isinstance(n, exp.Window) and n.find_ancestor(exp.Select) is query
        for item in query.expressions
        for n in item.find_all(exp.Window)
    )


def is_semi_join(node: exp.Expression) -> bool:
    """Whether the eddy takes ``node`` ([NOT] EXISTS / [NOT] IN (SELECT ...)) as a semi- or
    anti-join step: a top-level WHERE term whose subquery is a filter over one plain
    table (:func:`is_filter_body`), with no join and no subquery inside
    (engine/plan/outer_and_semi_joins.py checks the rest of its shape)."""
    query = membership_subquery(node)
    if query is None or not is_where_conjunct(node):
        return False
    if not is_filter_body(query):
        return False
    if query.args.get("joins"):
        return False
    source = query.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        return False
    return next(query.find_all(exp.Exists, exp.Subquery), None) is None


def membership_subquery(node: exp.Expression) -> exp.Expression | None:
    """The query of ``EXISTS (query)`` or ``x IN (query)``, else None."""
    if isinstance(node, exp.Exists):
        return node.this
    if isinstance(node, exp.In) and isinstance(node.args.get("query"), exp.Subquery):
        return node.args["query"].this
    return None


def composite_construct(root: exp.Expression) -> tuple[exp.Expression, str] | None:
    """The first construct of ``root`` that engine/execution/composite.py runs around the eddy (a
    node and its name), or None when ``root`` is one eddy query."""
    for node in root.walk():
        if isinstance(node, exp.With):
            return node, "WITH (common table expressions)"
        if isinstance(node, exp.Select) and node.args.get("from_") is None:
            return node, "a SELECT without FROM"
        if isinstance(node, exp.Values):
            return node, "VALUES"
        if membership_subquery(node) is not None and not is_semi_join(node):
            return node, "[NOT] IN / EXISTS (a subquery) the eddy does not take as a semi-join"
        if isinstance(node, exp.Subquery) and not _in_subquery(node):
            where = node.parent
            in_from = isinstance(where, exp.From | exp.Join)
            return node, "a derived table (FROM (SELECT ...))" if in_from else "a scalar subquery"
        if isinstance(node, exp.Union | exp.Intersect | exp.Except):
            return node, node_name(node)
        if isinstance(node, exp.Window):
            return node, "a window function (OVER)"
        if isinstance(node, exp.Qualify):
            return node, "QUALIFY"
        if isinstance(node, exp.Group) and node.args.get("all"):
            return node, "GROUP BY ALL"
        if isinstance(node, exp.Rollup | exp.Cube | exp.GroupingSets):
            return node, f"GROUP BY {node_name(node)}"
        if isinstance(node, exp.Grouping | exp.GroupingId):
            return node, node_name(node)
        if isinstance(node, exp.Distinct) and node.args.get("on") is not None:
            return node, "DISTINCT ON"
        if isinstance(node, exp.Ordered) and is_all(node.this):
            return node, "ORDER BY ALL"
    return None


#: Where a row value ``(a, b)`` means something: DISTINCT ON, a VALUES row, a set of
#: grouping keys.
_TUPLE_HOLDERS = (exp.Distinct, exp.Values, exp.Rollup, exp.Cube, exp.GroupingSets)


def _refuse_misplaced(root: exp.Expression) -> None:
    """Allowed node types in a place where they mean nothing: a row value outside
    DISTINCT ON, a window-only function without OVER."""
    for node in root.walk():
        if isinstance(node, exp.Tuple) and not isinstance(node.parent, _TUPLE_HOLDERS):
            raise refuse(node, "a row value (a, b)")
        if isinstance(node, _ONLY_WINDOW):
            parent = node.parent
            if isinstance(parent, exp.IgnoreNulls):
                parent = parent.parent
            if not isinstance(parent, exp.Window):
                raise UnsupportedQueryError(
                    f"{node_name(node)} needs an OVER clause: {describe(node)}"
                )


def is_all(node: exp.Expression | None) -> bool:
    """``ALL`` as an ORDER BY item (sqlglot reads it as a Var)."""
    return isinstance(node, exp.Var) and str(node.this).upper() == "ALL"


def refuse_composite(root: exp.Expression) -> None:
    """Raise UnsupportedQueryError if ``root`` is not a single eddy query (see
    :func:`composite_construct`): explain and the planner see one eddy at a time."""
    found = composite_construct(root)
    if found is not None:
        node, what = found
        raise UnsupportedQueryError(
            f"{what} is not supported in a single eddy query (execute, run_query and "
            f"open_query run it around the eddy; explain shows one eddy): {describe(node)}"
        )
