"""Crash-safe recording, composed on a sampler: recovery as a frame, the segment writer, the
watchdog and its journal (the files' formats are in :mod:`stroboscope.formats`).

Names are loaded on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "Sampler": "stroboscope.recording.sampler",
    "recover": "stroboscope.recording.spool",
    "read_spool": "stroboscope.formats.spool_read",
    "remove_spool": "stroboscope.formats.spool_read",
    "segment_paths": "stroboscope.formats.segments",
    "SpoolError": "stroboscope.recording.spool",
    "SegmentWriter": "stroboscope.recording.segments",
    "DumpJob": "stroboscope.recording.watchdog",
    "Watchdog": "stroboscope.recording.watchdog",
    "Receiver": "stroboscope.recording.receiver",
    "read_journal": "stroboscope.recording.journal",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'stroboscope.recording' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES))
