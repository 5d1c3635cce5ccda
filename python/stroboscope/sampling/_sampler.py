"""The core sampler: argument checks and lifecycle around the C++ sampler thread.

This is the facade over ``_core``: it validates, builds the sources, starts and stops the thread
and copies rows out (that side, a mixin, in :mod:`stroboscope.sampling._sampler_rows`). Crash
safety (segments beside a spool, a watchdog) is composed on top of it in
:mod:`stroboscope.recording`.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from types import MappingProxyType, TracebackType
from typing import TypedDict

import pyarrow as pa

import stroboscope._core as _core
from stroboscope._base import lifecycle as _lifecycle
from stroboscope._base.checks import PathsArg, check_bool, check_new_file
from stroboscope.sampling._checks import (
    DEFAULT_MAX_OVERHEAD,
    SourcesArg,
    check_capacity,
    check_interval,
    check_max_overhead,
    check_ring_bytes,
    check_sources,
    check_window,
)
from stroboscope.sampling._energy import EnergyWindows
from stroboscope.sampling._frame import Frame
from stroboscope.sampling._gpu import GpusArg, resolve_gpus
from stroboscope.sampling._gpu_samples import GpuSamples
from stroboscope.sampling._plan import (
    plan_sources,
    refuse_gpus_without_gpu_source,
    source_options,
)
from stroboscope.sampling._provenance import RunFacts
from stroboscope.sampling._run import RunRecord
from stroboscope.sampling._sampler_rows import SamplerRows
from stroboscope.sampling._schema import TIME_COLUMN, Column
from stroboscope.sampling._scope_log import ScopeRecording, check_edge_counters
from stroboscope.sampling._stacks import StackRecorder, check_stacks
from stroboscope.sampling._stats import SamplerStats


class SamplerOptions(TypedDict, total=False):
    """The keyword arguments of :class:`CoreSampler` after ``interval`` and ``capacity`` (for code
    that passes them on, such as :class:`stroboscope.recording.sampler.Sampler`)."""

    pid: int | None
    sources: SourcesArg
    disk_paths: PathsArg
    gpus: GpusArg
    cpu_window: float
    rate_window: float
    net_include_loopback: bool
    include_own_threads: bool
    gpu_samples: bool
    gpu_sample_interval: float
    precise: bool
    max_overhead: float | None
    proc_root: str | os.PathLike[str]
    sys_root: str | os.PathLike[str]
    cgroup_root: str | os.PathLike[str]
    edge_rows: bool
    edge_counters: bool | str
    stacks: bool | float | None


class CoreSampler(SamplerRows, ScopeRecording, EnergyWindows, RunRecord, GpuSamples):
    """Samples system, process and GPU metrics on a C++ thread into a ring buffer.

    The sampling room's sampler, without crash safety: a user makes :class:`stroboscope.Sampler`,
    which is this class plus a spool, dataset parts and a watchdog.

    Parameters
    ----------
    interval : float
        Base sampling interval in seconds, from 0.0001 (100 µs, 10 kHz) to 3600 (1 h).
    pid : int, optional
        Process whose ``proc.*`` columns are recorded; default the calling process.
    sources : list of str or dict of str to float, optional
        Source names (see :func:`available_sources`), or ``{name: interval_s}`` where each
        interval is a whole multiple of ``interval`` (``None`` = every tick); others are read
        every ``ceil(resolution_ns / interval)`` ticks, no faster than the kernel updates them
        (memory 1 s, cpu 10 ms, disk 1 s; see ``available_sources()``). Default: the seed set
        (cpu, memory, network, disk, diskio, process, and cgroup where limits exist).
    capacity : int
        Rows the ring holds (rounded up to a power of two). When full, the oldest rows are
        overwritten and counted in :meth:`stats`. Memory: rows * (columns + 1) * 8 bytes plus one
        validity bit per cell; see ``stats().ring_bytes``. A ring over 1 GiB
        (``stroboscope.sampling._checks.MAX_RING_BYTES``) is refused before it is allocated,
        naming the columns of each source (thousands of cores: thousands of ``cpu_cores``
        columns).
    disk_paths : path or sequence of paths (str or os.PathLike)
        Mount points whose usage the ``disk`` source reports (default ``("/",)``).
    gpus : None, "cuda", or sequence of int or str
        Devices of the ``gpu`` source: ``None`` = every GPU NVML sees (columns ``gpu.{nvml
        index}.*``); a list of NVML indices and/or UUIDs; or ``"cuda"`` = the devices in
        ``CUDA_VISIBLE_DEVICES``, matched by UUID where given and labelled by CUDA ordinal
        (``gpu.0.*`` is ``cuda:0``).
    cpu_window : float
        CPU % from /proc tick counters (10 ms resolution) is computed over windows of at least
        this many seconds (default 0.1); rows in between carry null for those columns rather than
        a quantised 0 % or 500 %. 0 computes it on every read.
    rate_window : float
        The same for the byte rates (``net.*_bytes_per_s``, ``disk.*_bytes_per_s``): kernel byte
        counters advance in bursts, so a rate over one 1 ms tick is noise (default 0.1 s).
    net_include_loopback : bool
        Count the loopback interface in ``net.*`` too (psutil's totals do; default False).
    include_own_threads : bool
        Count stroboscope's own threads in ``proc.cpu_pct`` of this process (default False:
        they are left out, and their CPU is the ``proc.self_cpu_pct`` column, the monitor's cost
        beside the workload's). Own means the core's threads: the sampler thread while it runs
        and the poll threads of slow sources (``gpu``). Python threads stroboscope starts
        (exporters, the dataset writer, the scope collector) run under the user's interpreter
        and GIL, and stay in ``proc.cpu_pct``; ticks taken with ``tick_now`` run on the
        caller's thread, the user's. Another process (``pid=``) has none of them.
        With ``stacks``, the package's own Python threads in this process (the stacks drain
        thread, the publisher, the writers: any thread whose first function is the package's)
        are likewise left out of the stack samples unless this is True.
    gpu_samples : bool
        With the ``gpu`` source, also collect every sample the driver buffered (power, GPU and
        memory utilisation, SM and memory clocks) at the driver's own resolution; see
        :meth:`gpu_samples`.
    gpu_sample_interval : float
        How often (seconds) the driver's sample buffers are read (default 0.25).
    precise : bool
        Sleep to just before each deadline, then spin (default False: sleep all the way). For
        short profiling runs on a machine with a core to spare: lateness drops to about a µs
        at the price of up to half a core's CPU time (the window is learned from its own
        wake-ups, at most half the interval: ``stats().spin_window_ns``; ``thread_cpu_ns``).
    max_overhead : float or None
        The sampler's CPU budget, a share of one core (default 0.05: 5 %, for a sampler left on;
        None or 0: no budget). Its threads' CPU (the sampler's and the GPU poll thread's) is
        measured 4 times a second; when it exceeds the budget over a second or two, the
        costliest sources are read less often (their interval doubled, step by step, up to 1 s
        or their resolution, past their declared resolution only when nothing else is left,
        and then said so), and read faster again when there is room for 5 s. Every change is in
        ``stats().rate_changes``, in the provenance (``budget``) and in the log.
    ring_file : path, optional
        Keep the ring in this new file (created 0600 in a directory you own), mapped
        ``MAP_SHARED``, so every row survives any death of the process. The crash-safe recording
        built on it (segments, recovery, a watchdog) is :class:`stroboscope.Sampler`'s ``spool``.
    proc_root, sys_root, cgroup_root : str or os.PathLike
        Where procfs, sysfs and the cgroup hierarchy are read from (tests replay recorded trees).
    edge_rows : bool
        Take an extra row at once whenever a scope opens (:func:`stroboscope.annotate`), so a
        region shorter than ``interval`` still has a row at its edge (default False).
    edge_counters : bool or str
        While this sampler runs, each scope edge also carries the opening thread's own counters,
        read by that thread at the edge: ``"cpu"`` (or True) its CPU clock, so every call's CPU
        time is exact whatever its length (``cpu_ms_edges`` in :meth:`summary`); ``"rusage"``
        also its ``getrusage(RUSAGE_THREAD)`` faults and context switches. ``"off"`` (or False,
        the default) adds nothing to a scope's cost. The setting is the process's events log's:
        the strongest asked by the samplers running at once.
    stacks : bool or float
        Also read every Python thread's stack of the sampled process and of its descendants
        (forked workers, launched ranks) on CLOCK_MONOTONIC, the clock of ``mono_ns``, from a
        C++ thread of its own that never pauses them: ``True`` = every ``interval`` but no
        faster than 1 ms; a number = that many seconds, a whole multiple of ``interval``;
        ``False`` (default) = off, at no cost. Read with :meth:`stacks`; the reader's own
        counts are ``stats().stacks``. CPython 3.11/3.12 on Linux (docs/stacks.md).
    """

    def __init__(
        self,
        interval: float = 0.001,
        *,
        pid: int | None = None,
        sources: SourcesArg = None,
        capacity: int = 65536,
        disk_paths: PathsArg = ("/",),
        gpus: GpusArg = None,
        cpu_window: float = 0.1,
        rate_window: float = 0.1,
        net_include_loopback: bool = False,
        include_own_threads: bool = False,
        gpu_samples: bool = True,
        gpu_sample_interval: float = 0.25,
        precise: bool = False,
        max_overhead: float | None = DEFAULT_MAX_OVERHEAD,
        ring_file: str | os.PathLike[str] | None = None,
        proc_root: str | os.PathLike[str] = "/proc",
        sys_root: str | os.PathLike[str] = "/sys",
        cgroup_root: str | os.PathLike[str] = "/sys/fs/cgroup",
        edge_rows: bool = False,
        edge_counters: bool | str = False,
        stacks: bool | float | None = False,
    ) -> None:
        # Every argument is checked here, before anything is allocated or created.
        self._interval = check_interval("interval", interval)
        cap = check_capacity(capacity)
        options = source_options(pid, proc_root, sys_root, cgroup_root, disk_paths)
        self._pid = options.pid
        devices, labels = resolve_gpus(gpus)
        options.gpu_devices = devices
        options.gpu_labels = labels
        options.cpu_window_ns = check_window("cpu_window", cpu_window)
        options.rate_window_ns = check_window("rate_window", rate_window)
        options.net_include_loopback = check_bool("net_include_loopback", net_include_loopback)
        options.include_own_threads = check_bool("include_own_threads", include_own_threads)
        want_gpu_samples = check_bool("gpu_samples", gpu_samples)
        self._edge_rows = check_bool("edge_rows", edge_rows)
        self._edge_counters = check_edge_counters(edge_counters)
        self._event_windows = []
        gpu_every_s = check_interval("gpu_sample_interval", gpu_sample_interval)
        want_precise = check_bool("precise", precise)
        stacks_every = check_stacks(stacks, self._interval)
        self._max_overhead = check_max_overhead(max_overhead)
        defaults = list(_core.default_source_names(options))
        asked = check_sources(sources, self._interval, defaults)
        if gpus is not None and "gpu" not in {name for name, _ in asked}:
            refuse_gpus_without_gpu_source(gpus, sources, options)
        ring_path = "" if ring_file is None else check_new_file("ring_file", ring_file)
        try:
            # Each source built once here: its columns, interface and natural resolution.
            plan = plan_sources(asked, options, round(self._interval * 1e9))
            self._details = plan.details
            self._fill_within = MappingProxyType(plan.fill_within_ns)  # shared by its frames
            specs = plan.specs
            columns = [(name, len(plan.details[name]["columns"])) for name, _ in specs]
            check_ring_bytes(cap, columns)
            self._core = _core.Sampler(
                plan.built,  # taken: the sources built for the plan are the ones read
                round(self._interval * 1e9),
                cap,
                os.fsencode(ring_path),
                want_precise,
                self._max_overhead,
            )
        except OSError:
            raise  # the ring file could not be made: the type (FileExistsError, ...) and path stay
        except RuntimeError as exc:
            raise RuntimeError(f"cannot build sampler: {exc}") from None
        self._ring_file = ring_path or None
        self._run: RunFacts | None = None  # the provenance, gathered once (_run_facts)
        wanted = want_gpu_samples and any(name == "gpu" for name, _ in specs)
        self._open_gpu_samples(devices, labels, gpu_every_s if wanted else None)
        self._owner_pid = os.getpid()
        self._stacks = (
            None
            if stacks_every is None
            else StackRecorder(stacks_every, self._pid, options.include_own_threads)
        )
        self._lock = threading.Lock()
        self._closed = False
        self._columns = [TIME_COLUMN] + [Column(**c) for c in self._core.columns()]
        self._schema = pa.schema(Frame(self._core.snapshot()))  # exactly what frames carry
        _lifecycle.register(self)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> CoreSampler:
        """Start sampling (a no-op when already running). Returns ``self``."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this Sampler is closed; create a new one to sample again")
            if self._ring_file is not None and os.getpid() != self._owner_pid:
                raise RuntimeError(
                    "this Sampler's ring lives in the file of the process that made it; "
                    "a forked child must create its own Sampler"
                )
            self._run_facts()  # the provenance is gathered before the first row, not per frame
            self._start_locked()
        return self

    def stop(self) -> None:
        """Stop sampling and join the thread (harmless when not running). Rows are kept."""
        with self._lock:
            self._stop_locked()

    def close(self) -> None:
        """Stop for good. Rows recorded so far stay readable with snapshot()/drain()."""
        with self._lock:
            try:
                self._stop_locked()
            finally:
                self._closed = True
                self._close_locked()

    # Hooks for what is composed on a sampler (stroboscope.recording): called with the lock held.
    def _start_locked(self) -> None:
        # Scopes are attached before the thread takes its first row: whoever waits for that
        # row (the aitune session, from another thread) finds every scope opened after it
        # recorded as this run's.
        self._attach_scopes()
        try:
            self._core.start()
        except BaseException:
            self._detach_scopes()
            raise
        if self._gpu_recorder is not None:
            self._gpu_recorder.start()
        if self._stacks is not None:
            self._stacks.start()

    def _stop_locked(self) -> None:
        self._detach_scopes()
        self._core.stop()
        if self._gpu_recorder is not None:
            self._gpu_recorder.stop()
        if self._stacks is not None:
            self._stacks.stop()
        if self._core.rate_changes_total != self.__dict__.get("_rates_seen", 0):
            self._follow_budget()  # the budget's latest changes: to the provenance and the log

    def _close_locked(self) -> None:
        pass

    def stacks(self) -> tuple[pa.Table, pa.Table]:
        """Every Python thread's stacks read so far: ``(samples, frames)`` tables in the
        schemas of :mod:`stroboscope.formats.stacks` (``SAMPLES_SCHEMA``, ``FRAMES_SCHEMA``).

        A frame names a function (``function`` its qualified name, ``file``, ``line`` its
        first line), not the line running in it. Samples are kept in memory up to
        ``stroboscope.sampling._stacks.MAX_KEPT_SAMPLES`` (the oldest dropped past it, counted
        in ``stats().stacks.samples_discarded``).

        Raises
        ------
        ValueError
            The sampler was made without ``stacks=``.
        """
        if self._stacks is None:
            raise ValueError(
                "this Sampler reads no stacks: make it with stacks=True (or stacks=SECONDS)"
            )
        return self._stacks.tables()

    def stats(self) -> SamplerStats:
        """The sampler's measurement of itself (see :class:`SamplerStats`); ``stacks`` holds
        the stack reader's (None without ``stacks=``)."""
        stats = super().stats()
        if self._stacks is None:
            return stats
        return dataclasses.replace(stats, stacks=self._stacks.stats())

    @property
    def running(self) -> bool:
        """Whether the sampler thread is running."""
        return bool(self._core.running)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> CoreSampler:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        if not hasattr(self, "_core"):  # __init__ did not finish
            return "<stroboscope.Sampler (not built)>"
        state = "closed" if self._closed else ("running" if self.running else "stopped")
        return f"<stroboscope.Sampler interval={self._interval:g}s pid={self._pid} {state}>"

    # -- the lifecycle registry's hooks ------------------------------------------------------

    def _at_exit(self) -> None:
        if os.getpid() == self._owner_pid:
            self.stop()

    def _after_fork_in_child(self) -> None:
        # The child of a fork has only the forking thread: the sampler thread is gone there.
        self._lock = threading.Lock()
        self._core.forget_thread_after_fork()
        if self._gpu_recorder is not None:
            self._gpu_recorder.forget_thread_after_fork()
        if self._stacks is not None:
            self._stacks.after_fork_in_child()
