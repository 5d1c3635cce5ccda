"""The gpu source's field counters on the fake NVML library: PCIe and NVLink bytes since start,
their rates timed by the driver's own timestamps, 32-bit wraps, unsupported fields without a
column, a GPU lost mid-run and an energy counter that wraps.

Each batch of field values the fake serves is stamped 0.2 s after the previous one
(``field_time``), while the source polls every 20 ms: a rate timed by the poll would be ten times
the rate timed by the driver. Each time the gpu source is built (the Sampler may build it more
than once, to learn its columns) it probes the counters once, taking one scripted value: the
scripts start with a run of equal values so the source's first reading lands in that run
whatever the number of probes, and the hand-computed totals hold. A reading the sampler's tick
did not copy before the next one landed is skipped in the table, so sequences are checked as
subsets plus their exact final values.
"""

from __future__ import annotations

import pyarrow as pa
import stroboscope
from _fake_nvml import ScriptFn, fake_calls, record_reads, values
from stroboscope import Sampler

PAD = 8  # equal values before the counters move: room for the build-time probes

COUNTERS = f"""
devices 1
field_time 0 1000000 200000
set 0 pcie_tx {"0 " * PAD} 1000 2000 3000
set 0 pcie_rx {"4294966296 " * PAD} 4294967096 600 1400
set 0 nvlink_tx {"10 " * PAD} 20 30 40
fail 0 field:139 NOT_SUPPORTED
"""


def rates(table: pa.Table, name: str) -> set[float]:
    """The distinct rates of column ``name``, rounded to 1e-6 (they are divisions)."""
    return {round(v, 6) for v in values(table, name)}


def test_link_counters_and_rates_from_driver_timestamps(nvml: ScriptFn) -> None:
    nvml(COUNTERS)
    s = Sampler(0.005, sources={"gpu": 0.02}, gpu_samples=False)
    names = [c.name for c in s.columns]
    # NVLink RX is not supported: no column at all, rather than a column of nulls.
    assert "gpu.0.nvlink_rx_bytes" not in names
    assert "gpu.0.nvlink_rx_bytes_per_s" not in names
    units = {c.name: c.unit for c in s.columns}
    assert units["gpu.0.pcie_tx_bytes_per_s"] == "bytes/s"
    assert units["gpu.0.nvlink_tx_bytes"] == "bytes"
    table = record_reads(s, PAD + 8)

    # PCIe TX: +1000 bytes per 0.2 s of driver time, three times, then no change.
    tx = values(table, "gpu.0.pcie_tx_bytes")
    assert tx == sorted(tx) and set(tx) <= {0, 1000, 2000, 3000} and tx[-1] == 3000
    assert rates(table, "gpu.0.pcie_tx_bytes_per_s") == {0.0, 5000.0}  # 1000 B / 0.2 s
    assert values(table, "gpu.0.pcie_tx_bytes_per_s")[-1] == 0.0
    # PCIe RX: +800 per batch, the second step across the 32-bit wrap (200 to the top + 600).
    rx = values(table, "gpu.0.pcie_rx_bytes")
    assert set(rx) <= {0, 800, 1600, 2400} and rx[-1] == 2400
    assert rates(table, "gpu.0.pcie_rx_bytes_per_s") == {0.0, 4000.0}
    # NVLink TX: the driver counts KiB; +10 KiB per 0.2 s.
    nv = values(table, "gpu.0.nvlink_tx_bytes")
    assert set(nv) <= {0, 10240, 20480, 30720} and nv[-1] == 30720
    assert rates(table, "gpu.0.nvlink_tx_bytes_per_s") == {0.0, 51200.0}

    device = stroboscope.gpu_status()["devices"][0]
    why = device["unavailable"]["nvlink_rx_bytes"]
    assert "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX" in why and "NOT_SUPPORTED" in why
    assert "pcie_tx_bytes" not in device["unavailable"]
    del s


def test_old_driver_has_no_counter_columns(nvml: ScriptFn) -> None:
    nvml("devices 1\n", library="old")  # no nvmlDeviceGetFieldValues at all
    s = Sampler(0.01, sources=["gpu"], gpu_samples=False)
    names = [c.name for c in s.columns]
    assert "gpu.0.temp_c" in names
    assert not [n for n in names if "pcie" in n or "nvlink" in n]
    unavailable = stroboscope.gpu_status()["devices"][0]["unavailable"]
    assert "not exported" in unavailable["pcie_rx_bytes"]
    del s


def test_gpu_lost_mid_run_nulls_its_counters(nvml: ScriptFn) -> None:
    # GPU 1 serves each value PAD times (probes and reads), then is lost; GPU 0 carries on.
    nvml(f"devices 2\nset 1 pcie_tx 100\nset 0 pcie_tx 100\nlost 1 after {PAD}\n")
    s = Sampler(0.005, sources={"gpu": 0.02}, gpu_samples=False)
    table = record_reads(s, PAD + 10)
    lost = table.column("gpu.1.pcie_tx_bytes").to_pylist()
    seen = [v for v in lost if v is not None]
    assert seen and set(seen) == {0} and len(seen) < PAD  # the readings before the loss
    last_seen = max(i for i, v in enumerate(lost) if v is not None) if seen else -1
    # After the loss GPU 1's cells are null while GPU 0's keep coming.
    later_0 = values(table.slice(last_seen + 1), "gpu.0.pcie_tx_bytes")
    assert len(later_0) >= 5 and set(later_0) == {0}
    assert table.slice(last_seen + 1).column("gpu.1.temp_c").null_count == (
        table.num_rows - last_seen - 1
    )
    reason = s.stats().source("gpu").reason
    assert reason is not None and "lost" in reason
    del s


def test_energy_counter_wraps_without_the_field(nvml: ScriptFn) -> None:
    # The energy field (83) is unsupported here, so nvmlDeviceGetTotalEnergyConsumption serves
    # it, wrapping at 2**32 mJ: +1000, +1000 across the wrap (296 + 704), +1000.
    nvml(
        "devices 1\n"
        "fail 0 field:83 NOT_SUPPORTED\n"
        f"set 0 energy {'4294966000 ' * PAD} 4294967000 704 1704\n"
    )
    s = Sampler(0.005, sources={"gpu": 0.02}, gpu_samples=False)
    table = record_reads(s, PAD + 8)
    energy = values(table, "gpu.0.energy_mj")
    assert energy == sorted(energy) and set(energy) <= {0, 1000, 2000, 3000}
    assert energy[-1] == 3000
    assert "energy_mj" not in stroboscope.gpu_status()["devices"][0]["unavailable"]
    del s


def test_status_during_a_run_does_not_query_the_gpus(nvml: ScriptFn) -> None:
    # gpu_status() (which every snapshot's provenance calls) used to build a probe source and
    # read every metric of every GPU again; with a gpu source alive it reports that source's
    # findings and leaves the GPUs (and the fake's scripted values) alone.
    nvml("devices 1\nfail 0 fan NOT_SUPPORTED\n")
    s = Sampler(0.005, sources={"gpu": 0.02}, gpu_samples=False)
    record_reads(s, 3)
    before = fake_calls("nvmlDeviceGetTemperature")
    status = stroboscope.gpu_status()
    assert "not supported" in status["devices"][0]["unavailable"]["fan_pct"].lower()
    s.snapshot()
    assert fake_calls("nvmlDeviceGetTemperature") == before
    del s
