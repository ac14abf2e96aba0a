"""The messages the eddy and its modules exchange (eddies-2000 §3; stems-2003 §2.1).

Modules read :class:`Work` from bounded input channels and answer with one
:class:`Returned` per Work; scan AMs send :class:`SourceBatch` and :class:`SourceDone`;
an AM that gives up sends :class:`AccessFailed`. They live here, in the router layer, so
that both the eddy (router) and the modules (one layer up) import them downward.
"""

from __future__ import annotations

from dataclasses import dataclass

from eddies.router.tuple_batch import TupleBatch


@dataclass(slots=True)
class Work:
    """A batch routed to one destination; ``edge`` is the probe key for SteM probes."""

    destination: int
    batch: TupleBatch
    edge: int | None = None
    routed_at: float = 0.0  # perf_counter() when the eddy routed it (for latency estimates)


@dataclass(slots=True)
class Returned:
    """A module's answer to one Work: its outputs (possibly none) and busy seconds.

    ``final=False`` marks a partial answer (a chunk of a large probe result); exactly one
    final answer follows, which is what ends the Work's time in flight. ``work``: the Work
    answered (its signature and routing time feed the estimates of
    :mod:`eddies.router.estimates`); None where no single Work is answered (an index
    AM's matches).
    """

    destination: int
    outputs: list[TupleBatch]
    tuples_in: int
    busy_seconds: float
    final: bool = True
    work: Work | None = None


@dataclass(slots=True)
class AccessFailed:
    """An AM gave up (past its timeouts and retries): the eddy routes around it.

    access: the AM's id (QueryGraph.access); source: for a scan AM, its index among the
    eddy's sources (None for index AMs); error: what went wrong, naming the AM and table.
    """

    access: int
    error: str
    source: int | None = None


@dataclass(slots=True)
class SourceBatch:
    """New singleton tuples from the scan AM with index ``source`` (see :class:`Source`)."""

    source: int
    batch: TupleBatch


@dataclass(slots=True)
class SourceDone:
    """A scan AM has delivered all its tuples."""

    source: int
