"""The stdlib leaves every room may use: files, lifecycle, rate-limited logging, identity,
checks, the version, a small HTTP server, the faces' PEP 562 helper (:mod:`.lazy`). They import
nothing of ours."""

from __future__ import annotations

from stroboscope._base.lazy import face

__all__: list[str] = []  # a room of modules, no names of its own

__getattr__, __dir__ = face(__name__, __all__)
