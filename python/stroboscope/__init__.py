"""stroboscope: millisecond system, process and GPU metrics from a C++ sampler, as Arrow data.

>>> import stroboscope
>>> with stroboscope.Sampler(interval=0.001) as s:   # 1 kHz on a C++ thread, no GIL
...     ...                                           # your workload
>>> table = s.snapshot().to_arrow()                   # time, mono_ns, cpu.util_pct, ...

The face holds the names a user needs: the sampler and what it returns, scopes and their
results, recovery and datasets, and the sender registry. The rooms keep the rest under their
own names (``stroboscope.cluster``, ``stroboscope.compat.scaffold``, ``stroboscope.compat.aitune``,
``stroboscope.recording``, ``stroboscope.senders``, ...).

The names load on first use (PEP 562), so ``import stroboscope`` costs the version only, and a
name loads its own room (``Sampler`` also the scopes, so a first scope imports nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stroboscope._base.lazy import face
from stroboscope._base.version import __version__

__all__ = [
    "Column",
    "Frame",
    "Sampler",
    "SamplerStats",
    "SourceStats",
    "SpoolError",
    "__version__",
    "annotate",
    "available_sources",
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

__getattr__, __dir__ = face(
    __name__,
    __all__,
    {
        "Sampler": ".recording.sampler",
        "Frame": ".sampling",
        "Column": ".sampling",
        "SamplerStats": ".sampling",
        "SourceStats": ".sampling",
        "available_sources": ".sampling",
        "gpu_status": ".sampling",
        "recover": ".recording.spool",
        "SpoolError": ".recording.spool",
        "open_dataset": ".formats.dataset",
        "annotate": ".scopes",
        "labels": ".scopes",
        "enable": ".scopes",
        "disable": ".scopes",
        "summary": ".scopes",
        "samples_by_scope": ".scopes",
        "export_chrome_trace": ".scopes",
        "load_sender": ".senders",
    },
    # The scopes' modules load with the Sampler (about 10 ms), so the first scope of a process
    # imports nothing inside the user's region.
    preload={"Sampler": (".scopes",)},
)

if TYPE_CHECKING:
    from stroboscope.formats.dataset import open_dataset
    from stroboscope.recording.sampler import Sampler
    from stroboscope.recording.spool import SpoolError, recover
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
        disable,
        enable,
        export_chrome_trace,
        labels,
        samples_by_scope,
        summary,
    )
    from stroboscope.senders import load_sender
