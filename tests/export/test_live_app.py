"""The live view (export/live_app.py), driven headless by Textual's pilot, its screen read as
text: the panels and their values, the keys, a 1 ms spike at a 10 min window, the scope names
and step figures of processes that wrote scopes, and a rank that lags named a straggler."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest
from _live_spools import write_spool
from _shared_events import run

pytest.importorskip("textual")

from stroboscope.export.live_app import LiveApp
from stroboscope.export.live_draw import ViewState
from stroboscope.export.live_feed import Feed

Pilot = Callable[[LiveApp, object], Awaitable[None]]


def _drive(
    app: LiveApp, script: Callable[[LiveApp, object], Awaitable[None]], size: tuple[int, int]
) -> None:
    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await pilot.pause(0.3)
            await script(app, pilot)

    asyncio.run(main())


def _host_spool(path: Path, seconds: float = 3.0, end_ns: int | None = None) -> Path:
    n = int(seconds * 1000)
    end = time.monotonic_ns() if end_ns is None else end_ns
    mono = end - (n - 1 - np.arange(n, dtype=np.int64)) * 1_000_000
    sparse = np.full(n, np.nan)
    sparse[::100] = 3 * 2**30  # read every 100 ms
    cols = {
        "cpu.util_pct": ("%", np.full(n, 42.0)),
        "mem.used_bytes": ("bytes", sparse),
        "net.recv_bytes_per_s": ("bytes/s", np.full(n, 2048.0)),
        "gpu.0.util_pct": ("%", np.full(n, 87.5)),
        "gpu.0.power_w": ("W", np.full(n, 250.0)),
    }
    return write_spool(path, mono, cols)


def _line(text: str, start: str) -> str:
    found = [ln for ln in text.splitlines() if ln.startswith(start)]
    assert found, f"no line starts with {start!r} in:\n{text}"
    return found[0]


def test_panels_values_and_keys_at_80_by_24(tmp_path: Path) -> None:
    spool = _host_spool(tmp_path / "host.spool")
    screens: dict[str, str] = {}

    async def script(app: LiveApp, pilot: object) -> None:
        screens["first"] = app.screen_text()
        for key, name in (("1", "no cpu"), ("minus", "shorter"), ("space", "paused")):
            await pilot.press(key)  # type: ignore[attr-defined]
            await pilot.pause(0.2)  # type: ignore[attr-defined]
            screens[name] = app.screen_text()

    app = LiveApp([Feed("host", str(spool))])
    _drive(app, script, (80, 24))
    first = screens["first"]
    assert all(len(line) <= 80 for line in first.splitlines())
    for title in ("CPU", "Memory", "Network", "GPU 0"):
        _line(first, title)
    assert "42.00 %" in _line(first, "cpu.util_pct")
    assert "3.00 Gi bytes" in _line(first, "mem.used_bytes")
    assert "2.00 Ki bytes/s" in _line(first, "net.recv_bytes_per_s")
    assert "87.50 %" in _line(first, "gpu.0.util_pct")
    assert "250.00 W" in _line(first, "gpu.0.power_w")
    # nobody holds the spool's lock: the view says the recorder is gone and keeps the data
    assert "ENDED" in first and "left its spool" in first
    assert "ticks missed 0" in first
    assert not [ln for ln in screens["no cpu"].splitlines() if ln.startswith("CPU")]
    assert "window 10 s" in first and "window 5 s" in screens["shorter"]
    assert "PAUSED" in screens["paused"] and "PAUSED" not in first


def test_a_wide_terminal_draws_taller_charts(tmp_path: Path) -> None:
    spool = _host_spool(tmp_path / "host.spool")
    got: list[str] = []

    async def script(app: LiveApp, pilot: object) -> None:
        got.append(app.screen_text())

    _drive(LiveApp([Feed("host", str(spool))]), script, (200, 50))
    lines = got[0].splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("cpu.util_pct"))
    assert "peak 42.00" in lines[at + 1]  # a second line of chart, its peak beside it
    # 42 % of a 2-line chart (16 eighths): 6.72 eighths, drawn as 7 in the lower line
    assert lines[at].rstrip().endswith("42.00 %")
    assert lines[at + 1].rstrip().endswith("▇" * 40)  # 3 s of rows in a 10 s window


def test_a_1_ms_spike_is_on_screen_at_a_10_min_window(tmp_path: Path) -> None:
    n = 600_000
    mono = 10**12 + np.arange(n, dtype=np.int64) * 1_000_000
    v = np.full(n, 3.0)
    v[433_217] = 97.0  # one row: 1 ms
    spool = write_spool(tmp_path / "long.spool", mono, {"cpu.util_pct": ("%", v)})
    got: list[str] = []

    async def script(app: LiveApp, pilot: object) -> None:
        got.append(app.screen_text())

    _drive(LiveApp([Feed("long", str(spool))], ViewState(window_s=600)), script, (80, 24))
    line = _line(got[0], "cpu.util_pct")
    chart = line[39:].rstrip()
    assert chart.count("█") == 1, line  # the spike, full height; 3 % elsewhere: one eighth
    assert set(chart.replace("█", "")) == {"▁"}, line


STEPS = """
import time, stroboscope
for i in range({n}):
    with stroboscope.annotate("train_step"):
        with stroboscope.annotate("forward"):
            time.sleep({sleep})
"""


def test_scopes_steps_and_a_rank_that_lags(tmp_path: Path) -> None:
    feeds = []
    for rank, sleep in enumerate((0.002, 0.002, 0.002, 0.06)):
        events = tmp_path / f"events-{rank}"
        events.mkdir()
        run(STEPS.format(n=8, sleep=sleep), events)
        spool = _host_spool(tmp_path / f"r{rank}.spool", seconds=1.0)
        feeds.append(Feed(f"rank {rank}", str(spool), str(events)))
    got: list[str] = []

    async def script(app: LiveApp, pilot: object) -> None:
        got.append(app.screen_text())
        await pilot.press("tab")  # type: ignore[attr-defined]
        await pilot.press("tab")  # type: ignore[attr-defined]
        await pilot.press("tab")  # type: ignore[attr-defined]
        await pilot.pause(0.2)  # type: ignore[attr-defined]
        got.append(app.screen_text())

    _drive(LiveApp(feeds, ViewState(window_s=60)), script, (100, 40))
    first, last_rank = got
    assert "■ train_step" in first
    steps = _line(first, "Steps")
    assert "'train_step': 8 in the window" in steps and "median" in steps and "p90" in steps
    slow = _line(first, "  rank 3")
    assert "STRAGGLER" in slow and "lag" in slow
    for rank in range(3):
        assert "STRAGGLER" not in _line(first, ("▶ " if rank == 0 else "  ") + f"rank {rank}")
    assert "rank 3 (4 of 4)" in last_rank and _line(last_rank, "▶ rank 3")


def test_a_step_named_is_found_at_any_depth_and_a_missing_one_said(tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    run(STEPS.format(n=5, sleep=0.002), events)
    spool = _host_spool(tmp_path / "r.spool", seconds=1.0)
    got: list[str] = []

    async def script(app: LiveApp, pilot: object) -> None:
        got.append(app.screen_text())

    for step in ("forward", "nope"):
        feed = Feed("rank 0", str(spool), str(events))
        _drive(LiveApp([feed], ViewState(window_s=60, step=step)), script, (100, 40))
    forward, nope = (_line(text, "Steps") for text in got)
    assert "'forward': 5 in the window" in forward  # forward is nested in train_step
    assert "step 'nope': no rank called a scope of that name" in nope


def test_text_lines_gives_what_rich_renders_line_by_line() -> None:
    from rich.console import Console
    from rich.segment import Segment
    from rich.style import Style
    from rich.text import Text
    from stroboscope.export.live_app import text_lines

    console = Console()
    base = Style(color="white", bgcolor="black")
    text = Text("title\n\nab▁▂cd\nlast  line\n")
    text.stylize("bold")  # the whole text: rich's own render drops text.style on a line
    text.stylize("red", 0, 3)  # without spans, so the reference has it as a span
    text.stylize("italic", 2, 12)  # overlaps the first and crosses a line break
    text.stylize(Style(underline=True), 9, 10)
    text.stylize("blue", 14, 14)  # empty: no run
    got = text_lines(text, base, console.get_style)
    want = [
        [s for s in Segment.apply_style(line.render(console, end=""), base) if s.text]
        for line in text.split("\n", allow_blank=True)
    ]
    merged = [list(Segment.simplify(line)) for line in got]
    assert merged == [list(Segment.simplify(line)) for line in want]
    assert [s.text for s in got[2]] == ["ab", "▁", "▂c", "d"]  # a run per change of style
    (plain,) = text_lines(Text("dim footer", "dim"), base, console.get_style)
    assert plain == [Segment("dim footer", base + Style(dim=True))]  # text.style applies
