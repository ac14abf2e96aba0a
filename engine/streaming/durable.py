"""Durable state: a continuous query's state checkpointed at commit points, resumed after a
restart, exactly-once.

A query over stream tables holds state between micro-batches: the stream tables' SteMs
(stems-2003 §2.1.4; with their windows' expiries and watermarks, §2.3), the SteMs of
tables read by an index AM alone (the lookup cache: looked-up tuples and their EOTs) and,
above the eddy, a streaming aggregate's per-group partial states
(:mod:`eddies.engine.streaming.incremental`).
With ``checkpoint=<folder>`` (RunOptions) that state is written at every commit point
(:mod:`eddies.engine.streaming.commit_points`), together with the ids of the micro-batches it
contains, so that a restarted query — the same SQL over the same catalog — resumes where
the last completed commit left it:

- **the cut**: at the grant of a commit point the dataflow is quiescent (every tuple
  pushed so far routed to completion), so the SteMs then hold exactly the tuples of the
  batches taken so far; they are snapshotted there (:meth:`DurableState.snapshot`,
  vectorized gathers, no copy of anything else). The aggregate's state is taken when the
  consumer meets the commit's marker, behind every result of those tuples: the same cut;
- **the files**: ``<folder>/commit-<seq>/`` holds ``meta.json`` (the query's fingerprint,
  the commit tags, the batch ids taken per stream, counters), one Arrow IPC file per
  SteM (its live tuples, build order, Done bits, event-time deadlines; EOT values of a
  looked-up table in ``stem-<table>-eot<i>.arrow``) and
  ``aggregate.arrow`` (the groups' partial states). It is written under a temporary name,
  fsynced and renamed: a crash leaves either the previous commit or this one, never half
  of one. Older commits are then removed;
- **the order**: :class:`~eddies.engine.streaming.thread_runner.BackgroundQuery` writes a commit's
  increment to its sink first and the checkpoint after, in commit order. A crash between
  the two replays the batch (the same increment again: ``ParquetSink`` replaces its file);
  a crash after both ignores the replay. Either way each batch's results reach the sink
  once;
- **the restart**: the streams ignore pushes of the batch ids the checkpoint holds (a
  replay, as Spark does after a restart from its own checkpoint); the lookup cache is
  restored before any tuple is built (its tuples are the oldest; keys looked up before
  the last commit are answered from it, not looked up again); the stream SteMs get their
  tuples back at the quiescent moment after the static tables are read and before the
  streams start, with fresh build TimeStamps newer than every static tuple and older than
  every new stream tuple, so new tuples find them (TimeStamp rule, §3.1) and static tuples
  do not (as in the first run); the aggregate gets its groups, watermark and counters back.

What cannot be checkpointed is refused (:func:`check_durable`): a table read by an index
AM and another AM, outer joins and [NOT] IN/EXISTS steps, aggregates, ORDER BY, DISTINCT
and LIMIT finished only when the streams end (give an ``output_mode``), composite queries.
Lookups made by a replayed micro-batch's first run after the last commit are not cached:
the replay looks them up again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import threading
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from eddies.engine.options import RunOptions
from eddies.engine.plan.plan_types import Plan
from eddies.engine.streaming.commit_points import Commit, CommitPoints
from eddies.engine.streaming.incremental import EventTimes, StreamingAggregate, StreamingPlan
from eddies.errors import EddiesError, UnsupportedQueryError
from eddies.modules.stem import SteMState
from eddies.router.query_graph import AccessKind

VERSION = 1
#: Seconds a commit waits for the previous commit's checkpoint (written by another thread).
ORDER_TIMEOUT = 300.0
_DONE = "__eddies_done"
_DEADLINE = "__eddies_deadline"


def check_durable(plan: Plan, streaming: StreamingPlan | None) -> None:
    """Raise unless ``plan``'s state can be checkpointed (see the module doc).

    Raises EddiesError for a query that reads no stream table, UnsupportedQueryError
    (saying why and what to do) for state that is not checkpointed.
    """
    graph = plan.graph
    streams = {t for t, e in plan.tables.items() if e.stream is not None}
    if not streams:
        raise EddiesError("checkpoint= applies to queries over stream tables; this one reads none")
    for table in {a.table for a in graph.access if a.kind is AccessKind.INDEX}:
        if table in streams or graph.has_scan(table) or len(graph.indexes_of(table)) > 1:
            raise UnsupportedQueryError(
                f"checkpoint=: table {table!r} is read by an index AM and another AM (a "
                "scan or a second index); only a table read by one index AM alone has its "
                "lookup answers checkpointed. Run without checkpoint= (exactly-once within "
                "one run) or give the table one AM"
            )
    if graph.steps:
        raise UnsupportedQueryError(
            "checkpoint=: outer joins and [NOT] IN / [NOT] EXISTS over streams are not "
            "checkpointed (their join steps' state is not saved)"
        )
    for table in streams:
        if table in graph.unbuilt or graph.deduplicates(table):
            raise UnsupportedQueryError(
                f"checkpoint=: stream {table!r} is never built or read by competing AMs; "
                "only a stream whose every tuple is built into its SteM is checkpointed"
            )
    spec = plan.finalize
    if streaming is None and (not spec.streaming or spec.limit is not None or spec.offset):
        raise UnsupportedQueryError(
            "checkpoint=: an aggregate, ORDER BY, DISTINCT or LIMIT without output_mode "
            "waits for the end of the streams, and the rows it holds are not checkpointed; "
            "give output_mode='update', 'complete' or 'append'"
        )
    if streaming is not None and spec.group is None and (spec.limit is not None or spec.offset):
        raise UnsupportedQueryError("checkpoint=: LIMIT/OFFSET over a stream is not checkpointed")


def fingerprint(plan: Plan, options: RunOptions) -> dict[str, Any]:
    """What must be equal for a checkpoint to be resumed: the SQL, the output mode and
    watermarks, and each stream's schema and window."""
    streams = {t: e for t, e in plan.tables.items() if e.stream is not None}
    return {
        "sql": plan.sql,
        "output_mode": options.output_mode,
        "watermarks": {
            t: [c, str(lateness)] for t, (c, lateness) in sorted((options.watermarks or {}).items())
        },
        "streams": {
            t: {"schema": str(e.stream.schema), "window": repr(e.window)}
            for t, e in sorted(streams.items())
        },
        "lookups": {
            t: [str(e.schema), [list(i.on) for i in e.indexes]]
            for t, e in sorted(plan.tables.items())
            if e.indexes and t not in streams
        },
    }


@dataclass
class Record:
    """One commit's checkpoint, made in the query's thread, written by a committer.

    seq: the commit's number (1, 2, ... over the life of the checkpoint folder); tags: the
    commit tags; taken: stream table -> the batch ids taken in full (both JSON-encoded as
    written; decoded when loaded); stems: stream table -> SteMState;
    aggregate: the streaming aggregate's state table (or None) and its stats.
    """

    seq: int
    tags: list[Any]
    stems: dict[str, SteMState]
    taken: dict[str, Any]
    aggregate: pa.Table | None = None
    aggregate_stats: dict[str, Any] | None = None
    written: threading.Event = field(default_factory=threading.Event)


class DurableState:
    """The checkpoint folder of one running query (see the module doc).

    Built (and the folder's latest commit read) before the query's tasks start; raises
    EddiesError when the folder holds a checkpoint of another query, or cannot be read.
    """

    def __init__(self, folder: str, plan: Plan, options: RunOptions) -> None:
        self.folder = Path(folder)
        self.plan = plan
        self.fingerprint = fingerprint(plan, options)
        self._lock = threading.Condition()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.loaded = self._load()
        except OSError as exc:
            raise EddiesError(f"checkpoint {str(self.folder)!r}: {exc}") from exc
        self.written = self.loaded.seq if self.loaded is not None else 0
        self._next_seq = self.written + 1
        self.bytes_written = 0  # of the last commit written (its files' sizes)

    # ------------------------------------------------------------------ restart
    def resume(
        self,
        aggregate: StreamingAggregate | None,
        event_times: EventTimes,
    ) -> None:
        """Before the query starts: the streams ignore the checkpoint's batch ids, and the
        aggregate (and the watermarks' event times) get their state back."""
        record = self.loaded
        if record is None:
            return
        for table, ids in record.taken.items():
            self.plan.tables[table].stream.restore_taken(ids)
        if aggregate is not None and record.aggregate_stats is not None:
            stats = record.aggregate_stats
            for name, value in stats.items():
                setattr(aggregate.stats, name, value)
            aggregate.restore(record.aggregate)
            event_times.max_us.update(aggregate.stats.max_event_us)

    def attach(self, points: CommitPoints) -> None:
        """Give the commit points their hooks: a snapshot at every grant, and the SteMs'
        restore before the streams start."""
        points.on_snapshot = lambda: self.snapshot(points)
        if self.loaded is None:
            return
        streams = {t: s for t, s in self.loaded.stems.items() if t in points.stream_stems}
        # The lookup cache first, now, before any task starts: its tuples are the oldest.
        self._restore(points, points.lookup_stems, self.loaded.stems)
        if streams:
            points.restore = lambda: self._restore(points, points.stream_stems, streams)

    def _restore(self, points: CommitPoints, stems: dict, states: dict[str, SteMState]) -> None:
        for table, stem in stems.items():
            if table not in states:
                continue
            row_ids, raw_ts = stem.restore(states[table])
            if points.checker is not None:  # debug=True: the restored tuples count as built
                points.checker.record_builds(table, row_ids, raw_ts)

    # ------------------------------------------------------------------ commit
    def snapshot(self, points: CommitPoints) -> tuple[dict, dict]:
        """At a grant (quiescent): every stream SteM's live tuples, every looked-up
        table's tuples and EOTs, every stream's ids."""
        stems = {
            t: stem.snapshot() for t, stem in (points.stream_stems | points.lookup_stems).items()
        }
        taken = {s.name: set(s.processed) for s in points.streams}
        return stems, taken

    def record(self, marker: Commit, aggregate: StreamingAggregate | None) -> Record:
        """The checkpoint of the commit ``marker`` (called by the consumer, behind the
        results it stands for, after the aggregate's increment)."""
        stems, taken = marker.state  # type: ignore[misc]
        # Encoded here, so that an id JSON cannot hold fails the query at once (an
        # EddiesError) rather than a checkpoint write that later commits would wait for.
        tags = [_encode(t) for t in marker.tags]
        ids = {t: [_encode(i) for i in batch_ids] for t, batch_ids in taken.items()}
        seq, self._next_seq = self._next_seq, self._next_seq + 1
        record = Record(seq, tags, stems, ids)
        if aggregate is not None:
            record.aggregate = aggregate.snapshot()
            stats = dataclasses.asdict(aggregate.stats)
            stats.pop("output_mode")
            record.aggregate_stats = stats
        return record

    def write(self, record: Record, timeout: float = ORDER_TIMEOUT) -> None:
        """Write ``record`` atomically, after every earlier commit's (thread-safe; any
        thread but the query's). Raises EddiesError if the previous commit is not written
        within ``timeout`` seconds, or on an I/O error or a batch id that is not made of
        str/int/float/bool/None/tuples."""
        with self._lock:
            if not self._lock.wait_for(lambda: self.written >= record.seq - 1, timeout):
                raise EddiesError(
                    f"checkpoint: commit {record.seq - 1} was not written in {timeout} s"
                )
            if self.written >= record.seq:
                return
            try:
                self._write(record)
            except OSError as exc:
                raise EddiesError(f"checkpoint {str(self.folder)!r}: {exc}") from exc
            self.written = record.seq
            record.written.set()
            self._lock.notify_all()

    def settle(self, commit: Commit, timeout: float = ORDER_TIMEOUT) -> None:
        """After a commit's results are safe (written to a sink, or handed to the
        caller): its owner writes the checkpoint; a request granted at the same commit
        point waits until it is written. Any thread but the query's."""
        record = commit.checkpoint
        if not isinstance(record, Record):
            return
        if commit.owner:
            self.write(record, timeout)
        elif not record.written.wait(timeout):
            raise EddiesError(f"checkpoint: commit {record.seq} was not written in {timeout} s")

    def _write(self, record: Record) -> None:
        final = self.folder / f"commit-{record.seq:012d}"
        temporary = self.folder / f".commit-{record.seq:012d}.tmp-{os.getpid()}"
        if temporary.exists():
            shutil.rmtree(temporary)
        temporary.mkdir()
        meta: dict[str, Any] = {
            "version": VERSION,
            "seq": record.seq,
            "fingerprint": self.fingerprint,
            "tags": record.tags,
            "taken": record.taken,
            "stems": {},
            "aggregate": record.aggregate_stats,
        }
        size = 0
        for table, state in record.stems.items():
            rows = state.rows.append_column(_DONE, _done_column(state.done))
            if state.deadlines is not None:
                rows = rows.append_column(_DEADLINE, pa.array(state.deadlines))
            size += _write_ipc(temporary / f"stem-{table}.arrow", rows)
            for i, values in enumerate(state.eots.values()):
                size += _write_ipc(temporary / f"stem-{table}-eot{i}.arrow", values)
            meta["stems"][table] = {
                "watermark": state.watermark,
                "counters": state.counters,
                "eots": [list(cols) for cols in state.eots],
            }
        if record.aggregate is not None:
            size += _write_ipc(temporary / "aggregate.arrow", record.aggregate)
        meta["has_aggregate_state"] = record.aggregate is not None
        data = json.dumps(meta).encode()
        size += len(data)
        _write_file(temporary / "meta.json", data)
        _fsync(temporary)
        os.replace(temporary, final)
        _fsync(self.folder)
        for old in self.folder.iterdir():  # earlier commits, and temporaries of a crash
            if old != final and (old.name.startswith("commit-") or ".tmp-" in old.name):
                shutil.rmtree(old, ignore_errors=True)
        self.bytes_written = size

    def _load(self) -> Record | None:
        commits = sorted(
            p for p in self.folder.iterdir() if p.name.startswith("commit-") and p.is_dir()
        )
        if not commits:
            return None
        path = commits[-1]
        meta = json.loads((path / "meta.json").read_text())
        if meta.get("version") != VERSION:
            raise EddiesError(f"checkpoint {str(path)!r}: unknown version {meta.get('version')}")
        if meta["fingerprint"] != self.fingerprint:
            raise EddiesError(
                f"checkpoint {str(self.folder)!r} was written by another query (or other "
                "stream schemas, windows, output mode or watermarks); give a new folder"
            )
        stems = {}
        for table, info in meta["stems"].items():
            rows = _read_ipc(path / f"stem-{table}.arrow")
            done = _done_values(rows.column(_DONE))
            deadlines = None
            if _DEADLINE in rows.column_names:
                deadlines = rows.column(_DEADLINE).to_numpy()
                rows = rows.drop_columns([_DEADLINE])
            rows = rows.drop_columns([_DONE])
            eots = {
                tuple(cols): _read_ipc(path / f"stem-{table}-eot{i}.arrow")
                for i, cols in enumerate(info["eots"])
            }
            stems[table] = SteMState(
                rows, done, deadlines, info["watermark"], info["counters"], eots
            )
        aggregate = _read_ipc(path / "aggregate.arrow") if meta["has_aggregate_state"] else None
        return Record(
            meta["seq"],
            [_decode(t) for t in meta["tags"]],
            stems,
            {t: {_decode(i) for i in ids} for t, ids in meta["taken"].items()},
            aggregate,
            meta["aggregate"],
        )


def _write_ipc(path: Path, table: pa.Table) -> int:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    _fsync(path)
    return path.stat().st_size


def _read_ipc(path: Path) -> pa.Table:
    # Read into memory, not mapped: the next commit removes this file.
    with pa.OSFile(str(path), "rb") as source:
        return pa.ipc.open_file(source).read_all()


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _encode(value: Hashable) -> Any:
    """A batch id or tag as JSON: str, int, float, bool, None; tuples tagged."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    raise EddiesError(
        f"checkpoint: batch ids and commit tags must be str, int, float, bool, None or "
        f"tuples of those, got {value!r}"
    )


def _decode(value: Any) -> Hashable:
    if isinstance(value, dict):
        return tuple(_decode(v) for v in value["tuple"])
    return value


def _done_column(done: np.ndarray) -> pa.Array:
    """A SteM's stored Done bits as a column: uint64, or past 64 bits (an object array of
    Python ints, issue 26) their decimal digits."""
    if done.dtype == object:
        return pa.array([str(m) for m in done.tolist()], pa.string())
    return pa.array(done, pa.uint64())


def _done_values(column: pa.ChunkedArray) -> np.ndarray:
    """The inverse of :func:`_done_column`."""
    if pa.types.is_string(column.type):
        return np.array([int(m) for m in column.to_pylist()], dtype=object)
    return column.to_numpy()
