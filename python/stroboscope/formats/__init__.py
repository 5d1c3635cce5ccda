"""Every on-disk format (pyarrow and the stdlib, never the extension): the provenance's stored
form, and the layouts the recording rooms write and read."""

from __future__ import annotations

from stroboscope._base.lazy import face

__all__: list[str] = []  # a room of modules, no names of its own

__getattr__, __dir__ = face(__name__, __all__)
