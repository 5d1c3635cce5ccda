"""Argument checks, the one module for them: errors name the argument, the value and what is
accepted. Every room of the package (sampling, recording, compat, cli) checks through here."""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from typing import Union

from stroboscope import _core
from stroboscope._files import read_regular

MIN_INTERVAL_S = _core.MIN_INTERVAL_NS / 1e9
MAX_INTERVAL_S = _core.MAX_INTERVAL_NS / 1e9
MAX_CAPACITY = 1 << 30
#: Upper bound on a ring's memory, checked before it is allocated: capacity x columns x 8 bytes
#: (plus one validity bit per cell). 1 GiB holds ~5 million rows of the default sources; a longer
#: run belongs in a spool, whose segments take the rows out of the ring.
MAX_RING_BYTES = 1 << 30
MAX_ROW_INDEX = (1 << 63) - 1

SourcesArg = Union[Sequence[str], Mapping[str, Union[float, None]], None]
PathsArg = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]


def describe(value: object) -> str:
    """The type and a short repr of ``value`` for an error message (huge ints abbreviated)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        digits = len(str(abs(value)))
        return f"an int of {digits} digits ({'-' if value < 0 else ''}~1e{digits - 1})"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}"


def _seconds(name: str, value: object) -> float:
    """A number of seconds as a float (inf for an int too large for one); TypeError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds (int or float), got {describe(value)}")
    try:
        return float(value)
    except OverflowError:  # an int beyond 1.8e308: out of every range below
        return math.inf


def check_interval(name: str, value: object) -> float:
    """A sampling interval in seconds, within [MIN_INTERVAL_S, MAX_INTERVAL_S]."""
    seconds = _seconds(name, value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(
            f"{name} must be a finite number of seconds in [{MIN_INTERVAL_S:g}, "
            f"{MAX_INTERVAL_S:g}], got {describe(value)}"
        )
    if seconds < MIN_INTERVAL_S or seconds > MAX_INTERVAL_S:
        raise ValueError(
            f"{name} must be within [{MIN_INTERVAL_S:g}, {MAX_INTERVAL_S:g}] seconds "
            f"(100 µs to 1 h), got {describe(value)}"
        )
    return seconds


def check_seconds(name: str, value: object) -> float:
    """Any positive, finite number of seconds (no upper bound: publish periods, timeouts)."""
    seconds = _seconds(name, value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(
            f"{name} must be a positive finite number of seconds, got {describe(value)}"
        )
    return seconds


def check_timeout(name: str, value: object) -> float | None:
    """None (no limit) or a finite number of seconds >= 0."""
    if value is None:
        return None
    seconds = _seconds(name, value)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(
            f"{name} must be a finite number of seconds >= 0, or None, got {describe(value)}"
        )
    return seconds


def check_int(name: str, value: object, low: int, high: int | None = None, unit: str = "") -> int:
    """An ``int`` (not a bool, not a float or a string) in ``[low, high]`` (no upper bound
    when ``high`` is None); ``unit`` says what it counts, for the message."""
    accepted = f"[{low}, {high}]" if high is not None else f">= {low}"
    what = f" ({unit})" if unit else ""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int {accepted}{what}, got {describe(value)}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be an int {accepted}{what}, got {describe(value)}")
    return value


def check_window(name: str, value: object) -> int:
    """A minimum rate window in seconds, [0, 1 h], as nanoseconds."""
    seconds = _seconds(name, value)
    if not 0 <= seconds <= MAX_INTERVAL_S:  # NaN fails this too
        raise ValueError(
            f"{name} must be a number of seconds in [0, {MAX_INTERVAL_S:g}], got {describe(value)}"
        )
    return round(seconds * 1e9)


def check_bool(name: str, value: object) -> bool:
    """A real ``bool``: ``'no'``, ``0`` or ``None`` would read as a choice nobody made."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {describe(value)}")
    return value


def check_text(name: str, value: str) -> str:
    """A ``str`` that UTF-8 can encode: a lone surrogate (``"\\udc80"``, what ``os.fsdecode``
    makes of undecodable bytes) would fail later, when the name is stored, naming nothing."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{name} {value!r} holds a lone surrogate ({value[exc.start]!r} at index "
            f"{exc.start}), which UTF-8 cannot encode; give text that is valid Unicode"
        ) from None
    return value


def check_capacity(capacity: object, name: str = "capacity") -> int:
    """Rows of a ring in [2, MAX_CAPACITY], rounded up to the power of two the ring holds."""
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise TypeError(f"{name} must be an int (rows), got {describe(capacity)}")
    if capacity < 2 or capacity > MAX_CAPACITY:
        raise ValueError(
            f"{name} must be within [2, {MAX_CAPACITY}] rows, got {describe(capacity)}"
        )
    return 1 << (capacity - 1).bit_length()  # the ring needs a power of two: round up


def ring_bytes(rows: int, columns: int) -> int:
    """Memory of a ring of ``rows`` x ``columns``: blocks of 64 rows (at least one), each with
    8-byte cells and a 64-bit validity word per column, a cache line of them per 8 columns."""
    return max(1, rows // 64) * (columns * 64 + (columns + 7) // 8 * 8) * 8


def check_ring_bytes(rows: int, columns: Sequence[tuple[str, int]], name: str = "capacity") -> None:
    """Refuse a ring over :data:`MAX_RING_BYTES` before it is allocated.

    Parameters
    ----------
    rows : int
        The ring's capacity in rows (already a power of two).
    columns : sequence of (source name, number of columns)
        The columns each source adds (the ring has one more: ``mono_ns``).
    name : str
        The argument that set ``rows``, for the message.
    """
    ncol = 1 + sum(n for _, n in columns)
    need = ring_bytes(rows, ncol)
    if need <= MAX_RING_BYTES:
        return
    fit = rows
    while fit > 2 and ring_bytes(fit, ncol) > MAX_RING_BYTES:
        fit //= 2
    parts = ", ".join(f"{src} {n}" for src, n in sorted(columns, key=lambda c: -c[1]))
    advice = (
        f"lower {name} to at most {fit} rows or record fewer sources"
        if ring_bytes(fit, ncol) <= MAX_RING_BYTES
        else "record fewer sources"
    )
    raise ValueError(
        f"{name}={rows} rows x {ncol} columns (mono_ns 1, {parts}) x 8 bytes needs a "
        f"{need / (1 << 30):.2f} GiB ring, over the limit of {MAX_RING_BYTES >> 20} MiB; {advice}"
    )


def check_row_index(name: str, value: object) -> int:
    """A row index in the sampler's lifetime count, [0, 2**63 - 1]."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ROW_INDEX:
        raise ValueError(f"{name} must be a row index in [0, 2**63 - 1], got {describe(value)}")
    return value


def check_path(name: str, value: object) -> str:
    """A path as ``str`` (``str`` or ``os.PathLike[str]``): not bytes, not empty, no NUL byte."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, (bytes, bytearray)):
        raise TypeError(
            f"{name} must be a str path or os.PathLike, got bytes {value!r}; decode it first "
            "(os.fsdecode)"
        )
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str path or os.PathLike, got {describe(value)}")
    if not value:
        raise ValueError(f"{name} is an empty path; give a non-empty path")
    if "\0" in value:
        # The C side would stop at the NUL and use (and create) a shorter, different path.
        raise ValueError(f"{name} {value!r} contains a NUL byte, which no file path can hold")
    return value


def check_dir_paths(name: str, value: object) -> list[str]:
    """One directory path or a sequence of them, each an existing directory."""
    if isinstance(value, (str, bytes, os.PathLike)):
        value = [value]
    if not isinstance(value, Iterable):
        raise TypeError(
            f"{name} must be a sequence of directory paths (str or os.PathLike), got "
            f"{describe(value)}"
        )
    out: list[str] = []
    for i, entry in enumerate(value):
        path = check_path(f"{name}[{i}]", entry)
        if not os.path.isdir(path):
            raise ValueError(f"{name} entry {path!r} is not an existing directory")
        out.append(path)
    if not out:
        raise ValueError(f"{name} must name at least one directory, got an empty sequence")
    return out


def check_pid(pid: object, proc_root: str = "/proc") -> int:
    """A process id that exists under ``proc_root`` (None: the calling process)."""
    if pid is None:
        return os.getpid()
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise TypeError(f"pid must be an int (a process id) or None, got {describe(pid)}")
    if pid <= 0:
        raise ValueError(f"pid must be a positive process id, got {describe(pid)}")
    stat_path = os.path.join(proc_root, str(pid), "stat")
    if not os.path.lexists(stat_path):
        raise ValueError(f"pid {pid} does not exist (no {stat_path})")
    if not os.access(stat_path, os.R_OK):
        raise PermissionError(f"pid {pid} cannot be read ({stat_path}: permission denied)")
    read_regular(stat_path, f"pid {pid}:", limit=1 << 16)  # a FIFO: refused, never waited on
    return pid


def check_file_dir(name: str, directory: str) -> str:
    """The directory of a new file (a spool, a ring file), if only this user can replace files
    in it.

    Accepted: a directory you own that nobody else can write, or a sticky one (like ``/tmp``)
    owned by you or root, where nobody else can remove or rename your files (the file itself
    is created with ``O_EXCL | O_NOFOLLOW``, so nothing planted there is followed). Refused: one
    writable by others without the sticky bit (anyone could swap the file), and one owned by
    someone else.
    """
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        raise ValueError(f"{name}: directory {directory!r} does not exist") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{name}: {directory!r} is not a directory")
    mode = stat.S_IMODE(st.st_mode)
    shared = mode & (stat.S_IWGRP | stat.S_IWOTH)
    sticky = mode & stat.S_ISVTX
    if shared and not sticky:
        raise ValueError(
            f"{name}: directory {directory!r} is writable by others (mode {mode:04o}) and not "
            f"sticky, so anyone could replace the file; give a directory only you can write "
            f"(or a sticky one such as /tmp)"
        )
    if st.st_uid != os.getuid() and not (sticky and st.st_uid == 0):
        raise ValueError(
            f"{name}: directory {directory!r} is not owned by you (its owner is uid "
            f"{st.st_uid}, you are uid {os.getuid()}); give a directory you own"
        )
    return directory


def check_new_file(name: str, path: str | os.PathLike[str]) -> str:
    """A path where a new file may be created: absent, in a directory that passes
    :func:`check_file_dir`."""
    text = check_path(name, path)
    full = os.path.abspath(text)
    check_file_dir(name, os.path.dirname(full))
    if os.path.isdir(full):
        raise ValueError(f"{name} {text!r} is a directory; give a file path")
    if os.path.lexists(full):
        raise ValueError(f"{name} {text!r} already exists; give a new file path")
    return full


def _list_form(text: str) -> list[str]:
    return [part for part in re.split(r"[\s,;]+", text) if part]


_EVERY_TICK = object()  # a mapping's None: read on every tick


def check_sources(
    sources: SourcesArg, interval: float, defaults: list[str]
) -> list[tuple[str, int | None]]:
    """``(source name, every n ticks)`` for the ``sources`` argument (None: ``defaults``).

    ``every`` is None where the caller gave no interval (the default set, or a list of names):
    the source's natural resolution then decides (see :func:`natural_every`). In a mapping,
    ``None`` means every tick."""
    known = list(_core.source_names())
    accepted = "a list of source names such as ['cpu', 'memory'] or a {name: interval_s} mapping"
    if sources is None:
        return [(name, None) for name in defaults]
    if isinstance(sources, str):
        raise TypeError(
            f"sources must be {accepted}, not a string; did you mean "
            f"sources={_list_form(sources)!r}? Known sources: {', '.join(known)}"
        )
    # A list names sources without rates (each then read at its natural resolution); in a
    # mapping, None is a rate: every tick.
    items: list[tuple[object, object]]
    if isinstance(sources, Mapping):
        items = [(n, _EVERY_TICK if every is None else every) for n, every in sources.items()]
    elif isinstance(sources, Iterable) and not isinstance(sources, (bytes, bytearray)):
        items = [(name, None) for name in sources]
    else:
        raise TypeError(f"sources must be {accepted}, got {describe(sources)}")
    if not items:
        raise ValueError(f"sources must name at least one source; known: {', '.join(known)}")
    out: list[tuple[str, int | None]] = []
    seen: set[str] = set()
    for name, every_s in items:
        if not isinstance(name, str):
            raise TypeError(
                f"sources entries must be source names (str), got {describe(name)}; "
                f"known sources: {', '.join(known)}"
            )
        if name not in known:
            raise ValueError(
                f"unknown source {name!r} in sources; known sources: {', '.join(known)}"
            )
        if name in seen:
            raise ValueError(f"source {name!r} is listed twice in sources")
        seen.add(name)
        if every_s is None or every_s is _EVERY_TICK:
            out.append((name, None if every_s is None else 1))
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
