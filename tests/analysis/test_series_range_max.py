"""``range_max`` in batches: the same maxima as one range at a time, whatever the batch."""

from __future__ import annotations

import numpy as np
import pytest
from stroboscope.analysis import _series


@pytest.mark.parametrize("batch", [1, 7, 100, 1 << 20])
def test_range_max_in_batches_is_the_max_of_each_range(
    monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    monkeypatch.setattr(_series, "RANGE_BATCH", batch)
    rng = np.random.default_rng(0)
    v = rng.random(5000)
    lo = rng.integers(0, 5000, 3000)
    hi = np.minimum(lo + rng.integers(-5, 300, 3000), 5000)  # some empty ranges
    lo[0], hi[0] = 0, 5000  # one range longer than every batch but the last
    want = np.array([v[a:b].max() if b > a else np.nan for a, b in zip(lo, hi)])
    assert np.array_equal(_series.range_max(v, lo, hi), want, equal_nan=True)


def test_range_max_of_no_range_and_of_empty_ranges() -> None:
    v = np.arange(5.0)
    assert len(_series.range_max(v, np.array([], np.int64), np.array([], np.int64))) == 0
    assert np.isnan(_series.range_max(v, np.array([3]), np.array([3]))).all()
