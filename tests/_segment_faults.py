"""Faults injected into the segment writer."""

from __future__ import annotations

import errno

import pyarrow as pa
import pytest
import stroboscope.recording.segments as segments


def failing_writes(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[str]:
    """Make the next ``failures`` segment writes raise ENOSPC; returns the paths tried."""
    real = segments._write_segment
    tried: list[str] = []

    def write(table: pa.Table, path: str) -> None:
        tried.append(path)
        if len(tried) <= failures:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        real(table, path)

    monkeypatch.setattr(segments, "_write_segment", write)
    return tried
