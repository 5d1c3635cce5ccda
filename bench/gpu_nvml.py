"""NVML through ctypes for the GPU checks (bench/gpu_check.py): our own declarations of the
functions and structures the gpu source uses (NVML's ABI on LP64 Linux), newest version first."""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_char_p, c_int, c_uint, c_ulonglong, c_void_p
from typing import Any, Callable

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
