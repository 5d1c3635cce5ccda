"""The live view's drawing: what each part of the screen says, as Rich text, from the feeds and
the view's settings (the window, the panels shown, the rank in view). No terminal here: the app
(:mod:`.live_app`) lays these out, and tests read them as text.

Numbers and units are written by :func:`stroboscope._base.text.fmt_value` and
``fmt_seconds`` (the one home of numbers in text); the straggler rule and the step figures are
the cluster report's (:mod:`._ranks_steps`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rich.text import Text

from stroboscope._base.text import fmt_seconds, fmt_value
from stroboscope.export._ranks_steps import StepStats, StragglerRule, choose_step, judge
from stroboscope.export.live_feed import Feed, Panel
from stroboscope.export.live_scopes import scope_band, step_figures
from stroboscope.export.live_series import band, scale_top

WINDOWS_S = (1, 2, 5, 10, 30, 60, 120, 300, 600)
"""The time windows the keys step through (seconds): 1 s to 10 min."""
PALETTE = ("cyan", "magenta", "yellow", "green", "blue", "red")
"""Colours of the scope names: ANSI colours, which the terminal's theme (light or dark) maps."""
LABEL_WIDTH = 39
"""Columns of text before a chart: the column's name and its current value."""
STEPS_SHOWN = 12


@dataclass
class ViewState:
    """What the view shows: the window (s), whether it is paused, the panels hidden (by
    title), the rank in view (an index into the feeds), the step (None: the most called)."""

    window_s: float = 10.0
    paused: bool = False
    hidden: set[str] = field(default_factory=set)
    rank: int = 0
    step: str | None = None


def now_of(feeds: list[Feed]) -> int:
    """The view's present: the newest row over the feeds (CLOCK_MONOTONIC ns; 0 without)."""
    return max((f.newest_ns for f in feeds if f.newest_ns is not None), default=0)


def header(feeds: list[Feed], view: ViewState) -> Text:
    """The first lines: the recording in view and the window, then its state."""
    feed = feeds[view.rank]
    out = Text()
    out.append("stroboscope top", "bold")
    out.append(f"  {feed.label}")
    if len(feeds) > 1:
        out.append(f" ({view.rank + 1} of {len(feeds)})")
    out.append(f"  window {fmt_seconds(view.window_s)}")
    if view.paused:
        out.append("  PAUSED", "reverse")
    out.append("\n")
    if feed.error:
        out.append(f"STOPPED READING: {feed.error}", "bold red")
    elif feed.state.recording:
        who = f" (pid {feed.state.pid})" if feed.state.pid else ""
        out.append(f"recording{who}", "green")
    else:
        out.append(f"ENDED: {feed.state.gone}; the last data stays on screen", "bold red")
    return out


def panel(feed: Feed, p: Panel, view: ViewState, width: int, height: int, now: int) -> Text:
    """A panel: its title, then per column its name, current value and unit, and its chart
    (``height`` lines; every row of the window: per screen column its min and max)."""
    out = Text(p.title, "bold")
    chart_w = max(8, width - LABEL_WIDTH)
    lo = now - int(view.window_s * 1e9)
    for name, unit in zip(p.columns, p.units, strict=True):
        s = feed.series[name]
        mins, maxs = hold(*s.extremes(lo, now, chart_w))
        seen = maxs[~np.isnan(maxs)]
        peak = float(seen.max()) if len(seen) else 0.0
        value = "-" if s.last is None else f"{fmt_value(s.last[1], unit)} {unit}"
        label = f"{name[: LABEL_WIDTH - 16]:<{LABEL_WIDTH - 16}}{value:>15} "
        top = scale_top(unit, peak)
        lines = band(mins, maxs, height, top, "magenta", "cyan")
        peak_text = f"{f'peak {fmt_value(peak, unit)} {unit}':>{LABEL_WIDTH - 1}} "
        for k, line in enumerate(lines):
            out.append("\n")
            out.append(label if k == 0 else peak_text if k == 1 else " " * LABEL_WIDTH)
            out.append_text(line)
    return out


def hold(mins: np.ndarray, maxs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Screen columns without a row between two with rows show the last reading (a column
    read every second holds its value until the next), never after the last row."""
    have = ~np.isnan(maxs)
    if not have.any():
        return mins, maxs
    at = np.maximum.accumulate(np.where(have, np.arange(len(maxs)), 0))
    last = int(np.flatnonzero(have)[-1])
    fill = ~have & (np.arange(len(maxs)) < last) & have[at]
    mins, maxs = mins.copy(), maxs.copy()
    mins[fill], maxs[fill] = mins[at[fill]], maxs[at[fill]]
    return mins, maxs


def scopes(feed: Feed, view: ViewState, width: int, now: int, lines: int = 3) -> Text:
    """Each thread's open scopes now, and the depth-0 calls of the busiest threads over the
    window (a colour per name, named below)."""
    out = Text("Scopes", "bold")
    if feed.events is None:
        out.append("  (no scope events: the recording has no events directory to read)")
        return out
    stacks = feed.scopes.open_stacks()
    if not stacks:
        out.append("  no scope open now")
    for (pid, _src, tid, _sid), stack in stacks[:lines]:
        names = " > ".join(name for name, _ in stack)
        since = fmt_seconds(max(0, now - stack[-1][1]) / 1e9)
        out.append(f"\n pid {pid} thread {tid}: ")
        out.append(names, "bold")
        out.append(f"  ({since})")
    if len(stacks) > lines:
        out.append(f"\n … and {len(stacks) - lines} more stacks with open scopes")
    closed = feed.scopes.closed()
    lo = now - int(view.window_s * 1e9)
    chart_w = max(8, width - LABEL_WIDTH)
    busy: Any = np.bincount(closed["thread"][closed["end"] >= lo]) if len(closed["end"]) else []
    shown = [int(t) for t in np.argsort(-np.asarray(busy))[:2] if busy[t] > 0]
    used: set[int] = set()
    for t in shown:
        pid, _src, tid, _sid = feed.scopes.thread_keys()[t]
        codes = scope_band(feed.scopes, t, lo, now, chart_w, now)
        out.append(f"\n{f'thread {tid}':<{LABEL_WIDTH}}")
        for code in codes.tolist():
            if code < 0:
                out.append(" ")
            else:
                used.add(code)
                out.append("▆", PALETTE[code % len(PALETTE)])
    if used:
        out.append("\n" + " " * LABEL_WIDTH)
        for code in sorted(used)[:8]:
            out.append("■ ", PALETTE[code % len(PALETTE)])
            out.append(f"{feed.scopes.names[code]}  ")
    return out


def _ranks_of(
    feeds: list[Feed], view: ViewState
) -> tuple[str | None, list[StepStats], list[list[int]], str]:
    """The step, each rank's figures and durations (ns), and why there is no step ("")."""
    lo = now_of(feeds) - int(view.window_s * 1e9)
    ranks = [f.scopes.rank(i, lo, view.step) for i, f in enumerate(feeds)]
    try:
        step = choose_step(ranks, view.step)
    except ValueError as exc:  # the step asked for has no call in the window (yet)
        return None, [], [], str(exc)
    if step is None:
        return None, [], [], "no step yet (the depth-0 scope called most is the step)"
    figs = [step_figures(r, step) for r in ranks]
    return step, [f for f, _ in figs], [d.tolist() for _, d in figs], ""


def steps(feeds: list[Feed], view: ViewState) -> Text:
    """The step of the rank in view: its last durations, median and 90th percentile over the
    window; across ranks, one line per rank with its median and its lag behind the fastest
    (a straggler by the cluster report's rule is named)."""
    step, stats, durations, why = _ranks_of(feeds, view)
    out = Text("Steps", "bold")
    if step is None:
        out.append(f"  {why}")
        return out
    mine, last = stats[view.rank], durations[view.rank][-STEPS_SHOWN:]
    out.append(f"  {step!r}: {mine.count} in the window")
    if mine.count:
        out.append(f", median {fmt_seconds(mine.median_s)}, p90 {fmt_seconds(mine.p90_s)}")
        out.append("\n last: " + " ".join(fmt_seconds(d / 1e9) for d in last))
    if len(feeds) > 1:
        medians = {("", "", i): s.median_s for i, s in enumerate(stats) if s.median_s is not None}
        verdict = judge(medians, StragglerRule())
        fastest = min(medians.values(), default=None)
        for i, (f, s) in enumerate(zip(feeds, stats, strict=True)):
            mark = "▶" if i == view.rank else " "
            out.append(f"\n{mark} {f.label:<14} median {fmt_seconds(s.median_s):>8}")
            if s.median_s is not None and fastest is not None:
                lag = s.median_s - fastest
                out.append(f"  lag {fmt_seconds(lag):>8} (+{100 * lag / fastest:.0f} %)")
            if ("", "", i) in verdict.stragglers:
                out.append("  STRAGGLER", "bold red")
            if not f.state.recording:
                out.append("  ended", "red")
    return out


def footer(feeds: list[Feed], view: ViewState) -> Text:
    """The sampler's own figures of the rank in view, and the keys."""
    out = Text("sampler: " + feeds[view.rank].footer(), "dim")
    out.append("\nq quit · space pause · +/- window · 1-9 panels · tab/r rank", "dim")
    return out
