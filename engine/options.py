"""The run options of a query: one frozen, validated :class:`RunOptions`.

Every public entry point (``execute``, ``run_query``, ``open_query``, ``BackgroundQuery``,
the Spark attachment, the partitioned runner, the CLI) takes the options as keywords for
convenience, or as ``options=RunOptions(...)``, and builds them through
:meth:`RunOptions.from_kwargs`, the one place that knows their names and checks their
values. A bad value raises :class:`EddiesError` naming the option and the value, at the API
edge, before any task starts.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

from eddies.engine.expr.intervals import span_us
from eddies.errors import EddiesError
from eddies.router.policies import check_policy_options
from eddies.router.run_choices import DEFAULT_POLICY, JOIN_STATES
from eddies.settings import Tuning, current


@dataclass(frozen=True)
class RunOptions:
    """How to run a query (all optional).

    policy: one of ``static``, ``random``, ``naive``, ``lottery``, ``lottery-window``
    (eddies-2000 §4), ``rank``, ``bandit`` or ``hybrid`` (:mod:`eddies.router.policies.learning`);
    default ``hybrid``: rank with pilots where a choice may be expensive (an SM calling a
    UDF, an index AM lookup), the lottery among free ones. order: destination names for
    ``static`` (see :func:`eddies.engine.plan.explain`), a sequence of strings, kept as a tuple.
    window: seconds per ticket window for ``lottery-window`` (positive, finite). batch_size:
    rows per scan batch, a positive int (1 = the per-tuple eddy of the paper; None: the
    table's or the engine's default). seed: a non-negative int that makes the policy's draws
    and the task scheduling repeatable, so a run routes the same way again (not with sync
    UDFs, under lottery-window, nor where rank, bandit or hybrid weigh measured costs —
    hybrid does so only when a UDF or index AM lookup is among the choices: these depend on
    timing). debug: check the routing constraints on every step. queue_capacity: batches per
    module input queue, a positive int. inline_visits: whether the eddy calls modules that
    never wait (SteMs, SMs without UDFs) directly instead of through their queues (None:
    yes, except under ``naive``, whose routing is back-pressure on those queues alone).
    filters: whether SteM filters (semi-joins by a complete SteM's join keys, see
    :mod:`eddies.router.routing_table`) may be offered. output_mode: for queries over stream
    tables, how results leave at each commit point (Spark's output modes, see
    :mod:`eddies.engine.streaming.incremental`): ``"update"`` (the groups that changed),
    ``"complete"`` (every group), ``"append"`` (a group once final); None: an aggregate's
    result leaves when the streams end. watermarks: stream table name -> ``(event-time
    column, allowed lateness)``, the lateness as text (``"10 seconds"``) or a
    ``datetime.timedelta``; kept as name -> (column, timedelta). Needs an output_mode.
    join_state: ``"stems"`` (SteMs, stems-2003; the default), ``"eddyjoins"`` (STAIRs that
    never migrate: the EddyJoins baseline of stairs-2004) or ``"stairs"`` (STAIRs with
    state migration by the greedy policy of stairs-2004 §4.1); see
    :mod:`eddies.engine.plan.join_state` for what they refuse.
    checkpoint: a folder (str or path; kept as str) where a query over stream tables
    checkpoints its state — stream SteMs, windows, a streaming aggregate, the lookup
    cache, the batch ids taken — at every commit point, and from which a restarted query
    with the same SQL resumes (see :mod:`eddies.engine.streaming.durable`); None: state lives in
    memory only.
    tuning: an :class:`eddies.settings.Tuning` in force while this query runs (the eddy's
    buffer bound, SteM probe output, STAIR migration costs, ...); None: the knobs in force
    where the query starts (:func:`eddies.settings.current`, the defaults unless a
    :func:`eddies.settings.tuned` block changed them).

    Raises EddiesError naming the option and the bad value; ``True`` is not a number here.
    """

    policy: str = DEFAULT_POLICY
    batch_size: int | None = None
    seed: int | None = None
    debug: bool = False
    order: tuple[str, ...] | None = None
    window: float | None = None
    queue_capacity: int | None = None
    inline_visits: bool | None = None
    filters: bool = True
    output_mode: str | None = None
    watermarks: Mapping[str, tuple[str, dt.timedelta]] | None = None
    join_state: str = "stems"
    checkpoint: str | None = None
    tuning: Tuning | None = None

    def __post_init__(self) -> None:
        _check_int(self, "batch_size", minimum=1)
        _check_int(self, "seed", minimum=0)
        _check_int(self, "queue_capacity", minimum=1)
        if not isinstance(self.debug, bool):
            raise EddiesError(f"debug must be True or False, got {self.debug!r}")
        if not isinstance(self.filters, bool):
            raise EddiesError(f"filters must be True or False, got {self.filters!r}")
        if self.inline_visits is not None and not isinstance(self.inline_visits, bool):
            raise EddiesError(
                f"inline_visits must be True, False or None, got {self.inline_visits!r}"
            )
        if self.order is not None:
            if isinstance(self.order, str | bytes) or not isinstance(self.order, Sequence):
                raise EddiesError(
                    f"order must be a sequence of destination names, got {self.order!r}"
                )
            bad = [name for name in self.order if not isinstance(name, str)]
            if bad:
                raise EddiesError(f"order must name destinations as strings, got {bad!r}")
            # An empty order means the default one, as if none was given.
            object.__setattr__(self, "order", tuple(self.order) or None)
        if self.window is not None:
            object.__setattr__(self, "window", check_positive("window", self.window))
        check_policy_options(self.policy, self.order, self.window)
        if self.join_state not in JOIN_STATES:
            raise EddiesError(
                f"join_state must be one of {', '.join(JOIN_STATES)}, got {self.join_state!r}"
            )
        if self.output_mode is not None and self.output_mode not in OUTPUT_MODES:
            raise EddiesError(
                f"output_mode must be one of {', '.join(OUTPUT_MODES)} or None, "
                f"got {self.output_mode!r}"
            )
        if self.checkpoint is not None:
            if not isinstance(self.checkpoint, str | os.PathLike) or not str(self.checkpoint):
                raise EddiesError(
                    f"checkpoint must be a folder (a str or path), got {self.checkpoint!r}"
                )
            object.__setattr__(self, "checkpoint", os.fspath(self.checkpoint))
        if self.tuning is not None and not isinstance(self.tuning, Tuning):
            raise EddiesError(
                f"tuning must be an eddies.settings.Tuning or None, got {self.tuning!r}"
            )
        if self.watermarks is not None:
            object.__setattr__(self, "watermarks", _check_watermarks(self.watermarks) or None)
            if self.watermarks and self.output_mode is None:
                raise EddiesError(
                    "watermarks need an output_mode ('update', 'complete' or 'append'): "
                    "they drive incremental aggregates over streams"
                )

    @property
    def inlined(self) -> bool:
        """Whether modules that never wait are visited inline (see ``inline_visits``)."""
        if self.inline_visits is not None:
            return self.inline_visits
        return self.policy != "naive"

    def knobs(self) -> Tuning:
        """The knobs this query runs with: ``tuning``, else those in force where it is asked
        (:func:`eddies.settings.current`)."""
        return self.tuning or current()

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The options' names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_kwargs(cls, options: RunOptions | None = None, **kwargs: Any) -> RunOptions:
        """``options`` (default: all defaults) with the keyword options replacing its values.

        Raises EddiesError for an unknown keyword (listing the valid ones), for ``options``
        that is not a RunOptions, and for any bad value.
        """
        unknown = sorted(set(kwargs) - set(cls.names()))
        if unknown:
            raise EddiesError(
                f"unknown option{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(repr(u) for u in unknown)}; valid options: "
                f"{', '.join(cls.names())}, options"
            )
        if options is None:
            return cls(**kwargs)
        if not isinstance(options, RunOptions):
            raise EddiesError(f"options must be a RunOptions, got {type(options).__name__}")
        return dataclasses.replace(options, **kwargs) if kwargs else options

    def as_kwargs(self) -> dict[str, Any]:
        """The options as keywords for ``execute`` (those that differ from the default)."""
        default = RunOptions()
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(default, f.name)
        }


#: Spark Structured Streaming's output modes.
OUTPUT_MODES = ("update", "complete", "append")


def _check_watermarks(value: Any) -> dict[str, tuple[str, dt.timedelta]]:
    """``{"stream": ("ts_col", "10 seconds")}`` checked and normalized to lower-case stream
    names -> (column, timedelta); EddiesError naming the bad entry."""
    if not isinstance(value, Mapping):
        raise EddiesError(
            f'watermarks must be a dict such as {{"clicks": ("ts", "10 seconds")}}, got {value!r}'
        )
    out: dict[str, tuple[str, dt.timedelta]] = {}
    for name, spec in value.items():
        if not isinstance(name, str) or not name:
            raise EddiesError(f"watermarks: a stream name must be a string, got {name!r}")
        if (
            isinstance(spec, str | bytes)
            or not isinstance(spec, Sequence)
            or len(spec) != 2
            or not isinstance(spec[0], str)
            or not spec[0]
        ):
            raise EddiesError(
                f"watermarks[{name!r}] must be (event-time column, allowed lateness), "
                f"e.g. ('ts', '10 seconds'); got {spec!r}"
            )
        try:
            lateness = span_us(spec[1], allow_zero=True)
        except EddiesError as exc:
            raise EddiesError(f"watermarks[{name!r}]: {exc}") from None
        out[name.lower()] = (spec[0], dt.timedelta(microseconds=lateness))
    return out


def _check_int(options: RunOptions, name: str, *, minimum: int) -> None:
    """Check option ``name`` is None or an int >= minimum (a NumPy int becomes an int)."""
    value = getattr(options, name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise EddiesError(f"{name} must be {what} or None, got {value!r}")
    object.__setattr__(options, name, int(value))


def check_positive(name: str, value: Any) -> float:
    """``value`` as a float if it is a positive, finite number of seconds (not a bool);
    else EddiesError naming ``name``. Used for windows and timeouts."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise EddiesError(f"{name} must be a positive finite number of seconds, got {value!r}")
    if value <= 0:
        raise EddiesError(f"{name} must be a positive finite number of seconds, got {value!r}")
    return float(value)


def check_timeout(name: str, value: Any) -> float | None:
    """A timeout in seconds: None (wait as long as it takes) or a positive finite number."""
    return None if value is None else check_positive(name, value)
