"""Debug-mode checks of the routing constraints (stems-2003 Table 2) on every routing step.

The routing table already only offers legal destinations; the checker verifies it
independently, from the batches themselves, so a bug in the routing table, a policy, the
eddy or a SteM shows up as a :class:`ConstraintViolation` naming the rule:

* **BuildFirst** — no probe, lookup, output, or (for multi-alias tables and tables with
  several AMs or an index AM, Table 2) SM or SteM filter before the build.
* **BoundedRepetition** — no destination whose work is already recorded in the signature
  (including a second direct lookup for the same alias).
* **ProbeCompletion** — a prior prober goes to no SteM, and to no AM other than one of its
  probe completion table; its Done bits and span are unchanged until then.
* **SteM BounceBack** — a build returns every tuple once per alias of the table, built; for
  a table with competing AMs, the ones it drops as duplicates are never bounced back.
* **TimeStamp** — the checker records each row's build timestamp itself (from the build
  bounce-backs) and recomputes every probe result's key as the max of its components'
  keys; it must equal the probe tuple's key, i.e. the probe tuple arrived last.
* **join order** (JoinSteps, docs/concepts.md "Which steps commute") — checked from the
  steps' conditions, not from the ``needs`` the planner derived: a step's tuples span the
  region and what its condition reads; RIGHT / FULL steps keep their FROM place.
"""

from __future__ import annotations

import numpy as np

from eddies.router.query_graph import QueryGraph
from eddies.router.routing_table import Destination, DestinationKind
from eddies.router.tuple_batch import TupleBatch


class ConstraintViolation(RuntimeError):
    """A routing constraint was broken: a bug in eddies, never the user's input."""


class ConstraintChecker:
    """Checks each routed batch and each module's answer (only with ``debug=True``)."""

    def __init__(self, graph: QueryGraph, destinations: list[Destination]) -> None:
        self.graph = graph
        self.destinations = destinations
        self.n_aliases = len(graph.aliases)
        self._build_ts: dict[str, dict[int, int]] = {}

    def _fail(self, rule: str, message: str) -> None:
        raise ConstraintViolation(f"{rule}: {message}")

    def check_route(self, batch: TupleBatch, destination: int) -> None:
        sig = batch.signature
        dest = self.destinations[destination]
        graph = self.graph
        if dest.kind is DestinationKind.OUTPUT:
            complete = sig.done & graph.all_predicates == graph.all_predicates
            if sig.span != graph.all_aliases or not complete:
                self._fail("completeness", f"incomplete tuples sent to output: {sig}")
            table = graph.aliases[sig.span.bit_length() - 1].table
            if not sig.built and not sig.floating and table in graph.stem_tables:
                self._fail("BuildFirst", f"unbuilt {table} tuples sent to output")
            return
        if dest.kind is DestinationKind.BUILD:
            if sig.built:
                self._fail("BoundedRepetition", f"built tuples routed to {dest.name} again")
            return
        if sig.floating:
            self._check_floating(sig, dest)
            return
        if not sig.built:
            table = graph.aliases[sig.span.bit_length() - 1].table
            if (
                dest.kind in (DestinationKind.PROBE, DestinationKind.LOOKUP)
                or len(graph.aliases_of(table)) > 1
                or graph.strict_build_first(table)
            ):
                self._fail("BuildFirst", f"unbuilt {table} tuples routed to {dest.name}")
        if sig.prior:
            if dest.kind is DestinationKind.PROBE:
                self._fail("ProbeCompletion", f"prior probers routed to SteM {dest.name}")
            if dest.kind is DestinationKind.LOOKUP and not sig.prior >> dest.target_alias & 1:
                self._fail("ProbeCompletion", f"prior probers routed to {dest.name}")
        if dest.kind is DestinationKind.LOOKUP and (sig.span | sig.looked) >> dest.target_alias & 1:
            self._fail("BoundedRepetition", f"tuples looked up in {dest.name} again")
        if dest.kind is DestinationKind.PROBE and sig.span >> dest.target_alias & 1:
            self._fail("BoundedRepetition", f"tuples spanning {dest.name} probed it again")
        if dest.kind is DestinationKind.FILTER:
            # An unbuilt singleton may pass a filter as it may an SM (checked above).
            if sig.prior:
                self._fail("ProbeCompletion", f"prior probers sent to {dest.name}")
            if sig.done & dest.bit or sig.span >> dest.target_alias & 1:
                self._fail("BoundedRepetition", f"tuples routed to {dest.name} twice")
        if dest.kind is DestinationKind.STEP:
            self._check_step(sig, dest)
        if dest.kind is DestinationKind.SM:
            pred = graph.predicates[dest.predicate]
            if sig.done & pred.bit:
                self._fail("BoundedRepetition", f"tuples routed to {dest.name} twice")
            if pred.alias_mask & ~sig.span:
                self._fail("routing", f"{dest.name} needs aliases the tuples do not span")

    def _check_step(self, sig, dest) -> None:
        """Join order around JoinSteps, from the steps' conditions rather than their
        ``needs``: the tuples span the region and every alias the step's condition
        reads, not the step's own; a RIGHT / FULL step gets tuples spanning exactly the
        aliases before it, and no step after one gets tuples that have not taken it;
        every predicate over the span is done."""
        graph = self.graph
        step = graph.step_of(dest.target_alias)
        span = sig.span
        if not sig.built or step is None or span >> step.alias & 1:
            self._fail("join order", f"{dest.name} got tuples spanning {span:b}")
        missing = (graph.region_mask | step.reads()) & ~span
        if missing:
            self._fail(
                "join order",
                f"{dest.name} got tuples without {graph.alias_names(missing)}, which it reads",
            )
        for barrier in graph.steps:
            if not barrier.barrier:
                continue
            before = (1 << barrier.alias) - 1
            if barrier is step and span != before:
                self._fail("join order", f"{dest.name} got tuples spanning {span:b}")
            if step.alias > barrier.alias and not span >> barrier.alias & 1:
                self._fail("join order", f"{dest.name} before {barrier.kind} step:{barrier.alias}")
        pending = [
            p.name for p in graph.predicates if not sig.done & p.bit and p.alias_mask & ~span == 0
        ]
        if pending:
            self._fail("join order", f"{dest.name} before {pending} over its span")

    def _check_floating(self, sig, dest) -> None:
        """Relaxed BuildFirst: floating tuples are never built, and a bounced one probes
        the SteM that bounced it again, and no other (§3.5)."""
        if dest.kind in (DestinationKind.BUILD, DestinationKind.LOOKUP):
            self._fail("BuildFirst", f"floating tuples routed to {dest.name}")
        if dest.kind is DestinationKind.PROBE and sig.span >> dest.target_alias & 1:
            self._fail("BoundedRepetition", f"tuples spanning {dest.name} probed it again")
        if (
            sig.prior
            and dest.kind is DestinationKind.PROBE
            and not sig.prior >> dest.target_alias & 1
        ):
            self._fail("ProbeCompletion", f"bounced floating tuples routed to {dest.name}")

    def check_returned(self, destination: int, tuples_in: int, outputs: list[TupleBatch]) -> None:
        dest = self.destinations[destination]
        if dest.kind is DestinationKind.BUILD:
            aliases = self.graph.aliases_of(dest.table)
            got = sorted(next(iter(b.rows)) for b in outputs)
            lengths = {len(b) for b in outputs}
            expected = {tuples_in} if not self.graph.deduplicates(dest.table) else lengths
            if got != sorted(aliases) or lengths != expected or max(lengths) > tuples_in:
                self._fail("SteM BounceBack", f"{dest.name} bounced back {got} of {aliases}")
            record = self._build_ts.setdefault(dest.table, {})
            for b in outputs:
                if not b.signature.built:
                    self._fail("SteM BounceBack", f"{dest.name} returned unbuilt tuples")
                (alias,) = b.rows
                raw = (b.ts - alias) // self.n_aliases
                record.update(zip(b.rows[alias].tolist(), raw.tolist(), strict=True))
        elif dest.kind is DestinationKind.FILTER:
            for b in outputs:  # a semi-join: a subset of its input, its Done bit set
                if not b.signature.done & dest.bit or len(b) > tuples_in:
                    self._fail("filter", f"{dest.name} returned tuples it did not filter")
        elif dest.kind is DestinationKind.PROBE:
            for b in outputs:
                if b.signature.floating:
                    continue  # no build timestamps to check: LastMatchTimeStamp applies
                if b.signature.prior:
                    if b.signature.prior != 1 << dest.target_alias:
                        self._fail("ProbeCompletion", f"{dest.name} bounced a wrong prior prober")
                    continue
                if not b.signature.span >> dest.target_alias & 1:
                    self._fail("probe", f"{dest.name} returned tuples without its alias")
                keys = np.stack([self._keys(alias, ids) for alias, ids in b.rows.items()])
                if not (keys.max(axis=0) == b.ts).all():
                    self._fail("TimeStamp", f"{dest.name} returned a match newer than its probe")
                if (self._keys(dest.target_alias, b.rows[dest.target_alias]) >= b.ts).any():
                    self._fail("TimeStamp", f"{dest.name} matched a tuple not older than the probe")

    def record_builds(self, table: str, row_ids: np.ndarray, raw_ts: np.ndarray) -> None:
        """Rows built outside the eddy's routing (a SteM restored from a checkpoint, see
        eddies.engine.streaming.durable), at raw build TimeStamps ``raw_ts``."""
        record = self._build_ts.setdefault(table, {})
        record.update(zip(row_ids.tolist(), raw_ts.tolist(), strict=True))

    def _keys(self, alias: int, row_ids: np.ndarray) -> np.ndarray:
        table = self.graph.aliases[alias].table
        record = self._build_ts.get(table, {})
        try:
            raw = np.array([record[r] for r in row_ids.tolist()], dtype=np.int64)
        except KeyError as missing:
            self._fail("BuildFirst", f"row {missing} of {table} was joined before it was built")
        return raw * self.n_aliases + alias
