"""Parse SQL with sqlglot and check it is a query block eddies runs.

The supported shape is one SELECT block: a select list (with ``* EXCLUDE`` / ``REPLACE``),
FROM with comma joins, [INNER] JOIN ... ON / USING, NATURAL JOIN, CROSS JOIN and
LEFT / RIGHT / FULL [OUTER] JOIN, WHERE (with ``[NOT] IN`` / ``[NOT] EXISTS`` subqueries
as top-level conjuncts, planned by engine/plan/outer_and_semi_joins.py), GROUP BY, HAVING, DISTINCT,
ORDER BY, LIMIT/OFFSET. Strictness comes in three layers,
each raising an EddiesError that names the construct and its line and column:

1. the text: sqlglot's tokenizer and parser (``ErrorLevel.IMMEDIATE``); their errors
   become SqlSyntaxError. A few token patterns sqlglot accepts but DuckDB rejects
   (``SELECT a,, b``, ``ORDER BY a ASC DESC``, a clause keyword with no operand, a
   reserved word used as a name) are checked on the tokens;
2. the tree: :func:`eddies.engine.frontend.allowlist.validate`, the one allow-list of node
   types and their arguments;
3. the shape: one SELECT with FROM, joins of the supported kinds (this module), names
   and types (planner.py, compile.py).
"""

from __future__ import annotations

import difflib
import itertools
import logging
import re
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Collection
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import PurePath

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ErrorLevel, ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from eddies.engine import rewrite
from eddies.engine.frontend.allowlist import refuse_composite, validate
from eddies.errors import SqlSyntaxError, UnsupportedQueryError, describe, line_col

_DIALECT = Dialect.get_or_raise("duckdb")

#: DuckDB's reserved keywords (``duckdb_keywords()``, category 'reserved', DuckDB 2.0): not
#: usable as an unquoted name. sqlglot reads ``FROM t OFFSET`` as ``t`` aliased OFFSET.
RESERVED = frozenset(
    """all analyse analyze and any array as asc asymmetric both case cast check collate column
    constraint create default deferrable desc describe distinct do else end except false fetch
    for foreign from group having in initially intersect into lambda lateral leading limit not
    null offset on only or order pivot pivot_longer pivot_wider placing primary qualify
    references returning select show some summarize symmetric table then to trailing true
    union unique unpivot using variadic when where window with""".split()  # noqa: SIM905
)

#: Keywords that start a clause: one directly after a clause keyword means an operand is
#: missing (``GROUP BY ORDER BY a``, ``SELECT FROM t``).
_CLAUSE_STARTS = {
    TokenType.FROM,
    TokenType.WHERE,
    TokenType.GROUP_BY,
    TokenType.HAVING,
    TokenType.ORDER_BY,
    TokenType.LIMIT,
    TokenType.OFFSET,
    TokenType.SEMICOLON,
    TokenType.R_PAREN,
}
_NEEDS_OPERAND = {
    TokenType.SELECT: "SELECT list",
    TokenType.WHERE: "WHERE condition",
    TokenType.GROUP_BY: "GROUP BY list",
    TokenType.HAVING: "HAVING condition",
    TokenType.ORDER_BY: "ORDER BY list",
    TokenType.LIMIT: "LIMIT count",
    TokenType.OFFSET: "OFFSET count",
}
_DIRECTIONS = {TokenType.ASC, TokenType.DESC}
_NO_ITEM_BEFORE = set(_NEEDS_OPERAND) | {
    TokenType.COMMA,
    TokenType.L_PAREN,
    TokenType.DISTINCT,
    TokenType.ALL,
}
_STATEMENT_WORDS = ["SELECT", "FROM", "WITH", "PIVOT", "UNPIVOT", "VALUES", "DESCRIBE"]

#: Most tables (aliases) in FROM. A span has no width limit (a Python int, interned where
#: the routing log stores it, issue 26); this bounds a query's AMs, SteMs and join search.
MAX_TABLES = 256


@dataclass
class TableRef:
    """A FROM entry: catalog table ``name`` under ``alias`` (both lower case).

    path: for ``FROM 'file.parquet'`` (a quoted name that is no catalog table) and
    ``read_parquet('glob')`` / ``read_csv('file')``, the file, directory or glob to read;
    format: ``"parquet"`` / ``"csv"`` when a read function names it.
    """

    name: str
    alias: str
    node: exp.Table
    path: str | None = None
    format: str | None = None


@dataclass
class JoinSpec:
    """How FROM entry ``index`` (1 or more) joins the entries to its left.

    kind: ``"comma"``, ``"cross"``, ``"on"``, ``"using"`` or ``"natural"``. ``group`` is the
    index of the first entry of its comma-separated group: a JOIN binds tighter than a
    comma, so ``t, u JOIN v USING (a)`` joins v with u only, and an ON clause sees only the
    entries of its group up to its own.
    """

    index: int
    kind: str
    group: int
    node: exp.Join
    on: list[exp.Expression] = field(default_factory=list)
    using: list[exp.Identifier] = field(default_factory=list)
    side: str = ""  # "left", "right" or "full" for an outer join (kind "on")


@dataclass
class QueryBlock:
    """A parsed, shape-checked SELECT block (sqlglot nodes, not yet resolved).

    ``conjuncts`` are WHERE's top-level AND terms (the first ``n_where``), then those of
    every ON clause before the first outer join; the equalities that USING and NATURAL
    JOIN imply are added by the planner, which knows the columns. From the first outer
    join on, a join's ON terms stay in its JoinSpec (engine/plan/outer_and_semi_joins.py plans
    them).
    ``subqueries``: the WHERE conjuncts that are ``[NOT] EXISTS (SELECT ...)`` or
    ``x [NOT] IN (SELECT ...)``, taken out of ``conjuncts``.
    """

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
    joins: list[JoinSpec] = field(default_factory=list)
    n_where: int = 0
    subqueries: list[exp.Expression] = field(default_factory=list)


def conjuncts_of(node: exp.Expression | None) -> list[exp.Expression]:
    """Split a predicate on top-level ANDs (parentheses removed), iteratively: a WHERE of
    5,000 ANDs is a left-deep tree 5,000 levels deep."""
    out: list[exp.Expression] = []
    stack = [node] if node is not None else []
    while stack:
        current = stack.pop()
        while isinstance(current, exp.Paren):
            current = current.this
        if isinstance(current, exp.And):
            stack.append(current.expression)  # popped after the left side: source order
            stack.append(current.this)
        else:
            out.append(current)
    return out


def _int_clause(node: exp.Expression | None, what: str) -> int | None:
    if node is None:
        return None
    value = node.args.get("expression") if isinstance(node, exp.Limit | exp.Offset) else node
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        return int(value.this)
    raise UnsupportedQueryError(f"{what} must be a non-negative integer literal: {describe(node)}")


def _at(sql: str, offset: int) -> str:
    line, col = line_col(sql, offset)
    return f"at line {line}, column {col}"


def _near(sql: str, offset: int) -> str:
    text = sql[offset : offset + 30].split("\n")[0]
    return f" (near {text!r})" if text else " (at the end)"


def _tokenize(sql: str) -> list[Token]:
    tokenizer = _DIALECT.tokenizer()
    try:
        return tokenizer.tokenize(sql)
    except TokenError as exc:
        # The tokenizer's own cursor says where the bad token starts; its message has it
        # as "line:offset" too ("Missing ' from 1:7").
        cause = str(exc.__cause__ or exc)
        offset = getattr(getattr(tokenizer, "_core", tokenizer), "_start", None)
        found = re.search(r"from (\d+):(\d+)\s*$", cause)
        if found is not None:
            offset = int(found.group(2))
            cause = cause[: found.start()].strip()
        if cause.startswith("Missing "):
            quote = cause.removeprefix("Missing ").strip()
            cause = f"unterminated quoted text: the closing {quote} is missing"
        if offset is None:
            raise SqlSyntaxError(f"SQL syntax error: {cause}") from None
        raise SqlSyntaxError(
            f"SQL syntax error {_at(sql, offset)}: {cause}{_near(sql, offset)}"
        ) from None


def _check_tokens(sql: str, tokens: list[Token]) -> None:
    """Token patterns sqlglot accepts but DuckDB rejects (sqlglot silently drops a comma,
    a direction, or an empty clause)."""
    if not tokens:
        raise SqlSyntaxError("SQL syntax error at line 1, column 1: the statement is empty")
    first = tokens[0]
    if first.token_type == TokenType.VAR:
        guess = difflib.get_close_matches(first.text.upper(), _STATEMENT_WORDS, n=1)
        hint = f"; did you mean {guess[0]}?" if guess else ""
        raise SqlSyntaxError(
            f"SQL syntax error {_at(sql, first.start)}: {first.text!r} is not a SQL statement "
            f"keyword{hint}"
        )
    for i, token in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        kind = token.token_type
        if kind == TokenType.COMMA and nxt is not None and nxt.token_type == TokenType.COMMA:
            raise SqlSyntaxError(
                f"SQL syntax error {_at(sql, nxt.start)}: two commas in a row (an item is "
                f"missing){_near(sql, token.start)}"
            )
        prev = tokens[i - 1] if i > 0 else None
        if kind == TokenType.COMMA and prev is not None and prev.token_type in _NO_ITEM_BEFORE:
            raise SqlSyntaxError(
                f"SQL syntax error {_at(sql, token.start)}: a comma with no item before it"
                f"{_near(sql, prev.start)}"
            )
        if (
            kind == TokenType.L_PAREN
            and nxt is not None
            and nxt.token_type == TokenType.R_PAREN
            and prev is not None
            and prev.text.upper() in ("EXCLUDE", "REPLACE", "USING", "IN")
        ):
            raise SqlSyntaxError(
                f"SQL syntax error {_at(sql, token.start)}: an empty list after {prev.text.upper()}"
            )
        if kind == TokenType.INTERVAL and nxt is not None and nxt.token_type == TokenType.DASH:
            # sqlglot folds INTERVAL -1 DAY into INTERVAL '-1' DAY; DuckDB rejects it.
            raise SqlSyntaxError(
                f"SQL syntax error {_at(sql, nxt.start)}: a sign after INTERVAL (write "
                "INTERVAL '-1' DAY or subtract the interval)"
            )
        if kind == TokenType.NOT and nxt is not None and nxt.token_type == TokenType.IS:
            raise SqlSyntaxError(f"SQL syntax error {_at(sql, token.start)}: NOT IS (write IS NOT)")
        if kind in _DIRECTIONS and nxt is not None and nxt.token_type in _DIRECTIONS:
            raise SqlSyntaxError(
                f"SQL syntax error {_at(sql, nxt.start)}: {nxt.text.upper()} after "
                f"{token.text.upper()} (one sort direction per ORDER BY item)"
            )
        what = _NEEDS_OPERAND.get(kind)
        if what is not None:
            j = i + 1
            if kind == TokenType.SELECT:  # SELECT DISTINCT / SELECT ALL
                while j < len(tokens) and tokens[j].token_type in (
                    TokenType.DISTINCT,
                    TokenType.ALL,
                ):
                    j += 1
            if j >= len(tokens) or tokens[j].token_type in _CLAUSE_STARTS:
                raise SqlSyntaxError(
                    f"SQL syntax error {_at(sql, token.start)}: the {what} is missing after "
                    f"{' '.join(t.text.upper() for t in tokens[i:j])}"
                )


def _window_calls(tokens: list[Token]) -> None:
    """Spark's ``window(ts, size[, slide])`` (hopping and tumbling event-time windows):
    WINDOW is a keyword to sqlglot (``WINDOW w AS (...)``), which then fails on the call;
    a WINDOW token directly followed by ``(`` is read as a function name instead (a named
    window always has its name between). compile.py gives the call its meaning."""
    for token, nxt in itertools.pairwise(tokens):
        if token.token_type == TokenType.WINDOW and nxt.token_type == TokenType.L_PAREN:
            token.token_type = TokenType.VAR


class _QuietWhileParsing(logging.Filter):
    """Drops sqlglot's warnings while the engine parses and checks a statement (such as
    "Falling back to parsing as a 'Command'"): the statement is then refused with an
    EddiesError naming it, and the warning was only noise on the user's stderr. sqlglot
    used elsewhere in the process keeps its warnings."""

    active: ContextVar[bool] = ContextVar("eddies_parsing", default=False)

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.active.get()


_SQLGLOT_QUIET = _QuietWhileParsing()
logging.getLogger("sqlglot").addFilter(_SQLGLOT_QUIET)


def _parse(sql: str, tokens: list[Token]) -> list[exp.Expression | None]:
    parser = _DIALECT.parser(error_level=ErrorLevel.IMMEDIATE)
    try:
        return parser.parse(tokens, sql)
    except ParseError as exc:
        errors = getattr(exc, "errors", None) or []
        first = errors[0] if errors else {}
        description = str(first.get("description") or "the statement is malformed here")
        if "<class" in description or "Required keyword" in description:
            description = "an operand is missing"
        elif description.startswith("Invalid expression / Unexpected token"):
            description = "unexpected token"
        highlight = str(first.get("highlight") or "")
        line, col = first.get("line"), first.get("col")
        if line is None or col is None:
            raise SqlSyntaxError(f"SQL syntax error: {description}") from None
        col = max(1, int(col) - len(highlight) + 1)  # sqlglot gives the token's last column
        near = f" (near {highlight!r})" if highlight else ""
        raise SqlSyntaxError(
            f"SQL syntax error at line {line}, column {col}: {description}{near}"
        ) from None
    except RecursionError:
        depth, offset = 0, 0
        deepest = 0
        for token in tokens:
            if token.token_type == TokenType.L_PAREN:
                depth += 1
                if depth > deepest:
                    deepest, offset = depth, token.start
            elif token.token_type == TokenType.R_PAREN:
                depth -= 1
        raise UnsupportedQueryError(
            f"the statement nests too deeply for the SQL parser ({deepest} levels of "
            f"parentheses; deepest {_at(sql, offset)})"
        ) from None


def parse_statement(
    sql: str, functions: Collection[str] = (), *, copy: bool = True
) -> exp.Expression:
    """Parse ``sql`` into one checked sqlglot statement (layers 1 and 2 of the module
    docstring); SqlSyntaxError / UnsupportedQueryError.

    ``functions``: lower-case names of registered Python functions (allowed as calls).
    ``copy=False``: the cached tree itself, for a caller that only reads it (a copy of a
    small query's tree costs ~0.3 ms).
    """
    return _statement(sql, functions, copy)[0]


#: Checked statements kept per (SQL text, registered function names): a query is parsed
#: by the API and again by the planner, and the same text is often run many times (a
#: stream's micro-batches); sqlglot's parse is ~1 ms of a small query's ~5 ms of overhead.
STATEMENT_CACHE_SIZE = 256
_statements: OrderedDict[tuple[str, frozenset[str]], tuple[exp.Expression, list[Token]]] = (
    OrderedDict()
)


def _statement(
    sql: str, functions: Collection[str], copy: bool = True
) -> tuple[exp.Expression, list[Token]]:
    """The checked statement and tokens of ``sql``: a fresh copy of the tree each time
    (callers transform it) unless not ``copy``, from a small LRU cache of earlier
    parses."""
    if not isinstance(sql, str):
        raise SqlSyntaxError(f"the query must be a string, not {type(sql).__name__}")
    key = (sql, frozenset(functions))
    hit = _statements.get(key)
    if hit is None:
        hit = _parse_checked(sql, functions)
        _statements[key] = hit
        if len(_statements) > STATEMENT_CACHE_SIZE:
            _statements.popitem(last=False)
    else:
        _statements.move_to_end(key)
    return (hit[0].copy() if copy else hit[0]), hit[1]


def _parse_checked(sql: str, functions: Collection[str]) -> tuple[exp.Expression, list[Token]]:
    """Tokenize, parse and check ``sql`` (a str); SqlSyntaxError / UnsupportedQueryError."""
    quiet = _QuietWhileParsing.active.set(True)
    try:
        return _parse_and_check(sql, functions)
    finally:
        _QuietWhileParsing.active.reset(quiet)


def _parse_and_check(sql: str, functions: Collection[str]) -> tuple[exp.Expression, list[Token]]:
    nul = sql.find("\x00")
    if nul >= 0:
        raise SqlSyntaxError(f"SQL syntax error {_at(sql, nul)}: a NUL character in the query")
    tokens = _tokenize(sql)
    _check_tokens(sql, tokens)
    _window_calls(tokens)
    statements = [s for s in _parse(sql, tokens) if s is not None]
    if not statements:
        raise SqlSyntaxError("SQL syntax error at line 1, column 1: the statement is empty")
    if len(statements) != 1:
        raise SqlSyntaxError(
            f"expected one SQL statement, got {len(statements)}; the second is "
            f"{describe(statements[1])}"
        )
    root = statements[0]
    for ident in root.find_all(exp.Identifier):
        if not ident.quoted and str(ident.this).lower() in RESERVED:
            raise SqlSyntaxError(
                f"SQL syntax error: the reserved word {ident.this!r} is used as a name "
                f'{describe(ident).split(" ", 1)[1]} (quote it as "{ident.this}" if it is one)'
            )
    _check_keywords(sql, tokens, root)
    _place_intervals(tokens, root)
    # The pure rewrites (engine/rewrite/__init__.py): ANY/ALL before the allow-list, ...
    root = rewrite.apply(root, rewrite.Stage.PARSED)
    validate(root, functions)
    for table in root.find_all(exp.Table):  # before any rewrite sees it (count(*) OVER ())
        if not isinstance(table.this, exp.Identifier) and type(table.this) not in _READERS:
            raise UnsupportedQueryError(
                f"FROM item {describe(table)} is not supported (tables only)"
            )
    # ... and, once checked, a subquery's own `t` gets a name of its own (unshadow)
    root = rewrite.apply(root, rewrite.Stage.CHECKED)
    return root, tokens


def parse_query(sql: str, functions: Collection[str] = ()) -> QueryBlock:
    """Parse ``sql`` into a :class:`QueryBlock`; SqlSyntaxError / UnsupportedQueryError.

    ``functions``: lower-case names of registered Python functions (allowed as calls).
    The constructs engine/execution/composite.py runs around the eddy (WITH, subqueries, set
    operations, window functions...) are refused here: a QueryBlock is one eddy's query.
    """
    root, tokens = _statement(sql, functions)
    refuse_composite(root)
    if not isinstance(root, exp.Select):
        raise UnsupportedQueryError(f"only SELECT queries are supported, got {describe(root)}")

    from_clause = root.args.get("from_")
    if from_clause is None:
        raise UnsupportedQueryError(f"a query without FROM is not supported: {describe(root)}")
    tables = [_table_ref(from_clause.this)]
    conjuncts = conjuncts_of(root.args.get("where") and root.args["where"].this)
    subqueries = [c for c in conjuncts if subquery_of(c) is not None]
    conjuncts = [c for c in conjuncts if subquery_of(c) is None]
    _refuse_other_subqueries(root, subqueries)
    n_where = len(conjuncts)
    specs: list[JoinSpec] = []
    group = 0
    outer = False
    for join in root.args.get("joins") or []:
        tables.append(_table_ref(join.this))
        spec = _join_spec(sql, tokens, join, len(tables) - 1, group)
        if spec.kind == "comma":
            group = spec.index
            spec.group = group
        outer = outer or bool(spec.side)
        if not outer:
            conjuncts += spec.on
        specs.append(spec)
    if len(tables) > MAX_TABLES:
        raise UnsupportedQueryError(
            f"the query has {len(tables)} tables in FROM; at most {MAX_TABLES} are supported: "
            f"{describe(root.args['joins'][-1])}"
        )

    if has_distinct_list(root):
        raise UnsupportedQueryError(f"DISTINCT with a list is not supported: {describe(root)}")
    distinct = root.args.get("distinct")
    group_node = root.args.get("group")
    having = root.args.get("having")
    order = root.args.get("order")
    return QueryBlock(
        sql=sql,
        tables=tables,
        conjuncts=conjuncts,
        select=list(root.expressions),
        distinct=distinct is not None,
        group=list(group_node.expressions) if group_node is not None else [],
        having=having.this if having is not None else None,
        order=list(order.expressions) if order is not None else [],
        limit=_int_clause(root.args.get("limit"), "LIMIT"),
        offset=_int_clause(root.args.get("offset"), "OFFSET") or 0,
        joins=specs,
        n_where=n_where,
        subqueries=subqueries,
    )


def has_distinct_list(select: exp.Expression) -> bool:
    """Whether ``select``'s DISTINCT carries a list of expressions (sqlglot's
    ``Distinct.expressions``), which one eddy block does not run."""
    distinct = select.args.get("distinct")
    return distinct is not None and bool(distinct.expressions)


def subquery_of(node: exp.Expression) -> exp.Select | None:
    """The SELECT of a WHERE conjunct ``[NOT] EXISTS (SELECT ...)`` or ``x [NOT] IN
    (SELECT ...)``, else None."""
    while isinstance(node, exp.Not | exp.Paren):
        node = node.this
    if isinstance(node, exp.Exists) and isinstance(node.this, exp.Select):
        return node.this
    query = node.args.get("query") if isinstance(node, exp.In) else None
    if isinstance(query, exp.Subquery) and isinstance(query.this, exp.Select):
        return query.this
    return None


def _refuse_other_subqueries(root: exp.Expression, taken: list[exp.Expression]) -> None:
    """Subqueries are supported as ``[NOT] EXISTS`` / ``[NOT] IN`` WHERE conjuncts only,
    one level deep: refuse any other (in the select list, under OR, nested)."""
    allowed = {id(subquery_of(c)) for c in taken}
    for node in root.find_all(exp.Exists, exp.Subquery, exp.In):
        if isinstance(node, exp.In) and node.args.get("query") is None:
            continue
        select = node.this if isinstance(node, exp.Exists | exp.Subquery) else None
        if isinstance(node, exp.In):
            select = node.args["query"].this
        if id(select) in allowed:
            continue
        if isinstance(node, exp.Subquery) and isinstance(node.parent, exp.In):
            continue  # reported as its IN
        what = {exp.Exists: "EXISTS (a subquery)", exp.In: "IN (subquery)"}.get(
            type(node), "a subquery"
        )
        raise UnsupportedQueryError(
            f"{what} is not supported here (only [NOT] EXISTS / [NOT] IN (SELECT ...) as a "
            f"top-level WHERE condition, one level deep): {describe(node)}"
        )


def _check_keywords(sql: str, tokens: list[Token], root: exp.Expression) -> None:
    """Every keyword the tree implies was written: sqlglot fills in a missing THEN, the AND
    of BETWEEN, or the AS of a REPLACE item, where DuckDB reports a syntax error."""
    count: dict[TokenType, int] = {}
    first: dict[TokenType, Token] = {}
    for token in tokens:
        count[token.token_type] = count.get(token.token_type, 0) + 1
        first.setdefault(token.token_type, token)
    cases = list(root.find_all(exp.Case))
    whens = sum(len(c.args.get("ifs") or []) for c in cases)
    implied = {
        TokenType.AND: len(list(root.find_all(exp.And)))
        + len(list(root.find_all(exp.Between)))
        + sum(1 for w in root.find_all(exp.WindowSpec) if w.args.get("end")),  # frames
        TokenType.OR: len(list(root.find_all(exp.Or))),
        TokenType.WHEN: whens,
        TokenType.THEN: whens,
        TokenType.ELSE: sum(1 for c in cases if c.args.get("default") is not None),
        TokenType.END: len(cases),
    }
    for kind, expected in implied.items():
        if count.get(kind, 0) != expected:
            anchor = first.get(TokenType.BETWEEN if kind == TokenType.AND else TokenType.CASE)
            anchor = anchor or first.get(kind) or tokens[0]
            raise SqlSyntaxError(
                f"SQL syntax error {_at(sql, anchor.start)}: {kind.name} is missing or "
                f"misplaced{_near(sql, anchor.start)}"
            )
    starts = [t.start for t in tokens]
    for star in root.find_all(exp.Star):
        for item in star.args.get("replace") or []:
            ident = item.args.get("alias") if isinstance(item, exp.Alias) else None
            meta = ident.meta if ident is not None and ident._meta else {}
            i = bisect_left(starts, int(meta.get("start", -1)))
            if 0 < i < len(tokens) and tokens[i - 1].token_type != TokenType.ALIAS:
                raise SqlSyntaxError(
                    f"SQL syntax error {_at(sql, tokens[i].start)}: REPLACE items are "
                    "'expression AS column' (AS is missing)"
                )


def _place_intervals(tokens: list[Token], root: exp.Expression) -> None:
    """Give each INTERVAL node its keyword's position: sqlglot records none under it (its
    quantity becomes a new string literal), and errors must say where it is."""
    nodes = list(root.find_all(exp.Interval, bfs=False))
    keywords = [t for t in tokens if t.token_type == TokenType.INTERVAL]
    if len(nodes) == len(keywords):
        for node, token in zip(nodes, keywords, strict=True):
            node.meta.update(line=token.line, col=token.col, start=token.start, end=token.end)


class _Where:
    """``describe(node)``, rendered when formatted (SQL generation costs ~0.1 ms)."""

    def __init__(self, node: exp.Expression) -> None:
        self.node = node

    def __str__(self) -> str:
        return describe(self.node)


def _join_spec(sql: str, tokens: list[Token], join: exp.Join, index: int, group: int) -> JoinSpec:
    """Classify one sqlglot Join (its kind/method values are already allow-listed)."""
    kind = str(join.args.get("kind") or "").upper()
    side = str(join.args.get("side") or "").lower()
    natural = str(join.args.get("method") or "").upper() == "NATURAL"
    on, using = join.args.get("on"), join.args.get("using") or []
    where = _Where(join)  # rendered only for an error message
    if kind == "OUTER" and not side:
        raise SqlSyntaxError(f"SQL syntax error: OUTER JOIN needs LEFT, RIGHT or FULL: {where}")
    if side:
        if side != "left" and (natural or using):
            # The merged column would be COALESCE(left, right): not modelled.
            raise UnsupportedQueryError(
                f"{side.upper()} JOIN with USING / NATURAL is not supported (write ON): {where}"
            )
        if kind == "CROSS":
            raise SqlSyntaxError(f"SQL syntax error: CROSS JOIN has no side: {where}")
        if natural:
            if on is not None or using:
                raise SqlSyntaxError(
                    f"SQL syntax error: NATURAL JOIN takes no ON or USING: {where}"
                )
            return JoinSpec(index, "natural", group, join, side=side)
        if using:
            if on is not None:
                raise SqlSyntaxError(f"SQL syntax error: a JOIN has either ON or USING: {where}")
            for ident in using:
                if not isinstance(ident, exp.Identifier):
                    raise UnsupportedQueryError(f"USING takes column names: {describe(ident)}")
            return JoinSpec(index, "using", group, join, using=list(using), side=side)
        if on is None:
            raise SqlSyntaxError(f"SQL syntax error: {side.upper()} JOIN needs ON: {where}")
        return JoinSpec(index, "on", group, join, on=conjuncts_of(on), side=side)
    if natural:
        if on is not None or using or kind == "CROSS":
            raise SqlSyntaxError(
                f"SQL syntax error: NATURAL JOIN takes no ON, USING or CROSS: {where}"
            )
        return JoinSpec(index, "natural", group, join)
    if kind == "CROSS":
        if on is not None or using:
            raise SqlSyntaxError(f"SQL syntax error: CROSS JOIN takes no ON or USING: {where}")
        return JoinSpec(index, "cross", group, join)
    if on is not None and using:
        raise SqlSyntaxError(f"SQL syntax error: a JOIN has either ON or USING: {where}")
    if on is not None:
        return JoinSpec(index, "on", group, join, on=conjuncts_of(on))
    if using:
        for ident in using:
            if not isinstance(ident, exp.Identifier):
                raise UnsupportedQueryError(f"USING takes column names: {describe(ident)}")
        return JoinSpec(index, "using", group, join, using=list(using))
    if not kind and _after_comma(tokens, join.this):
        return JoinSpec(index, "comma", index, join)
    raise SqlSyntaxError(
        "SQL syntax error: a JOIN needs ON, USING or NATURAL (or write CROSS JOIN): "
        f"JOIN {describe(join.this)}"
    )


def _after_comma(tokens: list[Token], table: exp.Expression) -> bool:
    """Whether the token before ``table``'s first token is a comma (``FROM t, u``): sqlglot
    builds the same Join node for ``t, u`` and for ``t JOIN u``."""
    starts = [int(n.meta["start"]) for n in table.walk() if n._meta and "start" in n.meta]
    if not starts:
        return False
    i = bisect_left([t.start for t in tokens], min(starts))
    return i > 0 and tokens[i - 1].token_type == TokenType.COMMA


#: Read functions in FROM and the format each reads.
_READERS = {exp.ReadParquet: "parquet", exp.ReadCSV: "csv"}


def _table_ref(node: exp.Expression) -> TableRef:
    if isinstance(node, exp.Table) and type(node.this) in _READERS:
        return _read_ref(node, _READERS[type(node.this)])
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        raise UnsupportedQueryError(f"FROM item {describe(node)} is not supported (tables only)")
    if node.args.get("db") or node.args.get("catalog"):
        raise UnsupportedQueryError(f"qualified table name {describe(node)} is not supported")
    text = node.this.this
    if node.this.args.get("quoted") and _looks_like_path(text):
        # DuckDB's replacement scan: the alias is the file's stem (a glob: all of it).
        glob = any(c in text for c in "*?[")
        alias = node.alias or (text if glob else PurePath(text).name.split(".")[0])
        return TableRef(node.name.lower(), alias.lower(), node, path=text)
    return TableRef(node.name.lower(), node.alias_or_name.lower(), node)


def _looks_like_path(text: str) -> bool:
    return "/" in text or "*" in text or "." in text


def _read_ref(node: exp.Table, fmt: str) -> TableRef:
    """``read_parquet('path')`` / ``read_csv('path')``: one string argument, no options."""
    call = node.this
    args = [call.this] if isinstance(call, exp.ReadCSV) else list(call.expressions)
    if len(args) != 1 or not (isinstance(args[0], exp.Literal) and args[0].is_string):
        raise UnsupportedQueryError(
            f"read_{fmt} takes one path (a string literal: a file, a directory or a glob) "
            f"and no options here: {describe(node)}"
        )
    alias = node.alias or f"read_{fmt}"
    return TableRef(f"read_{fmt}", alias.lower(), node, path=args[0].this, format=fmt)
