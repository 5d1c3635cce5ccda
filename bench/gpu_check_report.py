"""Output of bench/gpu_check.py as a Markdown section for bench/RESULTS.md (``--markdown``)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any


class Tee:
    """stdout that also keeps what was written (for ``--markdown``)."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return int(self.out.write(text))

    def flush(self) -> None:
        self.out.flush()

    def text(self) -> str:
        return "".join(self.parts)


def write_markdown(path: str, text: str, argv: list[str] | None) -> None:
    """The output as a Markdown section: when, on what, with which command."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as fh:
            model = next(
                (ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), model
            )
    except OSError:
        pass
    cmd = " ".join(["python bench/gpu_check.py", *(sys.argv[1:] if argv is None else argv)])
    head = (
        f"## GPU check, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n"
        f"Machine: {model}, {os.cpu_count()} CPUs. Command: `{cmd}`.\n\n"
    )
    with open(path, "w") as fh:
        fh.write(head + text)
