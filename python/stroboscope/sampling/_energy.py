"""Energy windows on a running Sampler: GPU joules between two instants, from the energy counter
the ``gpu`` source samples anyway (no extra NVML call, no helper process).

A window notes ``time.monotonic_ns()`` at its begin and end (after ``sync()`` when one is given,
e.g. ``torch.cuda.synchronize``, so queued GPU work is inside it) and the ring row of the last
GPU reading before its begin. Its end waits, for at most ``timeout`` seconds, until a GPU reading
taken at or after the end has reached the ring (asking for an edge row so it lands at once),
then computes each GPU's energy with :func:`stroboscope.analysis.energy.window_energy` over the
rows since that first reading (imported on first use, as :mod:`._scoped` does).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np
import pyarrow as pa

from stroboscope import _core
from stroboscope.sampling._checks import describe
from stroboscope.sampling._frame import Frame

if TYPE_CHECKING:
    from stroboscope.analysis.energy import WindowEnergy
    from stroboscope.sampling._stats import SamplerStats

SyncFn = Callable[[], object]
_READ = "gpu.read_mono_ns"
_PAUSE_S = 0.001  # between looks at the ring while an end waits for its reading


@dataclass
class EnergyWindow:
    """One energy window: its edges (CLOCK_MONOTONIC ns) and, once ended, per GPU label the
    :class:`~stroboscope.analysis.energy.WindowEnergy` (estimate, bounds, method, reason).

    ``waited_s`` is how long the end waited for a reading after it; ``reading_after_end`` says
    whether one came (False: the latest readings were used and the bounds widen accordingly).
    """

    key: str
    begin_ns: int
    end_ns: int | None = None
    gpus: dict[int, WindowEnergy] = field(default_factory=dict)
    waited_s: float = 0.0
    reading_after_end: bool = False

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

    def _open_energy_windows(self) -> dict[str, tuple[int, int]]:
        opened: dict[str, tuple[int, int]] | None = self.__dict__.get("_energy_open")
        if opened is None:
            opened = self.__dict__["_energy_open"] = {}
        return opened

    def _gpu_poll_s(self) -> float:
        gpu = next((s for s in self.stats().sources if s.name == "gpu"), None)
        if gpu is None:
            raise ValueError(
                "this Sampler has no 'gpu' source: energy windows read its gpu.{i}.energy_mj "
                "counter (add 'gpu' to sources; see stroboscope.gpu_status())"
            )
        return max(gpu.every, 1) * self._interval

    def _rows(self, first_row: int) -> tuple[int, pa.Table]:
        """The ring's rows from ``first_row`` on (or its oldest kept), and the first's index."""
        rows = self._core.copy_since(max(first_row, 0))
        return int(rows.first_row), Frame(rows).to_arrow()

    def _row_of_last_reading(self, at_ns: int, written: int) -> int:
        """The ring row of the last GPU reading taken at or before ``at_ns`` (else the oldest
        row kept), looked for in a growing tail of the ring's first ``written`` rows."""
        look = 64
        while True:
            first, table = self._rows(written - look)
            table = table.slice(0, max(written - first, 0))
            if _READ in table.column_names and table.num_rows:
                read = table.column(_READ)
                t = np.asarray(read.cast(pa.int64()).fill_null(np.iinfo(np.int64).max))
                before = np.flatnonzero(t <= at_ns)
                if len(before):
                    return first + int(before[-1])
            if look >= written or first > written - look:  # the whole ring was searched
                return first
            look *= 4

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
        self._gpu_poll_s()  # no gpu source: ValueError now, not at the end
        if fn is not None:
            fn()
        begin = time.monotonic_ns()
        # Only the ring's row count is taken inside the window; its rows are read at the end.
        opened[name] = (begin, int(self._core.stats()["rows_written"]))
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
        begin, written = opened.pop(name)
        first_row = self._row_of_last_reading(begin, written)
        poll = self._gpu_poll_s()
        limit = 2 * poll + 0.1 if timeout is None else float(timeout)
        came, waited = self._await_reading(end, first_row, limit)
        from stroboscope.analysis.energy import window_energy

        _, table = self._rows(first_row)
        gpus = window_energy(table, begin, end, max_power_w=max_power_w)
        return EnergyWindow(name, begin, end, gpus, waited, came)

    def _await_reading(self, at_ns: int, first_row: int, limit_s: float) -> tuple[bool, float]:
        """Wait (at most ``limit_s``) for a GPU reading taken at or after ``at_ns`` to be in the
        ring; whether one came, and the seconds waited."""
        start = time.monotonic()
        row = first_row
        while True:
            first, table = self._rows(row)
            row = first + table.num_rows
            if _READ in table.column_names and table.num_rows:
                read = table.column(_READ).cast(pa.int64()).fill_null(-1)
                if int(np.asarray(read).max()) >= at_ns:
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
