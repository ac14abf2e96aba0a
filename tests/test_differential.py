"""Property-based differential tests: random small tables and random SPJ(+aggregate) queries.

Hypothesis draws 1–4 table references (self-joins included) over small tables with NULLs,
duplicate rows and small integer domains so that joins hit, and a query over them: equi-join
graphs (chains, stars, cycles, multi-column keys, string keys, sometimes a cross product),
single-table predicates (comparisons, IN, BETWEEN, IS NULL, LIKE, NOT, OR, CASE, arithmetic),
sometimes a non-equi join predicate, and projections with expressions, DISTINCT, GROUP BY
with aggregates and HAVING, or ORDER BY over every output column with LIMIT/OFFSET (checked
in order). Each query runs under every policy with batch_size=None and batch_size=1
(debug=True), once with a small batch size (2–8, debug=True) under a drawn policy, and once
under ``static`` with a random permutation of the destinations explain() lists; every run
must equal DuckDB's result as a bag of rows.

Set EDDIES_DIFF_EXAMPLES to change the number of examples per shape, and
EDDIES_DIFF_SHRINK_SECONDS for the time spent shrinking a failure (default 30 s).
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine as _hypothesis_engine
from oracle import assert_same_bag, assert_same_ordered, duckdb_table, make_catalog

from eddies.engine import POLICIES, execute, explain
from eddies.router.policies.learning import LEARNING_POLICIES

MAX_EXAMPLES = int(os.environ.get("EDDIES_DIFF_EXAMPLES", "40"))

# Shrinking a failure re-runs the engine thousands of times; hypothesis stops after its
# (internal) MAX_SHRINKING_SECONDS, 300 s by default. Keep a failing run short instead.
if hasattr(_hypothesis_engine, "MAX_SHRINKING_SECONDS"):
    _hypothesis_engine.MAX_SHRINKING_SECONDS = int(
        os.environ.get("EDDIES_DIFF_SHRINK_SECONDS", "30")
    )

COLUMNS = ("k1", "k2", "v", "s", "f")
TYPES = {"k1": pa.int64(), "k2": pa.int64(), "v": pa.int64(), "s": pa.string(), "f": pa.float64()}
INT_COLS = ("k1", "k2", "v")
KEY_COLS = ("k1", "k2")
STRINGS = ("", "a", "ab", "b", "ba", "B")
FLOATS = (-1.5, 0.0, -0.0, 0.5, 2.25, 3.0, 100.125)
# rows per table, by number of table references in the query (keeps joins small)
MAX_ROWS = {1: 40, 2: 30, 3: 20, 4: 12}


@dataclass
class Scenario:
    sql: str
    tables: dict[str, pa.Table]
    seed: int
    extra_policy: str = "lottery"
    extra_batch_size: int = 3
    order_seed: int = 0
    order_keys: list[int] | None = None  # output positions of the ORDER BY keys
    notes: list[str] = field(default_factory=list)

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        lines = [
            f"SQL: {self.sql}",
            f"seed={self.seed} extra run: policy={self.extra_policy} "
            f"batch_size={self.extra_batch_size}; static order seed={self.order_seed}",
        ]
        for name, t in self.tables.items():
            lines.append(f"{name} {t.column_names} ({t.num_rows} rows):")
            lines.extend(f"    {row}" for row in zip(*t.to_pydict().values(), strict=True))
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:  # hypothesis' pretty-printer: the full data
        p.text(repr(self))


# ------------------------------------------------------------------------------ data
def _values(col: str) -> st.SearchStrategy:
    if col in KEY_COLS:
        return st.integers(0, 2)
    if col == "v":
        return st.integers(-2, 6)
    if col == "s":
        return st.sampled_from(STRINGS)
    return st.sampled_from(FLOATS)


@st.composite
def tables_st(draw, max_rows: int) -> pa.Table:
    nullable = draw(st.sets(st.sampled_from(COLUMNS)))
    col_st = {
        # about one value in four is NULL in a nullable column
        c: (st.one_of(st.none(), *[_values(c)] * 3) if c in nullable else _values(c))
        for c in COLUMNS
    }
    empty = draw(st.sampled_from([False] * 19 + [True]))
    n = 0 if empty else draw(st.integers(max_rows // 3, max_rows))
    rows = draw(st.lists(st.tuples(*(col_st[c] for c in COLUMNS)), min_size=n, max_size=n))
    if rows and draw(st.booleans()):  # duplicate some rows
        extra = draw(st.lists(st.sampled_from(rows), max_size=4))
        rows = (rows + extra)[: max_rows + 4]
    cols = list(zip(*rows, strict=True)) if rows else [() for _ in COLUMNS]
    return pa.table(
        {c: pa.array(list(v), type=TYPES[c]) for c, v in zip(COLUMNS, cols, strict=True)}
    )


# ------------------------------------------------------------------------------ predicates
def _lit(col: str, draw) -> str:
    if col == "s":
        return "'" + draw(st.sampled_from(STRINGS)) + "'"
    if col == "f":
        return repr(draw(st.sampled_from((*FLOATS, 1.0, 2))))
    return str(draw(st.integers(-1, 5)))


@st.composite
def single_pred_st(draw, a: str, depth: int = 0) -> str:
    kind = draw(
        st.sampled_from(
            [
                "cmp",
                "cmp",
                "in",
                "between",
                "isnull",
                "like",
                "not",
                "or",
                "strcmp",
                "arith",
                "colcmp",
                "case",
            ]
            if depth == 0
            else ["cmp", "in", "between", "isnull", "like", "arith", "colcmp"]
        )
    )
    op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
    if kind == "cmp":
        col = draw(st.sampled_from(("k1", "k2", "v", "f")))
        return f"{a}.{col} {op} {_lit(col, draw)}"
    if kind == "arith":
        return f"{a}.v * 2 - {a}.k1 {op} {draw(st.integers(-2, 8))}"
    if kind == "colcmp":
        return f"{a}.{draw(st.sampled_from(INT_COLS))} {op} {a}.{draw(st.sampled_from(INT_COLS))}"
    if kind == "case":
        return f"CASE WHEN {a}.k1 = 1 THEN {a}.v ELSE {a}.k2 END {op} 2"
    if kind == "strcmp":
        return f"{a}.s {op} {_lit('s', draw)}"
    if kind == "in":
        col = draw(st.sampled_from(("k1", "k2", "v", "s")))
        items = draw(st.lists(st.just(None), min_size=1, max_size=3))
        lits = sorted({_lit(col, draw) for _ in items})
        neg = draw(st.sampled_from(["", "NOT "]))
        return f"{a}.{col} {neg}IN ({', '.join(lits)})"
    if kind == "between":
        col = draw(st.sampled_from(("k1", "v", "f")))
        lo, hi = sorted([draw(st.integers(-2, 6)), draw(st.integers(-2, 6))])
        neg = draw(st.sampled_from(["", "", "NOT "]))
        return f"{a}.{col} {neg}BETWEEN {lo} AND {hi}"
    if kind == "isnull":
        col = draw(st.sampled_from(COLUMNS))
        return f"{a}.{col} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == "like":
        pat = draw(st.sampled_from(["a%", "%b", "_b%", "%a_", "a", "%", "_", "B%"]))
        return f"{a}.s {draw(st.sampled_from(['', 'NOT ']))}LIKE '{pat}'"
    if kind == "not":
        return f"NOT ({draw(single_pred_st(a, 1))})"
    # or
    return f"({draw(single_pred_st(a, 1))} OR {draw(single_pred_st(a, 1))})"


@st.composite
def non_equi_pred_st(draw, a: str, b: str) -> str:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return f"{a}.v < {b}.v"
    if kind == 1:
        return f"{a}.k1 <> {b}.k2"
    if kind == 2:
        return f"{a}.v + {b}.k1 >= 5"
    return f"({a}.v > {b}.v OR {a}.s = {b}.s)"


# ------------------------------------------------------------------------------ output
@st.composite
def select_item_st(draw, aliases: list[str]) -> str:
    a = draw(st.sampled_from(aliases))
    b = draw(st.sampled_from(aliases))
    kind = draw(st.integers(0, 11))
    if kind == 10:
        return f"{a}.v % 3"
    if kind == 11:
        return f"{a}.v / 4"
    if kind <= 4:
        return f"{a}.{draw(st.sampled_from(COLUMNS))}"
    if kind == 5:
        return f"{a}.v + {b}.k1"
    if kind == 6:
        return f"{a}.k2 * 2 - {b}.v"
    if kind == 7:
        return f"CASE WHEN {a}.v > 3 THEN 'hi' WHEN {a}.v IS NULL THEN {b}.s ELSE 'lo' END"
    if kind == 8:
        return f"{a}.f * {b}.v"
    return f"CAST({a}.k1 AS VARCHAR)"


@st.composite
def aggregate_st(draw, aliases: list[str]) -> str:
    a = draw(st.sampled_from(aliases))
    return draw(
        st.sampled_from(
            [
                "COUNT(*)",
                f"COUNT({a}.v)",
                f"SUM({a}.v)",
                f"SUM({a}.f)",
                f"MIN({a}.s)",
                f"MAX({a}.f)",
                f"AVG({a}.v)",
                f"COUNT(DISTINCT {a}.k2)",
                f"MAX({a}.v - {a}.k1)",
            ]
        )
    )


# ------------------------------------------------------------------------------ query
@st.composite
def scenarios(draw, n_refs: int) -> Scenario:
    # table references: alias ai over table tj; a later alias may reuse an earlier table
    alias_table: list[str] = []
    for i in range(n_refs):
        if i > 0 and draw(st.integers(0, 4)) == 0:
            alias_table.append(draw(st.sampled_from(alias_table)))
        else:
            alias_table.append(f"t{len(set(alias_table))}")
    aliases = [f"a{i}" for i in range(n_refs)]
    tables = {name: draw(tables_st(MAX_ROWS[n_refs])) for name in dict.fromkeys(alias_table)}

    # join graph: ON-conditions attached to the later alias of each edge
    join_preds: dict[int, list[str]] = {i: [] for i in range(n_refs)}
    notes: list[str] = []
    if n_refs >= 2:
        shape = draw(st.sampled_from(["chain", "star", "cycle"] if n_refs >= 3 else ["chain"]))
        notes.append(shape)
        if shape == "star":
            edges = [(0, i) for i in range(1, n_refs)]
        else:
            edges = [(i, i + 1) for i in range(n_refs - 1)]
            if shape == "cycle":
                edges.append((0, n_refs - 1))
        if n_refs == 3 and draw(st.integers(0, 7)) == 0:
            edges.pop(draw(st.integers(0, len(edges) - 1)))  # leaves a cross product
            notes.append("cross product")
        non_equi_only = n_refs == 2 and draw(st.integers(0, 5)) == 0
        for i, j in edges:
            a, b = aliases[i], aliases[j]
            if non_equi_only:
                join_preds[j].append(draw(non_equi_pred_st(a, b)))
                continue
            kind = draw(st.integers(0, 7))
            if kind == 0:
                preds = [f"{a}.s = {b}.s"]
            elif kind == 1:  # two-column key
                preds = [f"{a}.k1 = {b}.k1", f"{a}.k2 = {b}.k2"]
            else:
                preds = [
                    f"{a}.{draw(st.sampled_from(KEY_COLS))} = {b}.{draw(st.sampled_from(KEY_COLS))}"
                ]
            if draw(st.booleans()):
                preds = [f"{p.split(' = ')[1]} = {p.split(' = ')[0]}" for p in preds]
            join_preds[j].extend(preds)
        if draw(st.integers(0, 3)) == 0:  # an extra non-equi predicate over two aliases
            i, j = sorted(
                draw(st.lists(st.sampled_from(range(n_refs)), min_size=2, max_size=2, unique=True))
            )
            join_preds[j].append(draw(non_equi_pred_st(aliases[i], aliases[j])))

    where = [
        draw(single_pred_st(draw(st.sampled_from(aliases))))
        for _ in range(draw(st.sampled_from([0, 0, 1, 1, 1, 2, 3])))
    ]

    # FROM clause: comma style (all predicates in WHERE) or JOIN ... ON
    refs = [
        f"{t} AS {a}" if draw(st.booleans()) else f"{t} {a}"
        for t, a in zip(alias_table, aliases, strict=True)
    ]
    if n_refs >= 2 and draw(st.booleans()):
        from_sql = refs[0]
        for i in range(1, n_refs):
            if join_preds[i]:
                kw = draw(st.sampled_from(["JOIN", "INNER JOIN"]))
                from_sql += f" {kw} {refs[i]} ON {' AND '.join(join_preds[i])}"
            else:
                from_sql += f" CROSS JOIN {refs[i]}"
    else:
        from_sql = ", ".join(refs)
        where = [p for i in range(n_refs) for p in join_preds[i]] + where
    where = draw(st.permutations(where)) if where else []

    mode = draw(st.sampled_from(["star", "cols", "cols", "distinct", "group", "group", "order"]))
    tail = ""
    order_keys = None
    if mode == "order":
        # ORDER BY every output column, so LIMIT keeps a determined bag of rows
        cols = draw(
            st.lists(
                st.builds(
                    lambda a, c: f"{a}.{c}", st.sampled_from(aliases), st.sampled_from(COLUMNS)
                ),
                min_size=1,
                max_size=3,
                unique=True,
            )
        )
        select = ", ".join(cols)
        dirs = [
            draw(st.sampled_from(["", " ASC", " DESC", " NULLS FIRST", " DESC NULLS LAST"]))
            for _ in cols
        ]
        order_keys = draw(st.permutations(range(len(cols))))
        tail = " ORDER BY " + ", ".join(cols[i] + dirs[i] for i in order_keys)
        if draw(st.booleans()):
            tail += f" LIMIT {draw(st.integers(0, 12))}"
            if draw(st.booleans()):
                tail += f" OFFSET {draw(st.integers(0, 5))}"
    elif mode == "star":
        select = "*"
    elif mode in ("cols", "distinct"):
        items = draw(st.lists(select_item_st(aliases), min_size=1, max_size=4))
        select = ("DISTINCT " if mode == "distinct" else "") + ", ".join(items)
    else:
        keys = draw(
            st.lists(
                st.builds(
                    lambda a, c: f"{a}.{c}",
                    st.sampled_from(aliases),
                    st.sampled_from(("k1", "k2", "s")),
                ),
                max_size=2,
                unique=True,
            )
        )
        aggs = draw(st.lists(aggregate_st(aliases), min_size=1, max_size=3))
        select = ", ".join(keys + aggs)
        if keys:
            tail = " GROUP BY " + ", ".join(keys)
            if draw(st.integers(0, 3)) == 0:
                tail += f" HAVING COUNT(*) > {draw(st.integers(0, 2))}"

    sql = f"SELECT {select} FROM {from_sql}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += tail
    return Scenario(
        sql=sql,
        tables=tables,
        seed=draw(st.integers(0, 2**31 - 1)),
        extra_policy=draw(st.sampled_from(POLICIES)),
        extra_batch_size=draw(st.sampled_from([2, 3, 5, 7, 8])),
        order_seed=draw(st.integers(0, 10**6)),
        order_keys=order_keys,
        notes=notes,
    )


# ------------------------------------------------------------------------------ tests
DESTINATIONS = re.compile(r"destinations \(default static order\):\s*(.+)")


def static_order(sql: str, cat, seed: int) -> list[str]:
    """A random permutation of the destinations that explain() lists for ``sql``."""
    m = DESTINATIONS.search(explain(sql, cat))
    assert m, "explain() does not list the destinations"
    names = [n.strip() for n in m.group(1).split(",") if n.strip()]
    random.Random(seed).shuffle(names)
    return names


def run_everywhere(sc: Scenario) -> None:
    """Every policy with batch_size None and 1 (debug), the learning policies (pilot
    batches) also with 7; then one run with a small batch size under a drawn policy and
    one static run with a drawn destination order."""
    expected = duckdb_table(sc.sql, sc.tables)
    cat = make_catalog(sc.tables)
    runs = [(policy, bs, None) for bs in (None, 1) for policy in POLICIES]
    # The learning policies pilot and split batches: also at a small odd batch size.
    runs += [(policy, 7, None) for policy in LEARNING_POLICIES]
    runs.append((sc.extra_policy, sc.extra_batch_size, None))
    runs.append(("static", sc.extra_batch_size, static_order(sc.sql, cat, sc.order_seed)))
    for policy, bs, order in runs:
        debug = bs is not None
        ours = execute(
            sc.sql, cat, policy=policy, batch_size=bs, debug=debug, seed=sc.seed, order=order
        )
        context = f"policy={policy} batch_size={bs} debug={debug} seed={sc.seed} order={order}"
        if sc.order_keys is None:
            assert_same_bag(ours, sc.sql, sc.tables, context=context, expected=expected)
        else:
            assert_same_ordered(
                ours, sc.sql, sc.tables, sc.order_keys, context=context, expected=expected
            )


@pytest.mark.slow  # 6 to 31 s each (about 75 s together)
@pytest.mark.parametrize("n_refs", [1, 2, 3, 4])
@settings(max_examples=MAX_EXAMPLES, deadline=None, report_multiple_bugs=False)
@given(data=st.data())
def test_differential(n_refs, data):
    sc = data.draw(scenarios(n_refs), label="scenario")
    run_everywhere(sc)
