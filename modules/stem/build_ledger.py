"""The build ledger: the relaxed BuildFirst of stems-2003 §3.5, chosen while a query runs.

Which SteMs are *final* (their table's scan delivered every row, and each was built,
skipped or dropped before its build), and so whether a build may be skipped. SteM
filters read the same counts to know when a SteM holds every qualifying row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eddies.router.query_graph import QueryGraph

if TYPE_CHECKING:
    from eddies.modules.stem.core import SteMCore


class BuildLedger:
    """The relaxed BuildFirst of stems-2003 §3.5, chosen while the query runs (issue 11).

    A SteM is *final* when its table's scan has delivered every row and each delivered
    row has been built into it, skipped, or dropped by an SM before its build. Once every
    other table's SteM is final, a singleton arriving to be built is not stored: it still
    takes its build TimeStamp, which is newer than that of every tuple in the dataflow, so
    by the TimeStamp rule no tuple in flight may match it, and no new tuple of another
    table will come to probe for it. It goes on to probe the other SteMs, which hold all
    their tables' qualifying tuples, and finds every match there. Used only where Table 2
    allows skipping a build: every table of the query has one alias, its one AM is a scan,
    and it is neither a stream nor already never built (``build=False``).

    ``dropped``: per table, the unbuilt singletons SMs dropped (SMs call :meth:`drop`).
    ``skipped``: per table, the singletons not stored (the query's RunStats).
    """

    def __init__(self, skipped: dict[str, int], skipping: bool = True) -> None:
        self.stems: dict[str, SteMCore] = {}
        self.dropped: dict[str, int] = {}
        self.skipped = skipped
        # False: the ledger only counts (a query with SteM filters, which need to know
        # when a SteM holds every qualifying row), and never lets a build be skipped.
        self.skipping = skipping

    @staticmethod
    def applies(graph: QueryGraph, streams: bool) -> bool:
        """Whether the query may skip builds (see the class docstring)."""
        tables = {a.table for a in graph.aliases}
        return (
            len(tables) > 1
            and not streams
            and not graph.unbuilt
            and not graph.steps  # a JoinStep reads its table's whole SteM
            and set(graph.stem_tables) == tables
            and all(
                len(graph.aliases_of(t)) == 1
                and len(graph.scans_of(t)) == 1
                and not graph.indexes_of(t)
                for t in tables
            )
        )

    def drop(self, table: str, n: int) -> None:
        """Count ``n`` unbuilt singletons of ``table`` an SM dropped before their build."""
        self.dropped[table] = self.dropped.get(table, 0) + n

    def final(self, stem: SteMCore) -> bool:
        """Whether ``stem``'s table is scanned and each delivered row handled."""
        if stem.scanned is None or not stem.scanned.is_set():
            return False
        handled = len(stem) + self.skipped.get(stem.table, 0) + self.dropped.get(stem.table, 0)
        return handled >= len(stem.store)

    def may_skip(self, stem: SteMCore) -> bool:
        """True when every other table's SteM is final: ``stem`` need not store more."""
        return self.skipping and all(
            self.final(other) for other in self.stems.values() if other is not stem
        )
