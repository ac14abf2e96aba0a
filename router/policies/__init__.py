"""Routing policies: which eligible destination gets a batch (eddies-2000 §4).

The registry: the check of a policy's options (:func:`check_policy_options`) and the
factory (:func:`make_policy`) over the names a query may ask for
(:data:`eddies.router.run_choices.POLICIES`, with the default ``DEFAULT_POLICY``). The
policies live in the modules of this package, imported when a policy is made, so reading
the names (RunOptions, the CLI's help) imports no NumPy:

* :mod:`~eddies.router.policies.base` — :class:`RoutingPolicy`, what the eddy calls: a
  batch's choice (one destination, a per-tuple vector with ``HOLD`` entries, or None to
  wait), and the answers every policy learns from.
* :mod:`~eddies.router.policies.simple` — ``static`` (a fixed order: the papers'
  baselines), ``random`` (uniform per tuple), ``naive`` (back-pressure only, §4.2).
* :mod:`~eddies.router.policies.lottery` — ``lottery`` (tickets, §4.3) and
  ``lottery-window`` (banked and escrow tickets, §4.5).
* :mod:`~eddies.router.policies.learning` — ``rank``, ``bandit`` and ``hybrid`` (the
  default): pilots and batch sizes that grow with confidence over observed costs and
  selectivities; ``hybrid`` is the lottery among free choices and ``rank`` with pilots
  where an SM calling a UDF or an index AM lookup is eligible.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from eddies.errors import EddiesError
from eddies.router.run_choices import POLICIES

if TYPE_CHECKING:
    from eddies.router.policies.base import RoutingPolicy
    from eddies.router.routing_table import Destination

#: Policy name -> (its module in this package, its class), in the order the docs list them.
_CLASSES = {
    "static": ("simple", "StaticPolicy"),
    "random": ("simple", "RandomPolicy"),
    "naive": ("simple", "NaivePolicy"),
    "lottery": ("lottery", "LotteryPolicy"),
    "lottery-window": ("lottery", "WindowedLotteryPolicy"),
    "rank": ("learning", "RankPolicy"),
    "bandit": ("learning", "BanditPolicy"),
    "hybrid": ("learning", "HybridPolicy"),
}
# The names (POLICIES, DEFAULT_POLICY) live in the leaf run_choices, which the CLI's --help
# reads without this package; every name has its class here.
assert tuple(_CLASSES) == POLICIES, "router/run_choices.POLICIES and _CLASSES disagree"


def make_policy(
    name: str,
    destinations: Sequence[Destination],
    *,
    seed: int | None = None,
    order: Sequence[str] | None = None,
    window: float | None = None,
) -> RoutingPolicy:
    """Build a policy by name (one of :data:`POLICIES`); EddiesError for a bad name/option.

    ``seed`` seeds its NumPy generator; ``order`` (static only): destination names, the
    default explain's order; ``window`` (lottery-window only): seconds, default 0.25."""
    import numpy as np

    check_policy_options(name, order, window)
    module, class_name = _CLASSES[name]
    cls = getattr(importlib.import_module(f"{__name__}.{module}"), class_name)
    rng = np.random.default_rng(seed)
    if name == "static":
        return cls(destinations, rng, order)
    if name == "lottery-window":
        return cls(destinations, rng, window if window is not None else 0.25)
    return cls(destinations, rng)


def check_policy_options(name: str, order: Sequence[str] | None, window: float | None) -> None:
    """EddiesError unless ``name`` is one of :data:`POLICIES` and ``order``/``window`` are
    given only to the policy that uses them: checked by the engine's RunOptions at the API
    edge, and by :func:`make_policy` for its own callers."""
    if name not in POLICIES:
        raise EddiesError(f"unknown routing policy {name!r}; choose one of {', '.join(POLICIES)}")
    if order is not None and name != "static":
        raise EddiesError(f"'order' applies to policy='static' only, not {name!r}")
    if window is not None and name != "lottery-window":
        raise EddiesError(f"'window' applies to policy='lottery-window' only, not {name!r}")
