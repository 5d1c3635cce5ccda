"""The compatibility keys of the WandB-style monitors, mapped from stroboscope's canonical columns.

This is the only place where compatibility keys (``cpu``, ``memory``, ``network``,
``proc.memory.rssMB``, ``gpu.0.powerWatts``, …) exist; everything else in stroboscope speaks in
canonical columns (``cpu.util_pct``, ``mem.util_pct``, ``net.sent_bytes``, ``gpu.0.power_w``).
Units follow the pure-Python monitors: percentages 0 to 100, memory in MiB (``…MB`` keys divide by
1,048,576), network in bytes, temperature in °C, power in W.

Which aggregate a key publishes (the last element of each row of the tables below):

- ``WINDOW``: the monitor's ``aggregate`` over the window (mean, max or last), unless the
  package's own rule (:mod:`stroboscope.analysis._last_value`) makes it the last value: running
  totals (columns of kind ``counter``: ``network``, ``disk.in``/``disk.out``, ``energyJoules``)
  and integer columns in counts, MHz or bitmasks (``proc.cpu.threads``, clocks, ECC counts),
  because a mean of a count (5.99 threads) is a value the process never had;
- ``LAST``: the window's last value whatever the aggregate, marked per key. The GPU tables mark
  every key that publishes its last value, those of the rule too, because they are the
  translation table ``docs/compat-keys.md`` prints and its test compares with them; the marks
  beyond the rule are levels it does not reach (fan %, power limit, device bytes in use). The
  system keys carry no mark the rule already gives.

:meth:`CompatKeys.aggregates` (and ``SystemMonitor.key_aggregates``) give the rule per key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from stroboscope.analysis import gpu_columns
from stroboscope.sampling import available_sources

WINDOW = "window"
"""The key publishes the monitor's aggregate of the window (mean, max or last), or its last value
where the package's rule says so (:mod:`stroboscope.analysis._last_value`)."""
LAST = "last"
"""The key publishes the window's last value whatever the aggregate (marked per key)."""

MIB = 1048576.0
"""Bytes per MiB: the ``…MB`` keys of the pure-Python monitors are bytes / 2**20."""

# (key, canonical column, scale, aggregate rule). The monitor's default key set, in the
# order it publishes them.
SYSTEM_KEYS: tuple[tuple[str, str, float, str], ...] = (
    ("cpu", "cpu.util_pct", 1.0, WINDOW),  # system CPU busy %, all cores
    ("memory", "mem.util_pct", 1.0, WINDOW),  # system memory in use, %
    ("disk", "disk.used_pct", 1.0, WINDOW),  # usage of the filesystem holding /, %
    # system MemAvailable, MiB
    ("proc.memory.availableMB", "mem.available_bytes", 1.0 / MIB, WINDOW),
    ("proc.memory.rssMB", "proc.rss_bytes", 1.0 / MIB, WINDOW),  # process RSS, MiB
    ("proc.memory.percent", "proc.mem_pct", 1.0, WINDOW),  # process RSS / physical memory, %
    ("proc.cpu.threads", "proc.threads", 1.0, WINDOW),  # threads of the process (a count)
)

NETWORK_KEY = "network"
"""Bytes sent/received by all interfaces since the monitor was made: ``{"sent": …, "recv": …}``."""
NETWORK_COLUMNS: tuple[tuple[str, str], ...] = (
    ("sent", "net.sent_bytes"),
    ("recv", "net.recv_bytes"),
)

# Per GPU i: (key suffix after "gpu.{i}.", canonical suffix after "gpu.{i}.", scale, rule).
GPU_KEYS: tuple[tuple[str, str, float, str], ...] = (
    ("gpu", "util_pct", 1.0, WINDOW),  # % of the sample period a kernel ran
    ("memory", "mem_util_pct", 1.0, WINDOW),  # % of the sample period memory was read/written
    ("memoryAllocated", "mem_allocated_pct", 1.0, WINDOW),  # used / total device memory, %
    ("temp", "temp_c", 1.0, WINDOW),  # °C
    ("powerWatts", "power_w", 1.0, WINDOW),  # W (only on devices that report power)
    ("powerPercent", "power_pct", 1.0, WINDOW),  # % of the enforced power limit
)

# extended=True: the fuller W&B-style key set. W&B's own GPU keys (its system monitor, wandb
# 0.31: gpu.{i}.<key>) where one of our columns carries the same value, in W&B's units;
# docs/compat-keys.md lists them side by side with the ones we do not have and why.
EXTENDED_SYSTEM_KEYS: tuple[tuple[str, str, float, str], ...] = (
    ("proc.cpu.percent", "proc.cpu_pct", 1.0, WINDOW),  # process CPU, 100 per busy core (psutil)
    ("disk.in", "disk.read_bytes", 1.0 / MIB, WINDOW),  # MiB read from disks since start (total)
    ("disk.out", "disk.write_bytes", 1.0 / MIB, WINDOW),  # MiB written to disks since start
)
EXTENDED_CORE_KEY = ("cpu.{i}.cpu_percent", "cpu.{i}.util_pct")  # per core busy %
EXTENDED_GPU_KEYS: tuple[tuple[str, str, float, str], ...] = (
    ("memoryAllocatedBytes", "mem_used_bytes", 1.0, LAST),  # bytes
    ("smClock", "sm_clock_mhz", 1.0, LAST),  # MHz
    ("memoryClock", "mem_clock_mhz", 1.0, LAST),  # MHz
    ("graphicsClock", "graphics_clock_mhz", 1.0, LAST),  # MHz
    ("enforcedPowerLimitWatts", "power_limit_w", 1.0, LAST),  # W
    ("energyJoules", "energy_mj", 1e-3, LAST),  # J since the monitor started (W&B: driver load)
    ("fanSpeed", "fan_pct", 1.0, LAST),  # % of maximum
    ("correctedMemoryErrors", "ecc_corrected", 1.0, LAST),  # volatile ECC count, as W&B's
    # W&B emits "uncorrectedMemoryErrors" (its docs spell it "unCorrectedMemoryErrors").
    ("uncorrectedMemoryErrors", "ecc_uncorrected", 1.0, LAST),
    # Bytes/s over the window (W&B: NVML's 20 ms PCIe reading, or GPM on Hopper and newer).
    ("pcieTxBytes", "pcie_tx_bytes_per_s", 1.0, WINDOW),
    ("pcieRxBytes", "pcie_rx_bytes_per_s", 1.0, WINDOW),
    ("nvlinkTxBytes", "nvlink_tx_bytes_per_s", 1.0, WINDOW),  # W&B: GPM only
    ("nvlinkRxBytes", "nvlink_rx_bytes_per_s", 1.0, WINDOW),
)
# extended=True, GPUs with GPM (Hopper and newer, the gpu_gpm source): W&B's GPM keys (wandb 0.31,
# its NVML collector: percentages as NVML gives them, throughput MiB/s times 2**20 = bytes/s).
# Levels averaged over each GPM sample pair (>= 100 ms), so the window's aggregate applies.
EXTENDED_GPM_KEYS: tuple[tuple[str, str, float, str], ...] = (
    ("smActive", "sm_active_pct", 1.0, WINDOW),  # % of SMs busy
    ("smOccupancy", "sm_occupancy_pct", 1.0, WINDOW),  # % of the maximum resident warps
    ("pipeTensorActive", "tensor_active_pct", 1.0, WINDOW),  # % of time any tensor pipe ran
    ("pipeTensorHmmaActive", "hmma_active_pct", 1.0, WINDOW),  # % HMMA (FP16/BF16 tensor)
    ("pipeFp16Active", "fp16_active_pct", 1.0, WINDOW),  # % non-tensor FP16
    ("pipeFp32Active", "fp32_active_pct", 1.0, WINDOW),  # % non-tensor FP32
    ("pipeFp64Active", "fp64_active_pct", 1.0, WINDOW),  # % non-tensor FP64
    ("dramActive", "dram_active_pct", 1.0, WINDOW),  # % of the DRAM bandwidth
    # W&B's GPM throughput goes out under its PCIe/NVLink keys, bytes/s. Ours fill those keys
    # only on a GPU without the byte-counter columns above (the first table with a column wins).
    ("pcieTxBytes", "gpm_pcie_tx_bytes_per_s", 1.0, WINDOW),
    ("pcieRxBytes", "gpm_pcie_rx_bytes_per_s", 1.0, WINDOW),
    ("nvlinkTxBytes", "gpm_nvlink_tx_bytes_per_s", 1.0, WINDOW),
    ("nvlinkRxBytes", "gpm_nvlink_rx_bytes_per_s", 1.0, WINDOW),
)
# bytes (an integer level: LAST)
EXTENDED_GPU_PROCESS_KEY = ("gpu.process.{i}.memoryAllocatedBytes", "proc_mem_bytes")

BASE_SOURCES = ("cpu", "memory", "network", "disk", "process")
EXTENDED_SOURCES = ("cpu_cores", "diskio")
GPU_SOURCE = "gpu"
GPM_SOURCE = "gpu_gpm"

_CORE_UTIL = re.compile(r"^cpu\.(\d+)\.util_pct$")


def gpu_labels(columns: Sequence[str]) -> list[str]:
    """The GPU indices (as text) that have a utilisation column, in numeric order:
    ``["0", "1", …]``."""
    return [str(i) for i in gpu_columns(list(columns), "util_pct")]


def gpm_available() -> bool:
    """Whether the ``gpu_gpm`` source works here (a GPU with GPM, a driver with ``nvmlGpm*``)."""
    return any(s["name"] == GPM_SOURCE and s["available"] for s in available_sources())


def sources(extended: bool, gpu: bool, gpm: bool | None = None) -> list[str]:
    """The sampler sources the compatible key set reads.

    ``gpm``: whether to add the ``gpu_gpm`` source (``extended`` with ``gpu`` only); ``None``
    asks :func:`gpm_available`.
    """
    out = list(BASE_SOURCES)
    if extended:
        out += EXTENDED_SOURCES
    if gpu:
        out.append(GPU_SOURCE)
        if extended and (gpm_available() if gpm is None else gpm):
            out.append(GPM_SOURCE)
    return out


@dataclass(frozen=True)
class KeyMap:
    """One published key: the canonical column it comes from, the factor applied and its
    aggregate rule (:data:`WINDOW` or :data:`LAST`)."""

    key: str
    column: str
    scale: float = 1.0
    aggregate: str = WINDOW


class CompatKeys:
    """The concrete key map of one monitor, built from the columns its sampler really has.

    Parameters
    ----------
    columns : sequence of str
        The sampler's column names.
    rank : int, optional
        When given, every key is prefixed with ``rank{rank}.``.
    extended : bool
        Add the fuller W&B-style keys.
    """

    def __init__(self, columns: Sequence[str], rank: int | None, extended: bool) -> None:
        prefix = f"rank{rank}." if rank is not None else ""
        have = set(columns)
        self.prefix = prefix
        self.gpu_labels = gpu_labels(columns)
        maps: list[KeyMap] = []
        for i in self.gpu_labels:
            table = GPU_KEYS + (EXTENDED_GPU_KEYS + EXTENDED_GPM_KEYS if extended else ())
            maps += [KeyMap(f"{prefix}gpu.{i}.{k}", f"gpu.{i}.{c}", s, a) for k, c, s, a in table]
            if extended:
                key, suffix = EXTENDED_GPU_PROCESS_KEY
                maps.append(KeyMap(prefix + key.format(i=i), f"gpu.{i}.{suffix}", 1.0, LAST))
        system = SYSTEM_KEYS + (EXTENDED_SYSTEM_KEYS if extended else ())
        maps += [KeyMap(prefix + k, c, s, a) for k, c, s, a in system]
        if extended:
            cores = sorted(int(m.group(1)) for c in columns if (m := _CORE_UTIL.match(c)))
            key, column = EXTENDED_CORE_KEY
            maps += [KeyMap(prefix + key.format(i=i), column.format(i=i)) for i in cores]
        # A key is read from the first of its columns this sampler has (PCIe/NVLink throughput:
        # the byte counters' rate, else GPM's).
        taken: set[str] = set()
        self.maps: list[KeyMap] = []
        for km in maps:
            if km.column in have and km.key not in taken:
                taken.add(km.key)
                self.maps.append(km)
        self.network_key = prefix + NETWORK_KEY
        self.network_columns = [(k, c) for k, c in NETWORK_COLUMNS if c in have]

    @property
    def columns(self) -> list[str]:
        """Every canonical column the keys read."""
        return [m.column for m in self.maps] + [c for _, c in self.network_columns]

    @property
    def last_columns(self) -> list[str]:
        """The canonical columns whose keys are marked :data:`LAST` (the package's rule adds
        its own: running totals, integer counts and clocks)."""
        return [m.column for m in self.maps if m.aggregate == LAST]

    def aggregates(
        self, how: str, counters: Sequence[str] = (), levels: Sequence[str] = ()
    ) -> dict[str, str]:
        """Which aggregate each key publishes when the monitor's aggregate is ``how``:
        ``{key: "mean" | "max" | "last"}``. Keys of :data:`LAST` columns, of ``counters``
        (running totals) and of ``levels`` (the integer counts and clocks of the package's
        rule: :func:`stroboscope.analysis._last_value.counter_columns` and ``level_columns``
        of the sampler's columns) give ``"last"``, ``network`` too when its columns are
        counters; the others give ``how``."""
        last = set(self.last_columns) | set(counters) | set(levels)
        out = {m.key: "last" if m.column in last else how for m in self.maps}
        if self.network_columns:
            totals = all(c in last for _, c in self.network_columns)
            out[self.network_key] = "last" if totals else how
        return out

    def update(
        self,
        sampler: MutableMapping[str, Any],
        values: Mapping[str, float],
        network_offset: Mapping[str, int],
    ) -> None:
        """Write the keys whose column has a value in ``values`` into ``sampler``.

        Keys without a value keep what they had (carried over); keys that never had one stay
        absent. ``network`` is ``offset + column`` per direction, so it counts from the moment the
        monitor was made rather than from the sampler's first reading.
        """
        for m in self.maps:
            value = values.get(m.column)
            if value is not None:
                sampler[m.key] = value if m.scale == 1.0 else value * m.scale
        net = {k: values[c] for k, c in self.network_columns if c in values}
        if net:
            current = dict(sampler.get(self.network_key) or {})
            for k, v in net.items():
                current[k] = int(v) + int(network_offset.get(k, 0))
            sampler[self.network_key] = current
