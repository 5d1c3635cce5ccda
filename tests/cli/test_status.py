"""The live status line of ``stroboscope record``: drawn on a terminal (a pseudo-terminal here),
never when stderr is not one or with --quiet; its text checked by hand."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pyarrow as pa
from _fake_nvml import ScriptFn
from stroboscope.cli._status import latest_values, status_text, wanted
from stroboscope.sampling import CoreSampler as Sampler

ERASE = "\r\x1b[K"
STATUS = re.compile(r"rec (\d+\.\d) s \| ([\d,]+) rows \| missed ([\d,]+)")


def test_latest_values_are_the_last_non_null_cells() -> None:
    table = pa.table(
        {
            "time": pa.array([1, 2, 3], pa.timestamp("ns", "UTC")),
            "mono_ns": pa.array([1, 2, 3], pa.int64()),
            "proc.cpu_pct": pa.array([10.0, 20.0, None]),
            "proc.rss_bytes": pa.array([None, None, 3 << 20], pa.int64()),
            "gpu.0.util_pct": pa.array([None, None, None], pa.float64()),
        }
    )
    assert latest_values(table) == {"proc.cpu_pct": 20.0, "proc.rss_bytes": float(3 << 20)}


def test_status_text_by_hand() -> None:
    s = Sampler(0.01, sources=["memory"])
    s.tick_now(1234)
    stats = s.stats()
    s.close()
    latest = {
        "proc.cpu_pct": 95.04,
        "proc.rss_bytes": 120 * 1024 * 1024,
        "gpu.1.util_pct": 42.0,
        "gpu.1.proc_mem_bytes": 1.5 * 1024**3,
        "gpu.0.temp_c": 50.0,  # no figure the line shows: gpu0 is left out
    }
    assert status_text(12.34, stats, latest) == (
        "rec 12.3 s | 1,234 rows | missed 0 | proc cpu 95.0 % rss 120.00 Mi"
        " | gpu1 42 % proc mem 1.50 Gi"
    )
    assert status_text(0.0, stats, {}) == "rec 0.0 s | 1,234 rows | missed 0"


def test_wanted_only_on_a_terminal(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    try:
        with open(slave, "w", closefd=False) as tty, open(tmp_path / "f", "w") as plain:
            assert wanted(tty, quiet=False)
            assert not wanted(tty, quiet=True)
            assert not wanted(plain, quiet=False)
    finally:
        os.close(master)
        os.close(slave)


def _record_on_a_pty(tmp_path: Path, *extra: str, columns: int = 0) -> tuple[int, str, str]:
    """Run ``record`` with stderr on a pseudo-terminal (stdout a pipe; ``columns`` wide, or of
    no size it tells); return the exit code, what the terminal got and stdout."""
    master, slave = pty.openpty()
    if columns:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    out = tmp_path / "run.parquet"
    proc = subprocess.Popen(
        [sys.executable, "-m", "stroboscope", "record", "-o", str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    os.close(slave)
    got = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not chunk:
                break
            got += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    stdout, _ = proc.communicate(timeout=60)
    return proc.returncode, got.decode("utf-8", "replace"), stdout


def test_the_status_line_is_drawn_on_a_terminal_and_cleared(tmp_path: Path) -> None:
    code, tty, stdout = _record_on_a_pty(
        tmp_path, "--interval", "0.01", "--duration", "2", "--sources", "memory,process"
    )
    assert code == 0, tty
    draws = [d for d in tty.split(ERASE) if STATUS.match(d)]
    assert len(draws) >= 2, repr(tty)  # redrawn while recording (about 4 times a second)
    rows = [int(STATUS.match(d).group(2).replace(",", "")) for d in draws]  # type: ignore[union-attr]
    assert rows == sorted(rows) and rows[-1] > rows[0]
    assert "proc " in draws[-1] and "rss " in draws[-1]  # the monitored process's figures
    assert tty.endswith(ERASE)  # erased before the summary, which goes to stdout
    assert stdout.startswith("recorded ")
    recorded = int(stdout.split()[1])
    assert rows[-1] <= recorded


def test_quiet_draws_nothing_on_a_terminal(tmp_path: Path) -> None:
    code, tty, stdout = _record_on_a_pty(
        tmp_path, "--quiet", "--duration", "0.6", "--sources", "memory"
    )
    assert code == 0
    assert "\x1b[K" not in tty and "rows |" not in tty
    assert stdout.startswith("recorded ")


def test_no_status_line_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "stroboscope",
            "record",
            "-o",
            str(tmp_path / "x.parquet"),
            "--duration",
            "0.6",
            "--sources",
            "memory",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "\x1b[K" not in done.stderr and "rows |" not in done.stderr
    assert "\x1b" not in done.stdout and done.stdout.startswith("recorded ")


def test_the_status_line_fits_a_narrow_terminal(tmp_path: Path) -> None:
    code, tty, _ = _record_on_a_pty(
        tmp_path, "--duration", "1.5", "--sources", "memory,process", columns=30
    )
    assert code == 0, tty
    # the startup line (no --pid: proc.* describe the recorder) is a whole line before the draws
    said, _, tty = tty.partition("\n")
    assert said.startswith("stroboscope record: no --pid or command"), said
    draws = [d for d in tty.split(ERASE) if d]
    assert draws, repr(tty)
    assert all(len(d) == 29 and d.startswith("rec ") for d in draws), draws  # cut at 29 columns


def test_the_status_line_shows_the_gpu_of_the_monitored_process(
    tmp_path: Path, nvml: ScriptFn
) -> None:
    """On the fake NVML: device 0 at 42 % with 2 GiB used by the recording process itself."""
    nvml(
        "devices 1\ndriver 550.54.15\nname 0 Fake H200\n"
        "uuid 0 GPU-aaaaaaaa-0000-0000-0000-000000000000\n"
        "set 0 util 42\nset 0 mem_total 150000000000\nset 0 mem_used 30000000000\n"
        "process 0 self 2147483648 55\n"
    )
    code, tty, _ = _record_on_a_pty(
        tmp_path, "--interval", "0.01", "--duration", "1.5", "--sources", "gpu,process"
    )
    assert code == 0, tty
    draws = [d for d in tty.split(ERASE) if STATUS.match(d)]
    assert draws and "gpu0 42 % proc mem 2.00 Gi" in draws[-1], draws
