"""Crash-safe recording, composed on a sampler: recovery as a frame, the segment writer, the
watchdog and its journal (the files' formats are in :mod:`stroboscope.formats`).

Names are loaded on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stroboscope._base.lazy import face

__all__ = [
    "DumpJob",
    "Receiver",
    "Sampler",
    "SegmentWriter",
    "SpoolError",
    "Watchdog",
    "finish",
    "read_journal",
    "recover",
]

__getattr__, __dir__ = face(
    __name__,
    __all__,
    {
        "Sampler": ".sampler",
        "finish": "._finish",
        "recover": ".spool",
        "SpoolError": ".spool",
        "SegmentWriter": ".segments",
        "DumpJob": ".watchdog",
        "Watchdog": ".watchdog",
        "Receiver": ".receiver",
        "read_journal": ".journal",
    },
)

if TYPE_CHECKING:
    from stroboscope.recording._finish import finish
    from stroboscope.recording.journal import read_journal
    from stroboscope.recording.receiver import Receiver
    from stroboscope.recording.sampler import Sampler
    from stroboscope.recording.segments import SegmentWriter
    from stroboscope.recording.spool import SpoolError, recover
    from stroboscope.recording.watchdog import DumpJob, Watchdog
