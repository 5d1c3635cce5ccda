"""The live status line of ``stroboscope record`` on a terminal.

One line on standard error, redrawn in place (carriage return, then erase to the end of the
line) each time the recording loop wakes (a few times a second): elapsed time, rows recorded,
ticks missed, and the latest CPU, memory and GPU figures of the monitored process. It is drawn
only when standard error is a terminal (not ``TERM=dumb``) and ``--quiet`` is not given, so a
redirected or piped run writes nothing but its summary. The values are read with
:meth:`Sampler.copy_since`, which moves no cursor: the rows a publisher drains stay its own.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TextIO

import pyarrow as pa

from stroboscope._base.text import fmt_value
from stroboscope.analysis import gpu_labels
from stroboscope.sampling import CoreSampler as Sampler
from stroboscope.sampling import SamplerStats

_ERASE_LINE = "\r\x1b[K"


def wanted(stream: TextIO, quiet: bool) -> bool:
    """Whether to draw a status line on ``stream``: a terminal, not ``TERM=dumb``, no --quiet."""
    if quiet or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def latest_values(table: pa.Table) -> dict[str, float]:
    """The last non-null value of each numeric column of ``table`` (columns without one are
    left out)."""
    out: dict[str, float] = {}
    for name in table.column_names:
        if name in ("time", "mono_ns"):
            continue
        column = table.column(name)
        if not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
            continue
        cells = column.drop_null()
        if len(cells):
            value = cells[-1].as_py()
            if value is not None and math.isfinite(value):
                out[name] = float(value)
    return out


def status_text(elapsed_s: float, stats: SamplerStats, latest: Mapping[str, float]) -> str:
    """The status line's text: ``rec 12.3 s | 1,234 rows | missed 0 | proc cpu 95.0 %
    rss 120.0 MiB | gpu0 42 % mem 1.2 GiB`` (a figure is left out while it has no value)."""
    parts = [
        f"rec {elapsed_s:.1f} s",
        f"{stats.rows_written:,} rows",
        f"missed {stats.ticks_missed:,}",
    ]
    proc = []
    if "proc.cpu_pct" in latest:
        proc.append(f"cpu {latest['proc.cpu_pct']:.1f} %")
    if "proc.rss_bytes" in latest:
        proc.append(f"rss {fmt_value(latest['proc.rss_bytes'], 'bytes')}")
    if proc:
        parts.append("proc " + " ".join(proc))
    for i in gpu_labels(latest):
        gpu = [f"gpu{i}"]
        if f"gpu.{i}.util_pct" in latest:
            gpu.append(f"{latest[f'gpu.{i}.util_pct']:.0f} %")
        if f"gpu.{i}.proc_mem_bytes" in latest:
            gpu.append(f"proc mem {fmt_value(latest[f'gpu.{i}.proc_mem_bytes'], 'bytes')}")
        if len(gpu) > 1:
            parts.append(" ".join(gpu))
    return " | ".join(parts)


class StatusLine:
    """Draws :func:`status_text` for ``sampler`` on ``stream`` (see the module docstring).

    Parameters
    ----------
    stream : text stream
        Where to draw (``sys.stderr``).
    sampler : Sampler
        The recording's sampler.
    enabled : bool
        False makes every method a no-op (not a terminal, or ``--quiet``).
    """

    def __init__(self, stream: TextIO, sampler: Sampler, *, enabled: bool) -> None:
        self._stream = stream
        self._sampler = sampler
        self.enabled = enabled
        self._drawn = False

    def update(self, elapsed_s: float) -> None:
        """Redraw the line with the sampler's latest figures."""
        if not self.enabled:
            return
        stats = self._sampler.stats()
        # Enough recent rows that every source was due in them at least once.
        back = 2 * max((s.every for s in stats.sources), default=1)
        first = max(0, stats.rows_written - back)
        latest = latest_values(self._sampler.copy_since(first).to_arrow())
        text = status_text(elapsed_s, stats, latest)
        try:
            width = os.get_terminal_size(self._stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            width = 0
        width = width or 100  # a terminal that does not say its size (0 columns)
        self._write(_ERASE_LINE + text[: max(width - 1, 10)])
        self._drawn = True

    def clear(self) -> None:
        """Erase the line (before the summary is printed)."""
        if self.enabled and self._drawn:
            self._write(_ERASE_LINE)
            self._drawn = False

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # the terminal went away: stop drawing, keep recording
            self.enabled = False
