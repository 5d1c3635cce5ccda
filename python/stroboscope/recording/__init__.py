"""Crash-safe recording, composed on a sampler: the spool reader, the segment writer, the
watchdog and its journal.

Names are loaded on first use (PEP 562): the watchdog child imports :mod:`.spool` and
:mod:`.journal` from here without loading the C++ extension.
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
    "read_journal",
    "read_spool",
    "recover",
    "remove_spool",
    "segment_paths",
]

__getattr__, __dir__ = face(
    __name__,
    __all__,
    {
        "Sampler": ".sampler",
        "recover": ".spool",
        "read_spool": ".spool",
        "remove_spool": ".spool",
        "segment_paths": ".spool",
        "SpoolError": ".spool",
        "SegmentWriter": ".segments",
        "DumpJob": ".watchdog",
        "Watchdog": ".watchdog",
        "Receiver": ".receiver",
        "read_journal": ".journal",
    },
)

if TYPE_CHECKING:
    from stroboscope.recording.journal import read_journal
    from stroboscope.recording.receiver import Receiver
    from stroboscope.recording.sampler import Sampler
    from stroboscope.recording.segments import SegmentWriter
    from stroboscope.recording.spool import (
        SpoolError,
        read_spool,
        recover,
        remove_spool,
        segment_paths,
    )
    from stroboscope.recording.watchdog import DumpJob, Watchdog
