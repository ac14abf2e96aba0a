"""The messages the eddy and its modules exchange (eddies-2000 §3; stems-2003 §2.1).

Modules read :class:`Work` from bounded input channels and answer with one
:class:`Returned` per Work; scan AMs send :class:`SourceBatch` and :class:`SourceDone`;
an AM that gives up sends :class:`AccessFailed`. They live here, in the router layer, so
that both the eddy (router) and the modules (one layer up) import them downward.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from eddies.router.tuple_batch import TupleBatch


@dataclass(slots=True)
class ProbeCursor:
    """Where a SteM probe that reached its output bound stopped (see ``Returned.rest``).

    horizon: the probe sees the SteM's stored positions ``[0, horizon)``, the tuples held
    when it began, so its parts together find exactly what one probe would have;
    from_pos: the batch's first tuple has had its matches at stored positions below
    ``from_pos`` returned already (its matches alone exceeded the bound; 0 otherwise);
    counts: per probe tuple of the batch, an upper bound of its matches (int64);
    limit: the most tuples the SteM returns per Work (what the eddy reserves for it).
    """

    horizon: int
    from_pos: int
    counts: np.ndarray
    limit: int


@dataclass(slots=True)
class Work:
    """A batch routed to one destination; ``edge`` is the probe key for SteM probes.

    ``resume``: set when the batch is the rest of a SteM probe, sent back by the eddy
    (a continuation, see :class:`ProbeCursor`); None for a fresh Work.
    """

    destination: int
    batch: TupleBatch
    edge: int | None = None
    resume: ProbeCursor | None = None
    routed_at: float = 0.0  # perf_counter() when the eddy routed it (for latency estimates)
    # For a continuation: the Work first routed, whose estimate its answers count towards.
    origin: Work | None = None
    # A RIGHT / FULL JoinStep's flush: emit its SteM's unmatched tuples, NULL-padded (sent
    # once, when nothing can probe the step any more; the batch is empty).
    flush: bool = False
    # For a JoinStep over an index-only table: the table's finished builds when routed.
    builds_seen: int = 0


@dataclass(slots=True)
class Returned:
    """A module's answer to one Work: its outputs (possibly none) and busy seconds.

    ``final=False`` marks a partial answer (an index AM's matches); exactly one final
    answer follows, which is what ends the Work's time in flight. ``tuples_in``: the input
    tuples fully processed (a bounded SteM probe counts only the tuples it finished).

    ``rest``: a SteM probe stopped at its output bound hands back the rest of the probe as
    a continuation, a Work the eddy holds and sends back to the same destination when its
    backlog allows (see :class:`~eddies.router.eddy.Eddy`); ``resumed``: in the answer to
    such a resumed Work, the output bound the eddy reserved for it (0 otherwise).

    ``work``: the Work answered (its signature and routing time feed the estimates of
    :mod:`eddies.router.estimates`; a continuation's answers count towards its
    ``origin``); None where no single Work is answered (an index AM's matches).
    """

    destination: int
    outputs: list[TupleBatch]
    tuples_in: int
    busy_seconds: float
    final: bool = True
    work: Work | None = None
    rest: Work | None = None
    resumed: int = 0


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
