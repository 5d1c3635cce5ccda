"""The facade over the C++ core: the core sampler, its frames, their schema and its typed stats.

Every name loads on first use: ``Frame`` and ``Column`` without the extension (a recovered spool
is read into a frame by a process that never loads it: the crash path's promise), the rest with
it; ``available_sources`` and ``gpu_status`` without pyarrow (``stroboscope info``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stroboscope._base.lazy import face

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

__getattr__, __dir__ = face(
    __name__,
    __all__,
    {
        "Frame": "._frame",
        "Column": "._schema",
        "CoreSampler": "._sampler",
        "SamplerOptions": "._sampler",
        "SamplerStats": "._stats",
        "SourceStats": "._stats",
        "available_sources": "._plan",
        "gpu_status": "._gpu",
        "net_dev_totals": "._net",
    },
)

if TYPE_CHECKING:
    from stroboscope.sampling._frame import Frame
    from stroboscope.sampling._gpu import gpu_status
    from stroboscope.sampling._net import net_dev_totals
    from stroboscope.sampling._plan import available_sources
    from stroboscope.sampling._sampler import CoreSampler, SamplerOptions
    from stroboscope.sampling._schema import Column
    from stroboscope.sampling._stats import SamplerStats, SourceStats
