"""SteMs: State Modules, one per base table, built into and probed by the eddy (stems-2003 §2).

stems-2003 §2.1.4: a SteM is half of a join — it stores one table's singleton tuples and
answers probes with the concatenated matches. A table used under several aliases (a
self-join) has one SteM that serves every alias. Here a SteM keeps, per stored tuple, its
row id, its build TimeStamp and the Done bits it carried when built, plus one
:class:`~eddies.modules.stem.index.SortedRunIndex` per join column list, brought up to date
lazily when a probe needs it (a build only appends).

Routing constraints enforced inside the SteM (stems-2003 Table 2):

* **SteM BounceBack** — a build tuple is bounced back, once per alias of the table (so each
  alias role can go on to probe), unless it duplicates a row the SteM holds (tables with
  competing AMs, §3.2; see :mod:`~eddies.modules.stem.row_identity`). A probe tuple is
  bounced back only when the table has no scan AM, the probe's join binds one of its
  index AMs, and no EOT with the probe's bind values is held yet: the SteM may not have
  all matches, and the tuple goes on as a *prior prober* to an index AM (§3.3–3.4). Otherwise every
  match that arrives later will find it (TimeStamp).
* **EOT** — an index AM's matches arrive with the EOT tuples of their lookups (one batch);
  the SteM builds both at once, so holding an EOT means holding all its matches (§2.1.4).
  The SteM is then the cache of lookups: later probes with those bind values stay here.
* **Relaxed BuildFirst** (§3.5) — a floating tuple (it has a component that is never
  built) matches every stored tuple newer than its LastMatchTimeStamp instead of older
  than itself, and while the SteM is not complete (its table's scan has not delivered and
  built every row) it is bounced back with its LastMatchTimeStamp set to the newest
  stored timestamp, to probe again once more tuples are built.
* **TimeStamp** — building assigns global, increasing timestamps; a probe of tuple t finds
  match u only if key(u) < key(t), where key = ``ts * n_aliases + alias`` (the alias
  tiebreak makes the rule exact for self-joins).

A probe with no join edge (a cross product) matches every older tuple; the build
timestamps are increasing by position, so that is a ``searchsorted`` per tuple.

**Bounded probes** (a continuation, so intermediate results never pile up). One probe Work
returns at most ``Tuning.stem_max_output_rows`` tuples (eddies.settings); a probe with
more matches hands the rest back to the eddy, which sends it again once its backlog has
drained; the parts together are exactly one probe of the SteM as the probe began (see
:mod:`~eddies.modules.stem.bounded_probe`).

The package, one file per part of what a SteM decides:

* :mod:`~eddies.modules.stem.stem` — :class:`SteM`, the module the eddy routes to;
* :mod:`~eddies.modules.stem.core` — what a SteM holds (stored tuples, indexes, EOTs);
* :mod:`~eddies.modules.stem.build` — builds, duplicate removal, EOTs, skipped builds;
* :mod:`~eddies.modules.stem.matching` — the TimeStamp rule's windows and the matches;
* :mod:`~eddies.modules.stem.bounded_probe` — probes in bounded parts (continuations);
* :mod:`~eddies.modules.stem.bounce_back` — prior probers and floating tuples;
* :mod:`~eddies.modules.stem.filters` — SteM filters over a complete SteM's keys;
* :mod:`~eddies.modules.stem.checkpoint` — snapshot, restore, window eviction;
* :mod:`~eddies.modules.stem.build_clock`, :mod:`~eddies.modules.stem.build_ledger` — the
  build TimeStamps and the relaxed BuildFirst shared by a query's SteMs;
* :mod:`~eddies.modules.stem.column_index`, :mod:`~eddies.modules.stem.index`,
  :mod:`~eddies.modules.stem.direct_build` — a SteM's indexes;
* :mod:`~eddies.modules.stem.storage` — its per-tuple columns;
* :mod:`~eddies.modules.stem.key_filter`, :mod:`~eddies.modules.stem.row_identity` — key
  sets for SteM filters, and which delivered rows a SteM holds.
"""

from eddies.modules.stem.build_clock import BuildClock
from eddies.modules.stem.build_ledger import BuildLedger
from eddies.modules.stem.checkpoint import SteMState
from eddies.modules.stem.column_index import ColumnIndex
from eddies.modules.stem.stem import SteM

__all__ = ["BuildClock", "BuildLedger", "ColumnIndex", "SteM", "SteMState"]
