"""Argument checks, the one module for them: errors name the argument, the value given and what
is accepted. A standard-library leaf, so every room (senders, identity, formats) can check
through it; the checks that need the compiled core (intervals, sources) are in
:mod:`stroboscope.sampling._checks`, which builds on these."""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterable, Sequence
from typing import Union

from stroboscope._base.files import read_regular

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


def as_seconds(name: str, value: object) -> float:
    """A number of seconds as a float (inf for an int too large for one); TypeError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds (int or float), got {describe(value)}")
    try:
        return float(value)
    except OverflowError:  # an int beyond 1.8e308: out of every range below
        return math.inf


def check_seconds(name: str, value: object) -> float:
    """Any positive, finite number of seconds (no upper bound: publish periods, timeouts)."""
    seconds = as_seconds(name, value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(
            f"{name} must be a positive finite number of seconds, got {describe(value)}"
        )
    return seconds


def check_timeout(name: str, value: object) -> float | None:
    """None (no limit) or a finite number of seconds >= 0."""
    if value is None:
        return None
    seconds = as_seconds(name, value)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(
            f"{name} must be a finite number of seconds >= 0, or None, got {describe(value)}"
        )
    return seconds


def check_int(
    name: str,
    value: object,
    low: int,
    high: int | None = None,
    unit: str = "",
    *,
    also: str = "",
) -> int:
    """An ``int`` (not a bool, not a float or a string) in ``[low, high]`` (no upper bound
    when ``high`` is None); ``unit`` says what it counts, for the message, and ``also`` what else
    the caller accepts (``"None"``, handled before calling)."""
    accepted = f"[{low}, {high}]" if high is not None else f">= {low}"
    what = f" ({unit})" if unit else ""
    alt = f" or {also}" if also else ""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int {accepted}{what}{alt}, got {describe(value)}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be an int {accepted}{what}{alt}, got {describe(value)}")
    return value


def check_bool(name: str, value: object) -> bool:
    """A real ``bool``: ``'no'``, ``0`` or ``None`` would read as a choice nobody made."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {describe(value)}")
    return value


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """One of ``choices`` (exactly: a str, same case)."""
    if not isinstance(value, str) or value not in choices:
        accepted = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {accepted}, got {describe(value)}")
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


def check_str(name: str, value: object, *, empty: bool = True, also: str = "") -> str:
    """A ``str`` (non-empty unless ``empty``) that UTF-8 can encode (see :func:`check_text`);
    ``also`` says what else the caller accepts (``"None"``, handled before calling)."""
    what = "a str" if empty else "a non-empty str"
    alt = f" or {also}" if also else ""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be {what}{alt}, got {describe(value)}")
    if not value and not empty:
        raise ValueError(f"{name} must be {what}{alt}, got an empty str")
    return check_text(name, value)


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
    try:  # '\udcff' is the byte 0xff of a name that is not UTF-8 (os.fsdecode): a real path
        os.fsencode(value)
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{name} {value!r} holds a lone surrogate ({value[exc.start]!r} at index "
            f"{exc.start}) that stands for no byte of a file name (os.fsdecode makes only "
            "'\\udc80'-'\\udcff'); give a path that is valid Unicode or decoded with os.fsdecode"
        ) from None
    return value


def check_file_path(name: str, value: object) -> str:
    """A path for a file to write later (a sender's output): :func:`check_path`, not a
    directory, and its directory exists, so a typo fails when it is given, not at the first
    write on another thread."""
    text = check_path(name, value)
    if os.path.isdir(text):
        raise ValueError(f"{name} {text!r} is a directory; give a file path")
    parent = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(parent):
        raise ValueError(f"{name} {text!r}: directory {parent!r} does not exist")
    return text


def native_path(name: str, value: object) -> bytes:
    """A path checked by :func:`check_path`, as the bytes the C++ side takes (``os.fsencode``):
    a file name that is not UTF-8 (``'\\udcff'`` from ``os.fsdecode``) reaches it unchanged."""
    return os.fsencode(check_path(name, value))


def check_dir_paths(name: str, value: object) -> list[str]:
    """One directory path or a sequence of them, each an existing directory, each directory
    once (``/tmp``, ``/tmp/`` and a link to it are one: the first spelling is kept)."""
    if isinstance(value, (str, bytes, os.PathLike)):
        value = [value]
    if not isinstance(value, Iterable):
        raise TypeError(
            f"{name} must be a sequence of directory paths (str or os.PathLike), got "
            f"{describe(value)}"
        )
    out: list[str] = []
    seen: set[tuple[int, int]] = set()
    for i, entry in enumerate(value):
        path = check_path(f"{name}[{i}]", entry)
        if not os.path.isdir(path):
            raise ValueError(f"{name} entry {path!r} is not an existing directory")
        st = os.stat(path)
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
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
