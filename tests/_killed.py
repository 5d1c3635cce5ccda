"""A recording process killed as a crash kills it: the tests of what survives a SIGKILL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any


def kill_after_first_line(script: str, *args: str) -> Any:
    """Run ``python -c script args``, take the first line it prints (JSON: what it recorded
    before it waits to be killed), then SIGKILL it and wait for it; return that line decoded."""
    child = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    try:
        line = json.loads(child.stdout.readline())
    finally:
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
        child.stdout.close()
    return line
