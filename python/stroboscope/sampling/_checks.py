"""The sampler's argument checks, those that need the compiled core (the interval bounds, the
source names) or describe its ring; the generic checks (numbers, bools, text, paths, pids) are in
:mod:`stroboscope._base.checks`, the one module every room checks through."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Union

import stroboscope._core as _core
from stroboscope._base.checks import as_seconds, describe, native_path

MIN_INTERVAL_S = _core.MIN_INTERVAL_NS / 1e9
MAX_INTERVAL_S = _core.MAX_INTERVAL_NS / 1e9
MAX_CAPACITY = 1 << 30
#: Upper bound on a ring's memory, checked before it is allocated: capacity x columns x 8 bytes
#: (plus one validity bit per cell). 1 GiB holds ~5 million rows of the default sources; a longer
#: run belongs in a spool, whose segments take the rows out of the ring.
MAX_RING_BYTES = 1 << 30
MAX_ROW_INDEX = (1 << 63) - 1

SourcesArg = Union[Sequence[str], Mapping[str, Union[float, None]], None]


ROOTS = {"proc_root": "/proc", "sys_root": "/sys", "cgroup_root": "/sys/fs/cgroup"}
"""The sources' file-system roots and their defaults (``Sampler(proc_root=...)``)."""


def check_root(name: str, value: object) -> bytes:
    """A sources' root (``proc_root``, ``sys_root``, ``cgroup_root``) as the bytes the C++ side
    takes: a root the caller gives must be an existing directory (a typo would give null
    columns with no word); a default one that this machine lacks (no cgroup file system in
    a container) is left to the sources, which say what they cannot read. ``/proc`` is needed
    always."""
    root = native_path(name, value)
    given = root != os.fsencode(ROOTS[name])
    if (given or name == "proc_root") and not os.path.isdir(root):
        raise ValueError(
            f"{name} {os.fsdecode(root)!r} is not an existing directory; give the directory "
            f"that stands for {ROOTS[name]} (default {ROOTS[name]!r})"
        )
    return root


def check_command(command: object) -> list[str] | None:
    """``provenance(command=...)``: None, or the command line as a list of str (a str alone is
    refused: one word or a whole line, it cannot tell)."""
    if command is None:
        return None
    if isinstance(command, (str, bytes)) or not isinstance(command, (list, tuple)):
        raise TypeError(
            f"command must be None or a list of str (the command line), got {describe(command)}"
        )
    for i, word in enumerate(command):
        if not isinstance(word, str):
            raise TypeError(
                f"command[{i}] must be a str (one word of the command line), got {describe(word)}"
            )
    return list(command)


def check_interval(name: str, value: object) -> float:
    """A sampling interval in seconds, within [MIN_INTERVAL_S, MAX_INTERVAL_S]."""
    seconds = as_seconds(name, value)
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


#: The default overhead budget: 5 % of one core, for a sampler that is always on. The default
#: set at 1 kHz stays well under it (a slow VM's bare wake-up alone is ~2.6 %); a source forced
#: fast, or a GPU whose driver calls cost milliseconds, is slowed until the sampler fits.
DEFAULT_MAX_OVERHEAD = 0.05


def check_max_overhead(value: object) -> float:
    """``max_overhead``: None or 0 (off) or a share of one core in (0, 1]; 0.0 means off."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            "max_overhead must be None or a share of one core (a float in (0, 1], e.g. 0.02 "
            f"for 2 %), got {describe(value)}"
        )
    share = float(value)
    if not 0 <= share <= 1:  # NaN fails this too
        raise ValueError(
            "max_overhead must be None or 0 (off), or a share of one core in (0, 1] "
            f"(0.02 = 2 % of a core), got {describe(value)}"
        )
    return share


def check_window(name: str, value: object) -> int:
    """A minimum rate window in seconds, [0, 1 h], as nanoseconds."""
    seconds = as_seconds(name, value)
    if not 0 <= seconds <= MAX_INTERVAL_S:  # NaN fails this too
        raise ValueError(
            f"{name} must be a number of seconds in [0, {MAX_INTERVAL_S:g}], got {describe(value)}"
        )
    return round(seconds * 1e9)


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
