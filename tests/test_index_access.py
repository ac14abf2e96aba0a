"""Index AMs, competitive AMs, cyclic queries and failures, each result checked against DuckDB.

stems-2003 §2.1.3–3.4: a table may be served by asynchronous index AMs (lookups by bind
values, answered with EOT tuples), by several competing AMs (mirrors, a scan and an index)
whose duplicates the SteM removes, and the eddy must route around AMs that fail. Every
query here runs with ``debug=True`` (the routing constraints are checked on every step) and
its result is compared with DuckDB's on the same data, as a bag of rows (NULLs and duplicate
rows included). Lookup functions are plain ``async def`` filters over in-memory pyarrow
tables that log their calls, so the tests also check that a bind value is looked up at most
once per AM (later probes are answered from the SteM, the cache of lookups).

Sections: helpers; index joins (index-only tables, chains, self-joins, the SteM as cache);
cyclic queries and multi-column keys; competitive AMs; a hypothesis property test over
random AM configurations; faults and failover; latency hiding under trio's MockClock;
bind-field errors; explain.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import assert_same_bag, duckdb_table

from eddies.engine import (
    POLICIES,
    Catalog,
    DataSourceError,
    UnsupportedQueryError,
    explain,
    open_query,
    run_query,
)

# ---------------------------------------------------------------------------------------
# helpers

SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("c", pa.int64()), ("v", pa.int64())])
SCAN = ("scan",)


def index(*on: str) -> tuple:
    """An index AM spec for :func:`add_ams`: lookups by equality on ``on``."""
    return ("index", on)


def tbl(rows: Sequence[tuple], schema: pa.Schema = SCHEMA) -> pa.Table:
    """A table from row tuples (None is NULL)."""
    cols = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.table({f.name: pa.array(list(c), f.type) for f, c in zip(schema, cols, strict=True)})


def matching(table: pa.Table, bind: dict) -> pa.Table:
    """The rows of ``table`` equal to ``bind`` on its columns (what an index returns)."""
    assert all(v is not None for v in bind.values()), f"NULL bind value: {bind}"
    mask = None
    for col, value in bind.items():
        same = pc.equal(table[col], pa.scalar(value, table.schema.field(col).type))
        mask = same if mask is None else pc.and_(mask, same)
    return table.filter(mask)  # a NULL comparison drops the row


@dataclass
class Lookups:
    """Lookup functions over in-memory tables, with a log of every call per AM."""

    calls: Counter = field(default_factory=Counter)  # (am, bind items) -> calls
    yields: int = 0  # > 0: a lookup yields to trio 0..yields-1 times, varying by bind value
    in_flight: int = 0
    max_in_flight: int = 0

    def over(self, am: str, table: pa.Table, *, sleep: float = 0.0):
        """``async def lookup(bind)`` answering from ``table``, logged under ``am``."""

        async def lookup(bind: dict) -> pa.Table:
            key = tuple(sorted(bind.items()))
            self.calls[(am, key)] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                if self.yields:  # so that lookups finish out of order
                    for _ in range(hash((am, key)) % self.yields):
                        await trio.lowlevel.checkpoint()
                if sleep:
                    await trio.sleep(sleep)
                return matching(table, bind)
            finally:
                self.in_flight -= 1

        return lookup

    def binds(self, am: str) -> list[dict]:
        """The distinct bind values ``am`` looked up."""
        return [dict(key) for name, key in self.calls if name == am]

    def per_am(self, am: str) -> int:
        return sum(n for (name, _), n in self.calls.items() if name == am)

    def assert_each_bind_once(self) -> None:
        repeated = {key: n for key, n in self.calls.items() if n > 1}
        assert not repeated, f"bind values looked up more than once by one AM: {repeated}"


def add_ams(
    cat: Catalog,
    name: str,
    table: pa.Table,
    ams: Sequence[tuple],
    lookups: Lookups,
    *,
    key: Sequence[str] | None = None,
    max_concurrency: int = 8,
) -> None:
    """Add AMs named ``<table>_am<i>`` to table ``name``: ``SCAN`` or ``index(cols)``."""
    for i, am in enumerate(ams):
        access = f"{name}_am{i}"
        if am[0] == "scan":
            cat.add_table(name, table, key=key, access_name=access)
        else:
            cat.add_index(
                name,
                table.schema,
                on=list(am[1]),
                lookup=lookups.over(access, table),
                key=key,
                access_name=access,
                max_concurrency=max_concurrency,
            )


_EXPECTED: dict[tuple[str, tuple[int, ...]], pa.Table] = {}


def expected(sql: str, tables: dict[str, pa.Table]) -> pa.Table:
    """DuckDB's answer, remembered for the module's fixed tables (DuckDB takes ~25 ms)."""
    if tables is not TABLES:
        return duckdb_table(sql, tables)
    key = (sql, tuple(id(t) for t in tables.values()))
    if key not in _EXPECTED:
        _EXPECTED[key] = duckdb_table(sql, tables)
    return _EXPECTED[key]


@dataclass(frozen=True)
class Shape:
    """A query shape: its FROM aliases (alias -> table) and its equi-join edges
    ``(alias1, columns1, alias2, columns2)``."""

    name: str
    aliases: dict[str, str]
    edges: tuple[tuple[str, tuple[str, ...], str, tuple[str, ...]], ...]

    def sql(self, extra: str | None = None) -> str:
        froms = ", ".join(t if a == t else f"{t} {a}" for a, t in self.aliases.items())
        conds = [
            " AND ".join(f"{a1}.{x} = {a2}.{y}" for x, y in zip(c1, c2, strict=True))
            for a1, c1, a2, c2 in self.edges
        ]
        if extra:
            conds.append(extra)
        return f"SELECT * FROM {froms} WHERE {' AND '.join(conds)}"

    @property
    def tables(self) -> list[str]:
        return list(dict.fromkeys(self.aliases.values()))

    def bind_choices(self, table: str) -> list[tuple[str, ...]]:
        """Index ``on`` lists a join of this shape can bind (an edge's columns, or part)."""
        out: list[tuple[str, ...]] = []
        for a1, c1, a2, c2 in self.edges:
            for alias, cols in ((a1, c1), (a2, c2)):
                if self.aliases[alias] == table:
                    for k in range(1, len(cols) + 1):
                        out += itertools.combinations(cols, k)
        return list(dict.fromkeys(out))

    def runnable(self, ams: dict[str, Sequence[tuple]]) -> bool:
        """Nail's algorithm, independently of the planner: can every alias get rows?"""
        done = {a for a, t in self.aliases.items() if SCAN in ams[t]}
        changed = True
        while changed:
            changed = False
            for a1, c1, a2, c2 in self.edges:
                for source, target, cols in ((a1, a2, c2), (a2, a1, c1)):
                    table = self.aliases[target]
                    if source in done and target not in done and self._binds(ams[table], cols):
                        done.add(target)
                        changed = True
        return done == set(self.aliases)

    @staticmethod
    def _binds(ams: Sequence[tuple], cols: Sequence[str]) -> bool:
        return any(am[0] == "index" and set(am[1]) <= set(cols) for am in ams)


def check(
    shape: Shape,
    tables: dict[str, pa.Table],
    ams: dict[str, Sequence[tuple]],
    *,
    extra: str | None = None,
    policy: str = "lottery",
    batch_size: int | None = None,
    seed: int | None = 0,
    key: dict[str, Sequence[str]] | None = None,
    yields: int = 0,
    max_concurrency: int = 8,
):
    """Run the shape's query with the given AMs per table (debug=True); compare with DuckDB.

    Also checks that no AM failed and no AM looked a bind value up twice. Returns the run
    and the lookup log.
    """
    sql = shape.sql(extra)
    lookups = Lookups(yields=yields)
    cat = Catalog()
    for name in shape.tables:
        add_ams(
            cat,
            name,
            tables[name],
            ams[name],
            lookups,
            key=(key or {}).get(name),
            max_concurrency=max_concurrency,
        )
    run = run_query(sql, cat, policy=policy, batch_size=batch_size, seed=seed, debug=True)
    ctx = f"ams={ams} policy={policy} batch_size={batch_size} seed={seed}"
    assert_same_bag(run.table, sql, tables, context=ctx, expected=expected(sql, tables))
    assert run.stats.failures == []
    lookups.assert_each_bind_once()
    return run, lookups


PAIR = Shape("pair", {"r": "r", "s": "s"}, (("r", ("a",), "s", ("a",)),))
PAIR_2COL = Shape("pair-2col", {"r": "r", "s": "s"}, (("r", ("a", "b"), "s", ("a", "b")),))
CHAIN = Shape(
    "chain",
    {"r": "r", "s": "s", "t": "t"},
    (("r", ("a",), "s", ("a",)), ("s", ("b",), "t", ("b",))),
)
STAR = Shape(
    "star",
    {"r": "r", "s": "s", "t": "t", "u": "u"},
    (("r", ("a",), "s", ("a",)), ("r", ("b",), "t", ("b",)), ("r", ("c",), "u", ("c",))),
)
TRIANGLE = Shape(
    "triangle",
    {"r": "r", "s": "s", "t": "t"},
    (("r", ("a",), "s", ("a",)), ("s", ("b",), "t", ("b",)), ("t", ("c",), "r", ("c",))),
)
SELF_JOIN = Shape(  # two aliases of s, each bound through a different index AM
    "self-join",
    {"r": "r", "s1": "s", "s2": "s"},
    (("r", ("a",), "s1", ("a",)), ("s1", ("b",), "s2", ("b",))),
)
SELF_JOIN_ONE_INDEX = Shape(  # one index AM on s.a serves both aliases
    "self-join-one-index",
    {"r": "r", "s1": "s", "s2": "s"},
    (("r", ("a",), "s1", ("a",)), ("s1", ("b",), "s2", ("a",))),
)
SHAPES = [PAIR, PAIR_2COL, CHAIN, STAR, TRIANGLE, SELF_JOIN, SELF_JOIN_ONE_INDEX]

# Small tables with NULLs and duplicate rows in join and non-join columns.
R = tbl([(1, 1, 1, 10), (1, 1, 1, 10), (2, None, 2, 20), (None, 2, 0, 30), (3, 0, 2, None)])
S = tbl(
    [(1, 0, 1, 1), (1, 0, 1, 1), (1, 2, None, 2), (2, 2, 0, None), (None, 1, 1, 3), (4, 0, 0, 4)]
)
T = tbl([(0, 0, 1, 5), (1, 2, 2, 6), (1, 2, 2, 6), (2, None, 1, 7), (None, 0, 2, None)])
U = tbl([(0, 0, 0, 8), (0, 0, 2, 9), (0, 1, None, None), (0, 1, 1, 9)])
TABLES = {"r": R, "s": S, "t": T, "u": U}

RUNS = [(policy, bs) for policy in POLICIES for bs in (1, 2, None)]


# ---------------------------------------------------------------------------------------
# index joins


@pytest.mark.parametrize(("policy", "batch_size"), RUNS)
def test_index_only_table_joined_with_a_scanned_table(policy, batch_size):
    _, lookups = check(
        PAIR, TABLES, {"r": [SCAN], "s": [index("a")]}, policy=policy, batch_size=batch_size
    )
    # Only non-NULL r.a values are looked up (NULL never joins), each at most once.
    looked = {b["a"] for b in lookups.binds("s_am0")}
    assert looked <= {1, 2, 3}
    assert lookups.per_am("s_am0") == len(looked)


@pytest.mark.parametrize("batch_size", [1, None])
def test_index_join_with_projection_filters_and_aggregates(batch_size):
    lookups = Lookups()
    cat = Catalog()
    add_ams(cat, "r", R, [SCAN], lookups)
    add_ams(cat, "s", S, [index("a")], lookups)
    for sql in [
        "SELECT r.v, s.v FROM r JOIN s ON r.a = s.a WHERE s.b > 0 OR r.v IS NULL",
        "SELECT s.b, count(*), sum(r.v) FROM r, s WHERE r.a = s.a GROUP BY s.b",
        "SELECT DISTINCT s.a FROM r, s WHERE s.a = r.a AND r.c >= s.c",
    ]:
        run = run_query(sql, cat, batch_size=batch_size, debug=True, seed=1)
        assert_same_bag(run.table, sql, TABLES)
        lookups.assert_each_bind_once()  # per query: the SteM, the cache, lives for one
        lookups.calls.clear()


async def test_repeated_keys_are_answered_from_the_stem(autojump_clock):
    # r arrives in two pages with a pause between them: by the second page the lookups of
    # the first are done and their EOTs held, so the SteM answers those keys itself.
    r = tbl([(1, 0, 0, 0)] + [(1, 0, 0, i) for i in range(40)] + [(2, 0, 0, i) for i in range(9)])
    first, rest = r.slice(0, 1), r.slice(1)

    async def pages():
        yield first
        await trio.sleep(1.0)
        yield rest

    lookups = Lookups()
    cat = Catalog()
    cat.add_scan("r", r.schema, pages)
    cat.add_index("s", S.schema, on=["a"], lookup=lookups.over("s", S, sleep=0.01))
    sql = PAIR.sql()
    async with open_query(sql, cat, batch_size=1, debug=True, seed=0) as results:
        batches = [b async for b in results]
    assert_same_bag(pa.Table.from_batches(batches, results.schema), sql, {"r": r, "s": S})
    assert lookups.calls == Counter({("s", (("a", 1),)): 1, ("s", (("a", 2),)): 1})
    stats = results.stats.modules
    assert stats["probe:s"].tuples_in == r.num_rows
    # Prior probers: the first r tuple with a=1, and the nine a=2 tuples that all probed
    # before the (0.01 s) lookup of 2 returned; they shared that one lookup.
    assert stats["lookup:s_by_a@s"].tuples_in == 1 + 9


@pytest.mark.parametrize(("policy", "batch_size"), RUNS)
def test_chain_reaches_an_index_table_only_through_another_index_table(policy, batch_size):
    # r (scan) -> s (index on the r–s column a) -> t (index on the s–t column b)
    _, lookups = check(
        CHAIN,
        TABLES,
        {"r": [SCAN], "s": [index("a")], "t": [index("b")]},
        policy=policy,
        batch_size=batch_size,
    )
    # t is looked up only by b values of s rows that some r row reached.
    reached_s = S.filter(pc.is_in(S["a"], R["a"].drop_null()))
    assert {b["b"] for b in lookups.binds("t_am0")} <= set(reached_s["b"].drop_null().to_pylist())


@pytest.mark.parametrize("shape", [SELF_JOIN, SELF_JOIN_ONE_INDEX], ids=lambda s: s.name)
@pytest.mark.parametrize(("policy", "batch_size"), RUNS[::2])
def test_self_join_through_index_ams(shape, policy, batch_size):
    ams = {"r": [SCAN], "s": [index(*on) for on in shape.bind_choices("s")]}
    run, _ = check(shape, TABLES, ams, policy=policy, batch_size=batch_size)
    if shape is SELF_JOIN_ONE_INDEX:
        # One AM, two aliases: a lookup for one alias also serves the other (it is looked
        # up once per AM, checked in check()), and both lookup destinations exist.
        assert {"lookup:s_am0@s1", "lookup:s_am0@s2"} <= set(run.stats.modules)


@pytest.mark.parametrize("batch_size", [1, None])
def test_bind_values_are_cast_to_the_index_columns_types(batch_size):
    # r.f (float) binds s.a (int): 1.0 looks up 1, 1.5 and NULL look nothing up; r.k
    # (string) binds s.name; the bind dict uses the index's column names.
    r = pa.table(
        {
            "f": pa.array([1.0, 1.5, None, 2.0, -0.0, 1.0], pa.float64()),
            "k": pa.array(["x", "y", None, "", "x", "é"]),
        }
    )
    s = pa.table(
        {
            "a": pa.array([1, 1, 2, 0, None], pa.int32()),
            "name": pa.array(["x", "é", "", "x", "x"]),
            "w": pa.array([1, 2, 3, 4, 5], pa.int64()),
        }
    )
    lookups = Lookups()
    cat = Catalog()
    cat.add_table("r", r)
    cat.add_index("s", s.schema, on=["a"], lookup=lookups.over("by_a", s))
    cat.add_index("s2", s.schema, on=["name"], lookup=lookups.over("by_name", s))
    for sql in [
        "SELECT * FROM r, s WHERE r.f = s.a",
        "SELECT * FROM r, s2 WHERE r.k = s2.name",
        "SELECT * FROM r, s WHERE r.f = s.a AND r.k = s.name",
    ]:
        run = run_query(sql, cat, batch_size=batch_size, debug=True)
        assert_same_bag(run.table, sql, {"r": r, "s": s, "s2": s})
        assert {b["a"] for b in lookups.binds("by_a")} <= {0, 1, 2}
        assert all(type(b["a"]) is int for b in lookups.binds("by_a"))
        assert {b["name"] for b in lookups.binds("by_name")} <= {"x", "y", "", "é"}
        lookups.assert_each_bind_once()  # within one query (the SteM lives for one)
        lookups.calls.clear()


async def test_limit_and_early_exit_cancel_lookups_in_flight(autojump_clock):
    # Key 0 answers at once, every other key hangs far past its timeout: LIMIT 1 (and a
    # consumer that leaves after its first batch) must end the query without them.
    r = pa.table({"a": pa.array(range(20), pa.int64())})
    s = pa.table({"a": pa.array(range(20), pa.int64()), "w": pa.array(range(20), pa.int64())})

    async def lookup(bind):
        if bind["a"] != 0:
            await trio.sleep(10_000)
        return matching(s, bind)

    cat = Catalog()
    cat.add_table("r", r)
    cat.add_index("s", s.schema, on=["a"], lookup=lookup, timeout=1000.0)
    started = trio.current_time()
    async with open_query("SELECT * FROM r, s WHERE r.a = s.a LIMIT 1", cat, debug=True) as res:
        rows = [row for b in [b async for b in res] for row in b.to_pylist()]
    assert len(rows) == 1 and 0 in rows[0].values()
    async with open_query(PAIR.sql(), cat, batch_size=1, debug=True) as res:
        async for batch in res:
            assert batch.num_rows == 1
            break
    assert trio.current_time() - started < 1.0


# ---------------------------------------------------------------------------------------
# cyclic queries and multi-column keys

TRIANGLE_AMS = {
    "scan": lambda cols: [SCAN],
    "index-1": lambda cols: [index(cols[0])],
    "index-2": lambda cols: [index(cols[1])],
    "index-both": lambda cols: [index(cols[0]), index(cols[1])],
    "scan+index": lambda cols: [SCAN, index(cols[0])],
}
TRIANGLE_COLS = {"r": ("a", "c"), "s": ("a", "b"), "t": ("b", "c")}
TRIANGLE_MIXES = [
    mix
    for mix in itertools.product(TRIANGLE_AMS, repeat=3)
    if TRIANGLE.runnable(
        {t: TRIANGLE_AMS[m](TRIANGLE_COLS[t]) for t, m in zip("rst", mix, strict=True)}
    )
]


@pytest.mark.parametrize("mix", TRIANGLE_MIXES, ids="/".join)
def test_triangle_with_every_mix_of_scan_and_index_ams(mix):
    ams = {t: TRIANGLE_AMS[m](TRIANGLE_COLS[t]) for t, m in zip("rst", mix, strict=True)}
    k = TRIANGLE_MIXES.index(mix)
    for policy, batch_size in [RUNS[k % len(RUNS)], RUNS[(7 * k + 3) % len(RUNS)]]:
        check(TRIANGLE, TABLES, ams, policy=policy, batch_size=batch_size, seed=k)


def test_cycle_probe_into_index_only_stem_by_a_non_binding_edge():
    # r, t scanned; s only has an index on a. Static order: r probes t before t is built
    # (nothing), then t probes SteM s by s.b = t.b (binds no AM of s: nothing, not bounced
    # back) and never probes r, so no r–t tuple ever asks s for a = 0. DuckDB: 1 row.
    r = pa.table({"a": [0], "c": [0]})
    s = pa.table({"a": [0], "b": [0]})
    t = pa.table({"b": [0], "c": [0]})
    lookups = Lookups()
    cat = Catalog()
    cat.add_table("r", r)
    cat.add_table("t", t)
    cat.add_index("s", s.schema, on=["a"], lookup=lookups.over("s", s))
    sql = TRIANGLE.sql()
    run = run_query(
        sql,
        cat,
        policy="static",
        order=["probe:t", "probe:s", "probe:r"],
        batch_size=1,
        debug=True,
    )
    assert_same_bag(run.table, sql, {"r": r, "s": s, "t": t})


MULTI_KEY_AMS = [
    [index("a")],
    [index("b")],
    [index("a", "b")],
    [index("b"), index("a", "b")],
    [SCAN, index("a")],
    [index("a"), index("b")],
]


@pytest.mark.parametrize("s_ams", MULTI_KEY_AMS, ids=str)
@pytest.mark.parametrize(("policy", "batch_size"), RUNS[1::3])
def test_multi_column_key_with_index_on_a_subset_of_its_columns(s_ams, policy, batch_size):
    # The SteM probe checks both columns; the index binds one or both.
    _, lookups = check(
        PAIR_2COL, TABLES, {"r": [SCAN], "s": s_ams}, policy=policy, batch_size=batch_size
    )
    for i, am in enumerate(s_ams):
        for bind in lookups.binds(f"s_am{i}"):
            assert set(bind) == set(am[1])


def test_cycle_with_multi_column_edges():
    shape = Shape(
        "triangle-2col",
        {"r": "r", "s": "s", "t": "t"},
        (
            ("r", ("a", "b"), "s", ("a", "b")),
            ("s", ("c",), "t", ("c",)),
            ("t", ("a",), "r", ("c",)),
        ),
    )
    for ams in [
        {"r": [SCAN], "s": [index("a")], "t": [SCAN]},
        {"r": [SCAN], "s": [index("b"), index("c")], "t": [index("a")]},
        {"r": [SCAN], "s": [index("a", "b")], "t": [index("c"), SCAN]},
    ]:
        for policy, batch_size in RUNS[::4]:
            check(shape, TABLES, ams, policy=policy, batch_size=batch_size)


# ---------------------------------------------------------------------------------------
# competitive AMs

COMPETING = {
    "two-index-mirrors": [index("a"), index("a")],
    "index-on-two-columns": [index("a"), index("b")],
    "scan+index": [SCAN, index("a")],
    "index+scan": [index("a"), SCAN],
    "two-scans": [SCAN, SCAN],
    "three-mixed": [SCAN, index("a"), SCAN],
}


@pytest.mark.parametrize("s_ams", COMPETING.values(), ids=COMPETING.keys())
@pytest.mark.parametrize(("policy", "batch_size"), RUNS[::2])
def test_competing_ams_give_exact_bags(s_ams, policy, batch_size):
    check(PAIR, TABLES, {"r": [SCAN], "s": s_ams}, policy=policy, batch_size=batch_size)


@pytest.mark.parametrize(
    "key", [None, ["id"], "no-id"], ids=["all-columns", "key-id", "genuine-duplicates"]
)
def test_mirrors_with_different_row_orders(key):
    # The same rows in two orders (scans in batches of 4). With key=["id"], rows that agree
    # on every other column are still different rows; without the id column, the table has
    # genuine duplicate rows, identified by their ordinal among equal rows.
    schema = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("v", pa.int64())])
    rows = [(i, [1, 1, 2, None, 1][i % 5], [7, 7, 8, 8, None][i % 5]) for i in range(23)]
    s, s_reversed = tbl(rows, schema), tbl(rows[::-1], schema)
    r = tbl([(1, 1, 0), (2, 1, 0), (3, 2, 1), (4, None, 2)], schema)
    if key == "no-id":
        s, s_reversed, key = s.drop_columns("id"), s_reversed.drop_columns("id"), None
    sql = "SELECT * FROM r, s WHERE r.a = s.a"
    for ams in (["scan", "scan"], ["scan", "index"], ["index", "scan"], ["index", "index"]):
        for policy, batch_size in RUNS[::3]:
            lookups = Lookups()
            cat = Catalog()
            cat.add_table("r", r)
            for i, am in enumerate(ams):
                data = s if i == 0 else s_reversed
                if am == "scan":
                    cat.add_table("s", data, key=key, batch_size=4)
                else:
                    lookup = lookups.over(f"s{i}", data)
                    cat.add_index("s", data.schema, on=["a"], lookup=lookup, key=key)
            run = run_query(sql, cat, policy=policy, batch_size=batch_size, debug=True)
            ctx = f"{ams} key={key} {policy} {batch_size}"
            assert_same_bag(run.table, sql, {"r": r, "s": s}, context=ctx)
            lookups.assert_each_bind_once()


WITH_SCAN = {name: ams for name, ams in COMPETING.items() if SCAN in ams}


@pytest.mark.parametrize("s_ams", WITH_SCAN.values(), ids=WITH_SCAN.keys())
@pytest.mark.parametrize("batch_size", [1, 3, None])
def test_single_table_over_competing_ams(s_ams, batch_size):
    # No join: index AMs are never asked; scans' duplicates are still removed exactly.
    # (Without any predicate: see test_single_table_without_predicates_over_scan_mirrors.)
    lookups = Lookups()
    cat = Catalog()
    add_ams(cat, "s", S, s_ams, lookups)
    for sql in [
        "SELECT * FROM s WHERE b >= 0",
        "SELECT b, count(*) FROM s WHERE v IS NOT NULL GROUP BY b",
    ]:
        run = run_query(sql, cat, batch_size=batch_size, debug=True)
        assert_same_bag(run.table, sql, {"s": S})
    assert not lookups.calls


@pytest.mark.parametrize("sql", ["SELECT * FROM s", "SELECT count(*) FROM s"])
def test_single_table_without_predicates_over_scan_mirrors(sql):
    s = pa.table({"a": [1, 1, 2]})

    def mirror():
        async def pages():
            yield s
            await trio.sleep(0.05)  # both mirrors deliver everything before either ends

        return pages

    cat = Catalog()
    cat.add_scan("s", s.schema, mirror())
    cat.add_scan("s", s.schema, mirror())
    run = run_query(sql, cat, debug=True)  # got 6 rows (count 6), expected 3
    assert_same_bag(run.table, sql, {"s": s})


def test_hybrid_with_a_slow_scan_uses_the_index_and_stays_exact():
    # The scan of s starts late: per tuple, the access chooser tries the index join too
    # (stems-2003 §4.3), and the SteM removes what both AMs deliver.
    r = pa.concat_tables([R] * 4)
    lookups = Lookups()
    cat = Catalog()
    cat.add_table("r", r)
    cat.add_table("s", S, delay=0.2, access_name="s_scan")
    cat.add_index("s", S.schema, on=["a"], lookup=lookups.over("s_index", S))
    sql = PAIR.sql()
    run = run_query(sql, cat, batch_size=1, debug=True, seed=0)
    assert_same_bag(run.table, sql, {"r": r, "s": S})
    assert lookups.per_am("s_index") > 0
    lookups.assert_each_bind_once()


# ---------------------------------------------------------------------------------------
# property test: random tables, random AM configurations, a few query shapes

MAX_ROWS = {2: 8, 3: 6, 4: 5}  # rows per table by number of aliases
KEY_VALUE = st.one_of(st.none(), st.integers(0, 2), st.integers(0, 2))
ROW = st.tuples(KEY_VALUE, KEY_VALUE, KEY_VALUE, st.one_of(st.none(), st.integers(-1, 2)))
AM_KINDS = ["scan", "index", "scan+index", "index+scan", "index2", "scan2"]


@st.composite
def table_st(draw, max_rows: int) -> pa.Table:
    rows = draw(st.lists(ROW, max_size=max_rows))
    if rows and draw(st.booleans()):  # genuine duplicate rows
        rows += draw(st.lists(st.sampled_from(rows), min_size=1, max_size=3))
    return tbl(rows)


@st.composite
def ams_st(draw, shape: Shape, table: str) -> list[tuple]:
    kind = draw(st.sampled_from(AM_KINDS))
    ons = st.sampled_from(shape.bind_choices(table))
    return {
        "scan": lambda: [SCAN],
        "index": lambda: [index(*draw(ons))],
        "scan+index": lambda: [SCAN, index(*draw(ons))],
        "index+scan": lambda: [index(*draw(ons)), SCAN],
        "index2": lambda: [index(*draw(ons)), index(*draw(ons))],
        "scan2": lambda: [SCAN, SCAN],
    }[kind]()


@dataclass
class Case:
    shape: Shape
    tables: dict[str, pa.Table]
    ams: dict[str, list[tuple]]
    extra: str | None
    policy: str
    batch_size: int | None
    seed: int
    yields: int
    max_concurrency: int

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        lines = [
            f"shape={self.shape.name} SQL: {self.shape.sql(self.extra)}",
            f"ams={self.ams} policy={self.policy} batch_size={self.batch_size} seed={self.seed}",
            f"lookup yields={self.yields} max_concurrency={self.max_concurrency}",
        ]
        for name, t in self.tables.items():
            lines.append(f"{name}: {list(zip(*t.to_pydict().values(), strict=True))}")
        return "\n".join(lines)


@st.composite
def case_st(draw, shapes: Sequence[Shape] = tuple(SHAPES)) -> Case:
    shape = draw(st.sampled_from(shapes))
    tables = {t: draw(table_st(MAX_ROWS[len(shape.aliases)])) for t in shape.tables}
    ams = {t: draw(ams_st(shape, t)) for t in shape.tables}
    first = next(iter(shape.aliases))
    extra = draw(st.sampled_from([None, None, f"{first}.v > 0", f"{first}.b IS NOT NULL"]))
    return Case(
        shape,
        tables,
        ams,
        extra,
        draw(st.sampled_from(POLICIES)),  # static runs in explain's default order
        draw(st.sampled_from([1, 2, None])),
        draw(st.integers(0, 2**16)),
        draw(st.sampled_from([0, 0, 4])),
        draw(st.sampled_from([1, 2, 8])),
    )


def run_case(case: Case) -> None:
    if not case.shape.runnable(case.ams):
        # The planner must reject exactly what Nail's algorithm says cannot run.
        cat = Catalog()
        for name, table in case.tables.items():
            add_ams(cat, name, table, case.ams[name], Lookups())
        with pytest.raises(UnsupportedQueryError, match="no scan access method"):
            explain(case.shape.sql(case.extra), cat)
        return
    check(
        case.shape,
        case.tables,
        case.ams,
        extra=case.extra,
        policy=case.policy,
        batch_size=case.batch_size,
        seed=case.seed,
        yields=case.yields,
        max_concurrency=case.max_concurrency,
    )


@pytest.mark.slow
@settings(max_examples=150)
@given(case=case_st())
def test_random_am_configurations_match_duckdb(case):
    run_case(case)


# ---------------------------------------------------------------------------------------
# faults and failover

FAST_FAIL = {"timeout": 0.05, "retries": 1, "backoff": 0.01}  # a failure takes ~0.11 s


def faulty_lookup(kind: str, table: pa.Table, ok_calls: int = 0):
    """A lookup that fails after ``ok_calls`` good answers: it raises, hangs past any
    timeout, or returns rows without the table's columns (or with the wrong types)."""
    calls = 0

    async def lookup(bind: dict):
        nonlocal calls
        calls += 1
        if calls <= ok_calls:
            return matching(table, bind)
        if kind == "raises":
            raise ConnectionError("mirror went away")
        if kind == "hangs":
            await trio.sleep(3600)
        if kind == "garbage":
            return pa.table({"zzz": [1, 2]})
        return pa.table({name: ["not a number"] for name in table.column_names})

    return lookup


FAULTS = ["raises", "hangs", "garbage", "wrong-types"]


def bad_and_good_mirrors(kind: str, *, ok_calls: int = 2) -> Catalog:
    cat = Catalog()
    cat.add_table("r", R)
    cat.add_index(
        "s",
        S.schema,
        on=["a"],
        lookup=faulty_lookup(kind, S, ok_calls),
        access_name="s_bad",
        **FAST_FAIL,
    )
    cat.add_index("s", S.schema, on=["a"], lookup=Lookups().over("s", S), access_name="s_good")
    return cat


@pytest.mark.parametrize("kind", FAULTS)
def test_a_failing_index_mirror_fails_over_to_a_healthy_one(kind):
    # Static order with the bad mirror first: it answers two lookups, then fails; the
    # Works it held go to the good mirror, and the SteM drops the rows both delivered.
    sql = PAIR.sql()
    for batch_size in (1, None):
        run = run_query(
            sql,
            bad_and_good_mirrors(kind),
            policy="static",
            order=["lookup:s_bad@s"],
            batch_size=batch_size,
            debug=True,
        )
        assert_same_bag(run.table, sql, TABLES, expected=expected(sql, TABLES))
        assert len(run.stats.failures) == 1
        assert "'s_bad'" in run.stats.failures[0] and "'s'" in run.stats.failures[0]
    # Under the adaptive policies the result is exact whichever mirror they pick.
    for policy in POLICIES[1:]:
        run = run_query(sql, bad_and_good_mirrors(kind), policy=policy, batch_size=1, debug=True)
        assert_same_bag(run.table, sql, TABLES, expected=expected(sql, TABLES))
        assert all("'s_bad'" in f for f in run.stats.failures)


@pytest.mark.parametrize("kind", FAULTS)
async def test_a_failing_index_of_a_hybrid_falls_back_to_the_scan(autojump_clock, kind):
    # The scan starts late, so the index (tried first) fails before the scan has delivered
    # the table (after that, pending lookups are skipped and cannot fail). Virtual time:
    # the 0.11 s the index takes to fail always comes before the scan's 0.3 s delay.
    cat = Catalog()
    cat.add_table("r", R)
    cat.add_table("s", S, access_name="s_scan", delay=0.3)
    cat.add_index(
        "s", S.schema, on=["a"], lookup=faulty_lookup(kind, S), access_name="s_bad", **FAST_FAIL
    )
    sql = PAIR.sql()
    options = {"policy": "static", "order": ["lookup:s_bad@s"], "batch_size": 1, "debug": True}
    async with open_query(sql, cat, **options) as results:
        batches = [batch async for batch in results]
    table = pa.Table.from_batches(batches, results.schema)
    assert_same_bag(table, sql, TABLES, expected=expected(sql, TABLES))
    failures = results.stats.failures
    assert len(failures) == 1 and "'s_bad'" in failures[0]


@pytest.mark.parametrize(
    "kinds", [("raises", "hangs"), ("hangs", "hangs"), ("garbage", "raises"), ("wrong-types",)]
)
@pytest.mark.parametrize("policy", ["static", "lottery"])
async def test_when_every_index_mirror_fails_the_query_fails_promptly(
    autojump_clock, kinds, policy
):
    # Virtual time (autojump MockClock): "promptly" is measured, not waited for, so a
    # loaded machine cannot flake it. A "hangs" mirror sleeps an hour.
    cat = Catalog()
    cat.add_table("r", R)
    for i, kind in enumerate(kinds):
        cat.add_index(
            "s",
            S.schema,
            on=["a"],
            lookup=faulty_lookup(kind, S),
            access_name=f"s_{kind}_{i}",
            **FAST_FAIL,
        )
    started = trio.current_time()
    with pytest.raises(DataSourceError) as failure:
        await collect(PAIR.sql(), cat, policy=policy, debug=True)
    # Each mirror gives up after two attempts of at most 0.05 s and one 0.01 s backoff.
    assert trio.current_time() - started <= len(kinds) * 0.11 + 1e-9
    message = str(failure.value)
    assert "table 's'" in message
    for i, kind in enumerate(kinds):
        assert f"s_{kind}_{i}" in message
    # Nothing is left behind: the next query in this run works normally.
    healthy, lookups = index_catalog()
    assert_same_bag(await collect(PAIR.sql(), healthy, debug=True), PAIR.sql(), TABLES)
    lookups.assert_each_bind_once()


async def collect(sql: str, cat: Catalog, **options) -> pa.Table:
    """Run ``sql`` with :func:`open_query` in the current trio run; the whole result."""
    async with open_query(sql, cat, **options) as results:
        batches = [batch async for batch in results]
    return pa.Table.from_batches(batches, results.schema)


def paged(table: pa.Table, *, fail_after: int | None = None, pause: float = 0.0):
    """``pages`` for add_scan: 2-row pages; raise before page ``fail_after``; sleep between."""

    async def pages():
        for i, page in enumerate(table.to_batches(max_chunksize=2)):
            if i == fail_after:
                raise ConnectionError("connection reset by mirror")
            yield page
            if pause:
                await trio.sleep(pause)

    return pages


@pytest.mark.parametrize("batch_size", [1, None])
def test_a_failing_scan_with_a_surviving_mirror_is_exact(batch_size):
    cat = Catalog()
    cat.add_table("r", R)
    cat.add_scan("s", S.schema, paged(S, fail_after=1), access_name="s_flaky")
    cat.add_scan("s", S.schema, paged(S, pause=0.02), access_name="s_slow")
    for sql in [PAIR.sql(), "SELECT * FROM s WHERE a IS NULL OR a > 0"]:
        run = run_query(sql, cat, batch_size=batch_size, debug=True)
        assert_same_bag(run.table, sql, TABLES, expected=expected(sql, TABLES))
        assert len(run.stats.failures) == 1
        assert "s_flaky" in run.stats.failures[0] and "ConnectionError" in run.stats.failures[0]


@pytest.mark.parametrize("sql", [PAIR.sql(), "SELECT * FROM s WHERE v > 0"])
async def test_a_failing_scan_without_a_mirror_fails_the_query(autojump_clock, sql):
    # Virtual time: the failure ends the query at once (no sleep, timeout or retry).
    cat = Catalog()
    cat.add_table("r", R)
    cat.add_scan("s", S.schema, paged(S, fail_after=2), access_name="s_flaky")
    started = trio.current_time()
    with pytest.raises(DataSourceError, match=r"table 's'.*s_flaky.*connection reset"):
        await collect(sql, cat, debug=True)
    assert trio.current_time() == started
    healthy = Catalog()
    healthy.add_table("r", R)
    healthy.add_table("s", S)
    assert_same_bag(await collect(PAIR.sql(), healthy, debug=True), PAIR.sql(), TABLES)


@pytest.mark.parametrize("pause", [0.0, 0.01])
@pytest.mark.parametrize("policy", ["lottery", "random", "static"])
@pytest.mark.parametrize("batch_size", [1, 2, None])
def test_a_hybrid_whose_scan_fails_falls_back_to_its_index(pause, policy, batch_size):
    # Tuples that met the SteM while the scan was alive were not bounced back; when the
    # scan dies, the eddy looks their matches up again through the index AM.
    cat = Catalog()
    cat.add_table("r", R)
    cat.add_scan("s", S.schema, paged(S, fail_after=1, pause=pause), access_name="s_flaky")
    lookups = Lookups()
    cat.add_index("s", S.schema, on=["a"], lookup=lookups.over("s", S))
    for sql in [PAIR.sql(), PAIR.sql("s.v > 0")]:
        run = run_query(sql, cat, batch_size=batch_size, policy=policy, seed=2, debug=True)
        assert_same_bag(run.table, sql, TABLES, expected=expected(sql, TABLES))
        assert len(run.stats.failures) == 1 and "s_flaky" in run.stats.failures[0]


def test_a_failed_scan_cannot_fall_back_where_no_join_binds_the_index():
    # s is joined on b only, and its index is on a: the lookups cannot replace the scan.
    cat = Catalog()
    cat.add_table("r", R)
    cat.add_scan("s", S.schema, paged(S, fail_after=1), access_name="s_flaky")
    cat.add_index("s", S.schema, on=["a"], lookup=Lookups().over("s", S))
    with pytest.raises(DataSourceError, match=r"table 's'.*s_flaky"):
        run_query("SELECT * FROM r JOIN s ON r.b = s.b", cat, debug=True)


@pytest.mark.parametrize(
    "answer",
    [
        lambda rows, table: rows.to_pylist(),  # list of dicts
        lambda rows, table: rows.to_pandas(),  # pandas DataFrame
        lambda rows, table: rows.combine_chunks().to_batches()[0] if rows.num_rows else rows,
        lambda rows, table: table,  # a sloppy source: every row, the AM keeps the matches
        lambda rows, table: rows.select(["v", "c", "b", "a"]).append_column(
            "x", pa.nulls(len(rows))
        ),
        lambda rows, table: rows.cast(pa.schema([(f.name, pa.int32()) for f in rows.schema])),
    ],
    ids=["pylist", "pandas", "record-batch", "extra-rows", "reordered-extra-column", "int32"],
)
def test_lookup_answers_in_every_accepted_form(answer):
    async def lookup(bind):
        return answer(matching(S, bind), S)

    cat = Catalog()
    cat.add_table("r", R)
    cat.add_index("s", S.schema, on=["a"], lookup=lookup)
    sql = PAIR.sql()
    run = run_query(sql, cat, batch_size=1, debug=True)
    assert_same_bag(run.table, sql, TABLES, expected=expected(sql, TABLES))
    assert run.stats.failures == []


# ---------------------------------------------------------------------------------------
# latency hiding: lookups overlap (trio's autojump MockClock: virtual time, no waiting)

LATENCY = 0.05


@pytest.mark.parametrize("max_concurrency", [1, 4, 32])
@pytest.mark.parametrize("batch_size", [1, None])
async def test_lookups_overlap_up_to_max_concurrency(autojump_clock, max_concurrency, batch_size):
    n = 256
    r = pa.table({"a": pa.array(range(n), pa.int64()), "x": pa.array(range(n), pa.int64())})
    s = pa.table({"a": pa.array(range(n), pa.int64()), "y": pa.array(range(n), pa.int64())})
    lookups = Lookups()
    cat = Catalog()
    cat.add_table("r", r)
    cat.add_index(
        "s",
        s.schema,
        on=["a"],
        lookup=lookups.over("s", s, sleep=LATENCY),
        max_concurrency=max_concurrency,
    )
    sql = "SELECT * FROM r JOIN s ON r.a = s.a"
    started = trio.current_time()
    async with open_query(sql, cat, batch_size=batch_size, debug=True, seed=0) as results:
        batches = [b async for b in results]
    elapsed = trio.current_time() - started
    assert_same_bag(pa.Table.from_batches(batches, results.schema), sql, {"r": r, "s": s})
    bound = n * LATENCY / max_concurrency  # n lookups, max_concurrency at a time
    assert bound - 1e-9 <= elapsed <= 1.3 * bound + LATENCY, (elapsed, bound)
    assert lookups.max_in_flight == max_concurrency
    lookups.assert_each_bind_once()


# ---------------------------------------------------------------------------------------
# bind-field errors (stems-2003 §2.2 step 1)


def index_catalog(on: Sequence[str] = ("a",)) -> tuple[Catalog, Lookups]:
    lookups = Lookups()
    cat = Catalog()
    cat.add_table("r", R)
    cat.add_index("s", S.schema, on=list(on), lookup=lookups.over("s", S))
    return cat, lookups


@pytest.mark.parametrize(
    ("sql", "on", "alias", "bound"),
    [
        ("SELECT * FROM s", ["a"], "s", "binds none of its columns by a join"),
        ("SELECT * FROM s x WHERE x.a = 1", ["a"], "x", "binds none of its columns"),
        ("SELECT * FROM r, s x WHERE r.b = x.b", ["a"], "x", "binds it only on ['b']"),
        ("SELECT * FROM r, s WHERE r.a < s.a", ["a"], "s", "binds none of its columns"),
        ("SELECT * FROM r, s WHERE r.a + 0 = s.a", ["a"], "s", "binds none of its columns"),
        ("SELECT * FROM r CROSS JOIN s", ["a"], "s", "binds none of its columns"),
        ("SELECT * FROM r, s WHERE r.a = s.a", ["a", "b"], "s", "binds it only on ['a']"),
        ("SELECT * FROM s s1, s s2 WHERE s1.a = s2.a", ["a"], "s1", "binds it only on ['a']"),
    ],
)
def test_a_query_that_cannot_bind_an_index_only_table_is_rejected(sql, on, alias, bound):
    cat, lookups = index_catalog(on)
    needs = f"[{', '.join(on)}] (s_by_{'_'.join(on)})"
    for attempt in (explain, run_query):
        with pytest.raises(UnsupportedQueryError) as failure:
            attempt(sql, cat)
        message = str(failure.value)
        assert f"table 's' (as '{alias}')" in message
        assert f"need bindings for {needs}" in message
        assert bound in message
    assert not lookups.calls


def test_an_alias_reachable_only_through_an_unreachable_one_is_named():
    # t could be bound by s.b, but s itself is bound only on v (its index needs a).
    cat, _ = index_catalog(["a"])
    cat.add_index("t", T.schema, on=["b"], lookup=Lookups().over("t", T))
    sql = "SELECT * FROM r, s, t WHERE r.v = s.v AND s.b = t.b"
    with pytest.raises(UnsupportedQueryError, match=r"table 's' \(as 's'\).*\[a\]"):
        explain(sql, cat)
    # With r binding s.a too, both become reachable.
    shape = Shape(
        "chain-v",
        {"r": "r", "s": "s", "t": "t"},
        (("r", ("a", "v"), "s", ("a", "v")), ("s", ("b",), "t", ("b",))),
    )
    check(shape, TABLES, {"r": [SCAN], "s": [index("a")], "t": [index("b")]}, batch_size=1)


# ---------------------------------------------------------------------------------------
# explain


def test_explain_lists_ams_lookups_and_prior_probers():
    cat, _ = index_catalog()
    text = explain(PAIR.sql(), cat)
    assert "scan:r  (in-memory table; table r; aliases: r)" in text
    assert "am:s_by_a  (index on (a), up to 8 lookups in flight; table s; aliases: s)" in text
    assert "lookup:s_by_a@s" in text.split("destinations (default static order):")[1]
    assert "span {r} (prior prober of s) done {-} -> lookup:s_by_a@s" in text
    assert "span {s} (unbuilt) done {-} -> build:s" in text


def test_explain_shows_competing_ams_as_alternatives():
    cat = Catalog()
    cat.add_table("r", R)
    cat.add_table("s", S, key=["a", "b", "c", "v"])
    cat.add_index("s", S.schema, on=["a"], lookup=Lookups().over("s", S), access_name="s_idx1")
    cat.add_index("s", S.schema, on=["a"], lookup=Lookups().over("s", S), access_name="s_idx2")
    text = explain(PAIR.sql(), cat)
    assert "competing AMs of s: duplicates removed by (a, b, c, v)" in text
    # Hash join or index join (either mirror) for r's probe of s; no prior probers.
    assert "span {r} done {-} -> {probe:s / lookup:s_idx1@s / lookup:s_idx2@s}" in text
    assert "(looked up s)" in text
    assert "prior prober" not in text
    cat.drop_table("s")
    cat.add_index("s", S.schema, on=["a"], lookup=Lookups().over("s", S), access_name="m1")
    cat.add_index("s", S.schema, on=["a"], lookup=Lookups().over("s", S), access_name="m2")
    text = explain(PAIR.sql(), cat)
    assert "(prior prober of s) done {-} -> {lookup:m1@s / lookup:m2@s}" in text
    assert "competing AMs of s: duplicates removed by (all columns)" in text
