"""aitune's hardware-metrics session, translated onto a :class:`stroboscope.Sampler`.

aitune 0.6.0 starts a collector on the first scope (when enabled by ``AITUNE_HARDWARE_METRICS``
or :func:`enable_hardware_metrics`) that reads psutil and NVML on a timer every 0.1 s while a
scope is open, plus once at once when a scope opens that the previous reading did not see, and
pipes the rows to a child process. Here the readings are the rows of one stroboscope Sampler
(sources ``cpu``, ``memory`` and, where NVML sees a GPU, ``gpu``; interval 0.1 s) started on the
first scope; a scope open asks it for an edge row (``request_tick``); the rows are turned into
aitune's columns by :mod:`._rows` (innermost open scope and its labels from the sampler's scope
intervals) and only the rows taken while a scope was open are kept. A thread of the session
moves the rows out of the ring every :func:`collect_every_s` (a quarter of what the ring holds
at most), so a long scope never has its first rows overwritten; rows the ring overwrote anyway
(the process stalled longer than the ring lasts) are counted in the frames' ``attrs["rows_lost"]``
and a warning says so.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Callable

import pyarrow as pa
import pyarrow.compute as pc

from stroboscope import scopes
from stroboscope._base import lifecycle as _lifecycle
from stroboscope._base.checks import check_bool
from stroboscope.compat.aitune._dump import dump_to, write_csv
from stroboscope.compat.aitune._rows import (
    aitune_rows,
    empty_rows,
    intervals_of,
    stamp_readings,
    torch_memory,
)

if TYPE_CHECKING:
    import pandas

    from stroboscope.compat.aitune._rows import Edge, Reading
    from stroboscope.recording.sampler import Sampler

logger = logging.getLogger("stroboscope")

INTERVAL_S = 0.1  # aitune's collector interval
COLLECT_EVERY_S = 10.0  # rows leave the ring at least this often (it holds ~1.8 h at 10 Hz)
_CAPACITY = 1 << 16
FIRST_ROW_WAIT_S = 5.0  # at most this long for a new sampler's first row (seconds)
EDGE_WAIT_S = 1.0  # at most this long, beyond an interval, for an edge row asked for (seconds)


def collect_every_s(capacity: int, interval_s: float) -> float:
    """How often (seconds) the rows are moved out of a ring of ``capacity`` rows taken every
    ``interval_s``: every :data:`COLLECT_EVERY_S`, or every quarter of the ring's span if
    shorter."""
    return min(COLLECT_EVERY_S, capacity * interval_s / 4)


_TRUE = ("1", "true", "True", "yes", "Yes", "YES")  # aitune's truthy spellings


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value in _TRUE


# Read once at import, as aitune reads its environment variables.
HARDWARE_METRICS_ENABLED = _env_flag("AITUNE_HARDWARE_METRICS", False)
HARDWARE_METRICS_PATH: str | None = os.environ.get("AITUNE_HARDWARE_METRICS_PATH")


def dump_metrics(metrics: pandas.DataFrame) -> None:
    """Log the summary of ``metrics`` and write them as CSV to ``AITUNE_HARDWARE_METRICS_PATH``
    (read at import) or ``hardware_metrics_<YYYYmmdd_HHMMSS>.csv`` in the working directory,
    named per rank in a multi-process run. Nothing is written when there is nothing to
    summarise (aitune's rule)."""
    dump_to(metrics, HARDWARE_METRICS_PATH)


def _make_sampler() -> Sampler:
    """The sampler behind a session: aitune's readings (host CPU and memory, every GPU)."""
    # The rows become a DataFrame later, possibly at interpreter exit, when nothing can be
    # imported any more (pandas starts a thread pool module): load it with the session.
    importlib.import_module("pandas")
    from stroboscope.recording.sampler import Sampler
    from stroboscope.sampling import gpu_status

    # Every row reads every source (None: each tick), as aitune reads psutil and NVML for each
    # row; the memory source would otherwise wait for the kernel's 1 s fold of its counters.
    sources: dict[str, float | None] = {"cpu": None, "memory": None}
    if int(gpu_status().get("device_count") or 0) > 0:
        sources["gpu"] = None
    else:
        logger.warning("NVML not available, skipping GPU metrics")
    # cpu_window=0: CPU % over the time since the previous row, as psutil.cpu_percent() gives.
    return Sampler(
        INTERVAL_S, sources=sources, capacity=_CAPACITY, cpu_window=0.0, gpu_samples=False
    )


def _await(done: Callable[[], bool], timeout_s: float) -> None:
    """Poll ``done`` every millisecond until it is true or ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.001)


class HardwareMetricsSession:
    """The process's collection: enabled state, the sampler, the rows moved out of its ring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # never taken twice by one thread
        self._runtime_enabled: bool | None = None  # None: HARDWARE_METRICS_ENABLED decides
        self._sampler: Sampler | None = None
        self._request: Callable[[], None] | None = None  # the sampler's edge-row request
        self._pid = 0  # the process that started the sampler
        self._start_ns = 0
        self._open = 0  # compat scopes open in the process (aitune keeps one stack per process)
        self._last_edge: str | None = None
        self._last_edge_ns = 0
        self._collector: threading.Thread | None = None  # moves the rows out of the ring
        self._collector_stop = threading.Event()
        self.rows_lost = 0  # rows the ring overwrote before they were collected
        self._chunks: list[pandas.DataFrame] = []
        self._torch: list[tuple[int, int, int]] = []  # (mono_ns, allocated, reserved)
        self._torch_due: list[Reading] = []  # readings whose scope's begin is not yet looked up
        self._edges: list[Edge] = []  # edge rows asked for and not yet collected
        self._carry: pa.Table | None = None  # the latest row collected
        _lifecycle.register(self)

    # -- the scopes' side ------------------------------------------------------------------

    def should_collect(self) -> bool:
        if self._runtime_enabled is not None:
            return self._runtime_enabled
        return HARDWARE_METRICS_ENABLED

    @property
    def active(self) -> bool:
        return self._sampler is not None

    def before_open(self) -> None:
        """Start the sampler on the first scope of an enabled session."""
        if self._sampler is None and self.should_collect():
            with self._lock:
                if self._sampler is None:
                    try:
                        sampler = _make_sampler()
                    except Exception:  # never break the code being measured: stop collecting
                        logger.exception("hardware metrics: cannot start the sampler; disabled")
                        self._runtime_enabled = False
                        return
                    self._start_ns = time.monotonic_ns()
                    sampler.start()
                    # Its first row is taken before this scope opens: the scope's own row is
                    # then its edge row alone (a first tick taken after the open would be a
                    # second row at the same instant).
                    _await(lambda: sampler.stats().rows_written > 0, FIRST_ROW_WAIT_S)
                    self._pid = os.getpid()
                    self._request = sampler.request_tick
                    self._sampler = sampler
                    self._start_collector(collect_every_s(_CAPACITY, INTERVAL_S))

    def after_open(self, name: str, opened_ns: int | None = None) -> bool:
        """Count an open scope and ask for an edge row; False when not collecting.

        ``opened_ns`` (mono ns) is a time taken before the native scope opened: the torch
        figures read now hold from that scope's begin, found between the two times.
        """
        if self._sampler is None or self._runtime_enabled is False:
            return False  # (a session runs only when enabled: the variable needs no look)
        now = time.monotonic_ns()
        with self._lock:
            # aitune reads at once when no scope was open, or when the last reading saw
            # another scope; the last reading is unknown here, so a reading of another name is
            # assumed after one interval (a few more edge rows than aitune, never fewer).
            edge = (
                self._open == 0
                or name != self._last_edge
                or now - self._last_edge_ns >= INTERVAL_S * 1e9
            )
            self._open += 1
            if edge:
                self._last_edge, self._last_edge_ns = name, now
                self._read_torch(name, now if opened_ns is None else opened_ns, now)
                edge = self._request is not None
            if edge:
                labels = scopes.current_labels()
                self._edges.append((now, name, labels.get("module"), labels.get("backend")))
        if edge and self._request is not None:
            self._request()
        return True

    def after_close(self) -> None:
        with self._lock:
            self._open = max(0, self._open - 1)

    def _read_torch(self, name: str, opened_ns: int, now: int) -> None:
        """torch's allocator figures, when this process has initialised CUDA through torch."""
        reading = torch_memory()
        if reading is not None:
            self._torch_due.append((opened_ns, now, name, *reading))

    # -- rows ------------------------------------------------------------------------------

    def _start_collector(self, every_s: float) -> None:
        stop = self._collector_stop = threading.Event()
        self._collector = threading.Thread(
            target=self._collect_every, args=(stop, every_s), name="aitune-collector", daemon=True
        )
        self._collector.start()

    def _collect_every(self, stop: threading.Event, every_s: float) -> None:
        while not stop.wait(every_s):
            try:
                with self._lock:
                    self._collect_locked()
            except Exception:  # never dies of one round: the next one tries again
                logger.exception("hardware metrics: collecting the rows failed")

    def _stop_collector(self) -> None:
        """Stop the collector thread (not holding the lock: the thread takes it)."""
        self._collector_stop.set()
        if self._collector is not None and self._collector is not threading.current_thread():
            self._collector.join()
        self._collector = None

    def _collect_locked(self) -> None:
        """Move the ring's rows into aitune rows (only those taken while a scope was open)."""
        sampler = self._sampler
        if sampler is None:
            return
        drained = sampler.drain()
        if drained.rows_lost:
            self.rows_lost += drained.rows_lost
            logger.warning(
                "hardware metrics: %d rows were overwritten in the ring before they were "
                "collected (%d in all; get_hardware_metrics().attrs['rows_lost'])",
                drained.rows_lost,
                self.rows_lost,
            )
        frame = drained.to_arrow()
        intervals = intervals_of(sampler)
        if self._torch_due:  # read after the rows drained: each reading's scope is listed
            self._torch[:] = sorted(self._torch + stamp_readings(self._torch_due, intervals))
            self._torch_due.clear()
        if frame.num_rows == 0:
            return
        carried = 0
        if self._carry is not None:  # the previous row lends its GPU readings (see _rows)
            frame, carried = pa.concat_tables([self._carry, frame]), self._carry.num_rows
        rows = aitune_rows(frame, intervals, self._start_ns, self._torch, self._edges, carried)
        if len(rows):
            self._chunks.append(rows)
        self._carry = frame.slice(frame.num_rows - 1)
        last = pc.max(frame.column("mono_ns")).as_py()
        self._edges[:] = [e for e in self._edges if e[0] > last]  # their rows are still due
        # Keep the readings still due and the latest before them (it holds for later rows).
        older = [r for r in self._torch if r[0] <= last]
        self._torch[:] = older[-1:] + [r for r in self._torch if r[0] > last]

    def _await_edges_locked(self) -> None:
        """Collect until every edge row asked for is in (a scope that closed just now has its
        row): the sampler takes one within microseconds, its next tick within an interval."""
        sampler = self._sampler

        def served() -> bool:
            self._collect_locked()
            return not self._edges or sampler is None or not sampler.running

        _await(served, INTERVAL_S + EDGE_WAIT_S)

    def _frame_locked(self) -> pandas.DataFrame:
        import pandas

        self._await_edges_locked()
        if not self._chunks:
            rows = empty_rows()
        else:
            if len(self._chunks) > 1:
                self._chunks[:] = [pandas.concat(self._chunks, ignore_index=True)]
            rows = self._chunks[0].copy()
        rows.attrs["rows_lost"] = self.rows_lost
        return rows

    def get_metrics(self) -> pandas.DataFrame | None:
        """The rows so far, or None when collection never started."""
        with self._lock:
            if self._sampler is None:
                return None
            return self._frame_locked()

    def snapshot(self, path: str | os.PathLike[str], reset_metrics: bool = True) -> None:
        check_bool("reset_metrics", reset_metrics)
        with self._lock:
            if self._sampler is None:
                logger.warning("Hardware metrics collection is not active; snapshot skipped.")
                return
            write_csv(self._frame_locked(), path)
            if reset_metrics:
                self._chunks.clear()
        logger.info("Hardware metrics snapshot written to %s", path)

    # -- enable, disable, exit -------------------------------------------------------------

    def enable(self) -> None:
        self._runtime_enabled = True

    def disable(self) -> None:
        """Stop collecting; an active session dumps its rows and ends (a later enable starts a
        fresh one)."""
        self._runtime_enabled = False
        self._end(dump=True)

    def _end(self, *, dump: bool) -> None:
        self._stop_collector()
        with self._lock:
            sampler = self._sampler
            if sampler is None:
                return
            self._await_edges_locked()  # (a stopped sampler takes no edge row)
            sampler.stop()
            rows = self._frame_locked()
            sampler.close()
            self._sampler = self._request = None
            self._chunks.clear()
            self._torch.clear()
            self._torch_due.clear()
            self._edges.clear()
            self._carry = None
            self._open = 0
            self._last_edge = None
            self.rows_lost = 0
        if dump:
            dump_metrics(rows)

    def _at_exit(self) -> None:
        if os.getpid() == self._pid:  # a forked child's exit does not dump its parent's rows
            self._end(dump=True)

    def _after_fork_in_child(self) -> None:
        # The sampler belongs to the parent; a child starts its own session on its first scope.
        self._lock = threading.Lock()
        self._sampler = self._request = None
        self._chunks = []
        self._torch = []
        self._torch_due = []
        self._edges = []
        self._carry = None
        self._open = 0
        self._collector = None  # (threads do not survive a fork)
        self._collector_stop = threading.Event()
        self.rows_lost = 0


_DEFAULT_SESSION = HardwareMetricsSession()


def default_session() -> HardwareMetricsSession:
    return _DEFAULT_SESSION


def enable_hardware_metrics() -> None:
    """Enable collection (overrides ``AITUNE_HARDWARE_METRICS``); it starts on the next scope."""
    _DEFAULT_SESSION.enable()


def disable_hardware_metrics() -> None:
    """Disable collection (overrides ``AITUNE_HARDWARE_METRICS``). An active session dumps its
    rows (:func:`dump_metrics`) and ends; a later :func:`enable_hardware_metrics` starts anew."""
    _DEFAULT_SESSION.disable()


def snapshot(path: str | os.PathLike[str], reset_metrics: bool = True) -> None:
    """Write the rows collected so far to the CSV file ``path``; with ``reset_metrics`` they are
    forgotten afterwards. Logs a warning and does nothing when collection is not active."""
    _DEFAULT_SESSION.snapshot(path, reset_metrics)


def get_hardware_metrics() -> pandas.DataFrame | None:
    """The rows collected so far as a pandas DataFrame, or None when collection never started."""
    return _DEFAULT_SESSION.get_metrics()
