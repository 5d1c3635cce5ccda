"""The names of the files a recording is written as: every file :func:`companions` keeps beside
a recording is known as one by :func:`is_companion` (what the readers that list a folder's
recordings leave out), and no recording is."""

from __future__ import annotations

import pytest
from stroboscope.formats.writers import companions, is_companion


@pytest.mark.parametrize(
    "recording", ["d/run.parquet", "run.PQ", "d/run.csv", "run.data", "part-000001.parquet"]
)
def test_every_companion_of_a_recording_is_known_as_one(recording: str) -> None:
    files = companions(recording)
    assert files.pop("") == recording
    assert len(files) >= 3  # scope intervals, stack samples, interned stacks (+ CSV sidecar)
    assert all(is_companion(path) for path in files.values()), files
    assert not is_companion(recording)
