"""The scope events log as the sampling room gives it: the core's calls, which samplers run now,
and what a Sampler knows of the scopes its process opened while it ran.

Scope edges go into one process-wide events log in C++ (``_core.events_*``). A running Sampler
covers the events of its own runs: it notes the log's write counter when it starts and when it
stops, and its scope tables cover the events between. The scopes room (``annotate``, the default
session) writes the edges; it learns which samplers run from :func:`watch` (this room may not
import it), and writes through :data:`events_begin` / :data:`events_end` /
:func:`events_intern`, the core's own functions (taken from this room's face). The figures per
scope (:meth:`ScopeRecording.summary`) and the as-of join of samples to scopes are
:mod:`stroboscope.analysis`'s, the trace :mod:`stroboscope.export`'s; these methods hand them
this sampler's two tables (imported on first call, so a Sampler costs nothing of theirs until
asked). Nor does this module import pyarrow: a process that only annotates, with nothing
recording, loads the extension and no table library (about 0.2 s less on its first scope).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Callable, NamedTuple

import stroboscope._core as _core
from stroboscope._base import lifecycle as _lifecycle
from stroboscope._core import (
    ScopeEdges,
    events_begin,
    events_end,
    events_intern,
    events_read,
    events_strings,
    events_written,
    scope_edges_mode,
    scope_edges_pending,
    scope_edges_setup,
)
from stroboscope.sampling import _child_events

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = [
    "Recorder",
    "ScopeEdges",
    "ScopeRecording",
    "check_edge_counters",
    "events_begin",
    "events_end",
    "events_intern",
    "events_read",
    "events_strings",
    "events_written",
    "recorders",
    "ring_rows",
    "scope_edges_mode",
    "scope_edges_pending",
    "scope_edges_setup",
    "watch",
]

# The core's calls, as they are (no Python wrapper: a scope's edge pays one C call):
# - ``events_begin(scope_id, depth, labels_id, stack_id)``: write a scope's begin (CLOCK_MONOTONIC
#   and the thread id are stamped in C++).
# - ``events_end(scope_id, depth, labels_id, stack_id)``: write a scope's end.
# - ``events_intern(text) -> int``: the log's id of a scope name or label set.
# - ``events_written() -> int``: how many edges the log has taken so far.
# - ``events_strings(first=0) -> list[str]``: the interned texts, by id.
# - ``events_read(first, last=None)``: the log's edges from ``first`` on (an ``EventBatch``).
# - ``ScopeEdges``: the base of a scope whose ``__enter__``/``__exit__`` write its edges in C
#   where nothing else is asked of them, and call its Python ``_enter_slow``/``_exit_slow``
#   otherwise.
# - ``scope_edges_setup(stack_var, labels_var, frame_type, bind_asyncio)``: the scopes room's
#   stack, once.
# - ``scope_edges_mode(mode)``: 0 nothing records, 1 edges in C, 2 the Python path.
# - ``scope_edges_pending(sids)``: the stacks (at most 64) that hold a frame another thread
#   closed: their scopes take the Python path, which takes it off.


class Recorder(NamedTuple):
    """A running sampler, as the scopes room sees it."""

    sampler: object
    edge_target: Callable[[], None] | None  # asks it for a row at once (edge_rows=True)
    edge_counters: str = "off"  # what it asks of the log's edges (EDGE_COUNTERS)


def check_edge_counters(value: object) -> str:
    """``edge_counters`` as a mode of :data:`~stroboscope.formats.shared_events.EDGE_COUNTERS`
    (True is ``"cpu"``, False ``"off"``); ValueError naming the argument otherwise."""
    from stroboscope.formats.shared_events import EDGE_COUNTERS

    if value is True or value is False:
        return "cpu" if value else "off"
    if isinstance(value, str) and value in EDGE_COUNTERS:
        return value
    accepted = ", ".join(repr(m) for m in EDGE_COUNTERS)
    raise ValueError(f"edge_counters must be True, False, {accepted}, got {value!r}")


Watcher = Callable[[tuple[Recorder, ...]], None]


class _Running:
    """The samplers running now, in start order, and who is told when that changes.

    A watcher is called with the whole tuple, under the lock (so two changes reach it in
    order); it must not start or stop a sampler. In a forked child no sampler thread runs: the
    registry forgets them there (the lifecycle registry's hook), telling nobody (the watchers'
    own state is reset by their own hooks).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.recorders: tuple[Recorder, ...] = ()
        self.watchers: tuple[Watcher, ...] = ()
        self.counters_before: str | None = None  # the log's mode before a sampler asked

    def _tell(self) -> None:
        self._apply_counters()
        for watcher in self.watchers:
            watcher(self.recorders)

    def _apply_counters(self) -> None:
        """The log's edge counters: the strongest mode the running samplers ask for, over what
        the log had before the first of them asked (a recorded command's
        ``STROBOSCOPE_EDGE_COUNTERS``); back to that when none asks."""
        from stroboscope.formats.shared_events import EDGE_COUNTERS

        asked = max((EDGE_COUNTERS.index(r.edge_counters) for r in self.recorders), default=0)
        if asked == 0 and self.counters_before is None:
            return
        if self.counters_before is None:
            self.counters_before = _core.events_counters()
        before = EDGE_COUNTERS.index(self.counters_before)
        _core.events_counters(EDGE_COUNTERS[max(asked, before)])
        if asked == 0:
            self.counters_before = None

    def add(self, recorder: Recorder) -> None:
        with self.lock:
            if any(r.sampler is recorder.sampler for r in self.recorders):
                return
            self.recorders = (*self.recorders, recorder)
            self._tell()

    def remove(self, sampler: object) -> None:
        with self.lock:
            kept = tuple(r for r in self.recorders if r.sampler is not sampler)
            if len(kept) != len(self.recorders):
                self.recorders = kept
                self._tell()

    def _after_fork_in_child(self) -> None:
        self.lock = threading.Lock()  # another thread of the parent may have held it
        self.recorders = ()
        if self.counters_before is not None:  # no sampler of the parent's runs here
            _core.events_counters(self.counters_before)
            self.counters_before = None


_running = _Running()
_lifecycle.register(_running)


def watch(watcher: Watcher) -> Callable[[], None]:
    """Call ``watcher(recorders)`` now and whenever a sampler starts or stops; returns a
    remover. ``recorders``: the running samplers, in start order (:class:`Recorder`)."""
    with _running.lock:
        _running.watchers = (*_running.watchers, watcher)
        watcher(_running.recorders)

    def remove() -> None:
        with _running.lock:
            watchers = list(_running.watchers)
            if watcher in watchers:
                watchers.remove(watcher)
            _running.watchers = tuple(watchers)

    return remove


def ring_rows(events_dir: str | os.PathLike[str], sampler: object) -> _core.EventsDoorbell:
    """Edge rows across processes: ``sampler`` (a running :class:`stroboscope.Sampler`) takes a
    row whenever a process writing shared events into ``events_dir`` opens a scope.

    Makes ``events_dir/doorbell``, which processes map when they make their events file: make
    it before starting the command (processes started earlier never ring). Returns the doorbell;
    ``close()`` stops its waiter thread (before the sampler closes). Several scopes opening at
    once share a row, as in-process edge rows do.

    Raises
    ------
    OSError
        The doorbell cannot be made (no such directory, one is there already).
    """
    core = getattr(sampler, "_core", None)
    if not isinstance(core, _core.Sampler):
        raise TypeError(f"sampler must be a stroboscope.Sampler, got {type(sampler).__name__}")
    return _core.EventsDoorbell(os.fspath(events_dir), core)


def recorders() -> tuple[Recorder, ...]:
    """The samplers running now, in start order."""
    return _running.recorders


class _Children:
    """The scopes of the processes started while a sampler ran (:mod:`._child_events`): each
    run's span on the clock, and the intervals of the runs that ended (read before the
    directory goes)."""

    def __init__(self) -> None:
        self.read: list[pa.Table] = []  # the ended runs' children's intervals
        self.dir: str | None = None  # the running run's directory (None: not ours to read)
        self.start_ns = 0
        self.bell: _core.EventsDoorbell | None = None  # edge rows for the children's scopes

    def attach(self, core: _core.Sampler, edge_rows: bool) -> None:
        self.start_ns = time.monotonic_ns()
        self.dir = _child_events.acquire()
        if edge_rows and self.dir is not None:
            try:  # one doorbell per directory: the first sampler with edge rows rings
                self.bell = _core.EventsDoorbell(self.dir, core)  # as ring_rows() makes it
            except OSError:
                self.bell = None

    def detach(self) -> None:
        path, self.dir = self.dir, None
        if self.bell is not None:
            self.bell.close()
            self.bell = None
        stop = time.monotonic_ns()
        if path is not None:
            table = _child_events.read(path, [(self.start_ns, stop)])
            if table is not None and table.num_rows:
                self.read.append(table)
        _child_events.release(path)

    def with_own(self, own: pa.Table) -> pa.Table:
        """``own`` (this process's intervals) and the children's, with a ``pid`` column when
        there are any (:func:`stroboscope.analysis.scope_edges.with_shared`)."""
        import pyarrow as pa  # here: a process that only annotates never loads it
        import pyarrow.compute as pc

        from stroboscope.analysis.scope_edges import with_shared

        tables = list(self.read)
        if self.dir is not None:  # running: what the children wrote so far
            live = _child_events.read(self.dir, [(self.start_ns, time.monotonic_ns() + 1)])
            if live is not None and live.num_rows:
                tables.append(live)
        if not tables:
            return own
        # Each read numbers its stacks 1, 2, ...: the runs' stacks are kept apart.
        offset, parts = 0, []
        for t in tables:
            stacks = pc.add(t.column("stack_id"), pa.scalar(offset, pa.uint64()))
            parts.append(t.set_column(t.schema.get_field_index("stack_id"), "stack_id", stacks))
            offset += int(pc.max(t.column("stack_id")).as_py() or 0)
        shared = pa.concat_tables(
            [t.replace_schema_metadata(None) for t in parts], promote_options="default"
        )
        return with_shared(own, shared, os.getpid())


class ScopeRecording:
    """What one sampler records of the scopes, a part of
    :class:`stroboscope.sampling.CoreSampler`: the span of the events log each of its runs
    covers, and the scopes of the processes started while it ran.

    Parameters
    ----------
    core : _core.Sampler
        The sampler's thread, asked for a row at each scope's begin with ``edge_rows``.
    edge_rows : bool
        Ask for a row at each scope's begin (in this process, and in its children's through
        their events directory).
    edge_counters : str
        What the sampler asks of the log's edges while it runs (:func:`check_edge_counters`).
    """

    def __init__(self, core: _core.Sampler, edge_rows: bool, edge_counters: str) -> None:
        self._core = core
        self._edge_rows = edge_rows
        self._edge_counters = edge_counters
        self._windows: list[list[int]] = []  # [first, last) of the log per run; last -1: running
        self._children = _Children()

    @property
    def attached(self) -> bool:
        """Whether a run is attached (between :meth:`attach` and :meth:`detach`)."""
        return bool(self._windows) and self._windows[-1][1] < 0

    def attach(self, sampler: object) -> None:
        """Called right before the thread starts: scopes opened from now on are this run's, in
        this process and in the processes it starts (:mod:`._child_events`). ``sampler`` is the
        sampler as the scopes room sees it (:class:`Recorder`)."""
        if self.attached:
            return  # start() of a running sampler
        self._children.attach(self._core, self._edge_rows)
        self._windows.append([int(events_written()), -1])
        target = self._core.request_tick if self._edge_rows else None
        _running.add(Recorder(sampler, target, self._edge_counters))

    def detach(self, sampler: object) -> None:
        """Called when the thread stops."""
        _running.remove(sampler)
        if self.attached:
            self._windows[-1][1] = int(events_written())
            self._children.detach()

    def events(self) -> pa.Table:
        """The raw scope edges of the runs (see :meth:`CoreSampler.scope_events`)."""
        import pyarrow as pa

        from stroboscope.analysis.scope_edges import split_counter_records

        tables, lost = [], 0
        now = int(events_written())
        for first, last in self._windows:
            batch = _core.events_read(first, now if last < 0 else last)
            lost += int(batch.lost)
            tables.append(pa.table(batch))
        if not tables:
            tables.append(pa.table(_core.events_read(now, now)))
        table = split_counter_records(pa.concat_tables(tables))
        return table.replace_schema_metadata({b"events_lost": str(lost).encode()})

    def intervals(self) -> pa.Table:
        """One row per scope call of the runs, the children's too (see
        :meth:`CoreSampler.scope_intervals`)."""
        from stroboscope.analysis.scope_edges import pair_events

        events = self.events()
        table = self._children.with_own(pair_events(events, list(events_strings())))
        return table.replace_schema_metadata(events.schema.metadata)

    def summary(
        self,
        rows: pa.Table,
        *,
        by: str | Sequence[str] | None = None,
        weight: str | None = None,
        stacks: tuple[pa.Table, pa.Table] | None = None,
    ) -> pd.DataFrame:
        """:func:`stroboscope.analysis.scopes.summary` of ``rows`` (the sampler's) over the
        runs' scope intervals (see :meth:`CoreSampler.summary`)."""
        from stroboscope.analysis.scopes import summary

        return summary(rows, self.intervals(), by=by, stacks=stacks, weight=weight)

    def samples_by_scope(self, rows: pa.Table) -> pa.Table:
        """``rows`` with the scope open at each (an as-of join on ``mono_ns``)."""
        from stroboscope.analysis.scopes import samples_by_scope

        return samples_by_scope(rows, self.intervals())

    def export_chrome_trace(self, path: str | os.PathLike[str], rows: pa.Table) -> str:
        """``rows`` and the runs' scopes as a Chrome Trace Event file; returns the path."""
        from stroboscope.analysis.trace_data import write_chrome_trace

        write_chrome_trace(path, rows, self.intervals())
        return os.fspath(path)
