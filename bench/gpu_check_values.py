"""Section 5 of bench/gpu_check.py: every gpu column beside ``nvidia-smi --query-gpu`` and pynvml,
read at the same moment.

Each nvidia-smi field is asked in a process of its own, all started together (an unknown field
makes nvidia-smi refuse the whole query, and field names change between drivers:
``clocks_event_reasons`` was ``clocks_throttle_reasons``). pynvml reads while they run and while
our poll thread records every 10 ms; the row whose reading was taken nearest pynvml's is shown.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any, Callable

from gpu_bench_worker import pynvml_open  # bench/ is on sys.path when run as a script
from gpu_nvml import Nvml

MIB = 2**20

# (our column suffix, label, scale from our unit to the label's, nvidia-smi fields to try).
COLUMNS: tuple[tuple[str, str, float, tuple[str, ...]], ...] = (
    ("util_pct", "utilization %", 1.0, ("utilization.gpu",)),
    ("mem_util_pct", "memory utilization %", 1.0, ("utilization.memory",)),
    ("mem_used_bytes", "memory used MiB", 1 / MIB, ("memory.used",)),
    ("mem_free_bytes", "memory free MiB", 1 / MIB, ("memory.free",)),
    ("mem_total_bytes", "memory total MiB", 1 / MIB, ("memory.total",)),
    ("mem_allocated_pct", "memory allocated %", 1.0, ()),
    ("temp_c", "temperature C", 1.0, ("temperature.gpu",)),
    ("power_w", "power W", 1.0, ("power.draw.instant", "power.draw")),
    ("power_limit_w", "enforced power limit W", 1.0, ("enforced.power.limit",)),
    ("power_pct", "power % of limit", 1.0, ()),
    ("energy_mj", "energy J (ours: since start)", 1e-3, ()),
    ("sm_clock_mhz", "SM clock MHz", 1.0, ("clocks.sm",)),
    ("mem_clock_mhz", "memory clock MHz", 1.0, ("clocks.mem",)),
    ("graphics_clock_mhz", "graphics clock MHz", 1.0, ("clocks.gr",)),
    ("fan_pct", "fan %", 1.0, ("fan.speed",)),
    (
        "clock_event_reasons",
        "clock event reasons (bitmask)",
        1.0,
        ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
    ),
    ("pcie_tx_bytes", "PCIe TX MiB (since start)", 1 / MIB, ()),
    ("pcie_rx_bytes", "PCIe RX MiB (since start)", 1 / MIB, ()),
    ("pcie_tx_bytes_per_s", "PCIe TX MiB/s", 1 / MIB, ()),
    ("pcie_rx_bytes_per_s", "PCIe RX MiB/s", 1 / MIB, ()),
    ("nvlink_tx_bytes_per_s", "NVLink TX MiB/s", 1 / MIB, ()),
    ("nvlink_rx_bytes_per_s", "NVLink RX MiB/s", 1 / MIB, ()),
    ("ecc_corrected", "ECC corrected (volatile)", 1.0, ("ecc.errors.corrected.volatile.total",)),
    (
        "ecc_uncorrected",
        "ECC uncorrected (volatile)",
        1.0,
        ("ecc.errors.uncorrected.volatile.total",),
    ),
    ("proc_mem_bytes", "this process's memory MiB", 1 / MIB, ()),
    ("other_procs", "other processes", 1.0, ()),
)


def _proc_bytes(nv: Any, h: Any) -> float:
    pid = os.getpid()
    return float(
        sum(
            p.usedGpuMemory or 0 for p in nv.nvmlDeviceGetComputeRunningProcesses(h) if p.pid == pid
        )
    )


def _pynvml_device(nv: Any, h: Any) -> dict[str, float | None]:
    """Every compared value of one GPU through pynvml, in our columns' units (None where a call
    fails)."""
    row: dict[str, float | None] = {}

    def get(key: str, fn: Callable[[], float]) -> None:
        try:
            row[key] = float(fn())
        except (nv.NVMLError, TypeError, AttributeError, IndexError):  # an old pynvml lacks some
            row[key] = None

    def field(fid: int) -> float:
        v = nv.nvmlDeviceGetFieldValues(h, [fid])[0]
        if v.nvmlReturn != 0:
            raise nv.NVMLError(v.nvmlReturn)
        return float(v.value.ullVal if v.valueType == 3 else v.value.uiVal)

    get("util_pct", lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu)
    get("mem_util_pct", lambda: nv.nvmlDeviceGetUtilizationRates(h).memory)
    get("mem_used_bytes", lambda: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2).used)
    get("mem_free_bytes", lambda: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2).free)
    get("mem_total_bytes", lambda: nv.nvmlDeviceGetMemoryInfo(h).total)
    get("temp_c", lambda: nv.nvmlDeviceGetTemperature(h, 0))
    get("power_w", lambda: field(186) / 1e3)  # POWER_INSTANT, as ours where the driver has it
    get("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3)
    get("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
    get("mem_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
    get("graphics_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_GRAPHICS))
    get("fan_pct", lambda: nv.nvmlDeviceGetFanSpeed(h))
    get("clock_event_reasons", lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))
    get("ecc_corrected", lambda: nv.nvmlDeviceGetTotalEccErrors(h, 0, 0))
    get("ecc_uncorrected", lambda: nv.nvmlDeviceGetTotalEccErrors(h, 1, 0))
    get("proc_mem_bytes", lambda: _proc_bytes(nv, h))
    used, total, power, limit = (
        row.get(k) for k in ("mem_used_bytes", "mem_total_bytes", "power_w", "power_limit_w")
    )
    row["mem_allocated_pct"] = 100 * used / total if used is not None and total else None
    row["power_pct"] = 100 * power / limit if power is not None and limit else None
    return row


def run_smi(field: str) -> subprocess.Popen[str] | None:
    """Start ``nvidia-smi --query-gpu=index,<field>``; None when there is no nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    return subprocess.Popen(
        [smi, f"--query-gpu=index,{field}", "--format=csv,noheader,nounits"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def smi_values(procs: dict[str, subprocess.Popen[str] | None]) -> dict[tuple[int, str], str]:
    """Wait for the nvidia-smi queries; {(index, field): text} for those that answered."""
    out: dict[tuple[int, str], str] = {}
    for field, proc in procs.items():
        if proc is None:
            continue
        try:
            text, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            continue
        if proc.returncode != 0:
            continue
        for line in text.strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[0].isdigit():
                out[(int(parts[0]), field)] = parts[1]
    return out


def _smi_number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(int(text, 16)) if text.startswith("0x") else float(text)
    except ValueError:
        return None  # [N/A], [Not Supported]


def _agree(a: float | None, b: float | None, suffix: str) -> str:
    """Whether two readings agree: exactly for counts and bitmasks, else within 2 % or 1 unit."""
    if a is None or b is None:
        return ""
    if suffix in ("clock_event_reasons", "ecc_corrected", "ecc_uncorrected", "other_procs"):
        return "yes" if a == b else "NO"
    return "yes" if abs(a - b) <= max(1.0, 0.02 * max(abs(a), abs(b))) else "NO"


def check_values(stroboscope: Any, nv: Nvml, count: int) -> list[dict[str, Any]]:
    """Our reading nearest pynvml's beside it, and nvidia-smi run at the same time (see the
    module docstring). On the fake library our sampler is stopped before pynvml reads (the fake
    serves scripted values per call), so there the moments differ by up to 10 ms."""
    py_error = ""
    try:  # opened first, so that its nvmlInit is not inside the compared moment
        py = pynvml_open(nv.path)
    except Exception as exc:  # pynvml's own failure must not end the check
        py, py_error = None, f"{type(exc).__name__}: {exc}"
    s = stroboscope.Sampler(0.01, sources={"gpu": 0.01}, gpu_samples=False)
    s.start()
    time.sleep(0.3)
    fields = sorted({f for _, _, _, fs in COLUMNS for f in fs})
    smi = {f: run_smi(f) for f in fields}
    if nv.fake:
        s.stop()
    t_py = time.monotonic_ns()
    py_vals: list[dict[str, float | None]] | None = None
    try:
        if py is not None:
            py_vals = [_pynvml_device(py, py.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    except Exception as exc:
        py, py_error = None, f"{type(exc).__name__}: {exc}"
    smi_got = smi_values(smi)
    time.sleep(0.05)
    s.stop()
    table = s.snapshot().to_arrow()
    s.close()
    got = table.filter(table.column("gpu.read_mono_ns").is_valid())
    taken = got.column("gpu.read_mono_ns").to_pylist()
    best = min(range(len(taken)), key=lambda k: abs(taken[k] - t_py)) if taken else None
    if shutil.which("nvidia-smi") is None:
        print("  nvidia-smi: not found")
    elif not smi_got:
        print("  nvidia-smi: every query failed")
    if py_error:
        print(f"  pynvml: failed: {py_error}")
    elif py is None:
        print("  pynvml: not installed (pip install nvidia-ml-py)")
    if best is not None:
        print(f"  our reading was taken {(taken[best] - t_py) / 1e6:+,.1f} ms from pynvml's")
    out = []
    for i in range(count):
        print(f"\n  | GPU {i} | stroboscope | nvidia-smi | (field) | pynvml | agree |")
        print("  | --- | --- | --- | --- | --- | --- |")
        for suffix, label, scale, smi_fields in COLUMNS:
            name = f"gpu.{i}.{suffix}"
            if name not in got.column_names:
                continue  # a column this build or driver does not have
            v = got.column(name)[best].as_py() if best is not None else None
            ours = None if v is None else v * scale
            field = next((f for f in smi_fields if (i, f) in smi_got), "")
            smi_text = smi_got.get((i, field)) if field else None
            smi_v = _smi_number(smi_text)
            py_raw = py_vals[i].get(suffix) if py_vals else None
            py_v = None if py_raw is None else py_raw * scale
            agree = _agree(ours, py_v, suffix) or _agree(ours, smi_v, suffix)
            out.append(
                {"gpu": i, "column": name, "stroboscope": ours, "nvidia_smi": smi_text,
                 "smi_field": field, "pynvml": py_v, "agree": agree}
            )  # fmt: skip
            print(
                f"  | {label} | {_num(ours)} | {smi_text or '—'} | {field or '—'} "
                f"| {_num(py_v)} | {agree} |"
            )
    print(
        "\n  power: ours and pynvml's are POWER_INSTANT (field 186) where the driver has it; "
        "nvidia-smi's power.draw.instant likewise\n  (power.draw, when that is all it knows, is "
        "NVML's 1 s average on recent GPUs). Utilisation and power move between the reads;\n  "
        "clocks, memory, limits, ECC and reasons should agree. Energy and byte counters are ours "
        "since the sampler started."
    )
    return out


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:,.1f}"
