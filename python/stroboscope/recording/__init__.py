"""Crash-safe recording, composed on a sampler: the spool reader, the segment writer, the
watchdog and its journal.

Names are loaded on first use (PEP 562): the watchdog child imports :mod:`.spool` and
:mod:`.journal` from here without loading the C++ extension.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "Sampler": "stroboscope.recording.sampler",
    "finish": "stroboscope.recording._finish",
    "recover": "stroboscope.recording.spool",
    "read_spool": "stroboscope.recording.spool",
    "remove_spool": "stroboscope.recording.spool",
    "segment_paths": "stroboscope.recording.spool",
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
