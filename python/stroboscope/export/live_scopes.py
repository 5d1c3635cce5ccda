"""The live view's scopes: the edges followed paired into calls as they arrive, each thread's
open scopes now, the recent calls over the time axis, and the step times.

Edges pair as the recorded ones do (:mod:`stroboscope.analysis.scope_edges`): per writer
process, thread and stack, a begin opens a call at its depth and the end of that depth closes
it. An end whose begin the view never saw (it began before the events ring's oldest record) is
left out. The step and its figures are the cluster report's (:mod:`._ranks_steps`): the depth-0
scope called most often (or the name given), its closed calls' median and 90th percentile.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from stroboscope.export._ranks import Rank
from stroboscope.export._ranks_steps import StepStats, closed_calls, step_stats
from stroboscope.export.live_series import KEEP_NS, GrowingColumns
from stroboscope.formats.events_live import Edges

Array = np.ndarray[Any, Any]
MAX_CALLS = 1_000_000
"""Closed calls kept at most (40 MB): a command that closes more in 10 min has only its latest
on screen."""
ThreadKey = tuple[int, int, int, int]  # (pid, events file, thread id, stack id)


class ScopeTracker:
    """Calls of one recording, paired from its edges (see the module)."""

    def __init__(self) -> None:
        self.open: dict[ThreadKey, list[tuple[str, int]]] = {}  # per stack: (name, begin ns)
        self.names: list[str] = []
        self._code: dict[str, int] = {}
        self._threads: list[ThreadKey] = []
        self._thread_code: dict[ThreadKey, int] = {}
        # closed calls: begin, end (ns), name code, depth, thread code; in order of their end
        self._closed = GrowingColumns((np.int64, np.int64, np.int64, np.int64, np.int64))
        self.unpaired = 0  # ends whose begin was never seen

    def _name(self, name: str) -> int:
        code = self._code.get(name)
        if code is None:
            code = self._code[name] = len(self.names)
            self.names.append(name)
        return code

    def add(self, edges: Edges) -> None:
        """Pair the new edges (in each file's index order) into calls."""
        ended: list[tuple[int, int, int, int, int]] = []
        for mono, kind, pid, src, tid, sid, depth, name in zip(
            edges.mono_ns.tolist(),
            edges.kind.tolist(),
            edges.pid.tolist(),
            edges.source.tolist(),
            edges.thread_id.tolist(),
            edges.stack_id.tolist(),
            edges.depth.tolist(),
            edges.scope,
            strict=True,
        ):
            key = (pid, src, tid, sid)
            stack = self.open.setdefault(key, [])
            if kind == 1:
                del stack[depth:]  # ends lost before it: those calls are no longer open
                stack.append((name, mono))
                continue
            if depth >= len(stack):
                self.unpaired += 1
                continue
            opened, begin = stack[depth]
            del stack[depth:]
            if not stack:  # a stack (an asyncio task's) may never be used again
                del self.open[key]
            t = self._thread_code.get(key)
            if t is None:
                t = self._thread_code[key] = len(self._threads)
                self._threads.append(key)
            ended.append((begin, mono, self._name(opened), depth, t))
        if ended:
            cols = np.array(ended, dtype=np.int64).T
            self._closed.append(*cols)
            end = self._closed.view(1)
            keep_from = end[-1] - KEEP_NS
            if end[0] < keep_from:  # ends are nearly ordered: trim by the first one kept
                self._closed.drop_before(int(np.argmax(end >= keep_from)))
            self._closed.drop_before(len(self._closed.view(1)) - MAX_CALLS)

    def open_stacks(self) -> list[tuple[ThreadKey, list[tuple[str, int]]]]:
        """Each stack with open calls now (outermost first), by pid and thread."""
        return sorted((k, list(v)) for k, v in self.open.items() if v)

    def closed(self) -> dict[str, Array]:
        """The closed calls kept (the last 10 min): ``begin``, ``end`` (ns), ``name`` (code in
        :attr:`names`), ``depth``, ``thread`` (code in :meth:`thread_keys`)."""
        keys = ("begin", "end", "name", "depth", "thread")
        return {k: self._closed.view(i) for i, k in enumerate(keys)}

    def thread_keys(self) -> list[ThreadKey]:
        """The stacks by thread code."""
        return list(self._threads)

    def rank(self, rank: int, since_ns: int, step: str | None = None) -> Rank:
        """The depth-0 calls, and the calls of ``step`` at any depth (closed since
        ``since_ns``; the open depth-0 ones too), as a cluster report's :class:`Rank`, for its
        step rule."""
        c = self.closed()
        top = c["depth"] == 0
        if step is not None and step in self._code:
            top |= c["name"] == self._code[step]
        top &= c["end"] >= since_ns
        names = [self.names[i] for i in c["name"][top].tolist()]
        begin, end = c["begin"][top].tolist(), c["end"][top].tolist()
        ends: list[int | None] = list(end)
        for _key, stack in self.open.items():
            if stack:
                names.append(stack[0][0])
                begin.append(stack[0][1])
                ends.append(None)
        table = pa.table(
            {
                "name": pa.array(names, pa.string()),
                "depth": pa.array([*c["depth"][top].tolist(), *[0] * (len(names) - len(end))]),
                "begin_ns": pa.array(begin, pa.int64()),
                "end_ns": pa.array(ends, pa.int64()),
            }
        )
        return Rank("live", "", rank, None, table)


def step_figures(rank: Rank, step: str) -> tuple[StepStats, Array]:
    """``rank``'s figures for ``step`` (the cluster report's) and its closed calls' durations
    (ns), in begin order."""
    _, durations = closed_calls(rank, step)
    open_calls = 0
    if rank.scopes is not None:
        mask = np.asarray(rank.scopes.column("name").to_pylist(), dtype=object) == step
        open_calls = int((mask & rank.scopes.column("end_ns").is_null().to_numpy(False)).sum())
    return step_stats(durations, open_calls), durations


def scope_band(
    tracker: ScopeTracker, thread: int, lo_ns: int, hi_ns: int, width: int, now_ns: int
) -> Array:
    """Per screen column over ``[lo_ns, hi_ns)``, the name code of the depth-0 call of thread
    code ``thread`` running at the column's end (-1: none), open calls running to ``now_ns``."""
    c = tracker.closed()
    mine = (c["thread"] == thread) & (c["depth"] == 0)
    begin, end, name = c["begin"][mine], c["end"][mine], c["name"][mine]
    key = tracker.thread_keys()[thread]
    stack = tracker.open.get(key) or []
    if stack:
        begin = np.r_[begin, stack[0][1]]
        end = np.r_[end, now_ns]
        name = np.r_[name, tracker._name(stack[0][0])]
    order = np.argsort(begin, kind="stable")
    begin, end, name = begin[order], end[order], name[order]
    step = (hi_ns - lo_ns) / max(width, 1)
    col_lo = (lo_ns + step * np.arange(width)).astype(np.int64)
    col_hi = (lo_ns + step * np.arange(1, width + 1)).astype(np.int64)
    out = np.full(width, -1, np.int64)
    if not len(begin):
        return out
    # the latest call begun before the column's end, if it had not ended by the column's start
    at = np.searchsorted(begin, col_hi, side="right") - 1
    ok = at >= 0
    hit = np.zeros(width, bool)
    hit[ok] = end[at[ok]] >= col_lo[ok]
    out[hit] = name[at[hit]]
    return out
