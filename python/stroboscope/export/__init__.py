"""Everything a person reads of a recording: Parquet and CSV files, traces (Chrome JSON,
Perfetto, the merge into a torch.profiler trace), the report of one run and the report across
ranks, the per-scope summary as text (:func:`format_summary`), flame graphs of sampled stacks,
and the live view's drawing."""

from __future__ import annotations

from stroboscope._base.lazy import face
from stroboscope.formats.writers import (
    FORMATS,
    output_format,
    write_csv,
    write_parquet,
    write_table,
)

_FLAME = (
    "BINARY_FORMATS",
    "FLAME_FORMATS",
    "flame_bytes",
    "flame_graph",
    "flame_weights",
    "time_range_ns",
)

__all__ = [
    "BINARY_FORMATS",
    "FLAME_FORMATS",
    "FORMATS",
    "flame_bytes",
    "flame_graph",
    "flame_weights",
    "format_summary",
    "output_format",
    "time_range_ns",
    "write_csv",
    "write_parquet",
    "write_table",
]

__getattr__, __dir__ = face(
    __name__,
    __all__,
    {**{name: ".flame_formats" for name in _FLAME}, "format_summary": "._scope_text"},
)
