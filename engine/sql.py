"""Parse SQL with sqlglot and check it is a query block eddies runs.

The supported shape is one SELECT block: a select list, FROM with comma joins, [INNER]
JOIN ... ON and CROSS JOIN, WHERE, GROUP BY, HAVING, DISTINCT, ORDER BY, LIMIT/OFFSET.
Everything else — outer joins, USING, subqueries, CTEs, set operations, window functions —
raises UnsupportedQueryError naming the construct and its position; text that does not
parse raises SqlSyntaxError with sqlglot's line and column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from eddies.engine.errors import SqlSyntaxError, UnsupportedQueryError, describe


@dataclass
class TableRef:
    """A FROM entry: catalog table ``name`` under ``alias`` (both lower case)."""

    name: str
    alias: str
    node: exp.Table


@dataclass
class QueryBlock:
    """A parsed, shape-checked SELECT block (sqlglot nodes, not yet resolved)."""

    sql: str
    tables: list[TableRef]
    conjuncts: list[exp.Expression]
    select: list[exp.Expression]
    distinct: bool = False
    group: list[exp.Expression] = field(default_factory=list)
    having: exp.Expression | None = None
    order: list[exp.Ordered] = field(default_factory=list)
    limit: int | None = None
    offset: int = 0


def conjuncts_of(node: exp.Expression | None) -> list[exp.Expression]:
    """Split a predicate on top-level ANDs (parentheses removed)."""
    if node is None:
        return []
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return conjuncts_of(node.this) + conjuncts_of(node.expression)
    return [node]


def _int_clause(node: exp.Expression | None, what: str) -> int | None:
    if node is None:
        return None
    value = node.args.get("expression") if isinstance(node, exp.Limit | exp.Offset) else node
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        return int(value.this)
    raise UnsupportedQueryError(f"{what} must be a non-negative integer literal: {describe(node)}")


def parse_query(sql: str) -> QueryBlock:
    """Parse ``sql`` into a :class:`QueryBlock`; SqlSyntaxError / UnsupportedQueryError."""
    try:
        statements = sqlglot.parse(sql, dialect="duckdb")
    except (ParseError, TokenError) as exc:
        errors = getattr(exc, "errors", None) or []
        if errors:
            first = errors[0]
            description = str(first.get("description") or "")
            if "sqlglot" in description or "<class" in description:
                description = "the statement is incomplete or malformed here"
            raise SqlSyntaxError(
                f"SQL syntax error at line {first.get('line')}, column {first.get('col')}: "
                f"{description} (near {first.get('highlight')!r})"
            ) from exc
        raise SqlSyntaxError(f"SQL syntax error: {exc}") from exc
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise SqlSyntaxError(f"expected one SQL statement, got {len(statements)}")
    root = statements[0]
    if isinstance(root, exp.SetOperation):
        raise UnsupportedQueryError(f"set operation {type(root).__name__.upper()} is not supported")
    if not isinstance(root, exp.Select):
        raise UnsupportedQueryError(f"only SELECT queries are supported, got {describe(root)}")
    if root.args.get("with_") or root.args.get("with"):
        raise UnsupportedQueryError("WITH (common table expressions) is not supported")
    for key in ("qualify", "windows", "laterals", "pivots", "connect", "prewhere"):
        if root.args.get(key):
            raise UnsupportedQueryError(f"{key.upper()} is not supported")
    for node in root.find_all(exp.Window):
        raise UnsupportedQueryError(f"window function {describe(node)} is not supported")
    for node in root.find_all(exp.Subquery, exp.Exists):
        raise UnsupportedQueryError(f"subquery {describe(node)} is not supported")
    for node in root.find_all(exp.Select):
        if node is not root:
            raise UnsupportedQueryError(f"subquery {describe(node)} is not supported")

    from_clause = root.args.get("from_") or root.args.get("from")
    if from_clause is None:
        raise UnsupportedQueryError("a query without FROM is not supported")
    tables = [_table_ref(from_clause.this)]
    conjuncts = conjuncts_of(root.args.get("where") and root.args["where"].this)
    for join in root.args.get("joins") or []:
        side = (join.args.get("side") or "").upper()
        kind = (join.args.get("kind") or "").upper()
        if side or kind in ("OUTER", "SEMI", "ANTI", "ASOF"):
            raise UnsupportedQueryError(
                f"{' '.join(filter(None, [side, kind]))} JOIN {describe(join.this)} is not "
                "supported (inner joins only)"
            )
        if join.args.get("using"):
            raise UnsupportedQueryError(f"JOIN ... USING in {describe(join)} is not supported")
        tables.append(_table_ref(join.this))
        conjuncts += conjuncts_of(join.args.get("on"))

    distinct = root.args.get("distinct")
    if distinct is not None and distinct.args.get("on"):
        raise UnsupportedQueryError("DISTINCT ON is not supported")
    group = root.args.get("group")
    if group is not None and any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets")):
        raise UnsupportedQueryError("ROLLUP, CUBE and GROUPING SETS are not supported")
    having = root.args.get("having")
    order = root.args.get("order")
    return QueryBlock(
        sql=sql,
        tables=tables,
        conjuncts=conjuncts,
        select=list(root.expressions),
        distinct=distinct is not None,
        group=list(group.expressions) if group is not None else [],
        having=having.this if having is not None else None,
        order=list(order.expressions) if order is not None else [],
        limit=_int_clause(root.args.get("limit"), "LIMIT"),
        offset=_int_clause(root.args.get("offset"), "OFFSET") or 0,
    )


def _table_ref(node: exp.Expression) -> TableRef:
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        raise UnsupportedQueryError(f"FROM item {describe(node)} is not supported (tables only)")
    if node.args.get("db") or node.args.get("catalog"):
        raise UnsupportedQueryError(f"qualified table name {describe(node)} is not supported")
    return TableRef(node.name.lower(), node.alias_or_name.lower(), node)
