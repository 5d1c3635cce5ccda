"""Which OpenTelemetry metric each sampler column becomes: names, units, attributes, statistic.

Names follow the OpenTelemetry semantic conventions where one exists (checked against the
system, process (v1.45.0) and hardware pages on opentelemetry.io and, in the tests, the
constants of ``opentelemetry-semantic-conventions`` 0.66b2): ``system.*``, ``process.*``,
``hw.gpu.*``, ``hw.power``, ``hw.energy``, ``hw.temperature``, ``hw.errors``. A column with no
convention goes under ``stroboscope.*`` with its unit suffix turned into a UCUM unit
(``_bytes`` -> ``By``, ``_pct`` -> a ratio with unit ``1``). ``docs/opentelemetry.md`` is the
table for users.

This module only plans: it turns a list of columns into :class:`Metric` specs. The statistics
themselves are computed per window in :mod:`stroboscope.cluster._otel_window`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from stroboscope.analysis.prom_names import UNITS
from stroboscope.cluster._disk import mountpoint, usage_prefix
from stroboscope.sampling import Column

Instrument = Literal["gauge", "counter", "updowncounter"]
Stat = Literal["mean", "max", "last", "total", "cpu_seconds"]
Attrs = Mapping[str, "str | int"]

MAX_PREFIX = "stroboscope."
MAX_SUFFIX = ".max"


@dataclass(frozen=True)
class Point:
    """One data point of a metric: a column's window statistic, scaled, with its attributes.

    ``minus`` names a second column whose same statistic is subtracted (a filesystem's used
    bytes are its total minus its free bytes). ``stat``: ``mean``/``max``/``last`` of the
    window's valid cells; ``total`` the last total a counter column reached (kept across
    windows without a value); ``cpu_seconds`` the CPU seconds integrated from a CPU % column
    (see :class:`stroboscope.cluster._otel_window.Window`).
    """

    column: str
    stat: Stat
    attributes: Attrs = field(default_factory=dict)
    scale: float = 1.0
    minus: str | None = None


@dataclass(frozen=True)
class Metric:
    """One OpenTelemetry instrument and the points it reports at each collection."""

    name: str
    instrument: Instrument
    unit: str
    description: str
    points: tuple[Point, ...]


@dataclass(frozen=True)
class Gpu:
    """What the exporter says about one GPU (``hw.*`` attributes)."""

    label: str  # the {i} of the gpu.{i}.* columns
    hw_id: str  # the UUID where NVML gave one, else "gpu{i}"
    model: str | None = None


def gpu_attrs(gpu: Gpu) -> dict[str, str | int]:
    """The attributes every ``hw.*`` point of a GPU carries (``hw.id`` is required there)."""
    attrs: dict[str, str | int] = {
        "hw.id": gpu.hw_id,
        "hw.type": "gpu",
        "hw.name": f"gpu{gpu.label}",
    }
    if gpu.model:
        attrs["hw.model"] = gpu.model
    return attrs


# Columns with a semantic convention: column (with {i} for a GPU label) -> (metric name,
# instrument, unit, scale, extra attributes, statistic, whether a `.max` companion is exported).
_Row = tuple[str, Instrument, str, float, dict[str, "str | int"], Stat, bool]
_SEMCONV: dict[str, _Row] = {
    "cpu.util_pct": ("system.cpu.utilization", "gauge", "1", 0.01, {}, "mean", True),
    "mem.used_bytes": (
        "system.memory.usage", "updowncounter", "By", 1.0,
        {"system.memory.state": "used"}, "mean", True,
    ),
    "mem.util_pct": (
        "system.memory.utilization", "gauge", "1", 0.01,
        {"system.memory.state": "used"}, "mean", False,
    ),
    "mem.total_bytes": ("system.memory.limit", "updowncounter", "By", 1.0, {}, "last", False),
    "mem.available_bytes": (
        "system.memory.linux.available", "updowncounter", "By", 1.0, {}, "mean", False,
    ),
    "mem.swap_used_bytes": (
        "system.paging.usage", "updowncounter", "By", 1.0,
        {"system.paging.state": "used"}, "mean", False,
    ),
    "net.sent_bytes": (
        "system.network.io", "counter", "By", 1.0,
        {"network.io.direction": "transmit"}, "total", False,
    ),
    "net.recv_bytes": (
        "system.network.io", "counter", "By", 1.0,
        {"network.io.direction": "receive"}, "total", False,
    ),
    "disk.read_bytes": (
        "system.disk.io", "counter", "By", 1.0, {"disk.io.direction": "read"}, "total", False,
    ),
    "disk.write_bytes": (
        "system.disk.io", "counter", "By", 1.0, {"disk.io.direction": "write"}, "total", False,
    ),
    "proc.rss_bytes": ("process.memory.usage", "updowncounter", "By", 1.0, {}, "mean", True),
    "proc.mem_pct": ("process.memory.utilization", "gauge", "1", 0.01, {}, "mean", False),
    "proc.threads": ("process.thread.count", "updowncounter", "{thread}", 1.0, {}, "last", False),
    "proc.read_bytes": (
        "process.disk.io", "counter", "By", 1.0, {"disk.io.direction": "read"}, "total", False,
    ),
    "proc.write_bytes": (
        "process.disk.io", "counter", "By", 1.0, {"disk.io.direction": "write"}, "total", False,
    ),
    "proc.ctx_voluntary": (
        "process.context_switches", "counter", "{context_switch}", 1.0,
        {"process.context_switch.type": "voluntary"}, "total", False,
    ),
    "proc.ctx_involuntary": (
        "process.context_switches", "counter", "{context_switch}", 1.0,
        {"process.context_switch.type": "involuntary"}, "total", False,
    ),
    "gpu.{i}.util_pct": (
        "hw.gpu.utilization", "gauge", "1", 0.01, {"hw.gpu.task": "general"}, "mean", True,
    ),
    "gpu.{i}.mem_allocated_pct": (
        "hw.gpu.memory.utilization", "gauge", "1", 0.01, {}, "mean", False,
    ),
    "gpu.{i}.mem_used_bytes": ("hw.gpu.memory.usage", "updowncounter", "By", 1.0, {}, "mean", True),
    "gpu.{i}.mem_total_bytes": (
        "hw.gpu.memory.limit", "updowncounter", "By", 1.0, {}, "last", False,
    ),
    "gpu.{i}.power_w": ("hw.power", "gauge", "W", 1.0, {}, "mean", True),
    "gpu.{i}.energy_mj": ("hw.energy", "counter", "J", 0.001, {}, "total", False),
    "gpu.{i}.temp_c": ("hw.temperature", "gauge", "Cel", 1.0, {}, "mean", True),
    "gpu.{i}.pcie_tx_bytes": (
        "hw.gpu.io", "counter", "By", 1.0, {"network.io.direction": "transmit"}, "total", False,
    ),
    "gpu.{i}.pcie_rx_bytes": (
        "hw.gpu.io", "counter", "By", 1.0, {"network.io.direction": "receive"}, "total", False,
    ),
    "gpu.{i}.ecc_corrected": (
        "hw.errors", "counter", "{error}", 1.0, {"error.type": "ecc_corrected"}, "total", False,
    ),
    "gpu.{i}.ecc_uncorrected": (
        "hw.errors", "counter", "{error}", 1.0, {"error.type": "ecc_uncorrected"}, "total", False,
    ),
}  # fmt: skip

# Rates computed from a counter that is exported as a counter: rate() over the counter says
# the same, exactly, so these are not exported twice.
# (GPM's own rates, gpm_*, have no counter: they stay.) Also clock readings and thread ids.
_SKIP = re.compile(
    r"^(net|disk)\.\w+_bytes_per_s$|^gpu\.\d+\.(pcie|nvlink)_(tx|rx)_bytes_per_s$"
    r"|\.read_mono_ns$|\.tid$"
)
# A column unit -> (UCUM unit, scale to it). The suffix a column's name carries for its unit is
# the one naming table's (analysis.prom_names.UNITS: ``_pct`` for %, ``_mj`` for mJ, ...).
_UCUM: dict[str, tuple[str, float]] = {
    "bytes/s": ("By/s", 1.0),
    "bytes": ("By", 1.0),
    "%": ("1", 0.01),
    "mJ": ("J", 0.001),
    "W": ("W", 1.0),
    "celsius": ("Cel", 1.0),
    "MHz": ("MHz", 1.0),
    "ns": ("s", 1e-9),
    "cores": ("{cpu}", 1.0),
}
# Generic names (after the unit suffix is stripped) that would read wrongly on their own.
_RENAME = {
    "gpu.mem_util": "gpu.memory_controller.utilization",  # not hw.gpu.memory.utilization
    "gpu.power": "gpu.power.utilization",  # power_pct: a share of the enforced limit
    "gpu.fan": "gpu.fan_speed",
    "gpu.proc_sm_util": "gpu.process.sm.utilization",
    "gpu.proc_mem_util": "gpu.process.memory_controller.utilization",
    "gpu.proc_enc_util": "gpu.process.encoder.utilization",
    "gpu.proc_dec_util": "gpu.process.decoder.utilization",
    "gpu.proc_mem": "gpu.process.memory.usage",
}
_NO_QUANTITY = frozenset({"id", "bitmask"})  # a mean of an id or a bitmask means nothing
_GPU = re.compile(r"^gpu\.(\d+)\.(.+)$")
_MIG = re.compile(r"^mig\.(\d+)\.(.+)$")
_CORE = re.compile(r"^cpu\.(\d+)\.util_pct$")
_MODES = {"user": "user", "system": "system", "iowait": "iowait", "steal": "steal"}


class _Plan:
    """Collects points under metric names, checking that one name keeps one instrument/unit."""

    def __init__(self) -> None:
        self.metrics: dict[str, Metric] = {}

    def add(self, name: str, inst: Instrument, unit: str, desc: str, point: Point) -> None:
        had = self.metrics.get(name)
        if had is None:
            self.metrics[name] = Metric(name, inst, unit, desc, (point,))
            return
        if (had.instrument, had.unit) != (inst, unit):  # pragma: no cover - a mapping bug
            raise AssertionError(
                f"metric {name} planned as {had.instrument}/{had.unit} and {inst}/{unit}"
            )
        self.metrics[name] = Metric(name, inst, unit, had.description, (*had.points, point))


def plan_metrics(
    columns: Sequence[Column], gpus: Iterable[Gpu] = (), cpus_of_process: int = 1
) -> list[Metric]:
    """The metrics to export for a sampler with ``columns``.

    Parameters
    ----------
    columns : sequence of Column
        The sampler's columns (``time``/``mono_ns`` are ignored).
    gpus : iterable of Gpu
        What is known of each GPU label (others get ``hw.id = "gpu{i}"``).
    cpus_of_process : int
        CPUs the monitored process may run on: ``process.cpu.utilization`` is CPU time per
        wall time and per such CPU (0-1), as the convention defines it.
    """
    by_name = {c.name: c for c in columns}
    known = {g.label: g for g in gpus}
    plan = _Plan()
    for col in columns:
        name = col.name
        if name in ("time", "mono_ns") or _SKIP.search(name):
            continue
        gpu_match = _GPU.match(name)
        attrs: dict[str, str | int] = {}
        key = name
        if gpu_match:
            label = gpu_match.group(1)
            attrs = gpu_attrs(known.get(label) or Gpu(label, f"gpu{label}"))
            key = f"gpu.{{i}}.{gpu_match.group(2)}"
        row = _SEMCONV.get(key)
        if row is not None:
            metric, inst, unit, scale, extra, stat, with_max = row
            point = Point(name, stat, {**attrs, **extra}, scale)
            plan.add(metric, inst, unit, col.help, point)
            if with_max:
                plan.add(
                    f"{MAX_PREFIX}{metric}{MAX_SUFFIX}", "gauge", unit,
                    f"Largest value of {metric} in the export window.",
                    Point(name, "max", {**attrs, **extra}, scale),
                )  # fmt: skip
            continue
        if name == "proc.cpu_pct":
            _plan_process_cpu(plan, col, cpus_of_process)
            continue
        if _plan_cpu_or_disk(plan, col, by_name):
            continue
        _plan_generic(plan, col, attrs, gpu_match)
    return list(plan.metrics.values())


def _plan_process_cpu(plan: _Plan, col: Column, cpus: int) -> None:
    scale = 0.01 / max(cpus, 1)
    plan.add("process.cpu.utilization", "gauge", "1",
             "CPU time of the process per wall time and per CPU it may run on.",
             Point(col.name, "mean", {}, scale))  # fmt: skip
    plan.add(f"{MAX_PREFIX}process.cpu.utilization{MAX_SUFFIX}", "gauge", "1",
             "Largest value of process.cpu.utilization in the export window.",
             Point(col.name, "max", {}, scale))  # fmt: skip
    plan.add("process.cpu.time", "counter", "s",
             "CPU seconds of the process, integrated from proc.cpu_pct over the rows the "
             "exporter read since it started.",
             Point(col.name, "cpu_seconds", {}, 0.01))  # fmt: skip


def _plan_cpu_or_disk(plan: _Plan, col: Column, by_name: Mapping[str, Column]) -> bool:
    """CPU modes, CPU cores and filesystems: conventions whose attributes come from the name."""
    name = col.name
    mode = re.match(r"^cpu\.(\w+)_pct$", name)
    if mode and mode.group(1) in _MODES:
        plan.add("stroboscope.cpu.mode.utilization", "gauge", "1",
                 "Share of all CPU time spent in each mode, all cores.",
                 Point(name, "mean", {"cpu.mode": _MODES[mode.group(1)]}, 0.01))  # fmt: skip
        return True
    core = _CORE.match(name)
    if core:
        plan.add("stroboscope.cpu.core.utilization", "gauge", "1",
                 "Share of each logical CPU's time spent busy.",
                 Point(name, "mean", {"cpu.logical_number": int(core.group(1))}, 0.01))  # fmt: skip
        return True
    disk = usage_prefix(name)
    if disk is None:
        return False
    prefix, what = disk
    helps = {n: c.help for n, c in by_name.items()}
    mount = {"system.filesystem.mountpoint": mountpoint(helps, prefix)}
    if what == "used_pct":
        plan.add("system.filesystem.utilization", "gauge", "1", col.help,
                 Point(name, "mean", mount, 0.01))  # fmt: skip
    elif what == "total_bytes":
        plan.add("system.filesystem.limit", "updowncounter", "By", col.help,
                 Point(name, "last", mount))  # fmt: skip
    else:
        desc = "Filesystem bytes by state: free (writable by unprivileged users), used (the rest)."
        plan.add("system.filesystem.usage", "updowncounter", "By", desc,
                 Point(name, "mean", {**mount, "system.filesystem.state": "free"}))  # fmt: skip
        if f"{prefix}total_bytes" in by_name:
            used = Point(f"{prefix}total_bytes", "mean",
                         {**mount, "system.filesystem.state": "used"}, minus=name)  # fmt: skip
            plan.add("system.filesystem.usage", "updowncounter", "By", desc, used)
    return True


def _plan_generic(
    plan: _Plan, col: Column, attrs: dict[str, str | int], gpu_match: re.Match[str] | None
) -> None:
    """``stroboscope.<column without its unit suffix>`` (GPU and MIG indices as attributes)."""
    if col.unit in _NO_QUANTITY:
        return
    base = f"gpu.{gpu_match.group(2)}" if gpu_match else col.name
    mig = _MIG.match(base[4:]) if gpu_match else None
    if mig:
        base = f"gpu.mig.{mig.group(2)}"
        attrs = {**attrs, "stroboscope.gpu.mig.instance": int(mig.group(1))}
    unit, scale = {"count": "{count}", "1": "1"}.get(col.unit, col.unit), 1.0
    suffix = UNITS[col.unit].strip if col.unit in _UCUM else ""
    if suffix and base.endswith(suffix):
        base, (unit, scale) = base[: -len(suffix)], _UCUM[col.unit]
    if col.kind == "counter":
        inst: Instrument = "counter"
        stat: Stat = "total"
    else:
        # A count (threads, processes) is reported as its last value: a mean of 5.99 threads is
        # a value the process never had. Every other level or rate: the window mean.
        inst, stat = "gauge", ("last" if col.unit == "count" else "mean")
    name = f"stroboscope.{_RENAME.get(base, base)}"
    if name in plan.metrics and plan.metrics[name].unit != unit:  # pragma: no cover
        name = f"stroboscope.{col.name}"
    plan.add(name, inst, unit, col.help, Point(col.name, stat, attrs, scale))
