"""Writers of recordings: Parquet and CSV files (and, later, traces, reports and datasets)."""

from __future__ import annotations

from stroboscope._base.lazy import face
from stroboscope.formats.writers import (
    FORMATS,
    output_format,
    write_csv,
    write_parquet,
    write_table,
)

__all__ = ["FORMATS", "output_format", "write_csv", "write_parquet", "write_table"]

__getattr__, __dir__ = face(__name__, __all__)
