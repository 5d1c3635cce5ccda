"""Energy windows on a running Sampler: GPU joules between two instants, from the energy counter
the ``gpu`` source samples anyway (no extra NVML call, no helper process).

A window notes ``time.monotonic_ns()`` at its begin and end (after ``sync()`` when one is given,
e.g. ``torch.cuda.synchronize``, so queued GPU work is inside it), the ring's row count at its
begin and the ring's latest rows copied just before it. Its end waits, for at most ``timeout``
seconds, until a GPU reading taken at or after the end has reached the ring and every GPU's
energy counter has stepped after the end (asking for edge rows so readings land at once), then
computes each GPU's energy with :func:`stroboscope.analysis.energy.window_energy` over the rows
since the reading before the counter's last step before the begin (imported on first use, as
:mod:`._scope_log` does). So both edges lie between knots of the counter exactly as they will in
any later frame, and the window's figure is the one ``window_energy``, ``summary()`` and
``attribute_trace`` give for the same instants afterwards. A window that outlives the ring keeps
its begin: the rows around it, kept by any later window call while the ring still held them, or
else the rows copied before it (docs/energy.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np
import numpy.typing as npt
import pyarrow as pa

import stroboscope._core as _core
from stroboscope._base.checks import check_timeout, describe
from stroboscope.analysis import cells, int64_cells, read_times
from stroboscope.sampling._frame import Frame

if TYPE_CHECKING:
    from stroboscope.analysis.energy import WindowEnergy

SyncFn = Callable[[], object]
I64 = npt.NDArray[np.int64]
_SOURCES = ("gpu", "amd_gpu")  # the sources that write gpu.{i}.energy_mj
_READS = tuple(f"{name}.read_mono_ns" for name in _SOURCES)
_PAUSE_S = 0.001  # between looks at the ring while an end waits for its reading
_EDGE_READINGS = 16  # readings after a begin kept with it (slow counters step every few)
_TAIL_ROWS = 64  # rows kept from just before a begin (at least 4 GPU readings' worth)


@dataclass
class EnergyWindow:
    """One energy window: its edges (CLOCK_MONOTONIC ns) and, once ended, per GPU label the
    :class:`~stroboscope.analysis.energy.WindowEnergy` (estimate, bounds, method, reason).

    ``waited_s`` is how long the end waited for a reading and a counter step after it;
    ``reading_after_end`` says
    whether one came (False: the latest readings were used and the bounds widen accordingly);
    ``note`` says when the ring had overwritten rows of the window before its end.
    """

    key: str
    begin_ns: int
    end_ns: int | None = None
    gpus: dict[int, WindowEnergy] = field(default_factory=dict)
    waited_s: float = 0.0
    reading_after_end: bool = False
    note: str | None = None

    @property
    def time_s(self) -> float:
        """The window's length in seconds (NaN while open)."""
        return math.nan if self.end_ns is None else (self.end_ns - self.begin_ns) / 1e9

    @property
    def joules(self) -> dict[int, float]:
        """Energy estimate per GPU label (J)."""
        return {g: w.joules for g, w in self.gpus.items()}

    @property
    def uncertainty_j(self) -> dict[int, float]:
        """The ``±`` of each estimate (J): the larger distance to a bound."""
        return {g: w.uncertainty_j for g, w in self.gpus.items()}


@dataclass
class _Open:
    """An open window: its begin, the ring's row count then and its latest rows before, and
    once kept, the rows around its begin (``edge``) and the ring row that follows them."""

    begin_ns: int
    written: int
    tail: pa.Table  # the ring's latest rows just before the begin
    edge: pa.Table | None = None
    edge_next_row: int = 0
    edge_readings: int = 0  # readings after the begin in ``edge``


def _read_times(table: pa.Table) -> I64:
    """Per row, the latest GPU reading's time (``gpu.read_mono_ns`` or
    ``amd_gpu.read_mono_ns``; -1 where the row has none)."""
    t = np.full(table.num_rows, -1, dtype=np.int64)
    for name in _READS:
        if name in table.column_names:
            t = np.maximum(t, int64_cells(table.column(name), -1))
    return t


def _counter(table: pa.Table, column: str) -> tuple[I64, npt.NDArray[np.float64]]:
    """The valid readings of an energy counter column: read times (as the analysis times
    them, :func:`~stroboscope.analysis._series.read_times`) and values."""
    mono = int64_cells(table.column("mono_ns"), -1)
    t = read_times(table, column, mono)
    v = cells(table.column(column), np.float64, math.nan)
    ok = ~np.isnan(v)
    return np.asarray(t[ok], dtype=np.int64), np.asarray(v[ok], dtype=np.float64)


def _counters(table: pa.Table) -> list[str]:
    return [c for c in table.column_names if c.startswith("gpu.") and c.endswith(".energy_mj")]


def _follow_counters(
    table: pa.Table, at_ns: int, held: dict[str, float], stepped: set[str]
) -> None:
    """Fold the next rows of the ring into ``held`` (per energy counter: its latest value
    read at or before ``at_ns``) and ``stepped`` (the counters that show another value in a
    reading after ``at_ns``: a knot after it, as a recorded frame will place it).

    A reading taken at or before ``at_ns`` can reach the ring after the end looked at it (the
    tick that copies it comes later), so the value held is updated from every batch; the
    readings of one GPU reach the ring in the order they were taken, so once one after
    ``at_ns`` is there, the value held before it is final."""
    for column in _counters(table):
        t, v = _counter(table, column)
        before = np.flatnonzero(t <= at_ns)
        if len(before):
            held[column] = float(v[before[-1]])
        if column in held and bool(((t > at_ns) & (v != held[column])).any()):
            stepped.add(column)


def _knot_row(table: pa.Table, at_ns: int) -> tuple[int | None, bool]:
    """The row of the reading before the knot of each counter's value at ``at_ns`` (the
    earliest over counters), and whether every counter's knot was found in ``table``; without
    one, the row of its first reading. (None, False) when no GPU reading precedes ``at_ns``."""
    t = _read_times(table)
    before = np.flatnonzero((t >= 0) & (t <= at_ns))
    if len(before) == 0:
        return None, False
    best, complete = int(before[-1]), True
    for column in _counters(table):
        rows = np.flatnonzero(table.column(column).is_valid().to_numpy(zero_copy_only=False))
        times, values = _counter(table, column)
        seen = np.flatnonzero(times <= at_ns)
        if len(seen) == 0:
            continue
        other = np.flatnonzero(values[: seen[-1]] != values[seen[-1]])
        if len(other):
            best = min(best, int(rows[other[-1]]))
        else:
            best, complete = min(best, int(rows[0])), False
    return best, complete


def _check_key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"key must be a str naming the window, got {describe(key)}")
    return key


def check_sync(sync: object) -> SyncFn | None:
    """``sync`` as a callable or None (TypeError otherwise)."""
    if sync is not None and not callable(sync):
        raise TypeError(
            f"sync must be a callable such as torch.cuda.synchronize, or None, got {describe(sync)}"
        )
    return sync


class EnergyWindows:
    """The energy windows of one sampler, a part of :class:`stroboscope.sampling.CoreSampler`:
    the windows open now and how each is ended.

    Parameters
    ----------
    core : _core.Sampler
        The sampler's ring and thread (rows are copied from it; edge rows asked of it).
    interval : float
        The sampler's base interval (s).
    """

    def __init__(self, core: _core.Sampler, interval: float) -> None:
        self._core = core
        self._interval = interval
        self.opened: dict[str, _Open] = {}
        """The open windows by key (another thread may add one while a window ends)."""

    def _gpu_every(self) -> int:
        """Ticks between the GPU source's readings (gpu, or amd_gpu; ValueError without one)."""
        every = [int(s["every"]) for s in self._core.stats()["sources"] if s["name"] in _SOURCES]
        if not every:
            raise ValueError(
                "this Sampler has no 'gpu' (or 'amd_gpu') source: energy windows read its "
                "gpu.{i}.energy_mj counter (add it to sources; see stroboscope.gpu_status())"
            )
        return max(min(every), 1)

    def _rows(self, first_row: int) -> tuple[int, pa.Table]:
        """The ring's rows from ``first_row`` on (or its oldest kept), and the first's index."""
        rows = self._core.copy_since(max(first_row, 0))
        return int(rows.first_row), Frame(rows).to_arrow()

    def _row_of_begin(self, at_ns: int, written: int) -> int | None:
        """The ring row from which the counter's value at ``at_ns`` is timed as a recorded frame
        times it: the reading before the first reading of that value (its knot), for every
        GPU, among the ring's first ``written`` rows (searched in a growing tail); else the
        oldest reading kept before ``at_ns``; None when the ring kept no reading before it."""
        look = 64
        while True:
            first, table = self._rows(written - look)
            found, complete = _knot_row(table.slice(0, max(written - first, 0)), at_ns)
            whole = look >= written or first > written - look
            if found is not None and (complete or whole):
                return first + found
            if whole:
                return None
            look *= 4

    def _capture_edges(self) -> None:
        """Keep the rows around each open window's begin (up to 16 readings after it, at least
        2), so a window outliving the ring keeps its begin (done at every begin and end)."""
        written = int(self._core.stats()["rows_written"])
        for w in list(self.opened.values()):  # another thread may add one
            if w.edge_readings >= _EDGE_READINGS:
                continue
            row = self._row_of_begin(w.begin_ns, w.written)
            if row is None:
                continue
            first, table = self._rows(row)
            t = _read_times(table.slice(0, max(written - first, 0)))
            after = np.flatnonzero(t > w.begin_ns)
            if first == row and len(after) > w.edge_readings and len(after) >= 2:
                n = min(len(after), _EDGE_READINGS)
                last = int(after[n - 1])
                w.edge, w.edge_next_row = table.slice(0, last + 1), first + last + 1
                w.edge_readings = n

    def begin(self, key: str = "", *, sync: SyncFn | None = None, restart: bool = False) -> int:
        """Open the energy window ``key``; returns its begin (``time.monotonic_ns()``).

        ``sync`` is called first (e.g. ``torch.cuda.synchronize``) so queued GPU work is not
        counted in; ``restart=True`` replaces an open window of that name instead of raising.
        """
        name, fn = _check_key(key), check_sync(sync)
        opened = self.opened
        if name in opened and not restart:
            raise ValueError(f"energy window {name!r} is already open (restart=True replaces it)")
        if not self._core.running:
            raise RuntimeError("energy windows need a running Sampler: start() it first")
        self._gpu_every()  # no gpu source: ValueError now, not at the end
        self._capture_edges()
        if fn is not None:
            fn()
        # The latest rows, copied just before the begin (outside the window), in case the ring
        # overwrites them before the window ends; only the row count is taken after it.
        written = int(self._core.stats()["rows_written"])
        tail = self._rows(written - max(_TAIL_ROWS, 4 * self._gpu_every()))[1]
        tail = tail.select([c for c in tail.column_names if c.startswith("gpu.") or c == "mono_ns"])
        begin = time.monotonic_ns()
        opened[name] = _Open(begin, int(self._core.stats()["rows_written"]), tail)
        return begin

    def end(
        self,
        key: str = "",
        *,
        sync: SyncFn | None = None,
        timeout: float | None = None,
        max_power_w: float | None = None,
    ) -> EnergyWindow:
        """Close the energy window ``key`` and return its energy per GPU.

        ``sync`` is called before the end is taken. The end waits at most ``timeout`` seconds
        (default twice the gpu source's poll interval plus 0.1 s) for a GPU reading taken at or
        after it and a step of every GPU's energy counter after it (without that step the end
        is extrapolated, ``WindowEnergy.extrapolated``); ``max_power_w`` is passed on to
        :func:`~stroboscope.analysis.energy.window_energy`.
        """
        name, fn = _check_key(key), check_sync(sync)
        timeout = check_timeout("timeout", timeout)
        opened = self.opened
        if name not in opened:
            raise ValueError(f"energy window {name!r} is not open (open: {sorted(opened)})")
        if fn is not None:
            fn()
        end = time.monotonic_ns()
        w = opened.pop(name)
        limit = 2 * self._gpu_every() * self._interval + 0.1 if timeout is None else float(timeout)
        row = self._row_of_begin(w.begin_ns, w.written)
        came, waited = self._await_step(end, w.written if row is None else row, limit)
        self._capture_edges()  # the other open windows' begins
        from stroboscope.analysis.energy import window_energy

        row = self._row_of_begin(w.begin_ns, w.written)
        note, before = None, None
        if row is not None:
            table = self._rows(row)[1]  # the ring still holds the begin: every row since
        elif w.edge is not None:
            first, rest = self._rows(w.edge_next_row)
            table = pa.concat_tables([w.edge, rest])
            if first > w.edge_next_row:
                note = f"the ring overwrote {first - w.edge_next_row} rows inside the window"
        else:
            first, table = self._rows(w.written)
            before = w.tail
            note = (
                f"the ring overwrote the window's first {first - w.written} rows: the energy at "
                "its begin is carried forward from the counter's last step before it"
            )
        gpus = window_energy(table, w.begin_ns, end, max_power_w=max_power_w, before=before)
        return EnergyWindow(name, w.begin_ns, end, gpus, waited, came, note)

    def _await_step(self, at_ns: int, first_row: int, limit_s: float) -> tuple[bool, float]:
        """Wait (at most ``limit_s``) until a GPU reading taken at or after ``at_ns`` is in the
        ring and every GPU's energy counter has stepped after ``at_ns`` (so the end lies
        between two knots, as it will in any later frame); whether a reading came, and the
        seconds waited."""
        start = time.monotonic()
        row, came = first_row, False
        held: dict[str, float] = {}  # per counter: its value at at_ns (see _follow_counters)
        stepped: set[str] = set()
        while True:
            first, table = self._rows(row)
            row = first + table.num_rows
            came = came or int(_read_times(table).max(initial=-1)) >= at_ns
            _follow_counters(table, at_ns, held, stepped)
            waited = time.monotonic() - start
            if came and stepped >= held.keys():
                return True, waited
            if waited >= limit_s or not self._core.running:
                return came, waited
            self._core.request_tick()  # the next poll's reading lands in a row at once
            time.sleep(_PAUSE_S)

    def discard(self, key: str = "") -> None:
        """Forget the open window ``key`` without ending it (nothing when it is not open)."""
        self.opened.pop(key, None)

    @contextmanager
    def window(
        self,
        key: str = "",
        *,
        sync: SyncFn | None = None,
        timeout: float | None = None,
        max_power_w: float | None = None,
    ) -> Iterator[EnergyWindow]:
        """``with windows.window() as w: ...`` then ``w.joules`` ({gpu: J}),
        ``w.uncertainty_j`` and ``w.gpus`` (the details): begin and end around the block
        (see :meth:`begin`, :meth:`end`)."""
        window = EnergyWindow(_check_key(key), self.begin(key, sync=sync))
        try:
            yield window
        except BaseException:
            self.discard(key)
            raise
        done = self.end(key, sync=sync, timeout=timeout, max_power_w=max_power_w)
        window.end_ns, window.gpus = done.end_ns, done.gpus
        window.waited_s, window.reading_after_end = done.waited_s, done.reading_after_end
        window.note = done.note
