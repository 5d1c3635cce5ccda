"""Every on-disk format (pyarrow and the stdlib, never the extension), each with its encoder
and its decoder: Parquet/CSV writing, the provenance's stored form, the spool's layout and
reader, segment names, the scope events files, the receiver's journal codec, the Chrome trace
file, stacks tables, the dataset's partition layout. Not here: what a table means (analysis),
who writes when (recording), what a person reads (export). A room of modules: each
non-underscore module is a door.
"""

from __future__ import annotations

from stroboscope._base.lazy import face

__all__: list[str] = []  # a room of modules, no names of its own

__getattr__, __dir__ = face(__name__, __all__)
