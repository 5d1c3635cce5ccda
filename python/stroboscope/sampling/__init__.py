"""The facade over the C++ core: the core sampler, its frames, their schema and its typed stats."""

from __future__ import annotations

from stroboscope._base.lazy import face
from stroboscope.sampling._frame import Frame
from stroboscope.sampling._gpu import gpu_status
from stroboscope.sampling._net import net_dev_totals
from stroboscope.sampling._plan import available_sources
from stroboscope.sampling._sampler import CoreSampler, SamplerOptions
from stroboscope.sampling._schema import Column
from stroboscope.sampling._stats import SamplerStats, SourceStats

__all__ = [
    "Column",
    "CoreSampler",
    "Frame",
    "SamplerOptions",
    "SamplerStats",
    "SourceStats",
    "available_sources",
    "gpu_status",
    "net_dev_totals",
]

__getattr__, __dir__ = face(__name__, __all__)
