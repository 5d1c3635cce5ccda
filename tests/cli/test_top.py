"""``stroboscope top`` (cli/top.py): a running ``record`` watched (the wrapped command's scope
names and steps on screen, then the recorder SIGKILLed: the view says so and keeps its data),
the paths it takes, the recordings it lists, and what it refuses in words: no terminal, a file
that is no spool, another user's spool. The tmux test drives the real command in a terminal."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import stroboscope
from _binaries import binary
from _live_spools import write_spool
from stroboscope.cli import top
from stroboscope.formats.spool_live import live_spools

WORK = """
import time, stroboscope
while True:
    with stroboscope.annotate("train_step"):
        with stroboscope.annotate("forward"):
            time.sleep(0.01)
"""


def _cli(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    got: subprocess.CompletedProcess[str] = subprocess.run(
        [sys.executable, "-m", "stroboscope", *args],
        capture_output=True,
        text=True,
        timeout=120,
        **kw,  # type: ignore[call-overload]
    )
    return got


def _small_spool(path: Path) -> Path:
    mono = 10**12 + np.arange(200, dtype=np.int64) * 1_000_000
    return write_spool(path, mono, {"cpu.util_pct": ("%", np.full(200, 5.0))})


def _wait(what: str, ok: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ok() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.05)
    assert ok(), f"timed out waiting for {what}"  # type: ignore[operator]


def test_a_running_record_is_watched_then_killed(tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    script = tmp_path / "work.py"
    script.write_text(WORK)
    rec = subprocess.Popen(
        [
            *(sys.executable, "-m", "stroboscope", "record", "--interval", "0.005", "-q"),
            *("-o", str(out), "--", sys.executable, str(script)),
        ],
        start_new_session=True,
    )
    try:
        spool = Path(str(out) + ".spool")
        _wait("the spool", lambda: (str(spool), rec.pid) in live_spools())
        assert top.resolve(str(out)) == [str(spool)]  # the output names its spool
        assert top.resolve(str(tmp_path)) == [str(spool)]  # and so does its folder
        from stroboscope.export.live_app import LiveApp

        feeds = top._feeds_for([str(spool)])
        screens: list[str] = []

        async def main() -> None:
            app = LiveApp(feeds)
            async with app.run_test(size=(100, 40)) as pilot:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    await pilot.pause(0.2)
                    text = app.screen_text()
                    if "train_step" in text and "in the window, median" in text:
                        break
                screens.append(app.screen_text())
                os.kill(rec.pid, signal.SIGKILL)  # while it is watched
                rec.wait(30)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and "ENDED" not in app.screen_text():
                    await pilot.pause(0.2)
                screens.append(app.screen_text())

        asyncio.run(main())
    finally:
        if rec.poll() is None:
            os.killpg(rec.pid, signal.SIGKILL)
            rec.wait()
    live, killed = screens
    assert f"recording (pid {rec.pid})" in live
    assert "■ train_step" in live  # the wrapped command's scope, over the time axis
    assert "'train_step':" in live and "median" in live and "p90" in live
    assert f"ENDED: the recorder (pid {rec.pid}) is gone" in killed
    value = next(ln for ln in killed.splitlines() if ln.startswith("cpu.util_pct"))
    assert "%" in value and " - " not in value  # the last data stays


def test_the_footer_shows_the_recorders_own_figures(tmp_path: Path) -> None:
    # A 64-row ring at 1 kHz may lose rows between the segment writer's looks (it did on a
    # loaded machine; the writer now mostly keeps up), and ticks are missed under any load: the
    # recorder's own figures, which the view cannot infer from the rows, are shown as they are.
    out = tmp_path / "run.parquet"
    rec = subprocess.Popen(
        [
            *(sys.executable, "-m", "stroboscope", "record", "--interval", "0.001"),
            *("--capacity", "64", "--duration", "4", "-q", "-o", str(out)),
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        spool = Path(str(out) + ".spool")
        _wait("the spool", lambda: (str(spool), rec.pid) in live_spools())
        (feed,) = top._feeds_for([str(spool)])
        _wait("the recorder's figures", lambda: feed.poll() >= 0 and feed.recorder is not None)
        during = feed.footer()
        summary, _ = rec.communicate(timeout=120)  # it ends after --duration; its spool goes
        feed.poll()  # the mapping outlives the file: the figures published at the end
        after = feed.footer()
        feed.close()
    finally:
        if rec.poll() is None:
            os.killpg(rec.pid, signal.SIGKILL)
            rec.wait()
    assert rec.returncode == 0, summary
    line = next(ln for ln in summary.splitlines() if ln.startswith("sampler: "))
    figures = dict(
        (k, int(v))
        for k, v in (
            ("taken", line.split("ticks taken ")[1].split(",")[0]),
            ("missed", line.split("missed ")[1].split(",")[0]),
            ("lost", line.split("rows lost ")[1].split()[0]),
        )
    )

    def shown(footer: str) -> tuple[int, int, int]:
        missed, of = footer.split("ticks missed ")[1].split(" · ")[0].split(" of ")
        lost = footer.split("rows lost ")[1].split(" ")[0]
        return int(missed), int(of), int(lost)

    assert not during.startswith("inferred") and "p99 per tick" in during
    missed, scheduled, lost = shown(during)
    assert missed <= figures["missed"] and lost <= figures["lost"]  # read while it ran
    assert scheduled < figures["taken"] + figures["missed"]
    # After the end: the sampler stopped before its last publication, so its ticks are the
    # summary's; the last rows (taken at the finish) can only add to the rows lost.
    missed, scheduled, lost = shown(after)
    assert (missed, scheduled) == (figures["missed"], figures["taken"] + figures["missed"])
    assert lost <= figures["lost"] and figures["lost"] - lost <= 64, (after, line)


def test_no_terminal_is_refused_with_exit_2_and_no_escape_codes(tmp_path: Path) -> None:
    spool = _small_spool(tmp_path / "s.spool")
    got = _cli("top", str(spool))
    assert got.returncode == 2
    assert "standard output is not a terminal" in got.stderr
    assert "\x1b" not in got.stdout + got.stderr and got.stdout == ""
    live = _cli("record", "--live", "-o", str(tmp_path / "x.parquet"), "--", "true")
    assert live.returncode == 2 and "--live: standard output is not a terminal" in live.stderr
    assert not (tmp_path / "x.parquet").exists()


def test_a_file_that_is_no_spool_is_refused_in_words(tmp_path: Path) -> None:
    other = tmp_path / "notes.parquet"
    other.write_bytes(b"PAR1 not a spool at all")
    got = _cli("top", str(other))
    assert got.returncode == 2
    assert f"{other} is not a stroboscope spool" in got.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_spool_is_refused_in_words(tmp_path: Path) -> None:
    spool = _small_spool(tmp_path / "theirs.spool")
    os.chown(spool, 65534, 65534)
    got = _cli("top", str(spool))
    assert got.returncode == 2
    assert "is written by another user (owner uid 65534" in got.stderr


def test_with_no_argument_the_recordings_in_progress_are_listed(tmp_path: Path) -> None:
    spool = tmp_path / "mine.spool"
    s = stroboscope.Sampler(0.01, sources=["memory"], spool=spool)
    s.start()
    try:
        got = _cli("top")
    finally:
        s.close()
    assert got.returncode == 0
    mine = [ln for ln in got.stdout.splitlines() if ln.endswith(str(spool))]
    assert mine and mine[0].split()[0] == str(os.getpid())


def test_bad_paths_and_options_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"PATH .*no such file"):
        top.resolve(str(tmp_path / "nothing.parquet"))
    with pytest.raises(ValueError, match="no recording in progress in this folder"):
        top.resolve(str(tmp_path))
    got = _cli("top", "--window", "7", str(tmp_path))
    assert got.returncode == 2 and "--window must be one of 1, 2, 5, 10" in got.stderr
    got = _cli("top", "--pid", "x")
    assert got.returncode == 2 and "--pid must be a positive process id" in got.stderr
    got = _cli("top", "--pid", str(os.getpid()), "--interval", "-1")
    assert got.returncode == 2 and "--interval" in got.stderr


def test_the_command_in_a_terminal_draws_and_quits(tmp_path: Path) -> None:
    binary("tmux", install="apt-get install tmux")
    spool = tmp_path / "t.spool"
    s = stroboscope.Sampler(0.001, sources=["cpu", "memory"], spool=spool)
    s.start()
    session = f"strobotop{os.getpid()}"
    done = tmp_path / "done"
    cmd = f"{sys.executable} -m stroboscope top {spool}; echo exit=$? > {done}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", cmd],
            check=True,
            env=env,
        )

        def pane() -> str:
            return subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
            ).stdout

        _wait("the view", lambda: "cpu.util_pct" in pane())
        screen = pane()
        assert "recording (pid" in screen and "CPU" in screen and "Memory" in screen
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        _wait("the view to quit", done.exists)
        assert done.read_text().strip() == "exit=0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        s.close()


def test_attaching_loads_no_extension(tmp_path: Path) -> None:
    spool = _small_spool(tmp_path / "s.spool")
    code = (
        "import sys\nfrom stroboscope.cli import top\n"
        f"feeds = top._feeds_for(top.resolve({str(spool)!r}))\n"
        "print(feeds[0].poll(), 'stroboscope._core' in sys.modules)"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.stdout.split() == ["200", "False"], got.stderr


def test_pid_samples_the_process_here_with_the_samplers_figures(tmp_path: Path) -> None:
    with top._sampled(os.getpid(), 0.005) as feed:
        folder = os.path.dirname(feed.spool.path)
        _wait("rows", lambda: feed.poll() > 0 or feed.rows > 0)
        footer = feed.footer()
        assert feed.label == f"pid {os.getpid()}"
        assert "proc.rss_bytes" in feed.columns  # the process's own columns
    assert footer.startswith("ticks missed ") and " of " in footer and "rows lost" in footer
    assert not os.path.exists(folder)  # its private spool went with it


@pytest.mark.parametrize("leave", ["q", "C-c"])
def test_record_live_shows_the_view_in_its_terminal(tmp_path: Path, leave: str) -> None:
    binary("tmux", install="apt-get install tmux")
    script = tmp_path / "work.py"
    script.write_text(WORK)
    out = tmp_path / "live.parquet"
    session = f"strobolive{os.getpid()}"
    done = tmp_path / "done"
    cmd = (
        f"{sys.executable} -m stroboscope record --live --interval 0.005 -o {out} -- "
        f"{sys.executable} {script}; echo exit=$? > {done}"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}

    def pane() -> str:
        return subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
        ).stdout

    try:
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "40", cmd],
            check=True,
            env=env,
        )
        _wait("the scope of the command on screen", lambda: "■ train_step" in pane())
        assert "recording (pid" in pane()
        subprocess.run(["tmux", "send-keys", "-t", session, leave], check=True)
        if leave == "q":  # the view only: the recording goes on until Ctrl-C
            time.sleep(1)
            assert not done.exists()
            subprocess.run(["tmux", "send-keys", "-t", session, "C-c"], check=True)
        _wait("the recording to end", done.exists)  # Ctrl-C in the view ends it too
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert done.read_text().strip() == "exit=130"  # the command ended by SIGINT, as a shell says
    assert out.exists() and (tmp_path / "live.scopes.parquet").exists()


def test_a_dataset_root_finds_the_running_recorders_writing_under_it(tmp_path: Path) -> None:
    root = tmp_path / "dataset"
    script = tmp_path / "work.py"
    script.write_text(WORK)
    rec = subprocess.Popen(
        [
            *(sys.executable, "-m", "stroboscope", "record", "--interval", "0.01", "-q"),
            *("--dataset", str(root), "--", sys.executable, str(script)),
        ],
        start_new_session=True,
    )
    try:
        _wait("the recorder's spool", lambda: rec.pid in [p for _, p in live_spools()])
        spool = next(s for s, p in live_spools() if p == rec.pid)
        assert not spool.startswith(str(root))  # a dataset-only run keeps its spool elsewhere
        assert top.resolve(str(root)) == [spool]  # found by the recorder's --dataset
    finally:
        os.killpg(rec.pid, signal.SIGINT)
        rec.wait(60)


def test_a_fifo_is_named_as_no_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.parquet"
    os.mkfifo(fifo)
    got = _cli("top", str(fifo))
    assert got.returncode == 2
    assert "not a regular file" in got.stderr and "no such file" not in got.stderr, got.stderr
