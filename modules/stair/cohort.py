"""A cohort: the unit of STAIR state migration (stairs-2004 §3.2)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Cohort:
    """The base tuples of ``alias`` first routed to join ``source`` (their singletons are
    stored in its STAIR on ``alias``), to be moved to join ``target``: the paper's S^R
    (S tuples routed to R ⋈ S, stairs-2004 §3.2). ``ids``: their row ids, sorted."""

    alias: int
    source: int
    target: int
    ids: np.ndarray
