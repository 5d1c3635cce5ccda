"""The cross-rank step timeline (matplotlib, the ``report`` extra): every rank's step calls on
one realtime axis (its monotonic times plus its clock anchor), one row per rank, stragglers in
red; below, each rank's step time by step number."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from stroboscope.export._figure import (
    Plot,
    figure_png,
    legend_above,
    require_matplotlib,
    stacked_figure,
)
from stroboscope.export._ranks import Key, Rank
from stroboscope.export._ranks_steps import closed_calls, step_calls

MAX_RANKS = 64
"""Ranks drawn at most: the stragglers first, then by rank (the tables hold every rank)."""


def render_timeline(
    step: str | None, ranks: Sequence[Rank], slow: Collection[Key] = ()
) -> Plot | None:
    """The timeline figure of the calls of ``step`` in ``ranks`` (the ranks whose key is in
    ``slow`` in red), or None when no rank has both step calls and a clock anchor."""
    require_matplotlib()
    if step is None:
        return None
    ranks = [r for r in ranks if r.anchor_ns is not None]
    ranks.sort(key=lambda r: (r.key not in slow, r.job, r.rank))
    drawn = []
    for r in ranks[:MAX_RANKS]:
        begins = step_calls(r, step)[0]
        if len(begins) and r.anchor_ns is not None:
            drawn.append((r, begins))
    if not drawn:
        return None
    t0 = min(int(b[0]) + int(r.anchor_ns or 0) for r, b in drawn)
    fig, (top, bottom) = stacked_figure(2, sharex=False)
    labels = []
    for y, (r, _) in enumerate(drawn):
        begin, durations = closed_calls(r, step)
        x0 = (begin + int(r.anchor_ns or 0) - t0) / 1e9
        color = "tab:red" if r.key in slow else "tab:blue"
        top.broken_barh(
            list(zip(x0.tolist(), (durations / 1e9).tolist())), (y - 0.4, 0.8), facecolors=color
        )
        bottom.plot(
            np.arange(len(durations)),
            durations / 1e6,
            linewidth=1.6 if r.key in slow else 0.8,
            color=color if r.key in slow else None,
            label=f"rank {r.rank}",
        )
        labels.append(f"rank {r.rank} ({r.host})")
    top.set_yticks(range(len(drawn)), labels, fontsize=7)
    top.invert_yaxis()
    top.set_xlabel("seconds after the first step start (realtime, anchors applied)", fontsize=8)
    bottom.set_xlabel(f"{step} call number", fontsize=8)
    bottom.set_ylabel("step time (ms)", fontsize=8)
    if len(drawn) <= 16:
        legend_above(bottom)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=8)
    title = f"Steps ({step}) of {len(drawn)} ranks on one clock"
    fig.suptitle(title, fontsize=11, x=0.01, ha="left")
    return figure_png(fig, "steps", title)
