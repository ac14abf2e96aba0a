"""Keep Python's full garbage collections short while queries run.

A full (generation-2) collection scans every tracked object in the process. Once the
engine is imported that is ~100k objects — pandas (which pyarrow imports on its first
conversion of Python values), sqlglot, trio, structlog, the engine itself — and one full
collection takes 40-60 ms on the 2-core reference machine (``bench/README.md``, issue 10
(a)). CPython starts one whenever enough objects have survived younger collections, which
happens every few dozen small queries, at any point of a query: a 50 ms query paced by
async UDF calls then takes 100 ms.

Those import-time objects — modules, classes, functions, constants — live as long as the
process. :func:`freeze_import_time_objects` collects once and then moves every tracked
object into the permanent generation (:func:`gc.freeze`, the Python docs' remedy for
long-lived heaps), so later full collections scan only what was made after it: ~1-5 ms.

Cost and caveat: one collection when the API is first imported (~40 ms), and an object
alive at that moment that later becomes part of a reference cycle is never freed by the
cycle collector until the process exits (reference counting still frees everything
else; at exit they are unfrozen for the interpreter's last collections). Set the environment
variable ``EDDIES_GC_FREEZE=0`` before importing eddies to leave the collector alone.
"""

from __future__ import annotations

import atexit
import gc
import os

#: The environment variable that turns the freeze off ("0", "false", "no", "off").
ENV_VAR = "EDDIES_GC_FREEZE"

_done = False


def freeze_enabled(environ: os._Environ[str] | dict[str, str] | None = None) -> bool:
    """Whether the freeze is wanted: unless ``EDDIES_GC_FREEZE`` is 0/false/no/off."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "1")
    return value.strip().lower() not in {"0", "false", "no", "off"}


def freeze_import_time_objects() -> bool:
    """Collect once, then :func:`gc.freeze` every object tracked now; once per process.

    Returns True when it froze (now or earlier), False when ``EDDIES_GC_FREEZE`` turned it
    off. Called at the end of importing ``eddies.engine.api``.
    """
    global _done
    if not freeze_enabled():
        return False
    if not _done:
        gc.collect()  # garbage now would otherwise stay frozen for good
        gc.freeze()
        # At exit the interpreter's last collections must see them again (nanobind-based
        # extensions such as DuckDB's report frozen instances as leaks).
        atexit.register(gc.unfreeze)
        _done = True
    return True
