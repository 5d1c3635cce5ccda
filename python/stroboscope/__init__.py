"""stroboscope: millisecond system, process and GPU metrics from a C++ sampler, as Arrow data.

>>> import stroboscope
>>> with stroboscope.Sampler(interval=0.001) as s:   # 1 kHz on a C++ thread, no GIL
...     ...                                           # your workload
>>> table = s.snapshot().to_arrow()                   # time, mono_ns, cpu.util_pct, ...
"""

from __future__ import annotations

from stroboscope._frame import Frame
from stroboscope._gpu import gpu_status
from stroboscope._sampler import Column, Sampler, available_sources
from stroboscope.compat import (
    AbstractBackendSender,
    GPUHandle,
    SamplerDict,
    StatsDict,
    SystemMonitor,
)
from stroboscope.receiver import ParentReceiver
from stroboscope.senders import load_sender
from stroboscope.spool import SpoolError, recover
from stroboscope.watchdog import DumpJob, Watchdog

__version__ = "0.1.0"

__all__ = [
    "AbstractBackendSender",
    "Column",
    "DumpJob",
    "Frame",
    "GPUHandle",
    "ParentReceiver",
    "Sampler",
    "SamplerDict",
    "SpoolError",
    "StatsDict",
    "SystemMonitor",
    "Watchdog",
    "__version__",
    "available_sources",
    "gpu_status",
    "load_sender",
    "recover",
]
