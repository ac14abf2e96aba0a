"""The build TimeStamp clock of a query's SteMs (stems-2003 §3.1, the TimeStamp rule)."""

from __future__ import annotations

import numpy as np


class BuildClock:
    """The global, monotonically increasing build TimeStamp (stems-2003 §3.1).

    Shared by all SteMs of a query; only ever advanced on the trio thread, at the moment a
    SteM starts a build, so a timestamp order is also an order of insertion.
    """

    def __init__(self) -> None:
        self._next = 1

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` build TimeStamps (int64, consecutive, increasing)."""
        start = self._next
        self._next += n
        return np.arange(start, start + n, dtype=np.int64)
