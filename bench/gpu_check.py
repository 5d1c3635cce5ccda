"""Check NVML and the ``gpu`` source on a machine with an NVIDIA GPU (read-only, under ~60 s).

Builds nothing: it imports the installed ``stroboscope`` and talks to the NVML library directly
through ctypes. It only reads (``nvmlDeviceGet*``); it never changes a GPU setting. Per device:

1. the latency of every NVML call the gpu source makes (median and p90 over up to ``--calls``
   calls, timed with ``perf_counter_ns`` around a ctypes call; the ctypes overhead is printed so
   it can be taken off), independent of stroboscope's code;
2. the gpu source's achieved rate when asked for 1 kHz (``Sampler(0.001, sources={"gpu":
   0.001})`` for ``--rate-seconds``), and when asked for 10 kHz, where a read slower than 100 µs
   keeps the poll thread busy, so readings/s gives the wall time of one reading;
3. the driver's buffer of each ``nvmlDeviceGetSamples`` kind (asked with lastSeenTimeStamp 0):
   how many samples, over what span, at what spacing, how old the newest is;
4. how often the energy counter changes (``nvmlDeviceGetTotalEnergyConsumption`` in a tight loop,
   beside field 83 and POWER_INSTANT, field 186, read the same way);
5. our values beside ``nvidia-smi --query-gpu=...`` and pynvml, read at the same moment.

Without a GPU (or NVML) it prints why, from ``stroboscope.gpu_status()["reason"]``, and exits 0.
``--library PATH`` loads another NVML library (e.g. the test fake, built with
``cc -shared -fPIC -o libfake_nvml.so tests/fake_nvml/fake_nvml.c``; its scenario comes from
``FAKE_NVML_SCRIPT``); the fake is recognised by its ``fake_nvml_calls`` symbol and every section
is labelled FAKE.

Usage::

    python bench/gpu_check.py
    python bench/gpu_check.py --json gpu_check.json
    FAKE_NVML_SCRIPT=script.txt python bench/gpu_check.py --library ./libfake_nvml.so
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from ctypes import POINTER, byref, c_char_p, c_int, c_uint, c_ulonglong, c_void_p
from functools import partial
from typing import Any, Callable

from gpu_bench import _task_runtime_ns  # bench/ is on sys.path when run as a script

# ---- NVML declarations (our own; NVML's ABI on LP64 Linux) ---------------------------------------

NVML_SUCCESS = 0
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
MAX_PROCESSES = 1024  # the source's default per device and list
PROCESS_INFO_MAX_STRIDE = 32

FIELDS = {
    186: "POWER_INSTANT",
    190: "POWER_CURRENT_LIMIT",
    83: "TOTAL_ENERGY_CONSUMPTION",
    197: "PCIE_COUNT_TX_BYTES",
    198: "PCIE_COUNT_RX_BYTES",
    3: "ECC_SBE_VOL_TOTAL",
    4: "ECC_DBE_VOL_TOTAL",
}
SAMPLE_KINDS = {
    0: "power (mW)",
    1: "gpu_util (%)",
    2: "mem_util (%)",
    5: "sm_clock (MHz)",
    6: "mem_clock (MHz)",
}
CLOCKS = {"SM": 1, "MEM": 2, "GRAPHICS": 0}
VALUE_DOUBLE, VALUE_UINT, VALUE_ULONG, VALUE_ULL, VALUE_SLL, VALUE_SINT, VALUE_USHORT = range(7)


class Value(ctypes.Union):
    """nvmlValue_t."""

    _fields_ = [
        ("dVal", ctypes.c_double),
        ("uiVal", c_uint),
        ("ulVal", ctypes.c_ulong),
        ("ullVal", c_ulonglong),
        ("sllVal", ctypes.c_longlong),
        ("siVal", c_int),
        ("usVal", ctypes.c_ushort),
    ]


class FieldValue(ctypes.Structure):
    """nvmlFieldValue_t."""

    _fields_ = [
        ("fieldId", c_uint),
        ("scopeId", c_uint),
        ("timestamp", ctypes.c_longlong),
        ("latencyUsec", ctypes.c_longlong),
        ("valueType", c_int),
        ("nvmlReturn", c_int),
        ("value", Value),
    ]


class Sample(ctypes.Structure):
    """nvmlSample_t."""

    _fields_ = [("timeStamp", c_ulonglong), ("sampleValue", Value)]


class Utilization(ctypes.Structure):
    """nvmlUtilization_t."""

    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class Memory(ctypes.Structure):
    """nvmlMemory_t."""

    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class MemoryV2(ctypes.Structure):
    """nvmlMemory_v2_t."""

    _fields_ = [
        ("version", c_uint),
        ("total", c_ulonglong),
        ("reserved", c_ulonglong),
        ("free", c_ulonglong),
        ("used", c_ulonglong),
    ]


MEMORY_V2_VERSION = ctypes.sizeof(MemoryV2) | (2 << 24)


class ProcessUtilization(ctypes.Structure):
    """nvmlProcessUtilizationSample_t."""

    _fields_ = [
        ("pid", c_uint),
        ("timeStamp", c_ulonglong),
        ("smUtil", c_uint),
        ("memUtil", c_uint),
        ("encUtil", c_uint),
        ("decUtil", c_uint),
    ]


def value_of(value_type: int, v: Value) -> float:
    """The number in an nvmlValue_t of the given type."""
    getters: dict[int, Callable[[], float]] = {
        VALUE_DOUBLE: lambda: v.dVal,
        VALUE_UINT: lambda: v.uiVal,
        VALUE_ULONG: lambda: v.ulVal,
        VALUE_ULL: lambda: v.ullVal,
        VALUE_SLL: lambda: v.sllVal,
        VALUE_SINT: lambda: v.siVal,
        VALUE_USHORT: lambda: v.usVal,
    }
    return float(getters.get(value_type, lambda: float("nan"))())


class Nvml:
    """The NVML functions the gpu source uses, through ctypes, newest version first."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.fake = hasattr(self.lib, "fake_nvml_calls")
        self.names: dict[str, str] = {}

        def fn(key: str, names: tuple[str, ...], args: list[Any]) -> Any:
            for name in names:
                f = getattr(self.lib, name, None)
                if f is not None:
                    f.restype = c_int
                    f.argtypes = args
                    self.names[key] = name
                    return f
            return None

        h = c_void_p
        self.init = fn("init", ("nvmlInit_v2", "nvmlInit"), [])
        self.shutdown = fn("shutdown", ("nvmlShutdown",), [])
        self.count = fn("count", ("nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"), [POINTER(c_uint)])
        self.handle = fn(
            "handle",
            ("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"),
            [c_uint, POINTER(h)],
        )
        self.fields = fn("fields", ("nvmlDeviceGetFieldValues",), [h, c_int, POINTER(FieldValue)])
        self.mem2 = fn("mem2", ("nvmlDeviceGetMemoryInfo_v2",), [h, POINTER(MemoryV2)])
        self.mem1 = fn("mem1", ("nvmlDeviceGetMemoryInfo",), [h, POINTER(Memory)])
        self.util = fn("util", ("nvmlDeviceGetUtilizationRates",), [h, POINTER(Utilization)])
        self.temp = fn("temp", ("nvmlDeviceGetTemperature",), [h, c_int, POINTER(c_uint)])
        self.power = fn("power", ("nvmlDeviceGetPowerUsage",), [h, POINTER(c_uint)])
        self.limit = fn("limit", ("nvmlDeviceGetEnforcedPowerLimit",), [h, POINTER(c_uint)])
        self.energy = fn(
            "energy", ("nvmlDeviceGetTotalEnergyConsumption",), [h, POINTER(c_ulonglong)]
        )
        self.clock = fn("clock", ("nvmlDeviceGetClockInfo",), [h, c_int, POINTER(c_uint)])
        self.fan = fn("fan", ("nvmlDeviceGetFanSpeed",), [h, POINTER(c_uint)])
        self.reasons = fn(
            "reasons",
            ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
            [h, POINTER(c_ulonglong)],
        )
        self.ecc = fn(
            "ecc", ("nvmlDeviceGetTotalEccErrors",), [h, c_int, c_int, POINTER(c_ulonglong)]
        )
        procs = [h, POINTER(c_uint), c_void_p]
        self.compute = fn(
            "compute",
            tuple(f"nvmlDeviceGetComputeRunningProcesses{v}" for v in ("_v3", "_v2", "")),
            procs,
        )
        self.graphics = fn(
            "graphics",
            tuple(f"nvmlDeviceGetGraphicsRunningProcesses{v}" for v in ("_v3", "_v2", "")),
            procs,
        )
        self.putil = fn(
            "putil",
            ("nvmlDeviceGetProcessUtilization",),
            [h, POINTER(ProcessUtilization), POINTER(c_uint), c_ulonglong],
        )
        self.samples = fn(
            "samples",
            ("nvmlDeviceGetSamples",),
            [h, c_int, c_ulonglong, POINTER(c_int), POINTER(c_uint), POINTER(Sample)],
        )
        self.error_string = getattr(self.lib, "nvmlErrorString", None)
        if self.error_string is not None:
            self.error_string.restype = c_char_p
            self.error_string.argtypes = [c_int]
        if self.init is None or self.count is None or self.handle is None:
            raise RuntimeError(f"{path}: nvmlInit/nvmlDeviceGetCount/GetHandleByIndex missing")
        rc = self.init()
        if rc != NVML_SUCCESS:
            raise RuntimeError(f"{path}: nvmlInit returned {self.text(rc)}")

    def text(self, rc: int) -> str:
        """NVML's words for a return code."""
        if rc == NVML_SUCCESS:
            return "OK"
        words = self.error_string(rc).decode() if self.error_string is not None else ""
        return f"{words} ({rc})"

    def device_count(self) -> int:
        """nvmlDeviceGetCount."""
        n = c_uint(0)
        rc = self.count(byref(n))
        if rc != NVML_SUCCESS:
            raise RuntimeError(f"nvmlDeviceGetCount: {self.text(rc)}")
        return n.value

    def device(self, index: int) -> c_void_p:
        """nvmlDeviceGetHandleByIndex."""
        h = c_void_p()
        rc = self.handle(index, byref(h))
        if rc != NVML_SUCCESS:
            raise RuntimeError(f"nvmlDeviceGetHandleByIndex({index}): {self.text(rc)}")
        return h

    def read_fields(self, h: c_void_p, ids: list[int]) -> tuple[int, Any]:
        """One nvmlDeviceGetFieldValues call; (rc, the array)."""
        arr = (FieldValue * len(ids))()
        for i, fid in enumerate(ids):
            arr[i].fieldId = fid
        return self.fields(h, len(ids), arr), arr


# ---- 1. per-call latency ------------------------------------------------------------------------


def _ns() -> int:
    return time.perf_counter_ns()


def time_call(call: Callable[[], int], n: int, budget_ns: int) -> tuple[int, list[int]]:
    """(first return code, ns of each of up to ``n`` further calls within ``budget_ns``)."""
    rc = call()
    times: list[int] = []
    end = _ns() + budget_ns
    while len(times) < n and _ns() < end:
        t0 = _ns()
        call()
        times.append(_ns() - t0)
    return rc, times


def _call_uint(fn: Any, h: c_void_p, out: c_uint) -> int:
    return int(fn(h, byref(out)))


def _call_uint_kind(fn: Any, h: c_void_p, kind: int, out: c_uint) -> int:
    return int(fn(h, kind, byref(out)))


def _call_ecc(fn: Any, h: c_void_p, kind: int, out: c_ulonglong) -> int:
    return int(fn(h, kind, 0, byref(out)))


def _ctypes_probe(nv: Nvml) -> Callable[[], int]:
    """A ctypes call into the library that does (almost) nothing: nvmlErrorString(0)."""
    f = nv.error_string
    if f is None:
        return lambda: 0

    def probe() -> int:
        f(0)
        return 0

    return probe


def source_calls(nv: Nvml, h: c_void_p) -> list[tuple[str, str, Callable[[], int]]]:
    """(name, when the source makes it, a zero-argument call returning the NVML code)."""
    out: list[tuple[str, str, Callable[[], int]]] = []
    ids = list(FIELDS)
    if nv.fields is not None:
        arr = (FieldValue * len(ids))()

        def batch() -> int:
            for i, fid in enumerate(ids):
                arr[i].fieldId = fid
            return int(nv.fields(h, len(ids), arr))

        out.append(("nvmlDeviceGetFieldValues (7 fields)", "every read", batch))
        for fid, name in FIELDS.items():
            one = (FieldValue * 1)()

            def single(fid: int = fid, one: Any = one) -> int:
                one[0].fieldId = fid
                rc = int(nv.fields(h, 1, one))
                return rc if rc != NVML_SUCCESS else int(one[0].nvmlReturn)

            out.append((f"  field {fid} {name} alone", "(in the batch)", single))
    if nv.mem2 is not None:
        m2 = MemoryV2()

        def mem2() -> int:
            m2.version = MEMORY_V2_VERSION
            return int(nv.mem2(h, byref(m2)))

        out.append(("nvmlDeviceGetMemoryInfo_v2", "every read", mem2))
    if nv.mem1 is not None:
        m1 = Memory()
        out.append(("nvmlDeviceGetMemoryInfo", "if no _v2", lambda: int(nv.mem1(h, byref(m1)))))
    u = Utilization()
    ui = c_uint()
    ull = c_ulonglong()
    if nv.util is not None:
        out.append(
            ("nvmlDeviceGetUtilizationRates", "every read", lambda: int(nv.util(h, byref(u))))
        )
    if nv.temp is not None:
        out.append(
            ("nvmlDeviceGetTemperature(GPU)", "every read", lambda: int(nv.temp(h, 0, byref(ui))))
        )
    if nv.clock is not None:
        for name, kind in CLOCKS.items():
            out.append(
                (
                    f"nvmlDeviceGetClockInfo({name})",
                    "every read",
                    partial(_call_uint_kind, nv.clock, h, kind, ui),
                )
            )
    if nv.fan is not None:
        out.append(("nvmlDeviceGetFanSpeed", "every read", lambda: int(nv.fan(h, byref(ui)))))
    if nv.reasons is not None:
        out.append((nv.names["reasons"], "every read", lambda: int(nv.reasons(h, byref(ull)))))
    buf = (ctypes.c_ubyte * (MAX_PROCESSES * PROCESS_INFO_MAX_STRIDE))()
    for key, fn in (("compute", nv.compute), ("graphics", nv.graphics)):
        if fn is None:
            continue

        def procs(fn: Any = fn) -> int:
            n = c_uint(MAX_PROCESSES)
            return int(fn(h, byref(n), buf))

        out.append((f"{nv.names[key]} ({MAX_PROCESSES} slots)", "every read", procs))
    if nv.putil is not None:
        pbuf = (ProcessUtilization * MAX_PROCESSES)()
        last_seen = [0]

        def putil() -> int:
            n = c_uint(MAX_PROCESSES)
            rc = int(nv.putil(h, pbuf, byref(n), last_seen[0]))
            if rc == NVML_SUCCESS:
                for i in range(min(n.value, MAX_PROCESSES)):
                    last_seen[0] = max(last_seen[0], pbuf[i].timeStamp)
            return rc

        out.append(("nvmlDeviceGetProcessUtilization (lastSeen)", "every read", putil))
    for name, fn in (
        ("nvmlDeviceGetPowerUsage", nv.power),
        ("nvmlDeviceGetEnforcedPowerLimit", nv.limit),
    ):
        if fn is not None:
            out.append((name, "if its field fails", partial(_call_uint, fn, h, ui)))
    if nv.energy is not None:
        out.append(
            (
                "nvmlDeviceGetTotalEnergyConsumption",
                "if its field fails",
                lambda: int(nv.energy(h, byref(ull))),
            )
        )
    if nv.ecc is not None:
        for name, kind in (("CORRECTED", 0), ("UNCORRECTED", 1)):
            out.append(
                (
                    f"nvmlDeviceGetTotalEccErrors({name}, VOLATILE)",
                    "if its field fails",
                    partial(_call_ecc, nv.ecc, h, kind, ull),
                )
            )
    if nv.samples is not None:
        sbuf = (Sample * 4096)()
        for kind, name in SAMPLE_KINDS.items():
            seen = [0]

            def samples(kind: int = kind, seen: list[int] = seen) -> int:
                vt, n = c_int(), c_uint(4096)
                rc = int(nv.samples(h, kind, seen[0], byref(vt), byref(n), sbuf))
                if rc == NVML_SUCCESS and n.value:
                    seen[0] = max(sbuf[i].timeStamp for i in range(min(n.value, 4096)))
                return rc

            out.append((f"nvmlDeviceGetSamples({name.split()[0]})", "gpu_samples, 4/s", samples))
    return out


def check_latency(nv: Nvml, index: int, n: int, budget_s: float) -> dict[str, Any]:
    """Time every call of ``source_calls`` on one device; prints the table."""
    h = nv.device(index)
    calls = source_calls(nv, h)
    per_call_ns = int(budget_s * 1e9 / max(len(calls), 1))
    rows = []
    print("\n  | call | made by the source | first rc | median µs | p90 µs | calls |")
    print("  | --- | --- | --- | --- | --- | --- |")
    per_read_us = 0.0
    for name, when, call in calls:
        rc, times = time_call(call, n, per_call_ns)
        med = statistics.median(times) / 1e3 if times else float("nan")
        p90 = sorted(times)[int(len(times) * 0.9)] / 1e3 if times else float("nan")
        ok = rc in (NVML_SUCCESS, NVML_ERROR_NOT_FOUND)
        if when == "every read" and ok:
            per_read_us += med
        rows.append(
            {
                "call": name,
                "when": when,
                "rc": rc,
                "median_us": med,
                "p90_us": p90,
                "calls": len(times),
            }
        )
        print(f"  | {name} | {when} | {nv.text(rc)} | {med:,.1f} | {p90:,.1f} | {len(times)} |")
    print(
        f"  NVML time per read of this GPU (sum of the medians of the calls made every read that "
        f"answer): {per_read_us:,.1f} µs,\n  so one thread reads this GPU at most "
        f"~{1e6 / per_read_us if per_read_us else float('inf'):,.0f} times/s."
    )
    return {"calls": rows, "per_read_us": per_read_us}


# ---- 2. achieved rate ---------------------------------------------------------------------------


def check_rate(stroboscope: Any, interval: float, seconds: float, samples: bool) -> dict[str, Any]:
    """Run the gpu source polled every ``interval`` s; readings/s, age at copy, poll-thread CPU."""
    s = stroboscope.Sampler(interval, sources={"gpu": interval}, gpu_samples=samples)
    before = set(_task_runtime_ns())
    s.start()
    t0 = time.perf_counter()
    time.sleep(seconds)
    runtimes = _task_runtime_ns()
    elapsed = time.perf_counter() - t0
    st = s.stats()
    s.stop()
    table = s.snapshot().to_arrow()
    s.close()
    src = next(x for x in st.sources if x.name == "gpu")
    got = table.filter(table.column("gpu.read_mono_ns").is_valid())
    readings = got.num_rows
    ages = sorted(
        m - r
        for m, r in zip(
            got.column("mono_ns").to_pylist(), got.column("gpu.read_mono_ns").to_pylist()
        )
    )
    # Sampler.start() creates the poll thread first, then the sampler thread (then the driver
    # samples recorder); the second must match the sampler's own CPU clock.
    new = sorted(t for t in runtimes if t not in before)
    poll_cpu = None
    if len(new) >= 2 and abs(runtimes[new[1]] - st.thread_cpu_ns) <= (0.2 * st.thread_cpu_ns + 2e6):
        poll_cpu = runtimes[new[0]] / readings if readings else None
    return {
        "asked_hz": 1 / interval,
        "seconds": elapsed,
        "readings_per_s": readings / elapsed,
        "age_median_us": ages[len(ages) // 2] / 1e3 if ages else None,
        "age_p99_us": ages[int(len(ages) * 0.99)] / 1e3 if ages else None,
        "poll_cpu_us_per_reading": poll_cpu / 1e3 if poll_cpu else None,
        "tick_copy_ns": src.read_ns_total / max(src.reads, 1),
        "ticks_missed": st.ticks_missed,
        "failures": src.failures,
        "reason": src.reason,
    }


def print_rate(r: dict[str, Any]) -> None:
    """One line per rate run."""
    age = "—" if r["age_median_us"] is None else f"{r['age_median_us']:,.0f}"
    p99 = "—" if r["age_p99_us"] is None else f"{r['age_p99_us']:,.0f}"
    cpu = "—" if r["poll_cpu_us_per_reading"] is None else f"{r['poll_cpu_us_per_reading']:,.1f}"
    print(
        f"  asked {r['asked_hz']:,.0f}/s for {r['seconds']:.1f} s: {r['readings_per_s']:,.0f} "
        f"readings/s; age when copied median {age} µs, p99 {p99} µs; poll-thread CPU "
        f"{cpu} µs/reading;\n    tick copy {r['tick_copy_ns']:,.0f} ns; sampler ticks missed "
        f"{r['ticks_missed']}; source failures {r['failures']} ({r['reason'] or 'no reason'})"
    )
    if r["asked_hz"] < 10_000:
        print(
            "    (poll thread and sampler tick run at the same rate on separate deadlines: the age"
            " is their phase offset, 0 to 1 interval, fixed for a run)"
        )
    if r["asked_hz"] >= 10_000 and r["readings_per_s"] < 0.9 * r["asked_hz"]:
        print(
            f"    the poll thread never sleeps at this rate: one reading of every GPU takes "
            f"~{1e6 / r['readings_per_s']:,.0f} µs of wall time"
        )


# ---- 3. driver sample buffers -------------------------------------------------------------------


def check_samples(nv: Nvml, index: int) -> list[dict[str, Any]]:
    """Per nvmlDeviceGetSamples kind, what the driver holds (asked with lastSeenTimeStamp 0)."""
    h = nv.device(index)
    rows = []
    print(
        "\n  | kind | rc | buffer (NULL call) | returned | span s | median spacing ms "
        "| min spacing ms | newest age ms | latest value |"
    )
    print("  | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind, name in SAMPLE_KINDS.items():
        vt, cap = c_int(), c_uint(0)
        rc0 = nv.samples(h, kind, 0, byref(vt), byref(cap), None)
        n = c_uint(max(cap.value, 1) * 2 + 16)
        buf = (Sample * n.value)()
        now_us = time.time() * 1e6
        rc = nv.samples(h, kind, 0, byref(vt), byref(n), buf)
        got = [buf[i] for i in range(min(n.value, len(buf)))] if rc == NVML_SUCCESS else []
        ts = sorted(s.timeStamp for s in got)
        gaps = [(b - a) / 1e3 for a, b in zip(ts, ts[1:])]
        row = {
            "kind": name,
            "rc": rc,
            "null_call_rc": rc0,
            "buffer": cap.value if rc0 == NVML_SUCCESS else None,
            "returned": len(got),
            "span_s": (ts[-1] - ts[0]) / 1e6 if len(ts) > 1 else None,
            "median_spacing_ms": statistics.median(gaps) if gaps else None,
            "min_spacing_ms": min(gaps) if gaps else None,
            "newest_age_ms": (now_us - ts[-1]) / 1e3 if ts else None,
            "latest": value_of(vt.value, max(got, key=lambda s: s.timeStamp).sampleValue)
            if got
            else None,
        }
        rows.append(row)
        cells = [
            name,
            nv.text(rc),
            "—" if row["buffer"] is None else str(row["buffer"]),
            str(row["returned"]),
        ] + [
            "—" if row[k] is None else f"{row[k]:,.3g}"
            for k in ("span_s", "median_spacing_ms", "min_spacing_ms", "newest_age_ms", "latest")
        ]
        print("  | " + " | ".join(cells) + " |")
    return rows


# ---- 4. energy counter --------------------------------------------------------------------------


def check_energy(nv: Nvml, count: int, seconds: float) -> list[dict[str, Any]]:
    """Poll every GPU's energy counter (and fields 83, 186) in one tight loop for ``seconds``."""
    handles = [nv.device(i) for i in range(count)]
    series: list[dict[str, list[tuple[int, float]]]] = [
        {"energy fn (mJ)": [], "field 83 (mJ)": [], "field 186 (mW)": []} for _ in handles
    ]
    calls = [0] * count
    ull = c_ulonglong()
    arr = (FieldValue * 2)()
    end = _ns() + int(seconds * 1e9)
    while _ns() < end:
        for i, h in enumerate(handles):
            calls[i] += 1
            t = _ns()
            if nv.energy is not None and nv.energy(h, byref(ull)) == NVML_SUCCESS:
                _keep_change(series[i]["energy fn (mJ)"], t, float(ull.value))
            if nv.fields is not None:
                arr[0].fieldId, arr[1].fieldId = 83, 186
                if nv.fields(h, 2, arr) == NVML_SUCCESS:
                    for j, key in ((0, "field 83 (mJ)"), (1, "field 186 (mW)")):
                        if arr[j].nvmlReturn == NVML_SUCCESS:
                            v = value_of(arr[j].valueType, arr[j].value)
                            _keep_change(series[i][key], t, float(v))
    out = []
    print(
        "\n  | GPU | counter | polls | changes | median interval ms | p10-p90 ms "
        "| median step | implied W |"
    )
    print("  | --- | --- | --- | --- | --- | --- | --- | --- |")
    for i in range(count):
        for key, points in series[i].items():
            changes = points[1:]  # the first point is the starting value
            gaps = [(b[0] - a[0]) / 1e6 for a, b in zip(points, points[1:])][1:]
            steps = [b[1] - a[1] for a, b in zip(points, points[1:])]
            med_gap = statistics.median(gaps) if gaps else None
            med_step = statistics.median(steps) if steps else None
            watts = None
            if "mJ" in key and len(points) > 2:
                watts = (points[-1][1] - points[1][1]) / ((points[-1][0] - points[1][0]) / 1e9)
                watts /= 1e3
            spread = "—"
            if len(gaps) >= 2:
                g = sorted(gaps)
                spread = f"{g[len(g) // 10]:,.1f}-{g[len(g) * 9 // 10]:,.1f}"
            out.append(
                {
                    "gpu": i,
                    "counter": key,
                    "polls": calls[i],
                    "changes": len(changes),
                    "median_interval_ms": med_gap,
                    "median_step": med_step,
                    "implied_w": watts,
                }
            )
            print(
                f"  | {i} | {key} | {calls[i]:,} | {len(changes)} "
                f"| {'—' if med_gap is None else f'{med_gap:,.1f}'} | {spread} "
                f"| {'—' if med_step is None else f'{med_step:,.0f}'} "
                f"| {'—' if watts is None else f'{watts:,.1f}'} |"
            )
    return out


def _keep_change(points: list[tuple[int, float]], t: int, v: float) -> None:
    if not points or points[-1][1] != v:
        points.append((t, v))


# ---- 5. values side by side ---------------------------------------------------------------------

SMI_FIELDS = (
    "utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw,"
    "clocks.sm,clocks.mem"
)
OUR_COLUMNS = (  # (label, column suffix, scale to nvidia-smi's unit)
    ("utilization.gpu %", "util_pct", 1.0),
    ("utilization.memory %", "mem_util_pct", 1.0),
    ("memory.used MiB", "mem_used_bytes", 1 / 2**20),
    ("memory.total MiB", "mem_total_bytes", 1 / 2**20),
    ("temperature.gpu C", "temp_c", 1.0),
    ("power.draw W", "power_w", 1.0),
    ("clocks.sm MHz", "sm_clock_mhz", 1.0),
    ("clocks.mem MHz", "mem_clock_mhz", 1.0),
)


def pynvml_open(library: str) -> Any:
    """pynvml initialised on ``library`` (None when not installed).

    pynvml opens ``libnvidia-ml.so.1`` only while ``pynvml.nvmlLib`` is None, so our own
    ``ctypes.CDLL(library)`` assigned first is the one it uses. A library without
    ``nvmlInitWithFlags`` (the fake) is initialised through its own ``nvmlInit_v2``.
    """
    try:
        import pynvml
    except ImportError:
        return None
    pynvml.nvmlLib = ctypes.CDLL(library)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_FunctionNotFound:
        init = getattr(pynvml.nvmlLib, "nvmlInit_v2", None) or pynvml.nvmlLib.nvmlInit
        if init() != 0:
            return None
    return pynvml


def _pynvml_device(nv: Any, h: Any) -> dict[str, float | None]:
    """The compared values of one GPU through pynvml (None where a call fails)."""
    row: dict[str, float | None] = {}

    def get(key: str, fn: Callable[[], float]) -> None:
        try:
            row[key] = float(fn())
        except (nv.NVMLError, TypeError, AttributeError):  # an old pynvml lacks some calls
            row[key] = None

    get("utilization.gpu %", lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu)
    get("utilization.memory %", lambda: nv.nvmlDeviceGetUtilizationRates(h).memory)
    get(
        "memory.used MiB",
        lambda: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2).used / 2**20,
    )
    get("memory.total MiB", lambda: nv.nvmlDeviceGetMemoryInfo(h).total / 2**20)
    get("temperature.gpu C", lambda: nv.nvmlDeviceGetTemperature(h, 0))
    get("power.draw W", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1e3)
    get(
        "power instant W (field 186)",
        lambda: nv.nvmlDeviceGetFieldValues(h, [186])[0].value.uiVal / 1e3,
    )
    get("clocks.sm MHz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
    get("clocks.mem MHz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
    return row


def pynvml_values(nv: Any, count: int) -> list[dict[str, float | None]]:
    """The compared values of every GPU through pynvml."""
    return [_pynvml_device(nv, nv.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]


def run_smi(query: str) -> subprocess.Popen[str] | None:
    """Start ``nvidia-smi --query-gpu=index,<query>``; None when there is no nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    return subprocess.Popen(
        [smi, f"--query-gpu=index,{query}", "--format=csv,noheader,nounits"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def smi_rows(proc: subprocess.Popen[str] | None, names: list[str]) -> dict[int, dict[str, str]]:
    """Wait for an nvidia-smi query; {index: {name: text}} ({} when it failed)."""
    if proc is None:
        return {}
    try:
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        return {}
    if proc.returncode != 0:
        return {}
    rows = {}
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == len(names) + 1 and parts[0].isdigit():
            rows[int(parts[0])] = dict(zip(names, parts[1:]))
    return rows


def check_values(stroboscope: Any, nv: Nvml, count: int) -> list[dict[str, Any]]:
    """Our reading nearest pynvml's beside it, and nvidia-smi run at the same time.

    nvidia-smi is started first (it takes tens to hundreds of ms), pynvml reads while it runs and
    while our poll thread records every 10 ms; the row whose reading was taken nearest pynvml's
    is shown. On the fake library, our sampler is stopped before pynvml reads (the fake is not
    thread-safe), so there the moments differ by up to 10 ms.
    """
    py_error = ""
    try:  # opened first, so that its nvmlInit is not inside the compared moment
        py = pynvml_open(nv.path)
    except Exception as exc:  # pynvml's own failure must not end the check
        py, py_error = None, f"{type(exc).__name__}: {exc}"
    s = stroboscope.Sampler(0.01, sources={"gpu": 0.01}, gpu_samples=False)
    s.start()
    time.sleep(0.3)
    smi = run_smi(SMI_FIELDS)
    smi_power = run_smi("power.draw.instant,power.draw.average")
    if nv.fake:
        s.stop()  # the fake is not thread-safe: no pynvml calls while our poll thread runs
    t_py = time.monotonic_ns()
    py_vals = None
    try:
        py_vals = pynvml_values(py, count) if py is not None else None
    except Exception as exc:
        py, py_error = None, f"{type(exc).__name__}: {exc}"
    smi_vals = smi_rows(smi, [label for label, _, _ in OUR_COLUMNS])
    smi_pw = smi_rows(smi_power, ["instant", "average"])
    time.sleep(0.05)
    s.stop()
    table = s.snapshot().to_arrow()
    s.close()
    got = table.filter(table.column("gpu.read_mono_ns").is_valid())
    taken = got.column("gpu.read_mono_ns").to_pylist()
    best = min(range(len(taken)), key=lambda k: abs(taken[k] - t_py)) if taken else None
    if smi is None:
        print("  nvidia-smi: not found")
    elif not smi_vals:
        print("  nvidia-smi: the query failed")
    if py_error:
        print(f"  pynvml: failed: {py_error}")
    elif py is None:
        print("  pynvml: not installed (pip install nvidia-ml-py)")
    if best is not None:
        print(
            f"  stroboscope's reading was taken {(taken[best] - t_py) / 1e6:+,.1f} ms from pynvml's"
        )
    out = []
    for i in range(count):
        print(f"\n  GPU {i} | stroboscope | nvidia-smi | pynvml |\n  | --- | --- | --- | --- |")
        for label, suffix, scale in OUR_COLUMNS:
            ours = None
            if best is not None and f"gpu.{i}.{suffix}" in got.column_names:
                v = got.column(f"gpu.{i}.{suffix}")[best].as_py()
                ours = None if v is None else v * scale
            smi_v = smi_vals.get(i, {}).get(label)
            py_v = py_vals[i].get(label) if py_vals else None
            out.append(
                {
                    "gpu": i,
                    "metric": label,
                    "stroboscope": ours,
                    "nvidia_smi": smi_v,
                    "pynvml": py_v,
                }
            )
            print(f"  | {label} | {_num(ours)} | {smi_v or '—'} | {_num(py_v)} |")
        pw = smi_pw.get(i, {})
        print(
            f"  | power W: instant / average (nvidia-smi) | | {pw.get('instant', '—')} / "
            f"{pw.get('average', '—')} | "
            f"{_num(py_vals[i].get('power instant W (field 186)') if py_vals else None)} "
            f"(field 186) |"
        )
    print(
        "\n  stroboscope power.draw is POWER_INSTANT (field 186) where the driver has it; "
        "nvidia-smi's power.draw and pynvml's\n  nvmlDeviceGetPowerUsage are NVML's power "
        "reading (a 1 s average on recent GPUs). memory.used is NVML's _v2 'used'\n  (without "
        "the driver's reserve) for stroboscope and pynvml; nvidia-smi's may differ by the reserve."
    )
    return out


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:,.1f}"


# ---- main ---------------------------------------------------------------------------------------


def guarded(name: str, fn: Callable[[], Any]) -> Any:
    """Run one section; an error is printed and the next section runs (one short window)."""
    try:
        return fn()
    except Exception as exc:
        print(f"  {name} failed: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}


def main(argv: list[str] | None = None) -> int:
    """Run every check; exit 0 also when there is no GPU."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--library", help="NVML library to load instead of libnvidia-ml.so.1")
    p.add_argument("--calls", type=int, default=200, help="calls per NVML function (200)")
    p.add_argument(
        "--latency-seconds",
        type=float,
        default=20.0,
        help="cap on the per-call timing, all GPUs together (20)",
    )
    p.add_argument("--rate-seconds", type=float, default=3.0, help="1 kHz run (3)")
    p.add_argument("--energy-seconds", type=float, default=1.0, help="energy polling (1)")
    p.add_argument("--json", help="also write every number to this file")
    args = p.parse_args(argv)
    started = time.perf_counter()
    if args.library:
        os.environ["STROBOSCOPE_NVML_LIBRARY"] = args.library
    import stroboscope

    status = stroboscope.gpu_status()
    if not status["loaded"] or status["device_count"] == 0:
        why = status["reason"] or "NVML loaded but reports no GPU"
        print(f"gpu_check: no GPU to check here: {why}")
        return 0
    nv = Nvml(status["library_path"])
    label = ""
    if nv.fake:
        label = "[FAKE] "
        print("=" * 100)
        print(
            f"FAKE NVML LIBRARY ({status['library_path']}): every number below is the test "
            f"fake's, not a GPU's."
        )
        print("=" * 100)
    elif args.library:
        print(f"NVML library given on the command line: {status['library_path']}")
    count = nv.device_count()
    print(status["text"])
    result: dict[str, Any] = {
        "fake": nv.fake,
        "library": status["library_path"],
        "driver": status["driver_version"],
        "devices": count,
    }

    _, overhead = time_call(_ctypes_probe(nv), 2000, 10**8)
    ctypes_us = statistics.median(overhead) / 1e3 if overhead else 0.0
    print(
        f"\n{label}1. NVML call latency per GPU (µs, ctypes around each call; a ctypes call "
        f"of nvmlErrorString costs {ctypes_us:.2f} µs here)"
    )
    result["ctypes_overhead_us"] = ctypes_us
    budget = args.latency_seconds / count
    result["latency"] = []
    for i in range(count):
        print(f"\n  GPU {i}: {status['devices'][i]['name']}")
        result["latency"].append(
            guarded("latency", partial(check_latency, nv, i, args.calls, budget))
        )

    print(f"\n{label}2. the gpu source's achieved rate (every GPU per reading)")
    for key, interval, seconds, samples in (
        ("rate_1k", 0.001, args.rate_seconds, True),
        ("rate_10k", 0.0001, 1.0, False),
    ):
        r = guarded("rate", partial(check_rate, stroboscope, interval, seconds, samples))
        result[key] = r
        if "error" not in r:
            print_rate(r)

    print(f"\n{label}3. driver sample buffers (nvmlDeviceGetSamples, lastSeenTimeStamp 0)")
    result["samples"] = []
    for i in range(count):
        print(f"\n  GPU {i}")
        if nv.samples is None:
            print("  nvmlDeviceGetSamples: not in this library")
            continue
        result["samples"].append(guarded("samples", partial(check_samples, nv, i)))

    print(f"\n{label}4. how often the energy counter (and POWER_INSTANT) change")
    result["energy"] = guarded("energy", lambda: check_energy(nv, count, args.energy_seconds))

    print(f"\n{label}5. values side by side (stroboscope / nvidia-smi / pynvml, same moment)")
    result["values"] = guarded("values", lambda: check_values(stroboscope, nv, count))

    nv.shutdown()
    print(f"\n{label}gpu_check took {time.perf_counter() - started:.1f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
