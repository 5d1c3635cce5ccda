"""One recording followed by the live view: its spool's rows into a series per column shown,
its scope edges into calls, whether its recorder still runs, and the sampler's own figures.

The panels are chosen from the spool's columns: CPU, memory, network, disk, then one per GPU
(the columns each shows, when the recording has them: :data:`PANELS`, ``GPU_COLUMNS``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from stroboscope._base.text import fmt_seconds
from stroboscope.export.live_scopes import ScopeTracker
from stroboscope.export.live_series import KEEP_NS, Series
from stroboscope.formats.events_live import EventsTail
from stroboscope.formats.spool_header import SpoolError
from stroboscope.formats.spool_live import LiveSpool, LiveState
from stroboscope.formats.spool_stats import RecorderStats

PANELS = (
    ("CPU", ("cpu.util_pct", "proc.cpu_pct")),
    ("Memory", ("mem.used_bytes", "proc.rss_bytes")),
    ("Network", ("net.recv_bytes_per_s", "net.sent_bytes_per_s")),
    ("Disk", ("disk.read_bytes_per_s", "disk.write_bytes_per_s")),
)
"""The host and process panels: a title and the columns drawn, those the recording has."""
GPU_COLUMNS = ("util_pct", "mem_used_bytes", "power_w")
"""The columns of each GPU's panel (``gpu.{i}.<name>``), those the recording has."""
_GPU = re.compile(r"^gpu\.(\d+)\.")
STATE_EVERY_S = 0.5
"""How often the recorder's lock is looked at (seconds)."""

FooterFigures = Callable[[], str]


@dataclass(frozen=True)
class Panel:
    """A panel: its title and the columns it draws, with their units."""

    title: str
    columns: tuple[str, ...]
    units: tuple[str, ...]


def panels_of(fields: list[tuple[str, str, str, str]]) -> list[Panel]:
    """The panels of a spool with these ``(name, unit, dtype, kind)`` fields."""
    unit = {f[0]: f[1] for f in fields}
    out = []
    for title, columns in PANELS:
        have = tuple(c for c in columns if c in unit)
        if have:
            out.append(Panel(title, have, tuple(unit[c] for c in have)))
    gpus = sorted({int(m.group(1)) for f in fields if (m := _GPU.match(f[0]))})
    for i in gpus:
        have = tuple(f"gpu.{i}.{c}" for c in GPU_COLUMNS if f"gpu.{i}.{c}" in unit)
        if have:
            out.append(Panel(f"GPU {i}", have, tuple(unit[c] for c in have)))
    return out


class Feed:
    """One recording followed (see the module).

    Parameters
    ----------
    label : str
        Its name on screen (``"rank 3"``, a file name).
    spool : str
        Its spool (:class:`~stroboscope.formats.spool_live.LiveSpool`: :class:`SpoolError`
        when it is no spool, or another user's).
    events_dir : str, optional
        The shared-events directory its command writes its scope edges into.
    figures : callable, optional
        The sampler's own figures, in words, for the footer (a view that samples itself knows
        them; an attached one reads those its recorder publishes in the spool, else infers the
        ticks missed from the rows' times).
    """

    def __init__(
        self,
        label: str,
        spool: str,
        events_dir: str | None = None,
        figures: FooterFigures | None = None,
    ) -> None:
        self.label = label
        self.spool = LiveSpool(spool)
        self.events = EventsTail(events_dir) if events_dir is not None else None
        self.figures = figures
        self.panels = panels_of(self.spool.fields)
        self.columns = [c for p in self.panels for c in p.columns]
        units = dict((f[0], f[1]) for f in self.spool.fields)
        self.series = {c: Series(units[c]) for c in self.columns}
        self.scopes = ScopeTracker()
        self.newest_ns: int | None = None  # the newest row's mono_ns
        self.rows = 0
        self.view_missed = 0  # rows the ring overwrote before this view read them
        self.ticks_missed = 0  # gaps between rows longer than the tick, in ticks
        self.state = LiveState(True, None)
        self.error = ""
        self._state_at = 0.0
        self.recorder: RecorderStats | None = None  # the recorder's figures, as last published
        self._cpu_pct: float | None = None  # the sampler thread's CPU between two publications
        self._cpu_from: tuple[int, float] | None = None  # (thread CPU ns, monotonic s) then
        # The window's rows that are no longer in the ring: from the recorder's segments.
        for old in self.spool.history(self.columns, KEEP_NS // max(1, self.spool.interval_ns)):
            self._add(old.mono_ns, old.values)

    def poll(self) -> int:
        """Read what the recording wrote since the last poll; the rows read."""
        if self.error:
            return 0
        try:
            rows = self.spool.poll(self.columns)
        except SpoolError as exc:  # a spool that stopped making sense: keep what was read
            self.error = str(exc)
            return 0
        n = self._add(rows.mono_ns, rows.values)
        self.view_missed += rows.skipped
        self._read_recorder()
        if self.events is not None:
            edges = self.events.poll()
            if len(edges):
                self.scopes.add(edges)
        now = time.monotonic()
        if now - self._state_at >= STATE_EVERY_S or not self.state.recording:
            self._state_at = now
            if self.state.recording:
                self.state = self.spool.state()
        return n

    def _add(self, mono_ns: np.ndarray[Any, Any], values: dict[str, np.ndarray[Any, Any]]) -> int:
        """Rows into the series (and the gaps between them into the inferred ticks missed)."""
        n = len(mono_ns)
        if n:
            interval = self.spool.interval_ns
            gaps = np.diff(mono_ns)
            if self.newest_ns is not None:
                gaps = np.r_[mono_ns[0] - self.newest_ns, gaps]
            late = gaps[gaps > interval * 3 // 2]
            self.ticks_missed += int(np.sum(np.rint(late / interval).astype(np.int64) - 1))
            for c in self.columns:
                self.series[c].add(mono_ns, values[c])
            self.newest_ns = int(mono_ns[-1])
            self.rows += n
        return n

    def _read_recorder(self) -> None:
        """The recorder's figures from the spool's header, and its sampler thread's CPU share
        between publications at least a second apart."""
        st = self.spool.recorder_stats()
        if st is None or (self.recorder is not None and st.seq == self.recorder.seq):
            return
        self.recorder = st
        now = time.monotonic()
        if self._cpu_from is None:
            self._cpu_from = (st.thread_cpu_ns, now)
        elif now - self._cpu_from[1] >= 1.0:
            cpu, then = self._cpu_from
            self._cpu_pct = 100 * (st.thread_cpu_ns - cpu) / 1e9 / (now - then)
            self._cpu_from = (st.thread_cpu_ns, now)

    def footer(self) -> str:
        """The sampler's own figures, in words: the recorder's (as it published them in the
        spool) when it publishes them, else inferred from the rows."""
        if self.figures is not None:
            return self.figures()
        st = self.recorder
        if st is not None:
            cpu = "" if self._cpu_pct is None else f" · sampler CPU {self._cpu_pct:.1f} %"
            return ("" if self.state.recording else "as last published: ") + (
                f"ticks missed {st.ticks_missed} of {st.ticks_scheduled} · cost "
                f"{fmt_seconds(st.cost_mean_ns / 1e9)} mean, {fmt_seconds(st.cost_p99_ns / 1e9)}"
                f" p99 per tick{cpu} · rows lost {st.rows_lost} · rows the view missed "
                f"{self.view_missed}"
            )
        return (
            f"inferred: ticks missed {self.ticks_missed} (gaps between rows) · rows read "
            f"{self.rows} · rows the view missed {self.view_missed} · cost and rows lost: not "
            f"published by this recorder"
        )

    def close(self) -> None:
        """Close the files (the recording is not touched)."""
        self.spool.close()
        if self.events is not None:
            self.events.close()
