"""What a recorder outside the process sets in the environment of the command it runs, so that
the command's scopes (and those of every process it starts) reach it.

:func:`command_environment` is that environment: ``STROBOSCOPE_EVENTS_DIR`` names the recorder's
private events directory (each process writes its scope edges into files of its own there,
:mod:`stroboscope.formats.shared_events`), and ``NVTX_INJECTION64_PATH`` names the NVTX
injection library built with the core
(:func:`stroboscope.scopes.nvtx_capture.nvtx_injection_path`), so the command's NVTX
ranges become scopes in the same directory, unless the recorder was asked not to (``--no-nvtx``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from stroboscope.scopes import nvtx_capture

__all__ = ["command_environment", "nvtx_taken_by"]


def command_environment(
    events_dir: str | os.PathLike[str],
    *,
    nvtx: bool = True,
    base: Mapping[str, str] | None = None,
    edge_counters: str = "off",
) -> dict[str, str]:
    """The environment of a command recorded from outside: ``base`` (default: this process's)
    with ``STROBOSCOPE_EVENTS_DIR`` set to ``events_dir`` and, when ``nvtx`` and the injection
    library is installed, ``NVTX_INJECTION64_PATH`` set to it. With ``nvtx`` False, an
    ``NVTX_INJECTION64_PATH`` inherited from ``base`` is kept; so is one that names another
    library (another tool's, e.g. Nsight Systems' when it runs the recorder: NVTX loads one
    injection library, and it is not ours to take; :func:`nvtx_taken_by` names it).
    ``edge_counters`` other than ``"off"`` (one of
    :data:`~stroboscope.formats.shared_events.EDGE_COUNTERS`) sets ``STROBOSCOPE_EDGE_COUNTERS``:
    the command's edges carry their threads' own counters."""
    from stroboscope.formats.shared_events import (
        EDGE_COUNTERS,
        EDGE_COUNTERS_ENV,
        EVENTS_DIR_ENV,
        NVTX_INJECTION_ENV,
    )

    if edge_counters not in EDGE_COUNTERS:
        raise ValueError(f"edge_counters must be one of {EDGE_COUNTERS}, got {edge_counters!r}")
    env = dict(os.environ if base is None else base)
    env[EVENTS_DIR_ENV] = os.fspath(events_dir)
    if edge_counters != "off":
        env[EDGE_COUNTERS_ENV] = edge_counters
    library = nvtx_capture.nvtx_injection_path() if nvtx else None
    if library is not None and not env.get(NVTX_INJECTION_ENV):
        env[NVTX_INJECTION_ENV] = library
    return env


def nvtx_taken_by(env: Mapping[str, str]) -> str | None:
    """The injection library another tool set in ``env`` (not ours), or None: the command's
    NVTX ranges then go to that tool, not to the recording."""
    from stroboscope.formats.shared_events import NVTX_INJECTION_ENV

    value = env.get(NVTX_INJECTION_ENV)
    ours = nvtx_capture.nvtx_injection_path()
    if not value or (ours is not None and os.path.realpath(value) == os.path.realpath(ours)):
        return None
    return value
