"""The public Sampler: argument checks and lifecycle around the C++ sampler thread."""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pyarrow as pa

from stroboscope import _core
from stroboscope._checks import (
    SourcesArg,
    check_capacity,
    check_interval,
    check_pid,
    check_sources,
    check_spool,
    check_window,
)
from stroboscope._frame import Frame, TableFrame
from stroboscope._gpu import GpusArg, resolve_gpus
from stroboscope.spool import SegmentWriter, remove_spool
from stroboscope.watchdog import DumpJob, Watchdog


@dataclass(frozen=True)
class Column:
    """One column of a sampler's frames: name, unit, Arrow type, kind and a one-line help."""

    name: str
    unit: str
    dtype: str
    kind: str
    help: str


_TIME_COLUMN = Column(
    "time", "ns", "timestamp[ns, UTC]", "gauge", "UTC time of the tick (monotonic + anchor)."
)


_live: weakref.WeakSet[Sampler] = weakref.WeakSet()
_live_lock = threading.Lock()


class Sampler:
    """Samples system, process and GPU metrics on a C++ thread into a ring buffer.

    Parameters
    ----------
    interval : float
        Base sampling interval in seconds, from 0.0001 (100 µs, 10 kHz) to 3600 (1 h).
    pid : int, optional
        Process whose ``proc.*`` columns are recorded; default the calling process.
    sources : list of str or dict of str to float, optional
        Source names (see :func:`available_sources`), or ``{name: interval_s}`` where each
        interval is a whole multiple of ``interval`` (``None`` = every tick). Default: the seed
        set (cpu, memory, network, disk, diskio, process, and cgroup where limits exist).
    capacity : int
        Rows the ring holds (rounded up to a power of two). When full, the oldest rows are
        overwritten and counted in :meth:`stats`. Memory: rows * (columns + 1) * 8 bytes plus one
        validity bit per cell; see ``stats()["ring_bytes"]``.
    disk_paths : sequence of str
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
    gpu_samples : bool
        With the ``gpu`` source, also collect every sample the driver buffered (power, GPU and
        memory utilisation, SM and memory clocks) at the driver's own resolution; see
        :meth:`gpu_samples`.
    gpu_sample_interval : float
        How often (seconds) the driver's sample buffers are read (default 0.25).
    spool : path, optional
        Keep the ring in this file, mapped ``MAP_SHARED`` and created 0600 in a directory you
        own: every row is in the file as soon as it is written and survives any death of the
        process; :func:`stroboscope.recover` reads it back. While running, the rows are also
        drained every ``segment_seconds`` into Parquet segments beside it (``PATH.seg-N.parquet``)
        so the ring never has to hold the whole run.
    segment_seconds : float
        Interval of the spool's segment writer (default 10 s); the ring must hold at least twice
        that many rows.
    crash_safe : bool
        Start a watchdog process (:mod:`stroboscope.watchdog`) that does nothing while this
        process lives and, if it dies (SIGKILL, OOM killer, a crash in native code), writes every
        recorded row from the spool to ``dump_path``. Without ``spool``, a private temporary spool
        is used (and removed by :meth:`close`).
    dump_path : path, optional
        Where the watchdog writes the dump: default ``$STROBOSCOPE_DUMP_PATH``, else a timestamped
        file in the working directory.
    dump_format : {"csv", "parquet"}
        Format of the dump.
    proc_root, sys_root, cgroup_root : str
        Where procfs, sysfs and the cgroup hierarchy are read from (tests replay recorded trees).
    """

    def __init__(
        self,
        interval: float = 0.001,
        *,
        pid: int | None = None,
        sources: SourcesArg = None,
        capacity: int = 65536,
        disk_paths: Sequence[str] = ("/",),
        gpus: GpusArg = None,
        cpu_window: float = 0.1,
        rate_window: float = 0.1,
        net_include_loopback: bool = False,
        gpu_samples: bool = True,
        gpu_sample_interval: float = 0.25,
        spool: str | os.PathLike[str] | None = None,
        segment_seconds: float = 10.0,
        crash_safe: bool = False,
        dump_path: str | os.PathLike[str] | None = None,
        dump_format: str = "csv",
        proc_root: str = "/proc",
        sys_root: str = "/sys",
        cgroup_root: str = "/sys/fs/cgroup",
    ) -> None:
        self._interval = check_interval("interval", interval)
        cap = check_capacity(capacity)
        self._pid = check_pid(pid, proc_root)
        if isinstance(disk_paths, str):
            disk_paths = (disk_paths,)
        for path in disk_paths:
            if not os.path.isdir(path):
                raise ValueError(f"disk_paths entry {path!r} is not an existing directory")
        options = _core.SourceOptions()
        options.proc_root = proc_root
        options.sys_root = sys_root
        options.cgroup_root = cgroup_root
        options.pid = self._pid
        options.disk_paths = list(disk_paths)
        devices, labels = resolve_gpus(gpus)
        options.gpu_devices = devices
        options.gpu_labels = labels
        options.cpu_window_ns = check_window("cpu_window", cpu_window)
        options.rate_window_ns = check_window("rate_window", rate_window)
        options.net_include_loopback = bool(net_include_loopback)
        defaults = list(_core.default_source_names(options))
        specs = check_sources(sources, self._interval, defaults)
        if gpus is not None and "gpu" not in {name for name, _ in specs}:
            raise ValueError("gpus was given but the 'gpu' source is not in sources")
        if dump_format not in ("csv", "parquet"):
            raise ValueError(f"dump_format must be 'csv' or 'parquet', got {dump_format!r}")
        seg_s = 0.0
        if spool is not None or crash_safe:
            seg_s = check_interval("segment_seconds", segment_seconds)
            if cap * self._interval < 2 * seg_s:
                raise ValueError(
                    f"segment_seconds={segment_seconds!r} needs a ring of at least "
                    f"{math.ceil(2 * seg_s / self._interval)} rows at interval "
                    f"{self._interval:g} s (capacity is {cap}): raise capacity or lower "
                    "segment_seconds"
                )
        self._temp_spool_dir: str | None = None
        if crash_safe and spool is None:
            self._temp_spool_dir = tempfile.mkdtemp(prefix="stroboscope-")  # 0700, ours
            spool = os.path.join(self._temp_spool_dir, "sampler.spool")
        self._segments: SegmentWriter | None = None
        try:
            spool_path = "" if spool is None else check_spool(spool)
            self._core = _core.Sampler(specs, round(self._interval * 1e9), cap, options, spool_path)
        except (RuntimeError, OSError) as exc:
            self._remove_temp_dir()
            raise RuntimeError(f"cannot build sampler: {exc}") from None
        except BaseException:
            self._remove_temp_dir()
            raise
        self._spool = spool_path or None
        if spool_path:
            self._segments = SegmentWriter(self._core, spool_path, seg_s, max(cap // 2, 1))
        self._gpu_recorder: _core.GpuSampleRecorder | None = None
        self._gpu_labels: dict[int, int] = {}
        if gpu_samples and any(name == "gpu" for name, _ in specs):
            every_s = check_interval("gpu_sample_interval", gpu_sample_interval)
            self._gpu_recorder = _core.GpuSampleRecorder(devices, round(every_s * 1e9), 1 << 18)
            found = list(self._gpu_recorder.devices)
            self._gpu_labels = {
                idx: (int(labels[i]) if labels else idx) for i, idx in enumerate(found)
            }
        self._watchdog: Watchdog | None = None
        if crash_safe:
            dump = None if dump_path is None else os.fspath(dump_path)
            private = self._temp_spool_dir is not None  # nobody else knows it: remove once dumped
            job = DumpJob(
                "spool",
                spool_path,
                dump=dump,
                format=dump_format,
                remove_source=private,
                remove_source_dir=private,
            )
            self._watchdog = Watchdog([job])
        # Runs at close(), at exit, or when this object is collected without close(): stops the
        # sampler, the segment writer and the watchdog (a normal end: no dump) and removes a
        # private spool. Only in the process that made it (a forked child inherits it too).
        self._owner_pid = os.getpid()
        self._cleanup = weakref.finalize(
            self,
            _cleanup_crash_safe,
            self._owner_pid,
            self._core,
            self._segments,
            self._watchdog,
            spool_path,
            self._temp_spool_dir,
        )
        self._lock = threading.Lock()
        self._closed = False
        self._schema = [_TIME_COLUMN] + [Column(**c) for c in self._core.columns()]
        with _live_lock:
            _live.add(self)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Sampler:
        """Start sampling (a no-op when already running). Returns ``self``."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this Sampler is closed; create a new one to sample again")
            if self._spool is not None and os.getpid() != self._owner_pid:
                raise RuntimeError(
                    "this Sampler's ring lives in the spool of the process that made it; "
                    "a forked child must create its own Sampler"
                )
            if self._watchdog is not None and not self._watchdog.running:
                self._watchdog.start()  # before the first row: a death from now on is dumped
            self._core.start()
            if self._gpu_recorder is not None:
                self._gpu_recorder.start()
            if self._segments is not None:
                self._segments.start()
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
                self._cleanup()  # a normal end: the watchdog dumps nothing; a private spool goes

    def _stop_locked(self) -> None:
        self._core.stop()
        if self._gpu_recorder is not None:
            self._gpu_recorder.stop()
        if self._segments is not None:
            self._segments.stop()

    @property
    def running(self) -> bool:
        """Whether the sampler thread is running."""
        return bool(self._core.running)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self.running else "stopped")
        return f"<stroboscope.Sampler interval={self._interval:g}s pid={self._pid} {state}>"

    # -- data --------------------------------------------------------------------------------

    def snapshot(self) -> Frame:
        """A consistent copy of every row still in the ring (the rows are kept)."""
        return Frame(self._core.snapshot())

    def drain(self) -> Frame:
        """The rows written since the previous drain (or since the start)."""
        return Frame(self._core.drain())

    def gpu_samples(self, *, drain: bool = False) -> TableFrame:
        """Every GPU sample the driver buffered, at the driver's own resolution, in long form.

        Columns: ``time`` (``timestamp[ns, UTC]``, the driver's timestamp), ``mono_ns`` (the same
        instant on the clock of :func:`time.monotonic_ns`), ``gpu`` (the device's column label),
        ``kind`` (``power_w``, ``gpu_util_pct``, ``mem_util_pct``, ``sm_clock_mhz``,
        ``mem_clock_mhz``) and ``value``. NVML utilisation is an average over the driver's own
        window (1/6 s to 1 s depending on the GPU). With ``drain=True`` only rows not returned
        by an earlier drain. Empty without the ``gpu`` source.
        """
        recorder = self._gpu_recorder
        if recorder is None:
            return TableFrame(_gpu_sample_table({}, {}))
        rows = recorder.take() if drain else recorder.peek()
        return TableFrame(_gpu_sample_table(rows, self._gpu_labels), int(rows["dropped"]))

    def stats(self) -> dict[str, Any]:
        """The sampler's measurement of itself.

        Keys: ``ticks_scheduled``/``ticks_taken``/``ticks_missed``, ``rows_written``,
        ``rows_overwritten``, ``rows_lost`` (overwritten before a drain reached them),
        ``lateness_p50_ns``/``lateness_p99_ns``/``lateness_max_ns`` (wake-up after the deadline),
        ``cost_mean_ns``/``cost_p99_ns``/``cost_max_ns`` (time to read the sources and push one
        row), ``thread_cpu_ns``, ``ring_bytes``, ``capacity``, ``num_columns``,
        ``process_exited`` and ``sources`` (per source: reads, failures, read time, reason).
        """
        s: dict[str, Any] = self._core.stats()
        s["interval_s"] = self._interval
        s["pid"] = self._pid
        if self._segments is not None:
            s["segments_written"] = self._segments.segments_written
            s["segment_rows_lost"] = self._segments.rows_lost
        s["process_exited"] = any(
            src["name"] in ("process", "proc_tree") and src["reason"] == "process exited"
            for src in s["sources"]
        )
        return s

    @property
    def schema(self) -> list[Column]:
        """The columns of this sampler's frames, with units."""
        return list(self._schema)

    @property
    def spool(self) -> str | None:
        """The spool file, when the ring lives in one."""
        return self._spool

    @property
    def interval(self) -> float:
        """Base sampling interval in seconds."""
        return self._interval

    @property
    def pid(self) -> int:
        """The monitored process id."""
        return self._pid

    @staticmethod
    def available_sources() -> list[dict[str, Any]]:
        """Every source: name, help, whether it is on by default and whether it works here."""
        return available_sources()

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self._core.forget_thread_after_fork()
        if self._gpu_recorder is not None:
            self._gpu_recorder.forget_thread_after_fork()
        # The spool, its segments and the watchdog belong to the parent: the child must not
        # write segments into them or clean them up.
        self._segments = None
        self._cleanup.detach()

    def _remove_temp_dir(self) -> None:
        if self._temp_spool_dir is not None:
            shutil.rmtree(self._temp_spool_dir, ignore_errors=True)
            self._temp_spool_dir = None


def available_sources(
    *,
    pid: int | None = None,
    proc_root: str = "/proc",
    sys_root: str = "/sys",
    cgroup_root: str = "/sys/fs/cgroup",
    disk_paths: Sequence[str] = ("/",),
) -> list[dict[str, Any]]:
    """Every source this build knows: ``name``, ``help``, ``default``, ``available``, ``reason``."""
    options = _core.SourceOptions()
    options.proc_root = proc_root
    options.sys_root = sys_root
    options.cgroup_root = cgroup_root
    options.pid = os.getpid() if pid is None else pid
    options.disk_paths = list(disk_paths)
    return list(_core.describe_sources(options))


def _gpu_sample_table(rows: Mapping[str, Any], labels: Mapping[int, int]) -> pa.Table:
    kinds = list(_core.GPU_SAMPLE_KINDS)
    n = len(rows.get("value", ()))
    gpu = [labels.get(int(i), int(i)) for i in rows["gpu"]] if n else []
    return pa.table(
        {
            "time": pa.array(rows["time_ns"] if n else [], pa.int64()).cast(
                pa.timestamp("ns", "UTC")
            ),
            "mono_ns": pa.array(rows["mono_ns"] if n else [], pa.int64()),
            "gpu": pa.array(gpu, pa.int32()),
            "kind": pa.DictionaryArray.from_arrays(
                pa.array(rows["kind"] if n else [], pa.int8()), pa.array(kinds, pa.string())
            ),
            "value": pa.array(rows["value"] if n else [], pa.float64()),
        }
    )


def _cleanup_crash_safe(
    owner_pid: int,
    core: _core.Sampler,
    segments: SegmentWriter | None,
    watchdog: Watchdog | None,
    spool: str,
    temp_dir: str | None,
) -> None:
    if os.getpid() != owner_pid:
        return
    core.stop()
    if segments is not None:
        # The last segment; if the spool's directory is already gone there is nothing to keep.
        with contextlib.suppress(OSError):
            segments.stop()
    if watchdog is not None:
        watchdog.stop()
    if temp_dir is not None:
        remove_spool(spool)
        with contextlib.suppress(OSError):
            os.rmdir(temp_dir)


def _stop_all_at_exit() -> None:
    with _live_lock:
        samplers = list(_live)
    for sampler in samplers:
        sampler.stop()


def _forget_all_in_child() -> None:
    # The child of a fork has only the forking thread: every sampler thread is gone there.
    global _live_lock
    _live_lock = threading.Lock()
    for sampler in list(_live):
        sampler._after_fork_in_child()


atexit.register(_stop_all_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_all_in_child)
