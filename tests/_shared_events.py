"""Processes that write shared events (``STROBOSCOPE_EVENTS_DIR``), for the tests of the events
files, their reader and the scopes that write them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from stroboscope.formats.shared_events import EVENTS_DIR_ENV


def child_env(events_dir: Path) -> dict[str, str]:
    """This environment, with ``events_dir`` as the events directory and this import path."""
    return {
        **os.environ,
        EVENTS_DIR_ENV: str(events_dir),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }


def start(
    code: str, events_dir: Path, script: Path | None = None, **kwargs: object
) -> subprocess.Popen[str]:
    """``python -c code`` (dedented) with ``events_dir`` in its environment; with ``script``,
    ``code`` is written there and run as a file (multiprocessing's spawn needs a main module
    it can import)."""
    argv = ["-c", textwrap.dedent(code)]
    if script is not None:
        script.write_text(textwrap.dedent(code))
        argv = [str(script)]
    proc: subprocess.Popen[str] = subprocess.Popen(
        [sys.executable, *argv],
        env=child_env(events_dir),
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )
    return proc


def run(code: str, events_dir: Path, timeout: float = 120) -> str:
    """Runs ``code`` as :func:`start` does, to its end; its stdout (fails on a non-zero exit)."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=child_env(events_dir),
        text=True,
        capture_output=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


SCOPES = """
import stroboscope
for step in range({n}):
    with stroboscope.annotate("outer", step=step % 3):
        with stroboscope.annotate("inner"):
            pass
"""
"""``n`` outer scopes with labels, each with one inner scope (``SCOPES.format(n=...)``)."""
