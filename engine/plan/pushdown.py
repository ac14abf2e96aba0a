"""What a file scan AM may skip: unread columns (projection) and a pushed-down filter.

stems-2003 §2.1.3 lets an AM apply the selections it can evaluate by itself. A table read
from files (a ``pyarrow.dataset``) is scanned with only the columns the query reads, and
with the query's single-table selections that pyarrow can evaluate *soundly*: wherever SQL
says TRUE the pushed filter says TRUE, and wherever SQL says FALSE it says FALSE (it may
differ only where SQL says NULL, a row the eddy drops anyway). So no row the query keeps
is lost, and the selections still run in the eddy as SMs, which keeps the results exact
without proving any filter redundant. Partition pruning and Parquet row-group statistics
then skip whole files and row groups (counted per scan AM in its ModuleStats).

Pushed: ``=, <>, <, <=, >, >=`` between a column and a constant, BETWEEN, IN (constants),
IS [NOT] NULL, and AND / OR / NOT of those, on integer, string, boolean, DATE and
TIMESTAMP columns. Floating-point and decimal columns are never pushed: DuckDB orders
NaN above every number, pyarrow's comparisons do not.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.engine.expr.casts import unify
from eddies.engine.expr.compile import compile_expr
from eddies.engine.frontend.parse import QueryBlock
from eddies.engine.plan.column_scope import BaseScope
from eddies.engine.plan.plan_types import Plan
from eddies.errors import EddiesError
from eddies.router.expressions import KERNEL_ERRORS

_COMPARE = {
    exp.EQ: lambda a, b: a == b,
    exp.NEQ: lambda a, b: a != b,
    exp.GT: lambda a, b: a > b,
    exp.GTE: lambda a, b: a >= b,
    exp.LT: lambda a, b: a < b,
    exp.LTE: lambda a, b: a <= b,
}
_FLIPPED = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}


def pushable_type(t: pa.DataType) -> bool:
    """Types whose pyarrow comparisons agree with DuckDB's (NULLs propagate alike)."""
    return (
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date32(t)
        or pa.types.is_timestamp(t)
    )


def scan_filter(
    conjuncts: list[exp.Expression], alias: int, scope: Any, file_types: dict[str, pa.DataType]
) -> pc.Expression | None:
    """The AND of the translatable conjuncts that read only ``alias`` (None if none is).

    scope: the planner's BaseScope (resolves columns); file_types: the dataset's own type
    of each column (a column whose type the scan changes, e.g. a dictionary, is not
    pushed)."""
    parts = []
    for node in conjuncts:
        try:
            part = _sound(node, alias, scope, file_types)
        except (EddiesError, *KERNEL_ERRORS):
            part = None  # the eddy's SM reports what is wrong with it
        if part is not None:
            parts.append(part)
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = out & p
    return out


def _sound(node: exp.Expression, alias: int, scope: Any, types: dict) -> pc.Expression | None:
    """A sound translation of ``node`` (see the module docstring), or None."""
    if isinstance(node, exp.Paren):
        return _sound(node.this, alias, scope, types)
    if isinstance(node, exp.And | exp.Or):
        left = _sound(node.this, alias, scope, types)
        right = _sound(node.expression, alias, scope, types)
        if left is None or right is None:
            return None
        return left & right if isinstance(node, exp.And) else left | right  # Kleene
    if isinstance(node, exp.Not):
        inner = _sound(node.this, alias, scope, types)
        return None if inner is None else ~inner
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        field = _column(node.this, alias, scope, types)
        if field is None:
            return None
        return ~field[0].is_null() if node.args.get("negate") else field[0].is_null()
    if type(node) in _COMPARE:
        kind = type(node)
        column, other = node.this, node.expression
        if not _is_column(column):
            column, other = other, column
            kind = _FLIPPED.get(kind, kind)
        constant = _constant_for(column, other, alias, scope, types)
        if constant is None:
            return None
        return _COMPARE[kind](constant[0], constant[1])
    if isinstance(node, exp.Between):
        low = _constant_for(node.this, node.args["low"], alias, scope, types)
        high = _constant_for(node.this, node.args["high"], alias, scope, types)
        if low is None or high is None:
            return None
        return (low[0] >= low[1]) & (high[0] <= high[1])
    if isinstance(node, exp.In) and not node.args.get("query"):
        values = []
        field = None
        for item in node.expressions:
            if isinstance(item, exp.Null):
                continue  # x IN (.., NULL) is never FALSE: leaving NULL out stays sound
            found = _constant_for(node.this, item, alias, scope, types)
            if found is None:
                return None
            field = found[0]
            values.append(found[1])
        if field is None or len({v.type for v in values}) != 1:
            return None
        return field.isin(pa.array([v.as_py() for v in values], values[0].type))
    return None


def _is_column(node: exp.Expression) -> bool:
    return isinstance(node, exp.Column) and not isinstance(node.this, exp.Star)


def _column(
    node: exp.Expression, alias: int, scope: Any, types: dict
) -> tuple[pc.Expression, pa.DataType] | None:
    """The field of ``alias`` that ``node`` names, and its type, if pushable."""
    if not _is_column(node):
        return None
    ref = scope.resolve(node)
    if ref.key[0] != alias:
        return None
    name = ref.key[1]
    file_type = types.get(name)
    column_type = scope.types()[ref.key]
    if file_type is None or file_type != column_type or not pushable_type(column_type):
        return None
    return pc.field(name), column_type


def _constant_for(
    column: exp.Expression, other: exp.Expression, alias: int, scope: Any, types: dict
) -> tuple[pc.Expression, pa.Scalar] | None:
    """``column`` as a field and ``other`` (a constant) as the scalar the eddy compares it
    with, both brought to one type as the SM does (:func:`unify`); None if not pushable."""
    field = _column(column, alias, scope, types)
    if field is None or any(True for _ in other.find_all(exp.Column)):
        return None
    value = compile_expr(other, scope).eval({}, 1)
    if not isinstance(value, pa.Scalar) or not value.is_valid:
        return None
    left, right = unify([pa.array([], field[1]), value])
    if not pushable_type(left.type) or right.type != left.type:
        return None
    expr = field[0] if left.type == field[1] else field[0].cast(left.type)
    return expr, right


def needed_columns(keys: set[tuple[int, str]], aliases: list[int]) -> set[str]:
    """The columns of a table the query reads: those of ``keys`` ((alias, column) pairs
    from its predicates and output) under any of the table's ``aliases``."""
    wanted = set(aliases)
    return {column for alias, column in keys if alias in wanted}


def prune_scans(plan: Plan, block: QueryBlock, scope: BaseScope) -> None:
    """Fill ``plan.scan_columns`` and ``plan.scan_filters`` for tables read by a single
    dataset scan AM (with several AMs, duplicates are recognized by all columns, and a
    filtered scan could not stand in for the table)."""
    keys = set(plan.output_columns)
    exprs = [p.expr for p in plan.graph.predicates]
    for step in plan.graph.steps:  # a join step's keys and conditions read columns too
        exprs += [e for key in step.keys for e in key[:2]]
        exprs += [step.residual, step.notin, step.stored_filter]
    for expr in exprs:
        if expr is not None:
            keys |= {k for k in expr.column_keys() if isinstance(k, tuple)}
    for name, entry in plan.tables.items():
        if len(entry.scans) != 1 or entry.indexes or not entry.scans[0].prunable:
            continue
        source = entry.scans[0]
        aliases = [a.index for a in plan.graph.aliases if a.table == name]
        wanted = needed_columns(keys, aliases)
        plan.scan_columns[name] = [c for c in source.schema.names if c in wanted]
        if len(aliases) == 1:  # a self-join's one scan feeds every alias: no filter
            types = {f.name: f.type for f in source.dataset.schema}
            pushed = scan_filter(block.conjuncts, aliases[0], scope, types)
            if pushed is not None:
                plan.scan_filters[name] = pushed
