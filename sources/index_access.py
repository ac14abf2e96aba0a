"""An asynchronous index AM's description, as a catalog holds it (stems-2003 §2.1.3).

It sits beside the sources because it is one: a way of reading a table, by lookups on bind
values rather than by a scan. The module that runs it is :mod:`eddies.modules.index_am`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

#: An index AM's lookup: bind values by column name -> the matching rows.
LookupFn = Callable[[dict[str, Any]], Awaitable[Any]]

#: Lookups an index AM has in flight at once unless told otherwise.
DEFAULT_MAX_CONCURRENCY = 8
#: Seconds one lookup may take before it counts as failed (then retried).
DEFAULT_LOOKUP_TIMEOUT = 10.0
#: Retries of a failed lookup before the AM is declared failed (then the eddy fails over).
DEFAULT_RETRIES = 2
#: Seconds before the first retry; doubled for each further one.
DEFAULT_BACKOFF = 0.1


@dataclass
class IndexAccess:
    """An asynchronous index AM (stems-2003 §2.1.3): lookups by equality on ``on``.

    ``lookup`` is awaited with ``{column: value}`` for one distinct bind-value tuple and
    returns the matching rows (pyarrow Table/RecordBatch, list of dicts, or pandas
    DataFrame). ``session``, when set, is entered once per query and yields the lookup
    function to use (a web source opens its HTTP client there). At most
    ``max_concurrency`` lookups run at once; each gets ``timeout`` seconds and ``retries``
    retries ``backoff * 2**k`` seconds apart before the AM is declared failed.
    """

    name: str
    table: str
    on: tuple[str, ...]
    lookup: LookupFn | None = None
    session: Callable[[], AbstractAsyncContextManager[LookupFn]] | None = None
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    timeout: float | None = DEFAULT_LOOKUP_TIMEOUT
    retries: int = DEFAULT_RETRIES
    backoff: float = DEFAULT_BACKOFF
