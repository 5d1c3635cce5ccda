"""The stdlib leaves every room may use: files (exclusive create, 0600, no links), lifecycle
(atexit, fork), rate-limited logging, identity, checks of arguments, the version, a small HTTP
server, the faces' PEP 562 helper (:mod:`.lazy`), and human text (:mod:`.text`: the one home
of units and numbers in text, and of text tables). They import nothing of ours; nothing here
knows a table, a format or the extension.
"""

from __future__ import annotations

from stroboscope._base.lazy import face

__all__: list[str] = []  # a room of modules, no names of its own

__getattr__, __dir__ = face(__name__, __all__)
