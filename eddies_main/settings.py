"""Tuning knobs of the eddy, its SteMs and STAIRs: one documented, validated place.

The defaults are what the benches in ``bench/`` were measured with; a query runs with them
unless told otherwise. Set them for one query with ``RunOptions(tuning=Tuning(...))`` (the
engine applies it for the query's run), or for a block of code — a test, a bench — with
:func:`tuned`::

    from eddies.settings import Tuning, tuned

    with tuned(stair_migration_cost=0):
        ...  # every query started here migrates whenever the greedy plan asks

The active value lives in a :class:`contextvars.ContextVar`, so it follows trio tasks and
the worker threads trio starts (each copies its parent's context), and two queries in two
threads may run with different knobs. Modules read it with :func:`current` when they are
created or when they decide, never per row.

This module is a leaf like :mod:`eddies.errors`: any layer may import it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import operator
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from numbers import Integral, Real

from eddies.errors import EddiesError


@dataclass(frozen=True)
class Tuning:
    """The knobs (all optional; each field's comment gives its unit, default and source).

    Raises EddiesError naming the knob and the bad value (a bool is not a number here).
    """

    #: Eddy: tuples it may buffer (priority buffer and waiting, plus the output bounds of
    #: resumed probes in flight) before it holds back the continuations of large SteM
    #: probes; tuples, default 2**18 (memory stays bounded under fan-out).
    eddy_max_buffered_tuples: int = 1 << 18
    #: Eddy statistics: routing decisions kept in the log; beyond it the oldest half is
    #: folded into totals; records, default 2**20.
    route_log_max_records: int = 1 << 20
    #: Modules: batches of at least this many rows are visited in a worker thread (None:
    #: never); rows. A visit is many small NumPy kernels between Python steps holding the
    #: GIL, so offloading rarely pays on CPython; sync UDFs always run in threads.
    offload_rows: int | None = None
    #: SteM: most tuples one probe returns; a probe with more matches returns its rest to
    #: the eddy as a continuation (stems-2003 §2.1); tuples, default 2**16.
    stem_max_output_rows: int = 1 << 16
    #: SteM index: tables of at least this many rows get their direct-address tables built
    #: in a worker thread while builds arrive (one default scan batch); rows, default 2**17.
    direct_build_background_min_rows: int = 1 << 17
    #: STAIRs: the greedy migration policy looks at the routing again after this many more
    #: source tuples were admitted (stairs-2004 §5.1: every 1000 tuples); tuples.
    stair_check_every: int = 1000
    #: STAIRs: True routes by the greedy plan itself (stairs-2004 §4.1, the benches'
    #: setting, as the paper's STAIRs and EddyJoins do: the policy still orders SMs and the
    #: join; EddyJoins re-plan at the same checks but never migrate); False (default): the
    #: policy routes and the migrator moves what it misrouted (on bench/stairs.py 4-14×
    #: fewer intermediate tuples than greedy routing).
    stair_greedy_routing: bool = False
    #: STAIRs: the fixed cost of one migration (promotion/demotion of a cohort), in
    #: intermediate tuples' worth of work: whatever it moves, it rebuilds the groups holding
    #: the relation and routes the cohort and its results through the joins in a few eddy
    #: visits; default 1000 (bench/README.md, Fig. 8: 3-5 small migrations of 100-650
    #: tuples cost STAIRs 1.1-1.4× EddyJoins' CPU).
    stair_migration_cost: int = 1000
    #: STAIRs: the eddy merges returned batches of fewer tuples than this with the others
    #: of their signature waiting in its priority buffer before routing them on (a probe of
    #: a STAIR holding several signatures — after a migration especially — returns one
    #: small batch per signature, and their paths meet again: one module visit, ~0.1 ms,
    #: for all; eddies.router.eddy); tuples, default 128; 0: never. Read when a query is
    #: lowered.
    stair_coalesce_below: int = 128
    #: STAIRs: the cost of one more module visit a migration causes later, in intermediate
    #: tuples' worth of work (a visit ~0.1 ms, making and routing on an intermediate tuple
    #: ~1 µs; bench/README.md, issue 11): a span more in a STAIR splits each later probe's
    #: answer into one batch more; also weighed against moving a remnant with its cohort;
    #: default 100.
    stair_visit_cost: int = 100
    #: STAIRs under greedy routing: a seed drawing the plan used before the first check
    #: (the greedy plan under random fan-outs, 0.01-100 log-uniform per join side: "the
    #: initial plan ... chosen randomly", stairs-2004 §5.3); None (default): every fan-out
    #: 1 (ties to the lower join id).
    stair_initial_plan_seed: int | None = None
    #: STAIRs: a cohort the guard looked at is looked at again once the admitted input grew
    #: by this factor; default 2.0 (> 1). Each look scans the stored tuples holding its
    #: relation, and on bench/stairs.py Fig. 8 the looks that moved nothing were most of
    #: what STAIRs' CPU exceeded EddyJoins' by (1.25: 79-80% of the setups within 1.1x,
    #: 1.5: 82%, 2: 84%).
    stair_look_again: float = 2.0
    #: STAIRs: after the first check, no greedy check (routing change or migration) before
    #: this many source tuples were admitted (bench/stairs.py, Fig. 7(ii): the cost of
    #: migration when the first change of the early routing decisions is delayed);
    #: tuples, default 0.
    stair_first_check: int = 0
    #: STAIRs, the greedy policy's hysteresis (stairs-2004 §4.2, thrashing): a cohort is a
    #: candidate only when its new join's cumulative selectivity is at least this fraction
    #: below its old one's; default 0.2, in [0, 1).
    stair_migration_margin: float = 0.2
    #: STAIRs' guard: a vectorized scan over one stored tuple, as a fraction of the cost
    #: of making one intermediate tuple (a migration scans every stored tuple holding the
    #: cohort's relation to demote it); default 0.02.
    stair_scan_cost: float = 0.02
    #: STAIRs, for tests: a seed that forces migrations — at each point of stasis, with
    #: probability ``stair_random_migration_p``, a random cohort moves to a random other
    #: join, its intermediate results routed by random choices (migration at arbitrary
    #: points and to arbitrary plans must still give every result exactly once); None
    #: (default): the greedy policy decides.
    stair_random_plans_seed: int | None = None
    #: STAIRs, for tests: see ``stair_random_plans_seed``; a probability in (0, 1].
    stair_random_migration_p: float = 0.5

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            problem = _check(field.name, getattr(self, field.name))
            if problem:
                raise EddiesError(f"tuning: {field.name} must be {problem}")

    def replace(self, **changes: object) -> Tuning:
        """A copy with ``changes``; an unknown knob raises EddiesError naming it."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            known = ", ".join(f.name for f in dataclasses.fields(self))
            raise EddiesError(f"tuning: unknown knob(s) {', '.join(unknown)}; known: {known}")
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


#: Knob -> (kind, least, greatest, optional): "int" and "float" bounds are inclusive
#: unless named in _OPEN; optional knobs also take None.
_BOUNDS: dict[str, tuple[str, float | None, float | None, bool]] = {
    "eddy_max_buffered_tuples": ("int", 1, None, False),
    "route_log_max_records": ("int", 1, None, False),
    "offload_rows": ("int", 1, None, True),
    "stem_max_output_rows": ("int", 1, None, False),
    "direct_build_background_min_rows": ("int", 1, None, False),
    "stair_check_every": ("int", 1, None, False),
    "stair_greedy_routing": ("bool", None, None, False),
    "stair_migration_cost": ("int", 0, None, False),
    "stair_coalesce_below": ("int", 0, None, False),
    "stair_visit_cost": ("int", 0, None, False),
    "stair_initial_plan_seed": ("int", 0, None, True),
    "stair_look_again": ("float", 1, None, False),
    "stair_first_check": ("int", 0, None, False),
    "stair_migration_margin": ("float", 0, 1, False),
    "stair_scan_cost": ("float", 0, None, False),
    "stair_random_plans_seed": ("int", 0, None, True),
    "stair_random_migration_p": ("float", 0, 1, False),
}
#: Bounds that the value may not equal: look_again > 1, margin < 1, p > 0.
_OPEN = {("stair_look_again", 1), ("stair_migration_margin", 1), ("stair_random_migration_p", 0)}


def _check(name: str, value: object) -> str | None:
    """What ``value`` must be for knob ``name`` (a phrase for the error), or None if fine."""
    kind, least, greatest, optional = _BOUNDS[name]
    if value is None and optional:
        return None
    if kind == "bool":
        return None if isinstance(value, bool) else f"True or False, got {value!r}"
    limits = []  # (comparison, its sign, the bound)
    if least is not None:
        open_ = (name, least) in _OPEN
        limits.append((operator.gt, ">", least) if open_ else (operator.ge, ">=", least))
    if greatest is not None:
        open_ = (name, greatest) in _OPEN
        limits.append((operator.lt, "<", greatest) if open_ else (operator.le, "<=", greatest))
    number = Integral if kind == "int" else Real
    is_number = isinstance(value, number) and not isinstance(value, bool)
    if is_number and all(compare(value, bound) for compare, _, bound in limits):
        return None
    what = "an int" if kind == "int" else "a number"
    bounds = " and ".join(f"{sign} {bound}" for _, sign, bound in limits)
    return f"{what} {bounds}{' or None' if optional else ''}, got {value!r}"


DEFAULT = Tuning()
_active: contextvars.ContextVar[Tuning] = contextvars.ContextVar("eddies_tuning", default=DEFAULT)


def current() -> Tuning:
    """The knobs in force in this task or thread (:data:`DEFAULT` unless overridden)."""
    return _active.get()


@contextmanager
def tuned(tuning: Tuning | None = None, /, **changes: object) -> Iterator[Tuning]:
    """Run a block with ``tuning`` (or the current knobs with ``changes``) in force.

    Restored on exit, exceptions included. Yields the knobs in force inside the block.
    """
    value = (tuning or current()).replace(**changes) if changes else (tuning or current())
    token = _active.set(value)
    try:
        yield value
    finally:
        _active.reset(token)
