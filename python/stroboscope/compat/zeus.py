"""Zeus's ``ZeusMonitor`` (zeus.monitor.energy) served by a stroboscope Sampler.

``begin_window(key)`` / ``end_window(key)`` return a :class:`Measurement` with ``time`` (s) and
``gpu_energy`` ({index: J}) as Zeus's does, from the GPU energy counter a Sampler samples
continuously (:meth:`stroboscope.sampling.CoreSampler.end_energy_window`): no helper process, no
NVML call at the window's edges, interpolation between counter readings for windows shorter than
the counter's update period, and each figure's uncertainty and method beside it.

Differences from Zeus, on purpose:

- No synchronisation unless asked: Zeus calls ``torch.cuda.synchronize`` at both edges by
  default; here ``sync=`` (a callable) or ``sync_execution_with="torch"``/``"cupy"`` asks for it,
  and ``sync_execution=False`` on a call skips it.
- ``approx_instant_energy`` is accepted and has no effect: short windows are interpolated.
- CPU (RAPL) and SoC energy are not served: ``cpu_indices`` takes None or ``[]`` only and
  ``cpu_energy``/``dram_energy``/``soc_energy`` are None.
- ``time`` is measured on CLOCK_MONOTONIC (Zeus: ``time.time()``).
"""

from __future__ import annotations

import csv
import importlib
import io
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

from stroboscope._base.checks import (
    check_bool,
    check_int,
    check_path,
    check_text,
    check_timeout,
    describe,
)
from stroboscope.sampling import CoreSampler as Sampler
from stroboscope.sampling import EnergyWindow, SyncFn, check_capacity, check_interval, check_sync

if TYPE_CHECKING:
    from stroboscope.analysis.energy import WindowEnergy

_SYNC_WITH = ("torch", "cupy")


@dataclass
class Measurement:
    """One window's result, as Zeus's ``Measurement``: ``time`` (s) and ``gpu_energy``
    ({CUDA index: J}); ``cpu_energy``, ``dram_energy`` and ``soc_energy`` are None here.

    Added: ``gpu_energy_uncertainty`` ({index: ± J}), ``gpu_energy_method`` ({index:
    ``"counter"`` / ``"power integral"`` / ``"none"``}) and ``window`` (the Sampler's
    :class:`~stroboscope.sampling._energy.EnergyWindow`, None for a cancelled window).
    """

    time: float
    gpu_energy: dict[int, float]
    cpu_energy: dict[int, float] | None = None
    dram_energy: dict[int, float] | None = None
    soc_energy: Any = None
    gpu_energy_uncertainty: dict[int, float] = field(default_factory=dict)
    gpu_energy_method: dict[int, str] = field(default_factory=dict)
    window: EnergyWindow | None = None

    @property
    def total_energy(self) -> float:
        """Energy of all GPUs in the window (J)."""
        return float(sum(self.gpu_energy.values()))


def _check_sync_with(with_: object) -> None:
    if with_ is not None and with_ not in _SYNC_WITH:
        raise ValueError(
            f"sync_execution_with must be one of {_SYNC_WITH} or None, got {with_!r} "
            "(or pass sync= any callable)"
        )


def _sync_for(with_: object, indices: list[int]) -> SyncFn | None:
    """The synchronise callable Zeus's ``sync_execution_with`` names (imported lazily)."""
    if with_ is None:
        return None

    def sync() -> None:
        if with_ == "torch":
            import torch

            for i in indices:
                torch.cuda.synchronize(i)
        else:
            cupy = importlib.import_module("cupy")  # optional, untyped: not in mypy's list
            for i in indices:
                cupy.cuda.Device(i).synchronize()

    return sync


def _check_indices(name: str, value: object) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list of ints or None, got {describe(value)}")
    out: list[int] = []
    for i, v in enumerate(value):
        out.append(check_int(f"{name}[{i}]", v, 0, unit="a device index"))
    if len(set(out)) != len(out):
        raise ValueError(f"{name} names a device twice: {out}")
    return out


def _check_cuda_labels(sampler: Sampler, cuda: list[int]) -> None:
    """A caller's sampler must label its GPU columns by CUDA index (``gpus="cuda"``) where
    ``CUDA_VISIBLE_DEVICES`` makes CUDA's numbering differ from NVML's; ValueError otherwise."""
    from stroboscope.sampling import resolve_gpus

    devices, _ = resolve_gpus("cuda")  # NVML index of each CUDA ordinal ([]: the same numbering)
    labels = sampler.gpu_labels
    wrong = [c for c in cuda if c < len(devices) and labels.get(devices[c], devices[c]) != c]
    if wrong:
        raise ValueError(
            f"sampler: its GPU columns are labelled by NVML index, but gpu_indices {wrong} are "
            f"CUDA indices (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}): "
            f"build it with gpus='cuda', or let ZeusMonitor build its own"
        )


class ZeusMonitor:
    """Measure GPU time and energy of code blocks, as ``zeus.monitor.ZeusMonitor``.

    Parameters
    ----------
    gpu_indices : list of int, optional
        CUDA device indices (``CUDA_VISIBLE_DEVICES`` respected, as in Zeus); default every
        GPU the sampler sees (none when NVML sees none, as in Zeus).
    cpu_indices : None or []
        CPU energy is not served; anything else is a ValueError.
    approx_instant_energy : bool
        Accepted for compatibility; short windows are interpolated anyway.
    log_file : path, optional
        A CSV written as Zeus's: ``start_time,window_name,elapsed_time,gpu{i}_energy,...``.
    sync_execution_with : "torch", "cupy" or None
        Synchronise with that framework at the edges (default None: no synchronisation).
    sync : callable, optional
        Called at each edge instead (e.g. ``torch.cuda.synchronize``).
    sampler : Sampler, optional
        A running Sampler with the ``gpu`` source to serve the windows (not closed here);
        default a Sampler of the gpu source alone every ``interval`` seconds, owned by the
        monitor (:meth:`close`, or ``with ZeusMonitor() as m``).
    interval : float
        The owned sampler's interval and GPU poll interval in seconds (default 0.005).
    capacity : int
        The owned sampler's ring rows (default 16384: 82 s at 5 ms, about 190 kB per GPU; a
        window that outlives the ring keeps the rows from just before its begin, and its
        energy there is carried forward from the counter's last step).
    timeout : float, optional
        How long an end waits for a GPU reading after it (default: twice the poll plus 0.1 s).
    """

    def __init__(
        self,
        gpu_indices: list[int] | None = None,
        cpu_indices: list[int] | None = None,
        approx_instant_energy: bool = False,
        log_file: str | os.PathLike[str] | None = None,
        sync_execution_with: str | None = None,
        *,
        sync: SyncFn | None = None,
        sampler: Sampler | None = None,
        interval: float = 0.005,
        capacity: int = 1 << 14,
        timeout: float | None = None,
    ) -> None:
        wanted = _check_indices("gpu_indices", gpu_indices)
        if _check_indices("cpu_indices", cpu_indices):
            raise ValueError(
                "cpu_indices: CPU (RAPL) energy is not served by stroboscope's ZeusMonitor; "
                "pass None or []"
            )
        check_bool("approx_instant_energy", approx_instant_energy)
        if sampler is not None and not isinstance(sampler, Sampler):
            raise TypeError(f"sampler must be a stroboscope Sampler, got {describe(sampler)}")
        given = check_sync(sync)
        _check_sync_with(sync_execution_with)
        # Checked here, not by the Sampler they build: its refusal would read as "no GPU here"
        # (windows that measure time only), silently.
        interval = check_interval("interval", interval)
        check_capacity(capacity)
        self._timeout = check_timeout("timeout", timeout)
        self.approx_instant_energy = approx_instant_energy
        self._owned = sampler is None
        self._sampler: Sampler | None = sampler
        self._log: TextIO | None = None
        if log_file is not None:  # opened first: a bad path fails before a sampler starts
            from stroboscope._base.files import open_private

            # newline="": the csv module writes its own line ends, and quotes a field holding
            # one (or a comma), so a window's key can never forge a row of the log.
            self._log = io.TextIOWrapper(
                open_private(check_path("log_file", log_file)), encoding="utf-8", newline=""
            )
        try:
            if sampler is None and wanted != []:
                self._sampler = self._own_sampler(interval, capacity, wanted)
            seen = self._gpus_seen()
            if sampler is not None:
                _check_cuda_labels(sampler, seen if wanted is None else wanted)
            self.gpu_indices: list[int] = seen if wanted is None else wanted
            missing = [i for i in self.gpu_indices if i not in seen]
            if missing:
                raise ValueError(
                    f"gpu_indices {missing}: no such GPU; the sampler sees CUDA devices {seen} "
                    "(CUDA_VISIBLE_DEVICES respected; see stroboscope.gpu_status())"
                )
        except BaseException:
            self.close()
            raise
        self.cpu_indices: list[int] = []
        self._sync = (
            given if given is not None else _sync_for(sync_execution_with, self.gpu_indices)
        )
        self._begun: dict[str, tuple[float, int]] = {}  # key -> (time.time(), monotonic ns)
        if self._log is not None:
            cols = [f"gpu{i}_energy" for i in self.gpu_indices]
            self._log_row(["start_time", "window_name", "elapsed_time", *cols])

    def _own_sampler(
        self, interval: float, capacity: int, wanted: list[int] | None
    ) -> Sampler | None:
        try:
            sampler = Sampler(
                interval, sources={"gpu": None}, gpus="cuda", gpu_samples=False, capacity=capacity
            )
        except (RuntimeError, ValueError) as exc:  # no NVML or GPU; CUDA_VISIBLE_DEVICES hides all
            if wanted is None:
                return None  # no GPU here: windows measure time only, as Zeus's do
            raise ValueError(f"gpu_indices {wanted}: no GPU can be read here: {exc}") from None
        sampler.start()
        deadline = time.monotonic() + max(1.0, 20 * interval)
        while time.monotonic() < deadline:  # ready when the first reading is in the ring
            read = sampler.snapshot().to_arrow().column("gpu.read_mono_ns")
            if read.null_count < len(read):
                break
            time.sleep(interval / 4)
        return sampler

    def _gpus_seen(self) -> list[int]:
        if self._sampler is None:
            return []
        from stroboscope.analysis.energy import energy_gpus

        return energy_gpus(self._sampler.snapshot().to_arrow().slice(0, 0))

    @property
    def sampler(self) -> Sampler | None:
        """The Sampler serving the windows (None when no GPU is measured)."""
        return self._sampler

    def _edge_sync(self, wanted: bool) -> SyncFn | None:
        check_bool("sync_execution", wanted)
        return self._sync if wanted and self.gpu_indices else None

    def begin_window(self, key: str, sync_execution: bool = True, restart: bool = False) -> None:
        """Begin the window ``key`` (ValueError if it exists, unless ``restart=True``)."""
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, got {describe(key)}")
        check_text("key", key)  # a lone surrogate would fail the log's write at the end
        if check_bool("restart", restart) is False and key in self._begun:
            raise ValueError(f"Measurement window '{key}' already exists")
        sync = self._edge_sync(sync_execution)
        if self._sampler is not None and self.gpu_indices:
            begin = self._sampler.begin_energy_window(
                f"zeus:{id(self)}:{key}", sync=sync, restart=True
            )
        else:
            if sync is not None:
                sync()
            begin = time.monotonic_ns()
        self._begun[key] = (time.time(), begin)

    def end_window(
        self, key: str, sync_execution: bool = True, cancel: bool = False
    ) -> Measurement:
        """End the window ``key`` and return its :class:`Measurement` (ValueError if it was
        not begun); ``cancel=True`` discards it and returns zeros."""
        check_bool("cancel", cancel)
        try:
            started, begin = self._begun.pop(key)
        except KeyError:
            raise ValueError(f"Measurement window '{key}' does not exist") from None
        sync = self._edge_sync(sync_execution)
        if self._sampler is None or not self.gpu_indices:
            if sync is not None:
                sync()
            elapsed = 0.0 if cancel else (time.monotonic_ns() - begin) / 1e9
            return Measurement(elapsed, {i: 0.0 for i in self.gpu_indices})
        name = f"zeus:{id(self)}:{key}"
        if cancel:
            self._sampler.discard_energy_window(name)
            if sync is not None:
                sync()
            return Measurement(0.0, {i: 0.0 for i in self.gpu_indices})
        window = self._sampler.end_energy_window(name, sync=sync, timeout=self._timeout)
        per: dict[int, WindowEnergy] = {i: window.gpus[i] for i in self.gpu_indices}
        result = Measurement(
            time=window.time_s,
            gpu_energy={i: float(w.joules) for i, w in per.items()},
            gpu_energy_uncertainty={i: float(w.uncertainty_j) for i, w in per.items()},
            gpu_energy_method={i: w.method for i, w in per.items()},
            window=window,
        )
        if self._log is not None:
            energies = ["" if math.isnan(e) else repr(e) for e in result.gpu_energy.values()]
            self._log_row([repr(started), key, repr(result.time), *energies])
        return result

    def _log_row(self, fields: list[str]) -> None:
        """One row of the CSV log, each field quoted as needed (a key holding ``,``, a quote
        or a line end stays one field), with Zeus's ``\\n`` line ends."""
        assert self._log is not None
        csv.writer(self._log, lineterminator="\n").writerow(fields)
        self._log.flush()

    def reset_windows(self) -> None:
        """Forget every open window."""
        for key in list(self._begun):
            self.end_window(key, sync_execution=False, cancel=True)

    def close(self) -> None:
        """Stop the sampler this monitor made (a given one is left alone) and close the log."""
        if self._owned and self._sampler is not None:
            self._sampler.close()
        log, self._log = getattr(self, "_log", None), None
        if log is not None:
            log.close()

    def __enter__(self) -> ZeusMonitor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
