"""The SteM: one base table's State Module, its build, probe and filter destinations joined.

stems-2003 §2.1.4: a SteM is half of a join — it stores one table's singleton tuples and
answers probes with the concatenated matches. :class:`SteM` is the module the eddy routes
to; what each of its parts decides lives beside it (see the package docstring,
:mod:`eddies.modules.stem`).
"""

from __future__ import annotations

from eddies.modules.base import vectorized_inline
from eddies.modules.stem.bounded_probe import SteMProbes
from eddies.modules.stem.build import SteMBuilds
from eddies.modules.stem.checkpoint import SteMCheckpoints
from eddies.modules.stem.filters import SteMFilters
from eddies.router.messages import Returned, Work
from eddies.router.tuple_batch import TupleBatch


class SteM(SteMBuilds, SteMProbes, SteMFilters, SteMCheckpoints):
    """The SteM of one base table (see :mod:`eddies.modules.stem`). Destinations: one
    build, and one probe per alias of the table (``probe_targets``: destination id ->
    alias), and its SteM filters (``filter_targets``).

    Constructed as :class:`~eddies.modules.stem.core.SteMCore` documents: ``table``, the
    query ``graph``, the row ``stores`` per alias, the query's :class:`BuildClock`, the
    ``index_kinds`` per join column list, the build and probe destination ids; ``key``:
    the table's identifying columns (competing AMs), ``scanned``: set once its scan has
    delivered every row, ``clocks``: stream clocks per alias, ``ledger``: the query's
    :class:`BuildLedger`.
    """

    kind = "stem"

    @property
    def inline(self) -> bool:
        """Builds and probes never wait (in-memory), unless vectorized work is offloaded."""
        return vectorized_inline()

    async def process(self, work: Work) -> list[TupleBatch] | Returned:
        """Build the batch, probe it (see :mod:`~eddies.modules.stem.bounded_probe` on
        bounded probes), or filter it by this SteM's join keys."""
        if work.destination in self.filter_targets:
            return self.filter(work.batch, work.destination)
        if work.destination == self.build_destination:
            return await self.build_work(work.batch)
        return await self.probe_work(work)
