"""The live view's series (export/live_series.py) and its scope pairing (export/live_scopes.py):
per screen column the min and max of every row in it, against a loop over the rows; a 1 ms
spike kept at a 10 min window; calls paired from edges as the recorded ones are."""

from __future__ import annotations

import numpy as np
import pytest
from stroboscope.export.live_scopes import ScopeTracker, scope_band
from stroboscope.export.live_series import Series, band
from stroboscope.formats.events_live import Edges


def _reference(t: np.ndarray, v: np.ndarray, lo: int, hi: int, width: int) -> np.ndarray:
    """Per column, (min, max) of the rows in it: a plain loop over the rows."""
    step = (hi - lo) / width
    out = np.full((width, 2), np.nan)
    for ti, vi in zip(t.tolist(), v.tolist(), strict=True):
        if np.isnan(vi) or not lo <= ti < hi:
            continue
        c = min(width - 1, int((ti - lo) // step))
        if np.isnan(out[c, 0]) or vi < out[c, 0]:
            out[c, 0] = vi
        if np.isnan(out[c, 1]) or vi > out[c, 1]:
            out[c, 1] = vi
    return out


@pytest.mark.parametrize("window_s", [1, 5])
def test_extremes_per_column_are_those_of_every_row(window_s: int) -> None:
    rng = np.random.default_rng(7)
    t = np.cumsum(rng.integers(500_000, 1_500_000, 8000)).astype(np.int64)
    v = rng.normal(50, 20, len(t))
    v[rng.random(len(t)) < 0.2] = np.nan  # rows without a value
    s = Series("%")
    for chunk in np.array_split(np.arange(len(t)), 37):  # fed in polls of any size
        s.add(t[chunk], v[chunk])
    hi = int(t[-1]) + 1
    lo = hi - window_s * 10**9
    mins, maxs = s.extremes(lo, hi, 97)
    ref = _reference(t, v, lo, hi, 97)
    assert np.array_equal(mins, ref[:, 0], equal_nan=True)
    assert np.array_equal(maxs, ref[:, 1], equal_nan=True)


def test_a_1_ms_spike_shows_at_a_10_min_window() -> None:
    t = np.arange(600_000, dtype=np.int64) * 1_000_000 + 5 * 10**9  # 10 min at 1 kHz
    v = np.full(len(t), 3.0)
    spike = 417_123
    v[spike] = 97.0
    s = Series("%")
    for chunk in np.array_split(np.arange(len(t)), 600):
        s.add(t[chunk], v[chunk])
    hi = int(t[-1]) + 1
    mins, maxs = s.extremes(hi - 600 * 10**9, hi, 80)
    col = int((t[spike] - (hi - 600 * 10**9)) // ((600 * 10**9) / 80))
    assert maxs[col] == 97.0 and np.nanmax(np.delete(maxs, col)) == 3.0
    assert np.nanmin(mins) == 3.0
    line = band(mins, maxs, 1, 100.0, "magenta", "cyan")[0].plain
    assert line[col] == "█"  # full height: 97 % of a line's 8 eighths rounds up to 8
    assert set(line[:col] + line[col + 1 :]) == {"▁"}  # 3 %: one eighth


def _edges(rows: list[tuple[int, int, int, int, str]]) -> Edges:
    """Edges of one file: (mono_ns, kind, thread, depth, name)."""
    a = np.array([r[:4] for r in rows], np.int64)
    n = len(rows)
    return Edges(
        a[:, 0],
        a[:, 1].astype(np.uint8),
        np.full(n, 77, np.int64),
        np.zeros(n, np.int64),
        a[:, 2],
        a[:, 2].astype(np.uint64),
        a[:, 3],
        [r[4] for r in rows],
    )


def test_edges_pair_into_calls_and_open_stacks() -> None:
    tr = ScopeTracker()
    tr.add(_edges([(100, 1, 5, 0, "step"), (110, 1, 5, 1, "fwd"), (150, 2, 5, 1, "fwd")]))
    tr.add(_edges([(200, 2, 5, 0, "step"), (210, 1, 5, 0, "step"), (220, 1, 6, 0, "io")]))
    tr.add(_edges([(230, 2, 9, 0, "orphan")]))  # its begin was never seen
    c = tr.closed()
    got = sorted(
        (tr.names[n], b, e, d)
        for n, b, e, d in zip(c["name"], c["begin"], c["end"], c["depth"], strict=True)
    )
    assert got == [("fwd", 110, 150, 1), ("step", 100, 200, 0)]
    stacks = {key[2]: [n for n, _ in st] for key, st in tr.open_stacks()}
    assert stacks == {5: ["step"], 6: ["io"]}
    assert tr.unpaired == 1
    # the band: the thread's depth-0 call per column, the open one running to now
    codes = scope_band(tr, 0, 100, 300, 4, now_ns=300)  # columns of 50 ns
    assert [tr.names[c] if c >= 0 else None for c in codes] == ["step"] * 4


def test_the_band_colours_what_varied_within_a_column_apart() -> None:
    # column 0 steady at 50 %, column 1 from 0 to 100 %, column 2 without rows
    mins, maxs = np.array([50.0, 0.0, np.nan]), np.array([50.0, 100.0, np.nan])
    (line,) = band(mins, maxs, 1, 100.0, "varied", "steady")
    assert line.plain == "▄█ "
    style_at = [next(str(s.style) for s in line.spans if s.start <= i < s.end) for i in (0, 1)]
    assert style_at == ["steady", "varied"]
