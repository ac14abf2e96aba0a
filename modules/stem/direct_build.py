"""A SteM index's direct-address table, filled in a worker thread while its builds arrive.

Issue 11, item 3 (both cores). A SteM indexes its tuples lazily, at the first probe that
needs them (stems-2003 §2.1.4; see ``ColumnIndex.catch_up``). For a large table keyed by one
integer column (a primary key: Wisconsin's unique1, TPC-H's custkey) that index is a
direct-address table (``eddies.modules.stem.index``: ``where[key - low]`` is the key's one
stored position), and building it at the first probe stalls the eddy: 1 M keys gathered
and scattered took 4-5 ms, four times in the 5x1M star, on one core while the other idled.

Here each build batch is handed, as it is stored, to one worker thread that scatters its
positions into the table (NumPy releases the GIL for the gather and the scatter), while
the eddy routes on. The first probe, or the SteM filter made when the table is complete,
then only waits for the last batch and checks that no key repeated. The table is the one
``Run.of`` would make from the same keys, so what the index answers does not depend on
the thread's timing; where it would not be direct (a key repeats, or too few keys over the
range), :meth:`DirectBuild.finish` answers None and the SteM indexes the usual way.

The table is allocated only once the batches stored are enough keys for a direct run of
the column's range (``DIRECT_SPREAD`` slots a key): a SteM that keeps a few of a large
table's rows (TPC-H's orders after a customer filter: 5 k of 1.5 M) never allocates one.

Only tables of at least ``Tuning.direct_build_background_min_rows`` rows (eddies.settings;
one default scan batch: a smaller table hands the thread one batch or less, nothing to
overlap) are indexed so; below it the index is built at the first probe.
``EDDIES_BACKGROUND_INDEX=0`` turns this off (indexes are then built at the first probe).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from eddies.modules.stem.index import DIRECT_SPREAD, Run
from eddies.sources.table_store import is_range

_pool: ThreadPoolExecutor | None = None
_pool_pid: int | None = None
_pool_lock = threading.Lock()


def background_enabled() -> bool:
    """False when ``EDDIES_BACKGROUND_INDEX=0`` (read at each SteM's creation)."""
    return os.environ.get("EDDIES_BACKGROUND_INDEX", "1") != "0"


def _worker() -> ThreadPoolExecutor:
    """The process's one index worker thread. One thread, so a SteM's batches are
    scattered in the order they were built (a FIFO queue), and more would only contend
    with the eddy's thread for the GIL between kernels on two cores. A forked child makes
    its own (the parent's thread does not exist there)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="eddies-index")
            _pool_pid = os.getpid()
        return _pool


class DirectBuild:
    """The direct-address table of one SteM index over one integer column, in the making.

    ``whole``: the column's values for every row of the (preloaded, NULL-free) store, as
    int64 (``TableStore.int64_column``). Call :meth:`add` with each build's row ids and the
    stored position of the first, in build order, from the eddy's thread; then
    :meth:`finish` once, before the index is read. Only the worker thread touches the
    table until :meth:`finish` has waited for it.
    """

    def __init__(self, whole: np.ndarray) -> None:
        self._whole = whole
        self.covered = 0  # stored positions [0, covered) handed over
        self._jobs: list[Future] = []
        self._abandoned = False
        # Worker-thread state:
        self._low = 0
        self._span = 0
        self._where: np.ndarray | None = None
        self._waiting: list[tuple[np.ndarray, int]] = []

    def add(self, row_ids: np.ndarray, start: int) -> None:
        """Hand over the batch stored at positions ``[start, start + len(row_ids))``."""
        if self._abandoned:
            return
        if start != self.covered:
            raise RuntimeError(f"direct build: batch at {start}, expected {self.covered}")
        if not len(row_ids):
            return
        self.covered += len(row_ids)
        self._jobs.append(_worker().submit(self._take, row_ids, start, self.covered))

    def _take(self, row_ids: np.ndarray, start: int, covered: int) -> None:
        """Worker: scatter the batch, or keep it until enough keys make the table pay."""
        if not self._span:
            self._low = int(self._whole.min())
            self._span = int(self._whole.max()) - self._low + 1
        self._waiting.append((row_ids, start))
        if self._where is None:
            if DIRECT_SPREAD * covered + 1024 < self._span:
                return
            self._where = np.full(self._span, -1, dtype=np.int64)
        for ids, first in self._waiting:
            self._scatter(ids, first)
        self._waiting.clear()

    def _scatter(self, row_ids: np.ndarray, start: int) -> None:
        n = len(row_ids)
        if int(row_ids[-1] - row_ids[0]) == n - 1 and (n == 1 or is_range(row_ids)):
            keys = self._whole[int(row_ids[0]) : int(row_ids[0]) + n]  # no gather
        else:
            keys = self._whole[row_ids]
        slot = keys - self._low if self._low else keys
        assert self._where is not None
        self._where[slot] = np.arange(start, start + n, dtype=np.int64)

    def finish(self) -> Run | None:
        """Wait for the worker; the direct run of positions ``[0, covered)``, or None where
        ``Run.of`` would not make one (a key repeats: then fewer slots are filled than
        keys were given; or too few keys for the range). A job's error is raised here."""
        if self._abandoned:
            return None
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            job.result()
        where = self._where
        self._where = None
        if where is None or self._waiting or not self.covered:
            self._waiting = []
            return None
        if int(np.count_nonzero(where >= 0)) != self.covered:
            return None
        return Run.direct_of(where, self._low, self.covered)

    def abandon(self) -> None:
        """Drop the table unread (the SteM was released): batches not yet scattered are
        cancelled; one being scattered finishes into a table nobody reads."""
        self._abandoned = True
        for job in self._jobs:
            job.cancel()
        self._jobs = []
