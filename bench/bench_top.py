"""``stroboscope top`` (issue 32): frames per second, the lag from a row's sampling to its frame,
the view's CPU, and whether watching changes the recording.

Run: ``python bench/bench_top.py [--seconds 10] [--ranks 16]``. Each rank is a real Sampler at
1 kHz writing its spool (all ranks as threads of one writer process, started here); the view
follows them as ``stroboscope top FOLDER`` does.

1. **Frames and lag (in process).** The live app runs headless (Textual's own test driver, at
   120x40) for ``--seconds``; per frame it reads every spool's new rows and redraws. Frames/s
   = frames drawn / seconds. A row written just after one frame's read is read by the next and
   is on the widgets when that frame's drawing ends: the longest a row waits is, per frame, the
   end of its drawing minus the start of the frame before (Textual paints the changed widgets
   to the terminal at its next refresh, within 1/60 s, not counted).
2. **The view's CPU (the real command).** ``stroboscope top FOLDER`` in a tmux terminal of 120x40
   for ``--seconds``: its process's CPU time (``/proc/PID/stat`` utime + stime) over the
   wall time, as % of one core (skipped without tmux); the floor beside it: a Textual app that
   redraws one line ten times a second, in the same terminal.
3. **The recording, watched or not.** One writer at 1 kHz: its sampler's ticks missed and rows
   lost over 3 x ``--seconds`` alone; while 20 processes in turn start, import the view and
   leave without touching the spool (the control: what starting processes costs a 2-core
   machine); and while a view attaches and leaves 20 times (each: a process that opens the
   spool read-only, reads its rows for 5 frames, exits). Watching changes nothing when the
   attached run's figures are the control's.

Targets: >= 10 frames/s with 1 and 16 ranks; lag <= 200 ms; CPU <= 5 % of a core for 1 rank,
<= 15 % for 16; missed ticks and rows lost unchanged while watched.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
from bench_common import cpu_model

WRITER = """
import sys, time, stroboscope
folder, ranks, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
samplers = [
    stroboscope.Sampler(0.001, sources=["cpu", "memory", "network", "diskio"],
                        spool=f"{folder}/rank-{r}.spool", capacity=1 << 15)
    for r in range(ranks)
]
for s in samplers:
    s.start()
print("started", flush=True)
time.sleep(seconds)
for s in samplers:
    st = s.stats()
    print(st.ticks_scheduled, st.ticks_missed, st.rows_lost, flush=True)
    s.close()
"""

FLOOR = """
import time
from textual.app import App
from textual.widgets import Static

class Floor(App[None]):
    def compose(self):
        yield Static(id="s")

    def on_mount(self):
        self.set_interval(0.1, lambda: self.query_one("#s", Static).update(str(time.time())))

Floor().run()
"""
"""The floor: a Textual app that redraws one line ten times a second."""

ATTACH = """
import sys, time
from stroboscope.cli import top
from stroboscope.export import live_feed
if sys.argv[2] == "attach":
    feeds = top._feeds_for(top.resolve(sys.argv[1]))
else:  # the control: the same process, imports and time, the spool left alone
    feeds = []
for _ in range(5):
    for f in feeds:
        f.poll()
    time.sleep(0.1)
for f in feeds:
    f.close()
"""


def _writer(folder: str, ranks: int, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WRITER), folder, str(ranks), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    return proc


def _stats(proc: subprocess.Popen[str]) -> list[tuple[int, int, int]]:
    out, _ = proc.communicate(timeout=600)
    rows = [tuple(int(x) for x in ln.split()) for ln in out.splitlines() if ln.strip()]
    return [(a, b, c) for a, b, c in rows]


def frames_and_lag(ranks: int, seconds: float) -> dict[str, float]:
    """Headless app over ``ranks`` writers: frames/s and the lag of each frame (ms)."""
    from stroboscope.cli import top
    from stroboscope.export.live_app import LiveApp

    folder = tempfile.mkdtemp(prefix="bench-top-")
    writer = _writer(folder, ranks, seconds + 8)
    try:
        time.sleep(1.0)
        feeds = top._feeds_for(top.resolve(folder))
        app = LiveApp(feeds)
        lags: list[float] = []  # per frame: the end of its drawing minus the previous read
        starts: list[int] = []
        tick = app.tick

        def timed_tick() -> None:
            starts.append(time.monotonic_ns())
            tick()
            if len(starts) > 1:
                lags.append((time.monotonic_ns() - starts[-2]) / 1e6)

        app.tick = timed_tick  # type: ignore[method-assign]  # what on_mount's timer calls

        async def main() -> None:
            async with app.run_test(size=(120, 40)) as pilot:
                await pilot.pause(1.0)  # the first poll reads every row the rings hold
                lags.clear()
                starts.clear()
                app.frames = 0
                t0 = time.monotonic()
                await pilot.pause(seconds)
                elapsed = time.monotonic() - t0
                result["fps"] = app.frames / elapsed

        result: dict[str, float] = {}
        asyncio.run(main())
        lag = np.asarray(lags)
        result |= {
            "lag_p50_ms": float(np.median(lag)),
            "lag_p99_ms": float(np.percentile(lag, 99)),
            "lag_max_ms": float(lag.max()),
        }
        return result
    finally:
        writer.kill()
        writer.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tmux_cpu(cmd: str, seconds: float, folder: str) -> float | None:
    """% of one core that ``cmd`` uses in a 120x40 tmux terminal, after 3 s of start."""
    if shutil.which("tmux") is None:
        return None
    session = f"benchtop{os.getpid()}"
    pidfile = Path(folder) / "pid"
    try:
        subprocess.run(
            [
                *("tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40"),
                f"echo $$ > {pidfile}; exec {cmd}",
            ],
            check=True,
        )
        deadline = time.monotonic() + 30
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        pid = int(pidfile.read_text())
        time.sleep(3.0)  # started, first frames drawn
        c0, t0 = _cpu_s(pid), time.monotonic()
        time.sleep(seconds)
        return 100 * (_cpu_s(pid) - c0) / (time.monotonic() - t0)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def view_cpu(ranks: int, seconds: float) -> float | None:
    """% of one core that ``stroboscope top FOLDER`` uses in a 120x40 tmux terminal."""
    folder = tempfile.mkdtemp(prefix="bench-top-")
    writer = _writer(folder, ranks, seconds + 15)
    try:
        return _tmux_cpu(f"{sys.executable} -m stroboscope top {folder}", seconds, folder)
    finally:
        writer.kill()
        writer.wait()
        shutil.rmtree(folder, ignore_errors=True)


def floor_cpu(seconds: float) -> float | None:
    """% of one core of :data:`FLOOR` in the same terminal."""
    folder = tempfile.mkdtemp(prefix="bench-top-")
    script = Path(folder) / "floor.py"
    script.write_text(textwrap.dedent(FLOOR))
    try:
        return _tmux_cpu(f"{sys.executable} {script}", seconds, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def watched(seconds: float, times: int = 20) -> dict[str, tuple[int, int, int]]:
    """``(ticks, missed, rows lost)`` of a 1 kHz writer: alone; while ``times`` processes
    start, import the view and leave without touching the spool (the control); while a view
    attaches and leaves ``times`` times."""
    out = {}
    for mode in ("alone", "control", "attach"):
        folder = tempfile.mkdtemp(prefix="bench-top-")
        writer = _writer(folder, 1, seconds)
        try:
            if mode != "alone":
                for _ in range(times):
                    subprocess.run(
                        [sys.executable, "-c", textwrap.dedent(ATTACH), folder, mode], check=True
                    )
            out[mode] = _stats(writer)[0]
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--ranks", type=int, default=16)
    args = ap.parse_args()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M')}")
    for ranks in (1, args.ranks):
        r = frames_and_lag(ranks, args.seconds)
        print(
            f"{ranks:>2} rank(s) at 1 kHz: {r['fps']:.1f} frames/s (target >= 10); lag p50 "
            f"{r['lag_p50_ms']:.0f} ms, p99 {r['lag_p99_ms']:.0f} ms, max {r['lag_max_ms']:.0f} ms"
            f" (target <= 200 ms)"
        )
        cpu = view_cpu(ranks, args.seconds)
        target = 5 if ranks == 1 else 15
        text = "tmux not installed" if cpu is None else f"{cpu:.1f} % of a core"
        print(f"{ranks:>2} rank(s): stroboscope top's CPU {text} (target <= {target} %)")
    floor = floor_cpu(args.seconds)
    if floor is not None:
        print(f"floor: a Textual app redrawing one line 10 times a second: {floor:.1f} % of a core")
    runs = watched(args.seconds * 3)
    for mode, (ticks, missed, lost) in runs.items():
        print(
            f"1 kHz writer, {args.seconds * 3:.0f} s, {mode:<7}: ticks {ticks}, missed {missed}, "
            f"rows lost {lost}"
        )


if __name__ == "__main__":
    main()
