"""The rows a sampler takes while scopes are open, collected in the background.

:class:`ScopeCollector` is the machinery behind aitune's hardware-metrics session
(:mod:`stroboscope.compat.aitune` translates its names, columns, variables and dump onto it): a
:class:`stroboscope.Sampler` made and started on the first scope of an enabled collector; a scope
open asks it for an edge row (``request_tick``), so a scope shorter than the interval has its
row; a thread moves the rows out of the ring every :func:`collect_every_s` (a quarter of what
the ring holds at most), so a long scope never has its first rows overwritten; rows the ring
overwrote anyway (the process stalled longer than the ring lasts) are counted in
:attr:`ScopeCollector.rows_lost` and a warning says so. At exit (in the process that started it)
and on :meth:`ScopeCollector.disable` the rows are handed to :meth:`ScopeCollector.dump`.

What the rows become is the subclass's: :meth:`ScopeCollector.make_sampler` (the sources),
:meth:`ScopeCollector.rows` (a drained table and the scope intervals into the kept rows),
:meth:`ScopeCollector.join` and :meth:`ScopeCollector.result` (the kept rows as one object) and
:meth:`ScopeCollector.dump`. The open scopes' labels come from the ``labels`` callable it is
handed (``stroboscope.scopes.current_labels``: this room may not import ``scopes``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Generic, Optional, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from stroboscope._base import lifecycle as _lifecycle

if TYPE_CHECKING:
    from stroboscope.recording.sampler import Sampler

logger = logging.getLogger("stroboscope")

R = TypeVar("R")

COLLECT_EVERY_S = 10.0  # rows leave the ring at least this often (it holds ~1.8 h at 10 Hz)
FIRST_ROW_WAIT_S = 5.0  # at most this long for a new sampler's first row (seconds)
EDGE_WAIT_S = 1.0  # at most this long, beyond an interval, for an edge row asked for (seconds)

Edge = tuple[int, str, Optional[str], Optional[str]]
"""An edge row asked for: (requested at mono ns, scope name, module label, backend label)."""


def collect_every_s(capacity: int, interval_s: float) -> float:
    """How often (seconds) the rows are moved out of a ring of ``capacity`` rows taken every
    ``interval_s``: every :data:`COLLECT_EVERY_S`, or every quarter of the ring's span if
    shorter."""
    return min(COLLECT_EVERY_S, capacity * interval_s / 4)


def own_calls(intervals: pa.Table) -> pa.Table:
    """The calls of this process only: a process started here (a forked worker) that opens
    scopes starts a collection of its own and dumps its own rows, so the calls a sampler
    reads from its children (with a ``pid`` column) would be counted twice."""
    if "pid" not in intervals.column_names:
        return intervals
    mine = intervals.filter(pc.equal(intervals.column("pid"), os.getpid()))
    return mine.drop_columns([c for c in ("pid", "producer") if c in mine.column_names])


def await_true(done: Callable[[], bool], timeout_s: float) -> None:
    """Poll ``done`` every millisecond until it is true or ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.001)


class ScopeCollector(Generic[R]):
    """The process's collection: enabled state, the sampler, the rows moved out of its ring.

    Parameters
    ----------
    interval_s : float
        The sampler's interval (seconds): an edge row is asked for at most once an interval
        for a scope of the same name.
    capacity : int
        The sampler's ring, in rows (sets how often the rows are collected).
    labels : callable
        The labels of the scopes open now (``module`` and ``backend`` are kept with each edge).
    enabled : bool
        Whether the collector starts on the first scope until :meth:`enable` or
        :meth:`disable` says otherwise (read on each scope: :meth:`enabled_by_default`).
    what : str
        How log lines name the collector.
    thread : str
        The name of the thread that collects the rows.
    lost_hint : str
        Added to the warning about overwritten rows (where the count can be read).
    """

    def __init__(
        self,
        interval_s: float,
        capacity: int,
        labels: Callable[[], Mapping[str, Any]],
        *,
        enabled: bool = False,
        what: str = "scope collector",
        thread: str = "stroboscope-scope-collector",
        lost_hint: str = "",
    ) -> None:
        self.interval_s = interval_s
        self.capacity = capacity
        self._labels = labels
        self._enabled = enabled
        self._what = what
        self._thread_name = thread
        self._lost_hint = lost_hint
        self._lock = threading.Lock()  # never taken twice by one thread
        self._runtime_enabled: bool | None = None  # None: enabled_by_default() decides
        self._sampler: Sampler | None = None
        self._request: Callable[[], None] | None = None  # the sampler's edge-row request
        self._pid = 0  # the process that started the sampler
        self._start_ns = 0
        self._open = 0  # scopes open in the process (one stack per process)
        self._last_edge: str | None = None
        self._last_edge_ns = 0
        self._collector: threading.Thread | None = None  # moves the rows out of the ring
        self._collector_stop = threading.Event()
        self.rows_lost = 0  # rows the ring overwrote before they were collected
        self._chunks: list[R] = []
        self._edges: list[Edge] = []  # edge rows asked for and not yet collected
        self._carry: pa.Table | None = None  # the latest row collected
        _lifecycle.register(self)

    # -- what the subclass says --------------------------------------------------------------

    def make_sampler(self) -> Sampler:
        """The sampler behind the collector (made on the first scope)."""
        raise NotImplementedError

    def rows(self, frame: pa.Table, intervals: pa.Table, carried: int) -> R | None:
        """The rows to keep of ``frame`` (its first ``carried`` rows were kept already and only
        lend their readings), with the scope ``intervals`` of the sampler; None: none."""
        raise NotImplementedError

    def join(self, chunks: list[R]) -> R:
        """Several chunks of kept rows as one."""
        raise NotImplementedError

    def result(self, rows: R | None) -> R:
        """What :meth:`get_metrics` gives for the kept rows (None: none were kept)."""
        raise NotImplementedError

    def dump(self, rows: R) -> None:
        """Hand the rows on when the collection ends (:meth:`disable`, exit)."""

    def enabled_by_default(self) -> bool:
        """Whether to collect when neither :meth:`enable` nor :meth:`disable` was called."""
        return self._enabled

    def on_edge(self, name: str, opened_ns: int, now_ns: int) -> None:
        """Called (under the lock) when a scope ``name`` opened at or after ``opened_ns``
        asks for an edge row, at ``now_ns`` (mono ns)."""

    def on_intervals(self, intervals: pa.Table) -> None:
        """Called (under the lock) with the scope intervals after each drain."""

    def on_collected(self, last_ns: int) -> None:
        """Called (under the lock) once the rows up to ``last_ns`` (mono ns) were kept."""

    def on_reset(self) -> None:
        """Called when a collection ends (under the lock) and in a forked child: forget what
        the subclass keeps of it."""

    # -- the scopes' side ------------------------------------------------------------------

    def should_collect(self) -> bool:
        if self._runtime_enabled is not None:
            return self._runtime_enabled
        return self.enabled_by_default()

    @property
    def active(self) -> bool:
        return self._sampler is not None

    @property
    def start_ns(self) -> int:
        """When the sampler was started (mono ns)."""
        return self._start_ns

    def before_open(self) -> None:
        """Start the sampler on the first scope of an enabled collector."""
        if self._sampler is None and self.should_collect():
            with self._lock:
                if self._sampler is None:
                    try:
                        sampler = self.make_sampler()
                    except Exception:  # never break the code being measured: stop collecting
                        logger.exception("%s: cannot start the sampler; disabled", self._what)
                        self._runtime_enabled = False
                        return
                    self._start_ns = time.monotonic_ns()
                    sampler.start()
                    # Its first row is taken before this scope opens: the scope's own row is
                    # then its edge row alone (a first tick taken after the open would be a
                    # second row at the same instant).
                    await_true(lambda: sampler.stats().rows_written > 0, FIRST_ROW_WAIT_S)
                    self._pid = os.getpid()
                    self._request = sampler.request_tick
                    self._sampler = sampler
                    self._start_collector(collect_every_s(self.capacity, self.interval_s))

    def after_open(self, name: str, opened_ns: int | None = None) -> bool:
        """Count an open scope and ask for an edge row; False when not collecting.

        ``opened_ns`` (mono ns) is a time taken before the native scope opened (given to
        :meth:`on_edge`).
        """
        if self._sampler is None or self._runtime_enabled is False:
            return False  # (a collector runs only when enabled: the default needs no look)
        now = time.monotonic_ns()
        with self._lock:
            # An edge row when no scope was open, or when the last one was for another scope;
            # the last reading is unknown here, so one of another name is assumed after one
            # interval (a few more edge rows than a reading on every change, never fewer).
            edge = (
                self._open == 0
                or name != self._last_edge
                or now - self._last_edge_ns >= self.interval_s * 1e9
            )
            self._open += 1
            if edge:
                self._last_edge, self._last_edge_ns = name, now
                self.on_edge(name, now if opened_ns is None else opened_ns, now)
                edge = self._request is not None
            if edge:
                labels = self._labels()
                self._edges.append((now, name, labels.get("module"), labels.get("backend")))
        if edge and self._request is not None:
            self._request()
        return True

    def after_close(self) -> None:
        with self._lock:
            self._open = max(0, self._open - 1)

    # -- rows ------------------------------------------------------------------------------

    def _start_collector(self, every_s: float) -> None:
        stop = self._collector_stop = threading.Event()
        self._collector = threading.Thread(
            target=self._collect_every,
            args=(stop, every_s),
            name=self._thread_name,
            daemon=True,
        )
        self._collector.start()

    def _collect_every(self, stop: threading.Event, every_s: float) -> None:
        while not stop.wait(every_s):
            try:
                with self._lock:
                    self._collect_locked()
            except Exception:  # never dies of one round: the next one tries again
                logger.exception("%s: collecting the rows failed", self._what)

    def _stop_collector(self) -> None:
        """Stop the collector thread (not holding the lock: the thread takes it)."""
        self._collector_stop.set()
        if self._collector is not None and self._collector is not threading.current_thread():
            self._collector.join()
        self._collector = None

    def _collect_locked(self) -> None:
        """Move the ring's rows into kept rows (:meth:`rows` says which)."""
        sampler = self._sampler
        if sampler is None:
            return
        drained = sampler.drain()
        if drained.rows_lost:
            self.rows_lost += drained.rows_lost
            logger.warning(
                "%s: %d rows were overwritten in the ring before they were collected (%d in all%s)",
                self._what,
                drained.rows_lost,
                self.rows_lost,
                self._lost_hint,
            )
        frame = drained.to_arrow()
        intervals: pa.Table = own_calls(sampler.scope_intervals())
        self.on_intervals(intervals)  # after the rows drained: every scope opened is listed
        if frame.num_rows == 0:
            return
        carried = 0
        if self._carry is not None:  # the previous row lends its readings (see rows())
            frame, carried = pa.concat_tables([self._carry, frame]), self._carry.num_rows
        rows = self.rows(frame, intervals, carried)
        if rows is not None:
            self._chunks.append(rows)
        self._carry = frame.slice(frame.num_rows - 1)
        last = pc.max(frame.column("mono_ns")).as_py()
        self._edges[:] = [e for e in self._edges if e[0] > last]  # their rows are still due
        self.on_collected(last)

    def _await_edges_locked(self) -> None:
        """Collect until every edge row asked for is in (a scope that closed just now has its
        row): the sampler takes one within microseconds, its next tick within an interval."""
        sampler = self._sampler

        def served() -> bool:
            self._collect_locked()
            return not self._edges or sampler is None or not sampler.running

        await_true(served, self.interval_s + EDGE_WAIT_S)

    def _rows_locked(self) -> R:
        self._await_edges_locked()
        if len(self._chunks) > 1:
            self._chunks[:] = [self.join(self._chunks)]
        return self.result(self._chunks[0] if self._chunks else None)

    def get_metrics(self) -> R | None:
        """The rows so far, or None when collection never started."""
        with self._lock:
            if self._sampler is None:
                return None
            return self._rows_locked()

    def write_rows(self, write: Callable[[R], None], reset: bool) -> bool:
        """``write`` the rows so far; with ``reset`` they are forgotten once written. False
        (nothing written) when collection is not active."""
        with self._lock:
            if self._sampler is None:
                return False
            write(self._rows_locked())
            if reset:
                self._chunks.clear()
        return True

    # -- enable, disable, exit -------------------------------------------------------------

    def enable(self) -> None:
        self._runtime_enabled = True

    def disable(self) -> None:
        """Stop collecting; an active collection dumps its rows and ends (a later enable
        starts a fresh one)."""
        self._runtime_enabled = False
        self._end(dump=True)

    def _reset_locked(self) -> None:
        self._sampler = self._request = None
        self._chunks.clear()
        self._edges.clear()
        self._carry = None
        self._open = 0
        self._last_edge = None
        self.rows_lost = 0
        self.on_reset()

    def _end(self, *, dump: bool) -> None:
        self._stop_collector()
        with self._lock:
            sampler = self._sampler
            if sampler is None:
                return
            self._await_edges_locked()  # (a stopped sampler takes no edge row)
            sampler.stop()
            rows = self._rows_locked()
            sampler.close()
            self._reset_locked()
        if dump:
            self.dump(rows)

    def _at_exit(self) -> None:
        if os.getpid() == self._pid:  # a forked child's exit does not dump its parent's rows
            self._end(dump=True)

    def _after_fork_in_child(self) -> None:
        # The sampler belongs to the parent; a child starts its own collection on its first scope.
        self._lock = threading.Lock()
        self._chunks = []
        self._edges = []
        self._reset_locked()
        self._collector = None  # (threads do not survive a fork)
        self._collector_stop = threading.Event()
