"""True per-process GPU utilisation on the fake NVML library: the monitored process's SM,
memory, encoder and decoder shares from nvmlDeviceGetProcessUtilization (summed over its
descendants), not a copy of the device's utilisation.

The fake serves the k-th successful nvmlDeviceGetProcessUtilization call one sample per scripted
process with timestamp k s and that process's k-th values (the last repeats); the source passes
the newest timestamp it has seen back as lastSeenTimeStamp. A reading the sampler's tick did not
copy before the next one landed is skipped in the table, so sequences are checked as subsets
plus their final values.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
import stroboscope
from _fake_nvml import ScriptFn, record_reads, values
from stroboscope import Sampler


@pytest.fixture
def child() -> Iterator[int]:
    """A child process of the test (a descendant of the monitored process) that just waits."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_shares_of_the_process_and_its_child(nvml: ScriptFn, child: int) -> None:
    nvml(
        "devices 1\n"
        "set 0 util 99\n"  # the device is busy: the process columns must not copy it
        "process_util 0 self 30/4/0/0 60/8/0/0\n"
        f"process 0 {child} 1048576\n"
        f"process_util 0 {child} 20/1/2/3\n"
        "process 0 1 4096\n"  # init: outside the tree
    )
    s = Sampler(0.005, sources={"gpu": 0.02}, gpu_samples=False)
    table = record_reads(s, 8)
    # First call: 30 + 20, 4 + 1, 0 + 2, 0 + 3; from the second on: 60 + 20, 8 + 1, 2, 3.
    sm = values(table, "gpu.0.proc_sm_util_pct")
    assert set(sm) <= {50.0, 80.0} and sm[-1] == 80.0
    mem = values(table, "gpu.0.proc_mem_util_pct")
    assert set(mem) <= {5.0, 9.0} and mem[-1] == 9.0
    assert set(values(table, "gpu.0.proc_enc_util_pct")) == {2.0}
    assert set(values(table, "gpu.0.proc_dec_util_pct")) == {3.0}
    assert set(values(table, "gpu.0.util_pct")) == {99.0}
    # The child's memory is the tree's (the process itself holds none); init is the other one.
    assert set(values(table, "gpu.0.proc_mem_bytes")) == {1048576}
    assert set(values(table, "gpu.0.other_procs")) == {1}
    units = {c.name: c.unit for c in s.columns}
    assert units["gpu.0.proc_sm_util_pct"] == "%"
    del s


def test_samples_without_the_process_read_zero(nvml: ScriptFn) -> None:
    # Only another process (not in the tree) has samples: the monitored tree was idle.
    nvml("devices 1\nset 0 util 90\nprocess_util 0 1 90/90/90/90\n")
    s = Sampler(0.005, sources={"gpu": 0.02}, gpu_samples=False)
    table = record_reads(s, 5)
    for name in ["sm", "mem", "enc", "dec"]:
        assert set(values(table, f"gpu.0.proc_{name}_util_pct")) == {0.0}
    assert set(values(table, "gpu.0.proc_mem_bytes")) == {0}
    assert set(values(table, "gpu.0.other_procs")) == {1}
    del s


def test_unsupported_process_utilisation_is_null_with_a_reason(nvml: ScriptFn) -> None:
    nvml("devices 1\nfail 0 nvmlDeviceGetProcessUtilization NOT_SUPPORTED\n")
    s = Sampler(0.005, sources={"gpu": 0.02}, gpu_samples=False)
    table = record_reads(s, 3)
    assert table.column("gpu.0.proc_sm_util_pct").null_count == table.num_rows
    assert set(values(table, "gpu.0.temp_c")) == {40.0}  # the rest of the device reads on
    why = stroboscope.gpu_status()["devices"][0]["unavailable"]["proc_dec_util_pct"]
    assert "nvmlDeviceGetProcessUtilization" in why and "NOT_SUPPORTED" in why
    del s
