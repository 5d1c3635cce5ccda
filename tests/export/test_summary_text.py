"""``summary()`` printed in a terminal: pandas cuts a wide DataFrame with ``...`` (the CPU and
RSS columns were the ones hidden); ``stroboscope.export.format_summary`` prints every figure."""

from __future__ import annotations

import pandas as pd
from stroboscope.export import format_summary


def _wide_summary() -> pd.DataFrame:
    """A summary as ``Sampler.summary()`` makes it (its columns, two scopes)."""
    index = pd.MultiIndex.from_tuples(
        [("train/step", 1), ("train/step", 2)], names=["scope", "step"]
    )
    columns: dict[str, list[float]] = {
        "calls": [10, 12],
        "open": [0, 0],
        "total_s": [1.5, 1.8],
        "mean_s": [0.15, 0.15],
        "min_s": [0.1, 0.11],
        "max_s": [0.2, 0.21],
        "p50_s": [0.15, 0.15],
        "p99_s": [0.2, 0.2],
        "exclusive_s": [1.2, 1.4],
        "cpu_pct_mean": [87.5, 91.0],
        "cpu_pct_max": [100.0, 99.0],
        "cpu_pct_n": [150, 180],
        "rss_bytes_max": [2.5 * 2**30, 2.6 * 2**30],
        "rss_bytes_growth": [2**20, 0.0],
        "rss_bytes_n": [150, 180],
        "gpu_util_pct_mean": [55.0, 60.0],
        "gpu_util_pct_max": [98.0, 97.0],
        "gpu_util_pct_n": [9, 11],
        "power_w_mean": [250.0, 260.0],
        "power_w_max": [300.0, 310.0],
        "power_w_n": [9, 11],
        "energy_j": [375.0, 468.0],
        "energy_j_n": [9, 11],
    }
    df: pd.DataFrame = pd.DataFrame(columns, index=index)
    return df


def test_pandas_cuts_the_summary_and_format_summary_does_not() -> None:
    df = _wide_summary()
    with pd.option_context("display.width", 80, "display.max_columns", 20):
        assert "..." in str(df)  # what print(s.summary()) showed a new user
    text = format_summary(df)
    assert "..." not in text
    header = text.splitlines()[0]
    for figure in ("calls", "total", "cpu % mean/max", "rss max/growth", "gpu % mean/max"):
        assert figure in header
    row = text.splitlines()[2]
    assert row.split()[:2] == ["train/step", "1"]
    assert "87.5 / 100 [150]" in row and "2.50 Gi / 1.00 Mi [150]" in row
    assert "375 [9]" in row  # energy, with its readings
