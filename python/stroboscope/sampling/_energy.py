"""Energy windows on a running Sampler: GPU joules between two instants, from the energy counter
the ``gpu`` source samples anyway (no extra NVML call, no helper process).

A window notes ``time.monotonic_ns()`` at its begin and end (after ``sync()`` when one is given,
e.g. ``torch.cuda.synchronize``, so queued GPU work is inside it), the ring's row count at its
begin and the ring's latest rows copied just before it. Its end waits, for at most ``timeout``
seconds, until a GPU reading taken at or after the end has reached the ring (asking for an edge
row so it lands at once), then computes each GPU's energy with
:func:`stroboscope.analysis.energy.window_energy` over the rows since the last reading before
the begin (imported on first use, as :mod:`._scoped` does). A window that outlives the ring keeps
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

from stroboscope import _core
from stroboscope.analysis._series import int64_cells
from stroboscope.sampling._checks import describe
from stroboscope.sampling._frame import Frame

if TYPE_CHECKING:
    from stroboscope.analysis.energy import WindowEnergy
    from stroboscope.sampling._stats import SamplerStats

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

    ``waited_s`` is how long the end waited for a reading after it; ``reading_after_end`` says
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
    """The energy-window side of :class:`stroboscope.sampling.Sampler` (a mixin)."""

    _core: _core.Sampler
    _interval: float

    def stats(self) -> SamplerStats:
        raise NotImplementedError  # the Sampler's

    def _open_energy_windows(self) -> dict[str, _Open]:
        opened: dict[str, _Open] | None = self.__dict__.get("_energy_open")
        if opened is None:
            opened = self.__dict__["_energy_open"] = {}
        return opened

    def _gpu_every(self) -> int:
        """Ticks between the GPU source's readings (gpu, or amd_gpu; ValueError without one)."""
        every = [s.every for s in self.stats().sources if s.name in _SOURCES]
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

    def _row_of_last_reading(self, at_ns: int, written: int) -> int | None:
        """The ring row of the last GPU reading taken at or before ``at_ns`` among the ring's
        first ``written`` rows (searched in a growing tail); None when the ring kept none."""
        look = 64
        while True:
            first, table = self._rows(written - look)
            t = _read_times(table.slice(0, max(written - first, 0)))
            before = np.flatnonzero((t >= 0) & (t <= at_ns))
            if len(before):
                return first + int(before[-1])
            if look >= written or first > written - look:  # the whole ring was searched
                return None
            look *= 4

    def _capture_edges(self) -> None:
        """Keep the rows around each open window's begin (up to 16 readings after it, at least
        2), so a window outliving the ring keeps its begin (done at every begin and end)."""
        written = int(self._core.stats()["rows_written"])
        for w in list(self._open_energy_windows().values()):  # another thread may add one
            if w.edge_readings >= _EDGE_READINGS:
                continue
            row = self._row_of_last_reading(w.begin_ns, w.written)
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

    def begin_energy_window(
        self, key: str = "", *, sync: SyncFn | None = None, restart: bool = False
    ) -> int:
        """Open the energy window ``key``; returns its begin (``time.monotonic_ns()``).

        ``sync`` is called first (e.g. ``torch.cuda.synchronize``) so queued GPU work is not
        counted in; ``restart=True`` replaces an open window of that name instead of raising.
        """
        name, fn = _check_key(key), check_sync(sync)
        opened = self._open_energy_windows()
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

    def end_energy_window(
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
        after it; ``max_power_w`` is passed on to
        :func:`~stroboscope.analysis.energy.window_energy`.
        """
        name, fn = _check_key(key), check_sync(sync)
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0
        ):
            raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        opened = self._open_energy_windows()
        if name not in opened:
            raise ValueError(f"energy window {name!r} is not open (open: {sorted(opened)})")
        if fn is not None:
            fn()
        end = time.monotonic_ns()
        w = opened.pop(name)
        limit = 2 * self._gpu_every() * self._interval + 0.1 if timeout is None else float(timeout)
        came, waited = self._await_reading(end, w.written, limit)
        self._capture_edges()  # the other open windows' begins
        from stroboscope.analysis.energy import window_energy

        row = self._row_of_last_reading(w.begin_ns, w.written)
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

    def _await_reading(self, at_ns: int, first_row: int, limit_s: float) -> tuple[bool, float]:
        """Wait (at most ``limit_s``) for a GPU reading taken at or after ``at_ns`` to be in the
        ring; whether one came, and the seconds waited."""
        start = time.monotonic()
        row = first_row
        while True:
            first, table = self._rows(row)
            row = first + table.num_rows
            if int(_read_times(table).max(initial=-1)) >= at_ns:
                return True, time.monotonic() - start
            waited = time.monotonic() - start
            if waited >= limit_s or not self._core.running:
                return False, waited
            self._core.request_tick()  # the next poll's reading lands in a row at once
            time.sleep(_PAUSE_S)

    @contextmanager
    def energy_window(
        self,
        key: str = "",
        *,
        sync: SyncFn | None = None,
        timeout: float | None = None,
        max_power_w: float | None = None,
    ) -> Iterator[EnergyWindow]:
        """``with sampler.energy_window() as w: ...`` then ``w.joules`` ({gpu: J}),
        ``w.uncertainty_j`` and ``w.gpus`` (the details): begin and end around the block
        (see :meth:`begin_energy_window`, :meth:`end_energy_window`)."""
        window = EnergyWindow(_check_key(key), self.begin_energy_window(key, sync=sync))
        try:
            yield window
        except BaseException:
            self._open_energy_windows().pop(key, None)
            raise
        done = self.end_energy_window(key, sync=sync, timeout=timeout, max_power_w=max_power_w)
        window.end_ns, window.gpus = done.end_ns, done.gpus
        window.waited_s, window.reading_after_end = done.waited_s, done.reading_after_end
        window.note = done.note
