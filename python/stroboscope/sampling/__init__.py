"""The facade over the C++ core: the core sampler (composed of parts that own their state), its
frames, their schema and its typed stats, argument checks, the source plan, GPUs, stacks, the
events log of scope edges, and provenance gathered once per sampler. Not here: crash safety
(recording), files (formats), what the rows mean (analysis).

Every name loads on first use: ``Frame`` and ``Column`` without the extension (a recovered spool
is read into a frame by a process that never loads it: the crash path's promise), the rest with
it; ``available_sources`` and ``gpu_status`` without pyarrow (``stroboscope info``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stroboscope._base.lazy import face

__all__ = [
    "MAX_INTERVAL_S",
    "MIN_INTERVAL_S",
    "Column",
    "CoreSampler",
    "EnergyWindow",
    "Frame",
    "Recorder",
    "SamplerOptions",
    "SamplerStats",
    "ScopeEdges",
    "SourceStats",
    "SyncFn",
    "available_sources",
    "check_capacity",
    "check_interval",
    "check_sources",
    "check_sync",
    "declined_child_events",
    "default_source_names",
    "events_begin",
    "events_end",
    "events_intern",
    "events_read",
    "events_strings",
    "events_written",
    "for_table",
    "gpu_status",
    "natural_every",
    "net_dev_totals",
    "owned_gpus",
    "resolve_gpus",
    "scope_edges_mode",
    "scope_edges_pending",
    "scope_edges_setup",
    "source_names",
    "source_options",
    "watch",
]

_DOORS = {  # what the rooms above use
    "Recorder": "._scope_log",
    "ScopeEdges": "._scope_log",
    "events_begin": "._scope_log",
    "events_end": "._scope_log",
    "events_intern": "._scope_log",
    "events_read": "._scope_log",
    "events_strings": "._scope_log",
    "events_written": "._scope_log",
    "scope_edges_mode": "._scope_log",
    "scope_edges_pending": "._scope_log",
    "scope_edges_setup": "._scope_log",
    "watch": "._scope_log",
    "EnergyWindow": "._energy",
    "MAX_INTERVAL_S": "._checks",
    "MIN_INTERVAL_S": "._checks",
    "SyncFn": "._energy",
    "check_capacity": "._checks",
    "check_interval": "._checks",
    "check_sources": "._checks",
    "check_sync": "._energy",
    "declined_child_events": "._child_events",
    "for_table": "._provenance_frame",
    "default_source_names": "._plan",
    "natural_every": "._plan",
    "owned_gpus": "._gpu_owner",
    "resolve_gpus": "._gpu",
    "source_names": "._plan",
    "source_options": "._plan",
}

__getattr__, __dir__ = face(
    __name__,
    __all__,
    {
        **_DOORS,
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
    from stroboscope.sampling._checks import (
        MAX_INTERVAL_S,
        MIN_INTERVAL_S,
        check_capacity,
        check_interval,
        check_sources,
    )
    from stroboscope.sampling._child_events import declined_child_events
    from stroboscope.sampling._energy import EnergyWindow, SyncFn, check_sync
    from stroboscope.sampling._frame import Frame
    from stroboscope.sampling._gpu import gpu_status, resolve_gpus
    from stroboscope.sampling._gpu_owner import owned_gpus
    from stroboscope.sampling._net import net_dev_totals
    from stroboscope.sampling._plan import (
        available_sources,
        default_source_names,
        natural_every,
        source_names,
        source_options,
    )
    from stroboscope.sampling._provenance_frame import for_table
    from stroboscope.sampling._sampler import CoreSampler, SamplerOptions
    from stroboscope.sampling._schema import Column
    from stroboscope.sampling._scope_log import (
        Recorder,
        ScopeEdges,
        events_begin,
        events_end,
        events_intern,
        events_read,
        events_strings,
        events_written,
        scope_edges_mode,
        scope_edges_pending,
        scope_edges_setup,
        watch,
    )
    from stroboscope.sampling._stats import SamplerStats, SourceStats
