"""Continuous queries: incremental aggregates, commit points, sinks, durable state, and
:class:`BackgroundQuery` (a query in a thread of its own, fed by other threads).

``from eddies.engine.streaming import BackgroundQuery`` is the public path (loaded on
first use, so importing a sibling module does not start the API).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["BackgroundQuery"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("eddies.engine.streaming.thread_runner"), name)
    raise AttributeError(f"module 'eddies.engine.streaming' has no attribute {name!r}")
