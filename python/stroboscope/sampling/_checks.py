"""Argument checks, the one module for them: errors name the argument, the value and what is
accepted. Every room of the package (sampling, recording, compat, cli) checks through here."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Union

from stroboscope import _core

MIN_INTERVAL_S = _core.MIN_INTERVAL_NS / 1e9
MAX_INTERVAL_S = _core.MAX_INTERVAL_NS / 1e9
MAX_CAPACITY = 1 << 30

SourcesArg = Union[Sequence[str], Mapping[str, Union[float, None]], None]


def check_interval(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(
            f"{name} must be a finite number of seconds in [{MIN_INTERVAL_S:g}, "
            f"{MAX_INTERVAL_S:g}], got {value!r}"
        )
    if seconds < MIN_INTERVAL_S or seconds > MAX_INTERVAL_S:
        raise ValueError(
            f"{name} must be within [{MIN_INTERVAL_S:g}, {MAX_INTERVAL_S:g}] seconds "
            f"(100 µs to 1 h), got {value!r}"
        )
    return seconds


def check_seconds(name: str, value: object) -> float:
    """Any positive, finite number of seconds (no upper bound: publish periods, timeouts)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be a positive finite number of seconds, got {value!r}")
    return seconds


def check_window(name: str, value: object) -> int:
    """A minimum rate window in seconds, [0, 1 h], as nanoseconds."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (0 <= value <= MAX_INTERVAL_S)
    ):
        raise ValueError(
            f"{name} must be a number of seconds in [0, {MAX_INTERVAL_S:g}], got {value!r}"
        )
    return round(value * 1e9)


def check_capacity(capacity: object, name: str = "capacity") -> int:
    """Rows of a ring in [2, MAX_CAPACITY], rounded up to the power of two the ring holds."""
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise TypeError(f"{name} must be an int (rows), got {type(capacity).__name__}")
    if capacity < 2 or capacity > MAX_CAPACITY:
        raise ValueError(f"{name} must be within [2, {MAX_CAPACITY}] rows, got {capacity}")
    return 1 << (capacity - 1).bit_length()  # the ring needs a power of two: round up


def check_pid(pid: object, proc_root: str) -> int:
    if pid is None:
        return os.getpid()
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise TypeError(f"pid must be an int or None, got {type(pid).__name__}")
    if pid <= 0:
        raise ValueError(f"pid must be a positive process id, got {pid}")
    stat_path = os.path.join(proc_root, str(pid), "stat")
    try:
        with open(stat_path, "rb") as f:
            f.read(1)
    except FileNotFoundError:
        raise ValueError(f"pid {pid} does not exist (no {stat_path})") from None
    except PermissionError:
        raise PermissionError(
            f"pid {pid} cannot be read ({stat_path}: permission denied)"
        ) from None
    return pid


def check_private_dir(name: str, path: str | os.PathLike[str]) -> str:
    """An existing directory owned by this user (where the package may create its files)."""
    directory = os.path.abspath(os.fspath(path))
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        raise ValueError(f"{name}: directory {directory!r} does not exist") from None
    if not os.path.isdir(directory):
        raise ValueError(f"{name}: {directory!r} is not a directory")
    if st.st_uid != os.getuid():
        raise ValueError(
            f"{name}: directory {directory!r} is not owned by you (its owner is uid "
            f"{st.st_uid}, you are uid {os.getuid()}); give a directory you own"
        )
    return directory


def check_new_file(name: str, path: str | os.PathLike[str]) -> str:
    """A path where a new file may be created: absent, in a directory this user owns."""
    full = os.path.abspath(os.fspath(path))
    check_private_dir(name, os.path.dirname(full))
    if os.path.isdir(full):
        raise ValueError(f"{name} {os.fspath(path)!r} is a directory; give a file path")
    if os.path.lexists(full):
        raise ValueError(f"{name} {os.fspath(path)!r} already exists; give a new file path")
    return full


def check_sources(
    sources: SourcesArg, interval: float, defaults: list[str]
) -> list[tuple[str, int]]:
    known = list(_core.source_names())
    if sources is None:
        return [(name, 1) for name in defaults]
    if isinstance(sources, str):
        raise TypeError(
            f"sources must be a list of names or a {{name: interval}} mapping, not a string; "
            f"did you mean [{sources!r}]? Known sources: {', '.join(known)}"
        )
    items: list[tuple[str, float | None]]
    if isinstance(sources, Mapping):
        items = list(sources.items())
    else:
        items = [(name, None) for name in sources]
    if not items:
        raise ValueError(f"sources must name at least one source; known: {', '.join(known)}")
    out: list[tuple[str, int]] = []
    seen: set[str] = set()
    for name, every_s in items:
        if name not in known:
            raise ValueError(
                f"unknown source {name!r} in sources; known sources: {', '.join(known)}"
            )
        if name in seen:
            raise ValueError(f"source {name!r} is listed twice in sources")
        seen.add(name)
        if every_s is None:
            out.append((name, 1))
            continue
        seconds = check_interval(f"sources[{name!r}]", every_s)
        ratio = seconds / interval
        every = round(ratio)
        if every < 1 or abs(ratio - every) > 1e-6 * max(1.0, ratio):
            raise ValueError(
                f"sources[{name!r}] = {every_s!r} s must be a whole multiple of the base "
                f"interval {interval:g} s"
            )
        out.append((name, every))
    return out
