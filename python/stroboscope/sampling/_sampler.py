"""The core sampler: argument checks and lifecycle around the C++ sampler thread.

This is the facade over ``_core``: it validates, builds the sources, starts and stops the thread,
and is composed of parts that each own their state, built here and held as attributes: the rows
(:class:`~stroboscope.sampling._sampler_rows.RingReader`), the run and its provenance
(:class:`~stroboscope.sampling._run.RunRecord`), the scopes
(:class:`~stroboscope.sampling._scope_log.ScopeRecording`), the energy windows
(:class:`~stroboscope.sampling._energy.EnergyWindows`), the driver's GPU samples
(:class:`~stroboscope.sampling._gpu_samples.GpuSamples`) and the stacks
(:class:`~stroboscope.sampling._stacks.StackRecorder`). Its public methods delegate to them.
Crash safety (segments beside a spool, a watchdog) is composed on top of it in
:mod:`stroboscope.recording`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypedDict

import pyarrow as pa

import stroboscope._core as _core
from stroboscope._base import lifecycle as _lifecycle
from stroboscope._base.checks import PathsArg, check_bool, check_int, check_new_file
from stroboscope.sampling._checks import (
    DEFAULT_MAX_OVERHEAD,
    SourcesArg,
    check_capacity,
    check_command,
    check_interval,
    check_max_overhead,
    check_ring_bytes,
    check_sources,
    check_window,
)
from stroboscope.sampling._energy import EnergyWindow, EnergyWindows, SyncFn
from stroboscope.sampling._frame import Frame
from stroboscope.sampling._gpu import GpusArg, resolve_gpus
from stroboscope.sampling._gpu_samples import GpuSamples
from stroboscope.sampling._plan import (
    available_sources,
    plan_sources,
    refuse_gpus_without_gpu_source,
    source_options,
)
from stroboscope.sampling._provenance import counters
from stroboscope.sampling._run import RunRecord
from stroboscope.sampling._sampler_rows import RingReader
from stroboscope.sampling._schema import Column
from stroboscope.sampling._scope_log import ScopeRecording, check_edge_counters
from stroboscope.sampling._stacks import StackRecorder, check_stacks
from stroboscope.sampling._stats import SamplerStats

if TYPE_CHECKING:
    import pandas as pd


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


class CoreSampler:
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
        every = check_interval("interval", interval)
        cap = check_capacity(capacity)
        options = source_options(pid, proc_root, sys_root, cgroup_root, disk_paths)
        devices, labels = resolve_gpus(gpus)
        options.gpu_devices = devices
        options.gpu_labels = labels
        options.cpu_window_ns = check_window("cpu_window", cpu_window)
        options.rate_window_ns = check_window("rate_window", rate_window)
        options.net_include_loopback = check_bool("net_include_loopback", net_include_loopback)
        options.include_own_threads = check_bool("include_own_threads", include_own_threads)
        want_gpu_samples = check_bool("gpu_samples", gpu_samples)
        want_edge_rows = check_bool("edge_rows", edge_rows)
        counters_mode = check_edge_counters(edge_counters)
        gpu_every_s = check_interval("gpu_sample_interval", gpu_sample_interval)
        want_precise = check_bool("precise", precise)
        stacks_every = check_stacks(stacks, every)
        budget = check_max_overhead(max_overhead)
        defaults = list(_core.default_source_names(options))
        asked = check_sources(sources, every, defaults)
        if gpus is not None and "gpu" not in {name for name, _ in asked}:
            refuse_gpus_without_gpu_source(gpus, sources, options)
        ring_path = "" if ring_file is None else check_new_file("ring_file", ring_file)
        try:
            # Each source built once here: its columns, interface and natural resolution.
            plan = plan_sources(asked, options, round(every * 1e9))
            specs = plan.specs
            columns = [(name, len(plan.details[name]["columns"])) for name, _ in specs]
            check_ring_bytes(cap, columns)
            core = _core.Sampler(
                plan.built,  # taken: the sources built for the plan are the ones read
                round(every * 1e9),
                cap,
                os.fsencode(ring_path),
                want_precise,
                budget,
            )
        except OSError:
            raise  # the ring file could not be made: the type (FileExistsError, ...) and path stay
        except RuntimeError as exc:
            raise RuntimeError(f"cannot build sampler: {exc}") from None
        # The parts, each owning its state; this class runs their lifecycle and delegates.
        self._core = core
        self._details = plan.details
        self._owner_pid = os.getpid()
        self._lock = threading.Lock()
        self._closed = False
        self._rows = RingReader(
            core, interval=every, pid=options.pid, details=plan.details, ring_file=ring_path or None
        )
        wanted = want_gpu_samples and any(name == "gpu" for name, _ in specs)
        self._gpus = GpuSamples(devices, labels, gpu_every_s if wanted else None)
        self._run_record = RunRecord(
            interval=every,
            pid=options.pid,
            column_names=[c.name for c in self._rows.columns],
            gpu_labels=self._gpus.labels,
            details=plan.details,
            fill_within=plan.fill_within_ns,
            max_overhead=budget,
        )
        # A subclass that knows who records (an ``identity`` attribute, as
        # stroboscope.recording.Sampler's) gives the provenance that identity.
        self._run_record.identity = getattr(self, "identity", None)
        self._scopes = ScopeRecording(core, want_edge_rows, counters_mode)
        self._energy = EnergyWindows(core, every)
        self._stacks = (
            None
            if stacks_every is None
            else StackRecorder(stacks_every, options.pid, options.include_own_threads)
        )
        _lifecycle.register(self)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> CoreSampler:
        """Start sampling (a no-op when already running). Returns ``self``."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this Sampler is closed; create a new one to sample again")
            if self._rows.ring_file is not None and os.getpid() != self._owner_pid:
                raise RuntimeError(
                    "this Sampler's ring lives in the file of the process that made it; "
                    "a forked child must create its own Sampler"
                )
            self._run_record.facts(self.stats)  # gathered before the first row, not per frame
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
            self._scopes.detach(self)
            raise
        self._gpus.start()
        if self._stacks is not None:
            self._stacks.start()

    def _stop_locked(self) -> None:
        self._scopes.detach(self)
        self._core.stop()
        self._gpus.stop()
        if self._stacks is not None:
            self._stacks.stop()
        if self._run_record.budget_changed(self._core.rate_changes_total):
            self._run_record.follow_budget(self.stats)  # to the provenance and the log

    def _close_locked(self) -> None:
        pass

    def _attach_scopes(self) -> None:
        # Called right before the thread starts (its own method: tests check the order).
        self._scopes.attach(self)

    def _extra_stats(self) -> dict[str, Any]:
        """Fields a sampler composed on this one adds to :meth:`stats` (and its counters)."""
        return {}

    def _release_core(self) -> None:
        """Drop every reference this sampler's parts hold to the ring (for a subclass whose own
        set-up failed after the ring was made: its mapping, fd and lock go with the last)."""
        for name in ("_core", "_rows", "_scopes", "_energy"):
            with contextlib.suppress(AttributeError):
                delattr(self, name)

    # -- rows (RingReader) -------------------------------------------------------------------

    def tick_now(self, n: int = 1) -> int:
        """Take ``n`` ticks at once on the calling thread, while the sampler is stopped.

        Each tick reads every source due on it, exactly as the sampler thread would, and writes
        one row (the tick counter advances, so per-source intervals hold). A deterministic way to
        produce rows for tests and tools, with no sleeping and no thread. Returns the number of
        rows written.

        Raises
        ------
        RuntimeError
            When the sampler is running or closed.
        """
        check_int("n", n, 1, 1 << 30, unit="ticks")
        with self._lock:
            if self._closed:
                raise RuntimeError("tick_now() on a closed Sampler")
            return self._rows.tick(n)

    def request_tick(self) -> None:
        """Ask for one extra row now (an "edge row", e.g. at a scope's begin or end).

        Lock-free and cheap (no Python lock, no GIL release); a no-op while not running. The
        regular deadlines are unchanged; requests made before the row starts share it (counted in
        ``stats().tick_requests``; the rows in ``ticks_requested``). Sources read every n > 1
        ticks appear on an edge row only when due on the next regular tick, which then skips them.
        """
        self._core.request_tick()

    def snapshot(self) -> Frame:
        """A consistent copy of every row still in the ring (the rows are kept)."""
        return self._frame(self._rows.snapshot())

    def drain(self) -> Frame:
        """The rows written since the previous drain (or since the start)."""
        return self._frame(self._rows.drain())

    def copy_since(self, first_row: int) -> Frame:
        """The rows with index ``>= first_row`` still in the ring, for a consumer that keeps its
        own cursor (moves no cursor; rows already overwritten are counted in ``rows_lost``)."""
        return self._frame(self._rows.copy_since(first_row))

    def stats(self) -> SamplerStats:
        """The sampler's measurement of itself (see :class:`SamplerStats`); ``stacks`` holds
        the stack reader's (None without ``stacks=``)."""
        stacks = None if self._stacks is None else self._stacks.stats()
        return self._rows.stats(stacks=stacks, **self._extra_stats())

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of this sampler's frames (``unit``/``kind`` in field metadata)."""
        return self._rows.schema

    @property
    def columns(self) -> list[Column]:
        """The columns of this sampler's frames, with units, kinds and help."""
        return self._rows.columns

    @property
    def ring_file(self) -> str | None:
        """The file the ring lives in, when it lives in one."""
        return self._rows.ring_file

    @property
    def interval(self) -> float:
        """Base sampling interval in seconds."""
        return self._rows.interval

    @property
    def pid(self) -> int:
        """The monitored process id."""
        return self._rows.pid

    @staticmethod
    def available_sources() -> list[dict[str, Any]]:
        """Every source: name, help, whether it is on by default and whether it works here."""
        return available_sources()

    # -- the run (RunRecord) -----------------------------------------------------------------

    def _frame(self, rows: _core.Frame) -> Frame:
        run = self._run_record.current(self.stats, self._core.rate_changes_total)
        return Frame._of_sampler(rows, run, self._counters(), self._run_record.fill_within)

    def _counters(self) -> tuple[int, int, int]:
        """``(ticks_taken, ticks_missed, rows_lost)`` now: what a frame's provenance counts."""
        return counters(self._core.counters(), self._extra_stats())

    @property
    def _fill_within(self) -> Mapping[str, int]:
        # The forward-fill limits of the frames made now (the run record's).
        return self._run_record.fill_within

    def provenance(self, *, command: list[str] | None = None) -> dict[str, Any]:
        """What this sampler knows of its run, as a JSON-able dict that frames and outputs
        carry (see :func:`stroboscope.sampling._provenance.provenance`).

        The run's facts are gathered once (at :meth:`start`, or by the first frame); each call
        here reads the monitored process's command line again (it may ``exec``) and keeps the
        last successful read, unless ``command`` (the command line as the caller knows it) is
        given; and takes in the overhead budget's rate changes made since (``budget``). Frames
        made before keep the facts they were made with.
        """
        run = self._run_record.latest(self.stats, check_command(command))
        return run.provenance(self._counters())

    # -- scopes (ScopeRecording) -------------------------------------------------------------

    def scope_events(self) -> pa.Table:
        """The raw scope edges of this sampler's runs still in the events log.

        Columns ``mono_ns``, ``kind`` (1 begin, 2 end), ``thread_id``, ``scope_id``, ``depth``,
        ``labels_id``, ``stack_id``, and with edge counters (``edge_counters=``) each edge's
        own counters (:data:`~stroboscope.formats.shared_events.COUNTER_COLUMNS`); schema
        metadata ``events_lost`` counts edges the log overwrote before this read (its capacity
        is ``_core.events_stats()["capacity"]``).
        """
        return self._scopes.events()

    def scope_intervals(self) -> pa.Table:
        """One row per scope call of this sampler's runs (name, path, thread, times, labels);
        ``end_ns`` is null for a scope still open. The calls of the processes this process
        started while it ran (forked and spawned workers, subprocesses: :mod:`._child_events`)
        are there too, with ``pid`` and ``producer`` columns (this process's own calls have its
        pid); without such calls the table has no ``pid`` column."""
        return self._scopes.intervals()

    def summary(
        self, *, by: str | Sequence[str] | None = None, weight: str | None = None
    ) -> pd.DataFrame:
        """Per scope path and labels (or per ``by``: ``"name"``, ``"path"`` and/or label keys,
        see :func:`stroboscope.analysis.scope_summary.summary`): calls, durations (exact, from
        the edges), inclusive and exclusive time, and the metrics sampled while it ran (CPU,
        RSS, GPU, power, energy), each with the number of samples behind it.

        With ``"function"`` in ``by`` (``by="function"``), a sampler made with ``stacks=``
        breaks each such row down by the functions its Python stacks ran inside the scope's
        calls, weighted by ``weight``: ``"cpu"`` (default, the thread's CPU time), ``"wall"``
        or a metric column."""
        # Only a name or a list of names can ask for functions; anything else is refused in
        # words by the summary itself (the argument, its value and what is accepted).
        keys = [by] if isinstance(by, str) else list(by) if isinstance(by, (list, tuple)) else []
        stacks = self.stacks() if "function" in keys else None
        return self._scopes.summary(self.snapshot().to_arrow(), by=by, weight=weight, stacks=stacks)

    def samples_by_scope(self) -> pa.Table:
        """This sampler's rows with the scope open at each (an as-of join on ``mono_ns``)."""
        return self._scopes.samples_by_scope(self.snapshot().to_arrow())

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> str:
        """Scopes and metrics as a Chrome Trace Event file (Perfetto, chrome://tracing), on
        torch.profiler's time base; returns the path written."""
        return self._scopes.export_chrome_trace(path, self.snapshot().to_arrow())

    # -- energy (EnergyWindows) --------------------------------------------------------------

    def begin_energy_window(
        self, key: str = "", *, sync: SyncFn | None = None, restart: bool = False
    ) -> int:
        """Open the energy window ``key``; returns its begin (``time.monotonic_ns()``).

        ``sync`` is called first (e.g. ``torch.cuda.synchronize``) so queued GPU work is not
        counted in; ``restart=True`` replaces an open window of that name instead of raising.
        """
        return self._energy.begin(key, sync=sync, restart=restart)

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
        after it and a step of every GPU's energy counter after it (without that step the end
        is extrapolated, ``WindowEnergy.extrapolated``); ``max_power_w`` is passed on to
        :func:`~stroboscope.analysis.energy.window_energy`.
        """
        return self._energy.end(key, sync=sync, timeout=timeout, max_power_w=max_power_w)

    def energy_window(
        self,
        key: str = "",
        *,
        sync: SyncFn | None = None,
        timeout: float | None = None,
        max_power_w: float | None = None,
    ) -> AbstractContextManager[EnergyWindow]:
        """``with sampler.energy_window() as w: ...`` then ``w.joules`` ({gpu: J}),
        ``w.uncertainty_j`` and ``w.gpus`` (the details): begin and end around the block
        (see :meth:`begin_energy_window`, :meth:`end_energy_window`)."""
        return self._energy.window(key, sync=sync, timeout=timeout, max_power_w=max_power_w)

    def discard_energy_window(self, key: str = "") -> None:
        """Forget the open energy window ``key`` without measuring it (nothing if none is
        open under that key)."""
        self._energy.discard(key)

    @property
    def open_energy_windows(self) -> tuple[str, ...]:
        """The keys of the energy windows begun and not yet ended or discarded."""
        return tuple(self._energy.opened)

    # -- GPU samples and stacks --------------------------------------------------------------

    @property
    def gpu_labels(self) -> dict[int, int]:
        """NVML index -> the label of the device's columns (``gpu.{label}.*``) where they
        differ (``gpus="cuda"`` labels by CUDA ordinal); empty where every label is its NVML
        index. A copy."""
        return dict(self._gpus.labels)

    def gpu_samples(self, *, drain: bool = False) -> Frame:
        """Every GPU sample the driver buffered, at the driver's own resolution, in long form.

        Columns: ``time`` (``timestamp[ns, UTC]``, the driver's timestamp), ``mono_ns`` (the same
        instant on the clock of :func:`time.monotonic_ns`), ``gpu`` (the device's column label),
        ``kind`` (``power_w``, ``gpu_util_pct``, ``mem_util_pct``, ``sm_clock_mhz``,
        ``mem_clock_mhz``) and ``value``. NVML utilisation is an average over the driver's own
        window (1/6 s to 1 s depending on the GPU). With ``drain=True`` only rows not returned
        by an earlier drain. Empty without the ``gpu`` source.
        """
        return self._gpus.frame(drain=drain)

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

    # -- state -------------------------------------------------------------------------------

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
        if not hasattr(self, "_rows"):  # __init__ did not finish
            return "<stroboscope.Sampler (not built)>"
        state = "closed" if self._closed else ("running" if self.running else "stopped")
        return f"<stroboscope.Sampler interval={self.interval:g}s pid={self.pid} {state}>"

    # -- the lifecycle registry's hooks ------------------------------------------------------

    def _at_exit(self) -> None:
        if os.getpid() == self._owner_pid:
            self.stop()

    def _after_fork_in_child(self) -> None:
        # The child of a fork has only the forking thread: the sampler thread is gone there.
        self._lock = threading.Lock()
        self._core.forget_thread_after_fork()
        self._gpus.after_fork_in_child()
        if self._stacks is not None:
            self._stacks.after_fork_in_child()
