"""The plots' downsampler: every pixel bucket keeps its min, max, first and last point (so the
drawn picture equals drawing every point), checked against a plain per-bucket loop."""

from __future__ import annotations

import numpy as np
import pytest
from stroboscope.export._downsample import break_gaps, bucket_of, downsample, minmax_indices
from stroboscope.export._select import scope_mask


def _reference(buckets: np.ndarray, y: np.ndarray) -> dict[int, tuple[float, float, int, int]]:
    """Per bucket, by a plain loop: min, max, first index, last index."""
    out: dict[int, tuple[float, float, int, int]] = {}
    for i, (b, yi) in enumerate(zip(buckets.tolist(), y.tolist())):
        if b not in out:
            out[b] = (yi, yi, i, i)
        else:
            mn, mx, first, _ = out[b]
            out[b] = (min(mn, yi), max(mx, yi), first, i)
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("width", [1, 7, 100])
def test_every_bucket_keeps_its_min_max_first_and_last(seed: int, width: int) -> None:
    rng = np.random.default_rng(seed)
    n = 5000 + seed * 777
    x = np.cumsum(rng.integers(1, 2_000_000, n)).astype(np.int64)  # uneven spacing, gaps
    y = rng.normal(size=n).cumsum()
    y[rng.integers(0, n, 20)] += rng.normal(scale=100, size=20)  # spikes one sample wide
    if seed % 2:
        y = np.round(y)  # ties: the first of equal values is kept
    idx = minmax_indices(x, y, width)
    assert np.all(np.diff(idx) > 0) and len(idx) <= 4 * width
    kept = set(idx.tolist())
    buckets = bucket_of(x, width)
    # the buckets: pixel columns of equal time width, in order, covering 0 .. width-1
    span = int(x.max() - x.min())
    exact = np.minimum((x - x.min()) * width // span, width - 1)
    assert np.abs(buckets - exact).max() <= 1 and np.all(np.diff(buckets) >= 0)
    for b, (mn, mx, first, last) in _reference(buckets, y).items():
        mine = [i for i in kept if buckets[i] == b]
        assert first in kept and last in kept
        assert min(y[mine]) == mn and max(y[mine]) == mx
    assert y[idx].min() == y.min() and y[idx].max() == y.max()


def test_small_inputs_are_kept_whole_and_nan_dropped() -> None:
    x = np.arange(10, dtype=np.int64)
    y = np.array([1, np.nan, 3, 4, 5, 6, 7, 8, 9, 10], dtype=float)
    xs, ys = downsample(x, y, 100)
    assert xs.tolist() == [0, 2, 3, 4, 5, 6, 7, 8, 9] and not np.isnan(ys).any()
    with pytest.raises(ValueError, match="width must be a positive number of pixels"):
        bucket_of(x, 0)


def test_an_hour_at_1khz_becomes_a_few_thousand_points() -> None:
    n = 3_600_000
    x = np.arange(n, dtype=np.int64) * 1_000_000
    y = np.sin(np.arange(n) / 1000.0)
    y[1_234_567] = 50.0  # one sample in 3.6 million
    xs, ys = downsample(x, y, 1200)
    assert len(xs) <= 4 * 1200 and 50.0 in ys.tolist() and ys.min() == y.min()


def test_scope_mask_is_the_union_of_intervals() -> None:
    rng = np.random.default_rng(3)
    mono = np.sort(rng.integers(0, 10_000, 2000))
    begins = rng.integers(0, 10_000, 30)
    ends = begins + rng.integers(0, 800, 30)
    want = [any(b <= m <= e for b, e in zip(begins, ends)) for m in mono.tolist()]
    assert scope_mask(mono, begins, ends).tolist() == want
    assert not scope_mask(mono, begins[:0], ends[:0]).any()


def test_gaps_break_the_line() -> None:
    x = np.array([0, 10, 20, 200, 210], dtype=np.int64)
    y = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    xs, ys = break_gaps(x, y, spacing=10.0)
    assert np.isnan(xs[3]) and np.isnan(ys[3])
    assert xs[~np.isnan(xs)].tolist() == x.tolist() and ys[~np.isnan(ys)].tolist() == y.tolist()
    assert not np.isnan(break_gaps(x[:3], y[:3], spacing=10.0)[1]).any()


def test_reading_spans_hold_levels_and_cover_rate_windows() -> None:
    from stroboscope.export._downsample import reading_spans

    t = np.array([0, 10, 20, 30, 100, 110], dtype=np.int64)  # spacing 10; readings 40-90 missing
    start, end, joined = reading_spans(t, rate=False, lo=0, hi=125)
    assert start.tolist() == [0, 10, 20, 30, 100, 110]
    assert end.tolist() == [10, 20, 30, 40, 110, 120]  # 30 holds one period, then a gap
    assert joined.tolist() == [True, True, True, False, True, False]
    start, end, _ = reading_spans(t, rate=True, lo=0, hi=125)
    assert start.tolist() == [0, 0, 10, 20, 90, 100]  # the window before each reading
    assert end.tolist() == t.tolist()
    at = np.array([3, 4])
    assert [a.tolist() for a in reading_spans(t, False, 0, 125, at=at)] == [
        [30, 100],
        [40, 110],
        [False, True],
    ]


def test_step_path_keeps_a_gap_and_every_peak_when_it_downsamples() -> None:
    from stroboscope.export._downsample import step_path

    n = 100_000
    t = np.arange(n, dtype=np.int64) * 1_000_000  # 1 kHz
    y = np.sin(np.arange(n) / 500.0)
    y[70_000] = 9.0  # one spike
    keep = np.ones(n, bool)
    keep[40_000:45_000] = False  # 5 s without readings
    x, v, alone = step_path(t[keep], y[keep], False, width=500, lo=0, hi=int(t[-1]))
    assert len(x) < 4 * 500 * 2 + 10  # reduced to a few points per pixel column
    assert np.nanmax(v) == 9.0 and np.nanmin(v) == y[keep].min()
    breaks = np.flatnonzero(np.isnan(x))
    assert len(breaks) == 1
    k = breaks[0]
    assert x[k - 1] == pytest.approx(t[39_999] + 1_000_000)  # held one period, then the gap
    assert x[k + 1] == t[45_000]
    ok = ~np.isnan(x)
    assert (np.diff(x[ok][:k]) >= 0).all() and not alone.any()


def test_step_path_draws_no_break_narrower_than_a_pixel() -> None:
    from stroboscope.export._downsample import step_path

    t = np.arange(10_000, dtype=np.int64) * 1_000_000
    t[5000:] += 2_000_000  # a missed tick at 1 kHz: 3 ms without a reading, ~0.1 px wide
    x, _, _ = step_path(t, np.ones(len(t)), False, width=300, lo=0, hi=int(t[-1]))
    assert not np.isnan(x).any()
    x, _, _ = step_path(t, np.ones(len(t)), False, width=30_000, lo=0, hi=int(t[-1]))
    assert np.isnan(x).sum() == 1  # 30,000 columns: a pixel is 0.33 ms, the 2 ms gap shows
    t[5000:] += 200_000_000  # 200 ms: 6 px
    x, _, _ = step_path(t, np.ones(len(t)), False, width=300, lo=0, hi=int(t[-1]))
    assert np.isnan(x).sum() == 1


def test_ticks_the_sampler_missed_are_no_gap_but_a_failed_read_is() -> None:
    from stroboscope.export._downsample import reading_spans

    # a column read on every row, 10 ms apart; the sampler missed two ticks before row 3
    # (30 ms without a row), and the read of row 6 failed (null: the row is there)
    rows = np.array([0, 1, 2, 3, 4, 5, 7, 8])
    t = np.array([0, 10, 20, 50, 60, 70, 90, 100], dtype=np.int64)
    _, end, joined = reading_spans(t, False, 0, 100, rows=rows)
    assert joined.tolist() == [True, True, True, True, True, False, True, False]
    assert end[2] == 50 and end[5] == 80  # held over the missed ticks; not over the failure
    _, _, by_time = reading_spans(t, False, 0, 100)  # rows unknown: by time alone
    assert by_time.tolist() == [True, True, False, True, True, False, True, False]
    # the sampler stopped for 5 spacings or more: a gap, however few rows it skipped
    t2 = np.array([0, 10, 20, 80, 90], dtype=np.int64)
    _, _, stalled = reading_spans(t2, False, 0, 90, rows=np.arange(5))
    assert stalled.tolist() == [True, True, False, True, False]
