"""Crash safety composed on a sampler, and nothing else: the spool and recovery as a frame, the
segment writer, the dataset writer, the watchdog, and :func:`finish` (recover, provenance,
write, clean up). The files' formats are :mod:`stroboscope.formats`'; the machinery of the
systems replaced (aitune's receiver and journal, the SystemMonitor's publisher, the training
recorder) is :mod:`stroboscope.compat`'s.

Names are loaded on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stroboscope._base.lazy import face

__all__ = [
    "DumpJob",
    "Finished",
    "Sampler",
    "SegmentWriter",
    "SpoolError",
    "Watchdog",
    "finish",
    "prepare",
    "read_shared_intervals",
    "recover",
    "write_scopes_beside",
]

_DOORS = {  # what the rooms above use
    "Finished": "._finish",
    "prepare": "._finish",
    "read_shared_intervals": "._finish",
    "write_scopes_beside": "._finish",
}

__getattr__, __dir__ = face(
    __name__,
    __all__,
    {
        **_DOORS,
        "Sampler": ".sampler",
        "finish": "._finish",
        "recover": ".spool",
        "SpoolError": ".spool",
        "SegmentWriter": ".segments",
        "DumpJob": ".watchdog",
        "Watchdog": ".watchdog",
    },
)

if TYPE_CHECKING:
    from stroboscope.recording._finish import (
        Finished,
        finish,
        prepare,
        read_shared_intervals,
        write_scopes_beside,
    )
    from stroboscope.recording.sampler import Sampler
    from stroboscope.recording.segments import SegmentWriter
    from stroboscope.recording.spool import SpoolError, recover
    from stroboscope.recording.watchdog import DumpJob, Watchdog
