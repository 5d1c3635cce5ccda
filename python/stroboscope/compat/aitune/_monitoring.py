"""aitune's hardware-metrics session, translated onto the package's scope collector.

aitune 0.6.0 starts a collector on the first scope (when enabled by ``AITUNE_HARDWARE_METRICS``
or :func:`enable_hardware_metrics`) that reads psutil and NVML on a timer every 0.1 s while a
scope is open, plus once at once when a scope opens that the previous reading did not see, and
pipes the rows to a child process. Here the machinery is
:class:`stroboscope.compat.aitune._collector.ScopeCollector` (one stroboscope Sampler started
on the first scope, an edge row asked for when a scope opens, the rows moved out of the ring by
a thread, rows the ring overwrote counted in the frames' ``attrs["rows_lost"]``); this module
says what aitune's session is on it: the sources (``cpu``, ``memory`` and, where NVML sees a
GPU, ``gpu``; interval 0.1 s), the rows in aitune's columns (:mod:`._rows`: innermost open scope
and its labels, torch's allocator figures read when a scope opens), the variables and the dump.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import pyarrow as pa

from stroboscope._base.checks import check_bool, check_path
from stroboscope._base.extras import require
from stroboscope.compat.aitune._collector import COLLECT_EVERY_S as COLLECT_EVERY_S
from stroboscope.compat.aitune._collector import ScopeCollector
from stroboscope.compat.aitune._collector import collect_every_s as collect_every_s
from stroboscope.compat.aitune._dump import dump_to, write_csv
from stroboscope.compat.aitune._rows import aitune_rows, empty_rows, stamp_readings, torch_memory
from stroboscope.scopes import current_labels

if TYPE_CHECKING:
    import pandas

    from stroboscope.compat.aitune._rows import Reading
    from stroboscope.recording.sampler import Sampler

logger = logging.getLogger("stroboscope")

INTERVAL_S = 0.1  # aitune's collector interval
_CAPACITY = 1 << 16

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
    require("pandas", "aitune's hardware metrics", "pandas")
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


class HardwareMetricsSession(ScopeCollector["pandas.DataFrame"]):
    """aitune's collection in this process: its sampler, its rows, torch's readings."""

    def __init__(self) -> None:
        self._torch: list[tuple[int, int, int]] = []  # (mono_ns, allocated, reserved)
        self._torch_due: list[Reading] = []  # readings whose scope's begin is not yet looked up
        super().__init__(
            INTERVAL_S,
            _CAPACITY,
            current_labels,
            what="hardware metrics",
            thread="aitune-collector",
            lost_hint="; get_hardware_metrics().attrs['rows_lost']",
        )

    def enabled_by_default(self) -> bool:
        return HARDWARE_METRICS_ENABLED

    def make_sampler(self) -> Sampler:
        return _make_sampler()

    def on_edge(self, name: str, opened_ns: int, now_ns: int) -> None:
        """torch's allocator figures, when this process has initialised CUDA through torch:
        they hold from the begin of the scope ``name``, found between the two times."""
        reading = torch_memory()
        if reading is not None:
            self._torch_due.append((opened_ns, now_ns, name, *reading))

    def on_intervals(self, intervals: pa.Table) -> None:
        if self._torch_due:  # read after the rows drained: each reading's scope is listed
            self._torch[:] = sorted(self._torch + stamp_readings(self._torch_due, intervals))
            self._torch_due.clear()

    def rows(self, frame: pa.Table, intervals: pa.Table, carried: int) -> pandas.DataFrame | None:
        rows = aitune_rows(frame, intervals, self.start_ns, self._torch, self._edges, carried)
        return rows if len(rows) else None

    def on_collected(self, last_ns: int) -> None:
        # Keep the readings still due and the latest before them (it holds for later rows).
        older = [r for r in self._torch if r[0] <= last_ns]
        self._torch[:] = older[-1:] + [r for r in self._torch if r[0] > last_ns]

    def on_reset(self) -> None:
        self._torch = []
        self._torch_due = []

    def join(self, chunks: list[pandas.DataFrame]) -> pandas.DataFrame:
        import pandas

        joined: pandas.DataFrame = pandas.concat(chunks, ignore_index=True)
        return joined

    def result(self, rows: pandas.DataFrame | None) -> pandas.DataFrame:
        out = empty_rows() if rows is None else rows.copy()
        out.attrs["rows_lost"] = self.rows_lost
        return out

    def dump(self, rows: pandas.DataFrame) -> None:
        dump_metrics(rows)

    def get_metrics(self) -> pandas.DataFrame | None:
        """The rows so far, or None when collection never started."""
        return super().get_metrics()

    def snapshot(self, path: str | os.PathLike[str], reset_metrics: bool = True) -> None:
        path = check_path("path", path)  # refused as given, active or not
        check_bool("reset_metrics", reset_metrics)
        if not self.write_rows(lambda rows: write_csv(rows, path), reset_metrics):
            logger.warning("Hardware metrics collection is not active; snapshot skipped.")
            return
        logger.info("Hardware metrics snapshot written to %s", path)


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
