"""Keep freed NumPy memory for the next batch and the next query (glibc only).

A SteM stores three per-tuple arrays (row ids, TimeStamps, Done bits) and builds index
arrays over its table's key range; a probe, a gather or a selection makes arrays of a
batch's length. NumPy takes all of them from ``malloc``. glibc serves requests above its
*mmap threshold* with a fresh ``mmap`` and gives it back on ``free``; smaller ones come
from the heap, whose free top is handed back to the kernel (``trim``) once it exceeds the
*trim threshold* (both start at 128 KB and adapt up to 32 MB and 64 MB). So a query that
builds 8 MB arrays, frees them and runs again gets fresh pages every time, and the kernel
zeroes each page on its first touch, which is dear on the 2-core reference VM.

:func:`retain_freed_memory` sets the mmap threshold to 32 MB (glibc's largest) and the
trim threshold to ``EDDIES_MALLOC_RETAIN`` MB (default 256): freed blocks up to 32 MB go
back to the heap, and up to that much free heap stays mapped for reuse. Together with
``Module.release`` (a query's SteMs free their arrays when it ends) the Wisconsin 5x1M
star join faults 7 pages in per query instead of 9,176 (5x100k: 280 instead of 1,915),
and its system time fell from 29-112 ms to ~0 (``bench/README.md``, issue 11). DuckDB's
and Arrow's own allocators do the same: they keep freed memory in pools.

Cost and caveat: a process keeps up to that much freed memory resident after a large
query (a host program may call glibc's ``malloc_trim(0)`` to give it back); the settings
are process-wide, so they also apply to the host program's ``malloc``.
``EDDIES_MALLOC_RETAIN=0`` before importing eddies leaves glibc's defaults alone.
Elsewhere (macOS, musl, Windows) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

#: The environment variable: MB of free heap kept mapped; 0 (or off/false/no) = glibc's
#: defaults.
ENV_VAR = "EDDIES_MALLOC_RETAIN"
DEFAULT_MB = 256
#: glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX).
MMAP_THRESHOLD = 32 << 20
# mallopt parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

_applied: int | None = None


def retain_megabytes(environ: os._Environ[str] | dict[str, str] | None = None) -> int:
    """MB of freed heap to keep mapped, from ``EDDIES_MALLOC_RETAIN`` (default 256); 0 =
    off. Raises ValueError for a value that is neither a non-negative int nor off/false/no."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, str(DEFAULT_MB))
    value = value.strip().lower()
    if value in {"off", "false", "no"}:
        return 0
    mb = int(value)
    if mb < 0:
        raise ValueError(f"{ENV_VAR} must be >= 0 (MB), got {mb}")
    return mb


def retain_freed_memory() -> int:
    """Set glibc's mmap and trim thresholds (see the module docstring); once per process.

    Returns the MB of freed heap kept mapped (0: left alone: turned off, not glibc, or
    ``mallopt`` refused). Called at the end of importing ``eddies.engine.api``.
    """
    global _applied
    if _applied is not None:
        return _applied
    try:
        mb = retain_megabytes()
    except ValueError:
        mb = DEFAULT_MB  # a bad value must not break the import; the default applies
    _applied = 0
    if mb and platform.libc_ver()[0] == "glibc":
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = min(mb << 20, 2**31 - 1)  # mallopt takes an int
        if libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(
            _M_TRIM_THRESHOLD, trim
        ):
            _applied = mb
    return _applied
