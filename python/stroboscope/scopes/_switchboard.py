"""The scope switchboard: whether scopes write edges into the events log now, and whom an edge
wakes. The one piece of state every scope reads.

Scope edges go into one process-wide events log in C++. Writing them costs a call into the
extension, so a scope writes only while somebody records: a running Sampler (the sampling room
tells this module which run, :func:`stroboscope.sampling.watch`), the default
session of :mod:`stroboscope.scopes`, or a recorder outside the process: a process started with
``STROBOSCOPE_EVENTS_DIR`` in its environment (:mod:`stroboscope.formats.shared_events`) has its
events log in a file there, which the recorder reads, so its scopes always write. :data:`state`
says so in one attribute read, which is what a disabled scope costs. A Sampler made with
``edge_rows=True`` also asks for an immediate row when a scope opens (``request_tick``), so a
region shorter than the interval still has a row at its edge.

The tuples are replaced, never mutated, under :data:`_lock`: a scope on another thread reads
either the old tuple or the new one, both complete.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Callable

from stroboscope._base import lifecycle as _lifecycle
from stroboscope.formats.shared_events_env import EVENTS_DIR_ENV
from stroboscope.sampling import Recorder, scope_edges_mode, watch
from stroboscope.scopes import _stack as _stack  # the C edges' stack is set up before a mode

__all__ = ["add_open_hook", "set_enabled", "state"]


class _State:
    """What a scope reads on every edge (attributes, no locks)."""

    __slots__ = (
        "edge_targets",
        "enabled",
        "open_hooks",
        "recorders",
        "recording",
        "shared",
        "starter",
    )

    def __init__(self) -> None:
        self.recording = False  # write events at all: a recorder runs, or the session is on
        self.enabled = False  # the default session of stroboscope.scopes is on
        self.shared = False  # a recorder outside the process reads the events (shared_from_env)
        self.recorders: tuple[object, ...] = ()  # running samplers, in start order
        self.edge_targets: tuple[Callable[[], None], ...] = ()  # their request_tick, if asked
        self.open_hooks: tuple[Callable[[str], None], ...] = ()  # called with a scope's name
        self.starter: Callable[[], None] | None = None  # starts the default session's sampler

    def refresh(self) -> None:
        """Derives ``recording``, and tells the scopes' C edges which path to take: none (nothing
        records), C (nothing in Python waits on an edge), or the Python one."""
        self.recording = self.enabled or self.shared or bool(self.recorders)
        python_waits = self.starter is not None or bool(self.edge_targets or self.open_hooks)
        scope_edges_mode(0 if not self.recording else 2 if python_waits else 1)

    def set_starter(self, starter: Callable[[], None] | None) -> None:
        """The default session's starter (the first scope after enable() calls it)."""
        self.starter = starter
        self.refresh()


state = _State()
_lock = threading.Lock()


def _running(recorders: tuple[Recorder, ...]) -> None:
    """The sampling room's news: ``recorders`` run now (scopes write events while any does)."""
    with _lock:
        state.recorders = tuple(r.sampler for r in recorders)
        state.edge_targets = tuple(r.edge_target for r in recorders if r.edge_target is not None)
        state.refresh()


def set_enabled(on: bool) -> None:
    """The default session's switch (:func:`stroboscope.scopes.enable` / ``disable``)."""
    with _lock:
        state.enabled = on
        state.refresh()


def shared_from_env() -> bool:
    """Whether this process's events go to a recorder outside it (``STROBOSCOPE_EVENTS_DIR`` is
    set: the extension's events log lives in a file there); read at import and after fork."""
    with _lock:
        state.shared = bool(os.environ.get(EVENTS_DIR_ENV))
        state.refresh()
        return state.shared


def add_open_hook(hook: Callable[[str], None]) -> Callable[[], None]:
    """Call ``hook(name)`` whenever a scope opens while events are recorded; returns a remover."""
    with _lock:
        state.open_hooks = (*state.open_hooks, hook)
        state.refresh()

    def remove() -> None:
        with _lock:
            hooks = list(state.open_hooks)
            if hook in hooks:
                hooks.remove(hook)
            state.open_hooks = tuple(hooks)
            state.refresh()

    return remove


def _after_fork_in_child() -> None:
    """In a forked child no sampler thread runs: nothing records until one starts there (the
    default session starts its own again on the next scope). The lock may have been held by a
    thread that does not exist in the child: a new one replaces it."""
    global _lock
    _lock = threading.Lock()
    state.recorders = ()
    state.edge_targets = ()
    state.shared = bool(os.environ.get(EVENTS_DIR_ENV))
    state.refresh()


_lifecycle.register(sys.modules[__name__])  # the one registry calls _after_fork_in_child
watch(_running)  # now, and whenever a sampler starts or stops
shared_from_env()
