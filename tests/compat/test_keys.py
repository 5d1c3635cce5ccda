"""W&B GPU key parity of the drop-in monitor (extended=True): values in W&B's units against the
fake NVML's scripted ones, and docs/compat-keys.md against the key tables it documents."""

from __future__ import annotations

import gc
import os
import re
import threading
import time
from typing import Any

import pytest
from _fake_nvml import ScriptFn
from _paths import ROOT
from stroboscope.analysis._last_value import counter_columns, level_columns
from stroboscope.compat import CompatKeys, SystemMonitor
from stroboscope.compat._keys import (
    EXTENDED_GPM_KEYS,
    EXTENDED_GPU_KEYS,
    EXTENDED_GPU_PROCESS_KEY,
    GPU_KEYS,
    MIB,
    sources,
)
from stroboscope.sampling import CoreSampler
from stroboscope.senders import AbstractBackendSender, StatsDict

DOC = ROOT / "docs" / "compat-keys.md"

SCRIPT = """
devices 2
set 0 util 42
set 0 mem_util 17
set 0 mem_total 150000000000
set 0 mem_used 30000000000
set 0 temp 65
set 0 power 250000
set 0 power_limit 700000
set 0 energy 5000 7000 9500
set 0 sm_clock 1755
set 0 mem_clock 2619
set 0 gfx_clock 1410
set 0 fan 40
set 0 ecc_corrected 3
set 0 ecc_uncorrected 1
set 1 util 7
fail 1 fan NOT_SUPPORTED
fail 1 power_limit NOT_SUPPORTED
"""


class Recorder(AbstractBackendSender):
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        with self.lock:
            self.events.append(dict(event))


@pytest.fixture
def fake_gpus(nvml: ScriptFn) -> None:
    nvml(SCRIPT)


def test_extended_gpu_keys_in_wandb_units(fake_gpus: None) -> None:
    rec = Recorder()
    mon = SystemMonitor(os.getpid(), rec, 60.0, extended=True, aggregate="last")
    mon.start()
    # The counter counts from the source's first reading: 5000 mJ, or 7000 mJ where the fake
    # served its first value before that reading (it happens:
    # tests/analysis/test_scope_summary_energy.py fails now and then for this): 4.5 J or 2.5 J
    # once the last scripted value is read.
    final = {4.5, 2.5}
    try:  # until the energy counter's last scripted value has been read (not: some time)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            mon.flush()
            if rec.events and rec.events[-1].get("gpu.0.energyJoules") in final:
                break
            time.sleep(0.05)
        energy = mon._core.snapshot().to_arrow().column("gpu.0.energy_mj").drop_null()
    finally:
        mon.shutdown()
    ev = rec.events[-1]
    assert ev["gpu.0.smClock"] == 1755  # MHz
    assert ev["gpu.0.memoryClock"] == 2619
    assert ev["gpu.0.graphicsClock"] == 1410
    assert ev["gpu.0.enforcedPowerLimitWatts"] == 700.0  # NVML's mW as W
    assert ev["gpu.0.energyJoules"] in final  # mJ since the monitor's first reading, as J
    assert ev["gpu.0.energyJoules"] == energy[-1].as_py() / 1000
    assert ev["gpu.0.fanSpeed"] == 40.0
    assert ev["gpu.0.correctedMemoryErrors"] == 3
    assert ev["gpu.0.uncorrectedMemoryErrors"] == 1  # W&B's spelling (was unCorrected...)
    assert "gpu.0.unCorrectedMemoryErrors" not in ev
    assert ev["gpu.0.memoryAllocatedBytes"] == 30_000_000_000
    assert ev["gpu.0.gpu"] == 42.0 and ev["gpu.0.memory"] == 17.0
    assert ev["gpu.0.powerWatts"] == 250.0
    assert ev["gpu.0.powerPercent"] == pytest.approx(100 * 250 / 700)
    # What a device does not report never appears, for it alone.
    assert "gpu.1.fanSpeed" not in ev and "gpu.1.enforcedPowerLimitWatts" not in ev
    assert ev["gpu.1.gpu"] == 7.0 and ev["gpu.1.smClock"] == 1980  # the fake's default
    # Counts, clocks and totals publish the window's last value whatever the aggregate.
    rules = mon.key_aggregates
    assert rules["gpu.0.smClock"] == rules["gpu.0.energyJoules"] == "last"
    # Keys only from columns this sampler has: no rate keys without the rate columns.
    names = {c.name for c in mon._core.columns}
    for key, column, _, _ in EXTENDED_GPU_KEYS:
        assert (f"gpu.0.{key}" in rules) == (f"gpu.0.{column}" in names), key


def test_rate_columns_map_to_wandb_throughput_keys() -> None:
    columns = ["mono_ns", "gpu.0.util_pct"] + [
        f"gpu.0.{link}_{d}_bytes_per_s" for link in ("pcie", "nvlink") for d in ("tx", "rx")
    ]
    keys = CompatKeys(columns, rank=3, extended=True)
    maps = {m.key: (m.column, m.scale, m.aggregate) for m in keys.maps}
    assert maps["rank3.gpu.0.pcieTxBytes"] == ("gpu.0.pcie_tx_bytes_per_s", 1.0, "window")
    assert maps["rank3.gpu.0.nvlinkRxBytes"] == ("gpu.0.nvlink_rx_bytes_per_s", 1.0, "window")
    assert keys.aggregates("max")["rank3.gpu.0.pcieRxBytes"] == "max"  # a rate: the aggregate
    sampler: dict[str, Any] = {}
    keys.update(sampler, {"gpu.0.pcie_tx_bytes_per_s": 2.5e9}, {})
    assert sampler == {"rank3.gpu.0.pcieTxBytes": 2.5e9}  # bytes/s, as W&B's
    assert CompatKeys(columns, rank=None, extended=False).maps[0].key == "gpu.0.gpu"
    assert all("Bytes" not in m.key for m in CompatKeys(columns, None, False).maps)


# GPU 0 a Hopper-like GPU (GPM on) without the PCIe TX counter field, GPU 1 without GPM. NVML's
# GPM metric ids: 2 SM, 3 occupancy, 5 any tensor, 7 HMMA, 10 DRAM, 12 FP32, 13 FP16, 20/21 PCIe
# TX/RX and 60/61 NVLink RX/TX (MiB/s); FP64 (11) is not scripted: NOT_SUPPORTED.
GPM_SCRIPT = """
devices 2
gpm 0 on
gpm_metric 0 2 40 50 60
gpm_metric 0 3 25
gpm_metric 0 5 70
gpm_metric 0 7 55
gpm_metric 0 10 33.5
gpm_metric 0 12 12.5
gpm_metric 0 13 8
gpm_metric 0 20 3 5
gpm_metric 0 21 9
gpm_metric 0 60 2
gpm_metric 0 61 4
fail 0 field:197 NOT_SUPPORTED
"""


def test_gpm_keys_in_wandb_units(nvml: ScriptFn) -> None:
    nvml(GPM_SCRIPT)
    assert "gpu_gpm" not in sources(False, True)  # the default key set reads no GPM
    rec = Recorder()
    mon = SystemMonitor(os.getpid(), rec, 60.0, extended=True, aggregate="last")
    mon.start()
    try:  # until both ramps have reached their last scripted value (not: some time)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            mon.flush()
            ev = rec.events[-1] if rec.events else {}
            if ev.get("gpu.0.smActive") == 60.0 and ev.get("gpu.0.pcieTxBytes") == 5 * MIB:
                break
            time.sleep(0.05)
    finally:
        mon.shutdown()
        gc.collect()
    ev = rec.events[-1]
    assert ev["gpu.0.smActive"] == 60.0  # %, NVML's value as is
    assert ev["gpu.0.smOccupancy"] == 25.0
    assert ev["gpu.0.pipeTensorActive"] == 70.0
    assert ev["gpu.0.pipeTensorHmmaActive"] == 55.0
    assert ev["gpu.0.dramActive"] == 33.5
    assert ev["gpu.0.pipeFp32Active"] == 12.5
    assert ev["gpu.0.pipeFp16Active"] == 8.0
    assert "gpu.0.pipeFp64Active" not in ev  # NOT_SUPPORTED: absent, not 0
    # No PCIe TX counter on GPU 0: W&B's key carries GPM's MiB/s as bytes/s.
    assert ev["gpu.0.pcieTxBytes"] == 5 * 1048576
    # The counters' rates keep the other throughput keys (the fake's counters stand still).
    assert ev["gpu.0.pcieRxBytes"] == 0.0 and ev["gpu.0.nvlinkTxBytes"] == 0.0
    assert 9 * MIB not in ev.values() and 4 * MIB not in ev.values()
    columns = {m.key: m.column for m in mon._keys.maps}
    assert columns["gpu.0.pcieTxBytes"] == "gpu.0.gpm_pcie_tx_bytes_per_s"
    assert columns["gpu.0.pcieRxBytes"] == "gpu.0.pcie_rx_bytes_per_s"
    assert columns["gpu.1.pcieTxBytes"] == "gpu.1.pcie_tx_bytes_per_s"
    assert not any(k.startswith("gpu.1.") and "Active" in k for k in columns)  # no GPM there
    assert mon.key_aggregates["gpu.0.smActive"] == "last"
    units = {c.name: c.unit for c in mon._core.columns}
    assert units["gpu.0.sm_active_pct"] == "%"
    assert units["gpu.0.gpm_pcie_tx_bytes_per_s"] == "bytes/s"


def test_gpm_keys_follow_the_columns() -> None:
    gpm = [f"gpu.0.{c}" for _, c, _, _ in EXTENDED_GPM_KEYS]
    counters = ["gpu.0.pcie_tx_bytes_per_s", "gpu.0.nvlink_rx_bytes_per_s"]
    keys = CompatKeys(["gpu.0.util_pct", *gpm, *counters], rank=None, extended=True)
    maps = {m.key: m.column for m in keys.maps}
    assert len(maps) == len(keys.maps)  # one column per key
    assert maps["gpu.0.pcieTxBytes"] == "gpu.0.pcie_tx_bytes_per_s"  # counters first
    assert maps["gpu.0.nvlinkRxBytes"] == "gpu.0.nvlink_rx_bytes_per_s"
    assert maps["gpu.0.pcieRxBytes"] == "gpu.0.gpm_pcie_rx_bytes_per_s"  # else GPM
    assert maps["gpu.0.nvlinkTxBytes"] == "gpu.0.gpm_nvlink_tx_bytes_per_s"
    assert maps["gpu.0.pipeTensorHmmaActive"] == "gpu.0.hmma_active_pct"
    assert keys.aggregates("max")["gpu.0.dramActive"] == "max"  # a level: the aggregate
    plain = CompatKeys(["gpu.0.util_pct", *gpm], rank=None, extended=False)
    assert [m.key for m in plain.maps] == ["gpu.0.gpu"]
    assert sources(True, True, gpm=True)[-2:] == ["gpu", "gpu_gpm"]
    assert "gpu_gpm" not in sources(True, False, gpm=True) + sources(True, True, gpm=False)


def doc_rows(section: str) -> list[list[str]]:
    text = DOC.read_text()
    part = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in part.splitlines() if line.startswith("| `")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


def test_the_doc_table_is_the_key_tables() -> None:
    """Every published row of docs/compat-keys.md is a row of _keys.py, and back."""
    unit_scale = {"1": 1.0, "0.001": 1e-3}
    documented = set()
    for wandb, _, ours, _, scale, published, which, _ in doc_rows("Published"):
        key = re.fullmatch(r"`gpu\.(?:process\.)?\{i\}\.(\w+)`", wandb)
        col = re.fullmatch(r"`gpu\.\{i\}\.(\w+)`", ours)
        assert key and col, (wandb, ours)
        prefix = "process." if ".process." in wandb else ""
        documented.add((prefix + key.group(1), col.group(1), unit_scale[scale], published, which))
    code = {(k, c, s, a, "default") for k, c, s, a in GPU_KEYS}
    code |= {(k, c, s, a, "extended") for k, c, s, a in EXTENDED_GPU_KEYS}
    code |= {(k, c, s, a, "extended (GPM)") for k, c, s, a in EXTENDED_GPM_KEYS}
    process_key, process_column = EXTENDED_GPU_PROCESS_KEY
    code.add(("process." + process_key.rsplit(".", 1)[1], process_column, 1.0, "last", "extended"))
    assert documented == code
    missing = " ".join(row[0] for row in doc_rows("Not published"))
    for name in ("encoderUtilization", "pcieLinkGen"):
        assert name in missing
    for name in ("smActive", "pipeTensorActive", "dramActive"):  # published now
        assert name not in missing


def test_the_system_keys_last_values_come_from_the_one_rule() -> None:
    # The thread count and the running totals publish their last value by the package's rule
    # (a count, counters), read from the sampler's own columns; the key tables mark only what
    # the rule does not say or docs/compat-keys.md prints (the GPU keys).
    s = CoreSampler(0.01, sources=["process", "diskio", "network"], capacity=16)
    columns = s.columns
    s.close()
    keys = CompatKeys([c.name for c in columns], rank=None, extended=True)
    ruled = keys.aggregates("mean", counter_columns(columns), level_columns(columns))
    unruled = keys.aggregates("mean")
    for key in ("proc.cpu.threads", "disk.in", "disk.out", "network"):
        assert ruled[key] == "last", key
        assert unruled[key] == "mean", key  # no mark of their own: the rule's, not a copy
    assert ruled["proc.memory.rssMB"] == ruled["proc.cpu.percent"] == "mean"
    assert not keys.last_columns
