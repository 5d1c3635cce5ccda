"""Shared scope events (temporary stand-in: the names the recorder side uses, until the shared
events reader lands here with them)."""

from __future__ import annotations

EVENTS_DIR_ENV = "STROBOSCOPE_EVENTS_DIR"
"""The environment variable naming the directory a process writes its scope edges into."""
NVTX_INJECTION_ENV = "NVTX_INJECTION64_PATH"
"""The environment variable NVTX reads the injection library's path from."""
