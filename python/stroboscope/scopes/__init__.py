"""Scopes: named regions of code whose calls, durations and metrics stroboscope records.

>>> import stroboscope
>>> with stroboscope.Sampler(interval=0.001) as s:
...     with stroboscope.annotate("forward", step=3):
...         ...
>>> s.summary()                  # calls, durations, CPU/GPU/memory/power/energy per scope

Scope edges go into an events log in C++ on the sampler's clock; a running Sampler covers the
scopes its process opens while it runs, and :func:`enable` starts a default session on the first
scope. In a process started by ``stroboscope record -- cmd`` (``STROBOSCOPE_EVENTS_DIR`` in its
environment) the log lives in a file the recorder reads, and scopes always write. With nothing
recording, a scope costs an attribute read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stroboscope._base.lazy import face
from stroboscope.scopes._scope import annotate, collect_hardware_metrics
from stroboscope.scopes._session import (
    disable,
    enable,
    enable_from_environment,
    export_chrome_trace,
    is_enabled,
    samples_by_scope,
    session,
    summary,
)
from stroboscope.scopes._stack import current_labels, current_stack, labels
from stroboscope.scopes._switchboard import add_open_hook
from stroboscope.scopes.nvtx_capture import nvtx_injection_path

__all__ = [
    "add_open_hook",
    "annotate",
    "bare_decorator_hint",
    "collect_hardware_metrics",
    "command_environment",
    "current_labels",
    "current_scopes",
    "current_stack",
    "disable",
    "enable",
    "export_chrome_trace",
    "is_enabled",
    "labels",
    "nvtx_injection_path",
    "nvtx_taken_by",
    "samples_by_scope",
    "session",
    "summary",
]


def current_scopes() -> tuple[str, ...]:
    """The names of the scopes open in this context (thread or task), outermost first."""
    return tuple(str(frame.owner.name) for frame in current_stack())  # type: ignore[attr-defined]


_DOORS = {  # what the rooms above use
    "bare_decorator_hint": "._scope",
    "command_environment": "._outside",
    "nvtx_taken_by": "._outside",
}

__getattr__, __dir__ = face(__name__, __all__, _DOORS)

enable_from_environment()

if TYPE_CHECKING:
    from stroboscope.scopes._outside import command_environment, nvtx_taken_by
    from stroboscope.scopes._scope import bare_decorator_hint
