"""Shared fixtures: fail any test that leaves a sampler running; paths to recorded /proc trees."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from stroboscope import _sampler

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def no_leaked_sampler() -> Iterator[None]:
    """A test that leaves a sampler thread running fails (and the sampler is stopped)."""
    yield
    gc.collect()
    leaked = [s for s in list(_sampler._live) if s.running]
    for s in leaked:
        s.close()
    assert not leaked, f"test left {len(leaked)} sampler(s) running: {leaked}"


@pytest.fixture
def data_dir() -> Path:
    return DATA
