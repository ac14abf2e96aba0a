"""Spark Structured Streaming and scale-out: :func:`attach` (driver or executors placement),
independent eddies per partition (:mod:`eddies.engine.spark.partitioned`).

``eddies.engine.spark.attach`` is the public entry point; it is loaded on first use, so
``import eddies.engine.spark`` does not import pyspark.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["attach"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("eddies.engine.spark.driver"), name)
    raise AttributeError(f"module 'eddies.engine.spark' has no attribute {name!r}")
