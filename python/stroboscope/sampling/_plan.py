"""How often each source is read: its natural resolution, unless the caller chose a rate.

A source declares how often the kernel value it reads can change (``resolution_ns``, with the
kernel fact behind it, in docs/metrics.md); one given without an interval is read every
``ceil(resolution / interval)`` ticks, while the base tick stays as fast as asked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import stroboscope._core as _core
from stroboscope._base.checks import PathsArg, check_dir_paths, check_pid
from stroboscope._core import default_source_names as default_source_names  # for cluster/
from stroboscope._core import source_names as source_names  # (re-exported: the facade's)
from stroboscope.sampling._checks import check_root


@dataclass(frozen=True)
class SourcePlan:
    """What :func:`plan_sources` decided.

    Attributes
    ----------
    specs : list of (str, int)
        ``(source name, read every n ticks)`` in the order asked.
    built : list of (_core.BuiltSource, int)
        The same with each source as built here, for ``_core.Sampler``, which takes them (a
        source is built once: files opened, NVML initialised).
    details : dict
        Per source, what it said of itself when built here: ``columns``, ``interface``,
        ``resolution_ns``, ``resolution_reason``.
    fill_within_ns : dict of str to int
        Per column, how long after its last value a null means "not due" (until its next
        reading, :func:`value_holds_ns`, less half a tick of lateness):
        ``Frame.to_arrow(fill="forward")`` fills those nulls, and later ones up to the next
        reading unless the frame's log says a read failed (``forward_filled``).
    """

    specs: list[tuple[str, int]]
    built: list[tuple[_core.BuiltSource, int]]
    details: dict[str, dict[str, Any]]
    fill_within_ns: dict[str, int]


def natural_every(resolution_ns: int, interval_ns: int) -> int:
    """Ticks between reads of a source whose kernel value changes every ``resolution_ns``.

    ``ceil(resolution / interval)``, at least 1: a source is read no faster than its value can
    change, while the base tick stays as fast as asked (0: it can change on any tick).
    """
    if resolution_ns <= 0:
        return 1
    return max(1, -(-resolution_ns // interval_ns))


def plan_sources(
    asked: list[tuple[str, int | None]], options: _core.SourceOptions, interval_ns: int
) -> SourcePlan:
    """Build each asked source once (its columns and self-description) and set its rate:
    the one asked, or its natural resolution where ``every`` is None."""
    sources = {name: _core.build_source(name, options) for name, _ in asked}
    details = {name: dict(source.details()) for name, source in sources.items()}
    specs = [
        (
            name,
            every
            if every is not None
            else natural_every(details[name]["resolution_ns"], interval_ns),
        )
        for name, every in asked
    ]
    fill = {
        c["name"]: value_holds_ns(
            every * interval_ns, details[name].get("windows_ns", {}).get(c["name"], 0)
        )
        - interval_ns // 2
        for name, every in specs
        for c in details[name]["columns"]
    }
    built = [(sources[name], every) for name, every in specs]
    return SourcePlan(specs, built, details, fill)


def value_holds_ns(period_ns: int, window_ns: int) -> int:
    """How long after a value its column's next reading may come: one read period, or, for a
    column written once per window of at least ``window_ns`` (a rate over ``cpu_window`` or
    ``rate_window``), the first read at or past the window's end. Reads happen on ticks whose
    times jitter by microseconds, so a window that is a whole number of periods may close one
    read later: ``(window // period + 1)`` periods (one period when there is no window)."""
    return period_ns * (window_ns // period_ns + 1)


def refuse_gpus_without_gpu_source(
    gpus: object, sources: object, options: _core.SourceOptions
) -> None:
    """``gpus`` was given but the sources have no ``gpu``: say whether NVML or the list is why."""
    if sources is not None:
        raise ValueError(
            f"gpus={gpus!r} was given but 'gpu' is not in sources; add 'gpu' to sources "
            "(or leave gpus out)"
        )
    gpu = next((s for s in _core.describe_sources(options) if s["name"] == "gpu"), None)
    why = (gpu or {}).get("reason") or "NVML sees no GPU"
    raise RuntimeError(
        f"gpus={gpus!r} was given but no GPU can be read here, so the default sources leave "
        f"'gpu' out: {why} (see stroboscope.gpu_status())"
    )


def available_sources(
    *,
    pid: int | None = None,
    proc_root: str | os.PathLike[str] = "/proc",
    sys_root: str | os.PathLike[str] = "/sys",
    cgroup_root: str | os.PathLike[str] = "/sys/fs/cgroup",
    disk_paths: PathsArg = ("/",),
) -> list[dict[str, Any]]:
    """Every source this build knows: ``name``, ``help``, ``default``, ``available``, ``reason``,
    ``interface`` (what it reads here: ``rtnetlink``, or the fallback ``/proc/net/dev``...),
    ``resolution_ns`` (how often that value can change; 0 = any tick) and its reason.

    Takes the :class:`Sampler` arguments of the same names, checked the same way.
    """
    options = source_options(pid, proc_root, sys_root, cgroup_root, disk_paths)
    return list(_core.describe_sources(options))


def source_options(
    pid: object, proc_root: object, sys_root: object, cgroup_root: object, disk_paths: object
) -> _core.SourceOptions:
    """The checked arguments every source needs (the roots, the pid, the disk paths)."""
    options = _core.SourceOptions()
    # bytes: a root whose name is not UTF-8 reaches the C++ side as it is on disk
    root = check_root("proc_root", proc_root)  # not there: named here, not by a source
    options.proc_root = root
    options.sys_root = check_root("sys_root", sys_root)
    options.cgroup_root = check_root("cgroup_root", cgroup_root)
    options.pid = check_pid(pid, os.fsdecode(root))
    options.disk_paths = [os.fsencode(p) for p in check_dir_paths("disk_paths", disk_paths)]
    return options
