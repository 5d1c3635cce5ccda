"""The process-wide default session: a Sampler that scopes start on first use when enabled.

``enable()`` builds the sampler at once (so a bad argument fails there, not inside the first
scope) and the first scope opened afterwards starts it; until then nothing runs. ``disable()``
stops it and keeps its rows, so ``summary()`` still covers what was recorded. The environment
variable ``STROBOSCOPE_ENABLED`` (1, true, yes, on) enables it when :mod:`stroboscope.scopes` is
first imported.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stroboscope.scopes import _switchboard

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from stroboscope.recording.sampler import Sampler

# The default session samples at 1 kHz and keeps 2**17 rows (about two minutes at 1 kHz, plus
# edge rows): a profiling run's worth; pass capacity= or spool= to enable() to keep more.
DEFAULT_INTERVAL = 0.001
DEFAULT_CAPACITY = 1 << 17
TRUTHY = frozenset({"1", "true", "yes", "on"})

_lock = threading.Lock()
_sampler: Sampler | None = None


def enable(interval: float = DEFAULT_INTERVAL, **options: Any) -> None:
    """Record every scope from now on, in a default session started by the first scope.

    Parameters
    ----------
    interval : float
        The session's sampling interval in seconds (1 ms by default).
    **options
        Any keyword of :class:`stroboscope.Sampler` (``sources``, ``gpus``, ``spool``...).
        ``edge_rows`` is on unless given: each scope opening asks for an immediate row.

    Enabling again without arguments resumes the same session (its rows kept); with arguments,
    a new session replaces it.
    """
    global _sampler
    from stroboscope.recording.sampler import Sampler

    fresh = interval != DEFAULT_INTERVAL or bool(options)
    options.setdefault("capacity", DEFAULT_CAPACITY)
    options.setdefault("edge_rows", True)
    with _lock:
        if _sampler is None or _sampler.closed or fresh:
            replacement = Sampler(interval, **options)  # a bad argument fails here
            replacement.provenance()  # its run's facts gathered now, not inside the first scope
            if _sampler is not None:
                _sampler.close()
            _sampler = replacement
        _switchboard.state.set_starter(None if _sampler.running else _start)
        _switchboard.set_enabled(True)


def disable() -> None:
    """Stop recording scopes by default; the session's rows stay readable (``summary()``)."""
    with _lock:
        _switchboard.state.set_starter(None)
        _switchboard.set_enabled(False)
        if _sampler is not None:
            _sampler.stop()


def is_enabled() -> bool:
    """Whether the default session records scopes."""
    return _switchboard.state.enabled


def session() -> Sampler | None:
    """The default session's Sampler (None before :func:`enable`)."""
    return _sampler


def _start() -> None:
    """Called by the first scope opened after enable(): starts the session's sampler."""
    with _lock:
        if _switchboard.state.starter is None:  # another thread's scope got here first
            return
        _switchboard.state.set_starter(None)
        if _sampler is not None and _switchboard.state.enabled:
            _sampler.start()


def _need_session() -> Sampler:
    if _sampler is None:
        raise RuntimeError(
            "no default session: call stroboscope.enable() (or set STROBOSCOPE_ENABLED=1) "
            "before the scopes, or use the methods of your own running Sampler"
        )
    return _sampler


def summary(*, by: str | Sequence[str] | None = None, weight: str | None = None) -> pd.DataFrame:
    """Per-scope figures of the default session, or with ``by="function"`` each scope by
    function (see :meth:`stroboscope.Sampler.summary`)."""
    return _need_session().summary(by=by, weight=weight)


def samples_by_scope() -> pa.Table:
    """The default session's samples with their scope (see ``Sampler.samples_by_scope``)."""
    return _need_session().samples_by_scope()


def export_chrome_trace(path: str | os.PathLike[str]) -> str:
    """The default session as a Chrome/Perfetto trace (see ``Sampler.export_chrome_trace``)."""
    return _need_session().export_chrome_trace(path)


def enable_from_environment() -> None:
    if os.environ.get("STROBOSCOPE_ENABLED", "").strip().lower() in TRUTHY:
        enable()
