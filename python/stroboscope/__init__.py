"""stroboscope: millisecond system, process and GPU metrics from a C++ sampler, as Arrow data.

>>> import stroboscope
>>> with stroboscope.Sampler(interval=0.001) as s:   # 1 kHz on a C++ thread, no GIL
...     ...                                           # your workload
>>> table = s.snapshot().to_arrow()                   # time, mono_ns, cpu.util_pct, ...

The names below are loaded on first use (PEP 562), so ``import stroboscope`` costs little more
than numpy and pyarrow, and a name from an optional room loads only that room.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from stroboscope._base.version import __version__

# name -> module that defines it (the rooms: sampling, recording, export, compat, senders).
_NAMES = {
    "Column": "stroboscope.sampling",
    "Frame": "stroboscope.sampling",
    "SamplerStats": "stroboscope.sampling",
    "SourceStats": "stroboscope.sampling",
    "available_sources": "stroboscope.sampling",
    "gpu_status": "stroboscope.sampling",
    "Sampler": "stroboscope.recording.sampler",
    "SpoolError": "stroboscope.recording.spool",
    "recover": "stroboscope.recording.spool",
    "DumpJob": "stroboscope.recording.watchdog",
    "Watchdog": "stroboscope.recording.watchdog",
    "AbstractBackendSender": "stroboscope.senders",
    "GPUHandle": "stroboscope.senders",
    "SamplerDict": "stroboscope.senders",
    "StatsDict": "stroboscope.senders",
    "load_sender": "stroboscope.senders",
    "SystemMonitor": "stroboscope.compat.scaffold",
    "ParentReceiver": "stroboscope.compat.aitune",
    "annotate": "stroboscope.scopes",
    "collect_hardware_metrics": "stroboscope.scopes",
    "labels": "stroboscope.scopes",
    "enable": "stroboscope.scopes",
    "disable": "stroboscope.scopes",
    "summary": "stroboscope.scopes",
    "samples_by_scope": "stroboscope.scopes",
    "export_chrome_trace": "stroboscope.scopes",
    "attribute_trace": "stroboscope.analysis.attribution",
    "open_dataset": "stroboscope.formats.dataset",
}

__all__ = [
    "AbstractBackendSender",
    "Column",
    "DumpJob",
    "Frame",
    "GPUHandle",
    "ParentReceiver",
    "Sampler",
    "SamplerDict",
    "SamplerStats",
    "SourceStats",
    "SpoolError",
    "StatsDict",
    "SystemMonitor",
    "Watchdog",
    "__version__",
    "annotate",
    "attribute_trace",
    "available_sources",
    "collect_hardware_metrics",
    "disable",
    "enable",
    "export_chrome_trace",
    "gpu_status",
    "labels",
    "load_sender",
    "open_dataset",
    "recover",
    "samples_by_scope",
    "summary",
]

if TYPE_CHECKING:
    from stroboscope.analysis.attribution import attribute_trace
    from stroboscope.compat.aitune import ParentReceiver
    from stroboscope.compat.scaffold import SystemMonitor
    from stroboscope.formats.dataset import open_dataset
    from stroboscope.recording.sampler import Sampler
    from stroboscope.recording.spool import SpoolError, recover
    from stroboscope.recording.watchdog import DumpJob, Watchdog
    from stroboscope.sampling import (
        Column,
        Frame,
        SamplerStats,
        SourceStats,
        available_sources,
        gpu_status,
    )
    from stroboscope.scopes import (
        annotate,
        collect_hardware_metrics,
        disable,
        enable,
        export_chrome_trace,
        labels,
        samples_by_scope,
        summary,
    )
    from stroboscope.senders import (
        AbstractBackendSender,
        GPUHandle,
        SamplerDict,
        StatsDict,
        load_sender,
    )


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'stroboscope' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES))
