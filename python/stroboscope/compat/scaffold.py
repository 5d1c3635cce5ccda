"""A drop-in ``SystemMonitor``: the WandB-style monitor's surface over stroboscope's C++ sampler.

Sampling runs in C++ at ``interval`` (10 ms by default) and never waits for Python. The
package's window publisher (:class:`stroboscope.compat._publisher.WindowPublisher`) wakes
every ``sample_rate_seconds`` on its own thread, drains the ring and reduces the window's columns
(mean, max or last); this module only translates: the monitor's arguments into a sampler, the
window into the compatibility keys, and the event to each sender's own worker thread.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Union

from stroboscope._base.checks import check_bool, check_choice, check_int, check_pid, check_seconds
from stroboscope._base.extras import require
from stroboscope._base.identity import detect_identity
from stroboscope.analysis.windows import AGGREGATES, Aggregate, WindowInfo
from stroboscope.compat._keys import GPU_SOURCE, CompatKeys, sources
from stroboscope.compat._publisher import DRAIN_PERIOD_S, WindowPublisher
from stroboscope.compat._ranked import rank_aware
from stroboscope.formats.dataset import part_capacity, part_seconds
from stroboscope.recording.sampler import DUMP_FORMATS, Sampler, ring_segment_seconds
from stroboscope.sampling import (
    available_sources,
    check_capacity,
    check_interval,
    natural_every,
    net_dev_totals,
)
from stroboscope.senders import AbstractBackendSender, Fanout, StatsDict, as_sender

if TYPE_CHECKING:
    import psutil

logger = logging.getLogger("stroboscope.monitor")

GPU_MIN_INTERVAL_S = 0.1
"""Default floor of the GPU polling interval (s): NVML averages utilisation over 1/6 to 1 s."""

SenderArg = Union[AbstractBackendSender, Callable[[StatsDict], Any], Sequence[Any]]


def _net_totals(include_loopback: bool, proc_root: str = "/proc") -> dict[str, int]:
    """Bytes sent and received by all interfaces (``lo`` only when asked), read with the
    network source's own /proc/net/dev parser."""
    sent, recv = net_dev_totals(include_loopback, proc_root)
    return {"sent": sent, "recv": recv}


def _sender_list(backend_sender: SenderArg) -> list[AbstractBackendSender]:
    if isinstance(backend_sender, (list, tuple)):
        if not backend_sender:
            raise ValueError("backend_sender: an empty list was given; pass at least one sender")
        return [as_sender(s) for s in backend_sender]
    return [as_sender(backend_sender)]


def _gpu_available(pid: int) -> bool:
    return any(s["name"] == GPU_SOURCE and s["available"] for s in available_sources(pid=pid))


class SystemMonitor:
    """Publishes system, process and GPU metrics to a sender every ``sample_rate_seconds``.

    A drop-in for the pure-Python WandB-style ``SystemMonitor``: same constructor, methods,
    attributes and keys, but the sampling happens in stroboscope's C++ thread at ``interval``
    and each published value aggregates the whole window (the mean by default) instead of one
    reading taken by a Python thread.

    Parameters
    ----------
    pid : int
        Process whose ``proc.*`` keys are reported.
    backend_sender : AbstractBackendSender or callable or list of them
        Receives every event as ``publish(event)``; a plain callable is called with the event. A
        list fans each event out to every sender, each on its own worker thread.
    sample_rate_seconds : float
        Seconds between published events (default 2).
    rank : int, optional
        Prefix every key with ``rank{rank}.`` (distributed training), as the original monitors
        did, in :attr:`sampler` and in what every user sender receives. A built-in sender that
        labels the rank in its backend instead (W&B's ``x_label``, an MLflow run tag, a
        TensorBoard run directory) is given the rank through its ``label_rank`` hook and gets
        the keys without the prefix, so the rank is not said twice.
    interval : float
        Keyword-only. Sampling interval of the C++ sampler in seconds (default 0.01).
    aggregate : {"mean", "max", "last"}
        Keyword-only. How each published value reduces its window's samples (default ``"mean"``).
        Running totals (``network``, ``disk.in``/``out``, GPU energy) and counts or integer
        levels (``proc.cpu.threads``, GPU clocks, fan, power limit, device bytes, ECC counts)
        always give the latest: :attr:`key_aggregates` says which applies per key.
    extended : bool
        Keyword-only. Add the fuller W&B-style keys: ``cpu.{i}.cpu_percent`` per core,
        ``proc.cpu.percent``, ``disk.in``/``disk.out`` (MiB since start), and per GPU clocks,
        power limit, energy (J), memory bytes, fan, ECC counts and
        ``gpu.process.{i}.memoryAllocatedBytes``.
    gpu_interval : float, optional
        Keyword-only. GPU polling interval in seconds, a whole multiple of ``interval``
        (default: the smallest such multiple of at least 0.1 s).
    capacity : int, optional
        Keyword-only. Ring capacity in rows (default: room for several drains).
    max_pending : int
        Keyword-only. Events a slow sender may have queued before its oldest is dropped.
    flush_timeout : float
        Keyword-only. Seconds :meth:`flush` waits for the senders to take the event, and
        :meth:`shutdown` for them to finish and close (default 10).
    crash_safe : bool
        Keyword-only. Keep the samples in a spool file and start a watchdog process that, if this
        process dies, dumps every recorded row to ``dump_path`` (CSV by default; see
        :class:`stroboscope.Sampler`).
    dump_path : path, optional
        Keyword-only. Where the watchdog writes the dump (default ``$STROBOSCOPE_DUMP_PATH``,
        else a timestamped file in the working directory).
    dump_format : {"csv", "parquet"}
        Keyword-only. Format of the dump.
    dataset : path, optional
        Keyword-only. Also record every sample as Parquet parts of a partitioned dataset at this
        root (``ROOT/job=J/host=H/rank=R/part-….parquet``, a part every 10 s; read all ranks as
        one with :func:`stroboscope.open_dataset`). Job and host come from the environment, the
        rank from ``rank`` when given, else from the environment.

    Attributes
    ----------
    gpu_count : int
        GPUs the ``gpu`` source reports (0 when NVML or GPUs are absent).
    network_init : dict
        ``{"sent": bytes, "recv": bytes}`` of all interfaces when the monitor was made.
    sampler : dict
        The latest published values, keyed as described above.
    last_window : WindowInfo or None
        Rows and monotonic time span of the latest published window.
    """

    gpu_count: int
    network_init: dict[str, int] | None
    sampler: StatsDict

    def __init__(
        self,
        pid: int,
        backend_sender: SenderArg,
        sample_rate_seconds: float = 2,
        rank: int | None = None,
        *,
        interval: float = 0.01,
        aggregate: Aggregate = "mean",
        extended: bool = False,
        gpu_interval: float | None = None,
        capacity: int | None = None,
        max_pending: int = 64,
        flush_timeout: float = 10.0,
        crash_safe: bool = False,
        dump_path: str | os.PathLike[str] | None = None,
        dump_format: str = "csv",
        dataset: str | os.PathLike[str] | None = None,
    ) -> None:
        pid = check_pid(pid)  # first: a bad pid is named before anything else is checked
        # a publish period within a sampling interval's bounds (1e300 s would never publish)
        self._rate = check_interval("sample_rate_seconds", sample_rate_seconds)
        interval = check_seconds("interval", interval)
        if self._rate < interval:
            raise ValueError(
                f"sample_rate_seconds ({sample_rate_seconds!r}) must be at least the sampling "
                f"interval ({interval!r} s)"
            )
        if rank is not None:
            check_int("rank", rank, 0, unit="the process's global rank, or None")
        check_bool("extended", extended)
        check_bool("crash_safe", crash_safe)
        check_choice("dump_format", dump_format, DUMP_FORMATS)  # also when not crash-safe
        if gpu_interval is not None:  # checked even where no GPU makes it unused
            check_interval("gpu_interval", gpu_interval)
        if capacity is not None:
            check_capacity(capacity)
        check_int("max_pending", max_pending, 1, unit="events a slow sender may have queued")
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, got {aggregate!r}")
        self._aggregate: Aggregate = aggregate
        self._flush_timeout = check_seconds("flush_timeout", flush_timeout)
        senders = _sender_list(backend_sender)
        self._backend_sender = senders[0] if len(senders) == 1 else senders
        fed = rank_aware(senders, rank)  # before any resource: a rank conflict raises here

        spec: dict[str, float | None] = dict.fromkeys(sources(extended, _gpu_available(pid)))
        if GPU_SOURCE in spec:
            if gpu_interval is None:
                # read no faster than NVML's values change, as the sampler's own plan does
                every = natural_every(round(GPU_MIN_INTERVAL_S * 1e9), round(interval * 1e9))
                gpu_interval = every * interval
            spec[GPU_SOURCE] = gpu_interval
        given_capacity = capacity
        if capacity is None:
            per_drain = math.ceil(min(self._rate, DRAIN_PERIOD_S) / interval)
            capacity = max(1024, 8 * per_drain)
        extra: dict[str, Any] = {}
        if crash_safe:
            extra.update(
                crash_safe=True,
                dump_path=dump_path,
                dump_format=dump_format,
                segment_seconds=ring_segment_seconds(capacity, interval),
            )
        if dataset is not None:
            if given_capacity is None:  # a ring that holds full-length parts
                capacity = max(capacity, part_capacity(interval))
            who = None if rank is None else detect_identity(rank=rank)
            part_s = part_seconds(capacity, interval)  # the dataset's rule, as record's
            extra.update(dataset=dataset, identity=who, segment_seconds=part_s)
        # The pure-Python monitors read psutil.net_io_counters(), which counts loopback.
        self._loopback = True
        self._core = Sampler(
            interval, pid=pid, sources=spec, capacity=capacity, net_include_loopback=True, **extra
        )
        self._pid = self._core.pid

        columns = [c.name for c in self._core.columns]
        self._keys = CompatKeys(columns, rank, extended)
        self.gpu_count = len(self._keys.gpu_labels)
        self._publisher = WindowPublisher(
            self._core.columns,
            self._emit,
            every=self._rate,
            aggregate=aggregate,
            select=self._keys.columns,
            levels=self._keys.last_columns,
            source=lambda: self._core.drain().to_arrow(),
            name="stroboscope-monitor",
            logger=logger,
        )
        self.network_init = _net_totals(self._loopback)
        self._net_offset = {"sent": 0, "recv": 0}
        self.sampler = {}
        self.last_window: WindowInfo | None = None

        self._fanout = Fanout(fed, max_pending)
        self._lock = threading.Lock()  # start/shutdown
        self._closed = False
        self._last_published = threading.Event()  # shutdown's last window is in the senders

    # -- the compatible surface --------------------------------------------------------------

    def start(self) -> None:
        """Start sampling and the publishing thread (a no-op when already running)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this SystemMonitor was shut down; make a new one to restart")
            if self._publisher.running:
                return
            if not self._core.running:
                now = _net_totals(self._loopback)
                assert self.network_init is not None
                # The sampler counts from its first reading; shift that to the construction.
                self._net_offset = {k: now[k] - self.network_init[k] for k in ("sent", "recv")}
                self._core.start()
            self._publisher.start()

    def shutdown(self) -> None:
        """Publish the last window, stop sampling, close every sender once and join the threads.

        A second call only waits for the senders: after a shutdown a sender began from its
        own ``publish()``, it is the call that waits for the last events and ``close()``.
        """
        with self._lock:
            again, self._closed = self._closed, True
        if again:  # once the first call has published its last window
            self._last_published.wait(self._flush_timeout)
            self._fanout.close(self._flush_timeout)
            return
        self._publisher.stop()
        self._core.stop()
        try:
            self._publisher.publish()
        finally:
            self._last_published.set()
            self._core.close()
            self._fanout.close(self._flush_timeout)

    def flush(self) -> None:
        """Publish the values of the window so far now, and wait for the senders to take them.

        Waits at most ``flush_timeout`` seconds (a sender still busy then is logged).
        """
        if self._closed:
            logger.warning("stroboscope: flush() after shutdown() publishes nothing")
            return
        tickets = self._publisher.publish()
        if not self._fanout.wait(tickets, self._flush_timeout):
            logger.warning(
                "stroboscope: a sender did not take the flushed event within %.1f s",
                self._flush_timeout,
            )

    @property
    def proc(self) -> psutil.Process:
        """``psutil.Process`` of the monitored pid (needs psutil: ``stroboscope[psutil]``)."""
        require("psutil", "SystemMonitor.proc", "psutil")
        import psutil

        return psutil.Process(pid=self._pid)

    # -- extras ------------------------------------------------------------------------------

    @property
    def backend_sender(self) -> AbstractBackendSender | list[AbstractBackendSender]:
        """The sender (or the list of senders) events go to."""
        return self._backend_sender

    @property
    def raw_sampler(self) -> Sampler:
        """The :class:`stroboscope.Sampler` underneath (for ``stats()``, ``snapshot()``)."""
        return self._core

    @property
    def key_aggregates(self) -> dict[str, str]:
        """Which aggregate each key publishes: ``{key: "mean" | "max" | "last"}`` (the
        ``aggregate`` asked, or ``"last"`` for running totals, counts and integer levels)."""
        return self._keys.aggregates(
            self._aggregate, self._publisher.counters, self._publisher.levels
        )

    @property
    def sample_rate_seconds(self) -> float:
        """Seconds between published events."""
        return self._rate

    def __enter__(self) -> SystemMonitor:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        state = "shut down" if self._closed else ("running" if self._core.running else "stopped")
        return (
            f"<stroboscope.compat.SystemMonitor pid={self._pid} every {self._rate:g} s, "
            f"{self.gpu_count} GPU(s), {state}>"
        )

    # -- a window, translated -------------------------------------------------------------

    def _emit(self, values: dict[str, float | int], info: WindowInfo) -> list[int]:
        """A closed window: update ``sampler`` with its keys and queue a copy for the senders."""
        self._keys.update(self.sampler, values, self._net_offset)
        if info.rows:
            self.last_window = info
        event = copy.deepcopy(self.sampler)
        return self._fanout.submit(event, timestamp=time.time())
