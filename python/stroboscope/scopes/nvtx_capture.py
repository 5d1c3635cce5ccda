"""NVTX capture: the injection library that turns a process's NVTX ranges into its scopes.

Code annotated with NVTX (``torch.cuda.nvtx``, ``record_function`` under ``emit_nvtx``, Megatron,
NeMo, the ``nvtx`` package) calls NVTX's C API, which does nothing until a tool attaches: on the
first NVTX call NVTX loads the library named by ``NVTX_INJECTION64_PATH`` and calls its entry
point, as it does for Nsight Systems. stroboscope ships such a library next to its extension
(``libstroboscope_nvtx.so``, built with the core; no CUDA at build or run time). A recorder that
runs a command sets that variable to :func:`nvtx_injection_path` beside its events directory
(``STROBOSCOPE_EVENTS_DIR``); the library then writes each range's begin and end into the
process's events file (producer ``nvtx``):

- push/pop and start/end ranges become scopes named ``domain/message`` (``message`` for the
  default domain); a start/end range may end on another thread and is a stack of its own;
- marks become scopes of zero length, nested in the innermost open range of their domain;
- a category becomes the label ``category`` (its name, or its number when unnamed);
- timestamps are CLOCK_MONOTONIC and thread ids the OS's (``gettid``), as for ``annotate``.

Without ``STROBOSCOPE_EVENTS_DIR`` the library declines to attach and NVTX stays a no-op.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

__all__ = ["NVTX_LIBRARY_NAME", "nvtx_injection_path", "ranges_recorded_here"]

NVTX_LIBRARY_NAME = "libstroboscope_nvtx.so"
"""The injection library's file name, installed in the package directory beside ``_core``."""


def nvtx_injection_path() -> str | None:
    """The absolute path of the NVTX injection library, or None where this build has none.

    Returns
    -------
    str or None
        The value for ``NVTX_INJECTION64_PATH``; None when the library is not installed beside
        the extension (a build without it, or a source tree whose C++ was not built).
    """
    path = Path(__file__).resolve().parent.parent / NVTX_LIBRARY_NAME
    return str(path) if path.is_file() else None


@functools.cache
def ranges_recorded_here() -> bool:
    """Whether this process's NVTX ranges are written to its events by our injection library
    (``NVTX_INJECTION64_PATH`` names it and ``STROBOSCOPE_EVENTS_DIR`` is set: a command that a
    recorder runs). :class:`stroboscope.annotate` then opens no NVTX range of its own for a
    scope with ``nvtx=``: the scope is recorded once, as itself, not again as an NVTX range.
    Looked up once per process (NVTX too reads its variable once, at its first call)."""
    from stroboscope.formats.shared_events import EVENTS_DIR_ENV, NVTX_INJECTION_ENV

    value = os.environ.get(NVTX_INJECTION_ENV)
    ours = nvtx_injection_path()
    if not value or ours is None or not os.environ.get(EVENTS_DIR_ENV):
        return False
    return os.path.realpath(value) == os.path.realpath(ours)
