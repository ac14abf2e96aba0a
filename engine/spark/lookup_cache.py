"""The lookup cache of a Spark Python worker process: an index AM's answers, kept across tasks.

An executor task of ``attach(..., placement="executors")`` rebuilds its catalog for every
micro-batch piece, but the Python worker process that runs it lives on. Its index AMs
(lookup tables, web sources) answer from a cache per worker process — per query and AM,
:data:`LOOKUP_CACHE_ENTRIES` bind values, the oldest dropped first — so a key is looked
up once per worker process, not once per micro-batch. The cache sits in front of the
AM's own ``lookup``/``session`` (stems-2003 §2.2: an index AM is any asynchronous lookup
by bind values), so the eddy sees an ordinary index AM.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

from eddies.sources.index_access import IndexAccess

#: Bind values cached per lookup table per Python worker process.
LOOKUP_CACHE_ENTRIES = 100_000
#: Per Python worker process: (query id, index AM name) -> bind values -> looked-up rows.
_LOOKUP_CACHES: dict[tuple[str, str], dict[tuple, Any]] = {}


def cached_lookup(query_id: str, access: IndexAccess, lookup: Callable) -> Callable:
    """``lookup`` (an async ``bind -> rows``) answered from this worker process's cache
    of query ``query_id``'s AM ``access`` where it can."""
    cache = _LOOKUP_CACHES.setdefault((query_id, access.name), {})
    on = access.on

    async def cached(bind: dict) -> Any:
        key = tuple(bind[c] for c in on)
        if key in cache:
            return cache[key]
        rows = await lookup(bind)
        if len(cache) >= LOOKUP_CACHE_ENTRIES:
            cache.pop(next(iter(cache)))
        cache[key] = rows
        return rows

    return cached


def cached_session(query_id: str, access: IndexAccess) -> Callable:
    """``access.session`` (an async context manager yielding a lookup) whose lookups are
    answered from the cache as :func:`cached_lookup`."""
    session = access.session
    assert session is not None

    @asynccontextmanager
    async def opened():
        async with session() as lookup:
            yield cached_lookup(query_id, access, lookup)

    return opened
