"""Node roles: one process per node records the host, every process records itself.

Sources are either **per-process** (they read the monitored pid: :data:`PROCESS_SOURCES`) or
**host-wide** (the machine, its disks and network, the cgroup all ranks of a container share,
the GPUs: :data:`HOST_SOURCES`). The registry in the core does not say which is which, so the
per-process names are listed here and every other name the registry knows is host-wide; a test
pins both lists to the registry, so a new source is classified on purpose.

:func:`rank_sources` gives a rank its sources: the node's leader (local rank 0, or a process whose
local rank is unknown: it may be alone) takes host-wide and per-process sources, every other local
rank per-process ones only, so a host-wide column is recorded once per node however many ranks
run there. :func:`owned_gpus` says which GPUs a rank drives, by UUID (resolved in the sampling
room, whose provenance records it for each run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from stroboscope._base.identity import Identity
from stroboscope.sampling import default_source_names, owned_gpus, source_names, source_options

__all__ = [
    "HOST_SOURCES",
    "PROCESS_SOURCES",
    "default_sources",
    "is_node_leader",
    "owned_gpus",
    "rank_sources",
]

PROCESS_SOURCES: tuple[str, ...] = ("process", "process_io", "threads", "proc_tree")
"""Sources that read the monitored process (``proc.*``, its I/O, threads and descendants)."""

HOST_SOURCES: tuple[str, ...] = tuple(n for n in source_names() if n not in PROCESS_SOURCES)
"""Every other source of the registry: the machine's (cpu, cpu_cores, memory, network, disk,
diskio, load, pressure), the cgroup's and the GPUs' (``gpu``, ``gpu_gpm``)."""


def is_node_leader(identity: Identity) -> bool:
    """True for local rank 0 and for a process whose local rank is unknown."""
    return identity.local_rank is None or identity.local_rank == 0


def _names(sources: Iterable[object]) -> list[str]:
    known = set(HOST_SOURCES) | set(PROCESS_SOURCES)
    out: list[str] = []
    for name in sources:
        if not isinstance(name, str):
            raise TypeError(f"sources must name sources as str, got {name!r}")
        if name not in known:
            raise ValueError(
                f"sources names an unknown source {name!r}; known: {', '.join(sorted(known))}"
            )
        out.append(name)
    return out


def default_sources(**options: Any) -> list[str]:
    """The sampler's default source names here (the core's seed set: cpu, memory, network,
    disk, diskio, process, cgroup where limits exist, gpu where NVML sees one). ``options``:
    ``pid``, ``proc_root``, ``sys_root``, ``cgroup_root``, ``disk_paths`` as a Sampler takes."""
    opts = source_options(
        options.get("pid"),
        options.get("proc_root", "/proc"),
        options.get("sys_root", "/sys"),
        options.get("cgroup_root", "/sys/fs/cgroup"),
        options.get("disk_paths", ("/",)),
    )
    return list(default_source_names(opts))


def rank_sources(
    identity: Identity, sources: Iterable[str] | Mapping[str, Any] | None = None
) -> list[str]:
    """The source names ``identity``'s process records.

    Parameters
    ----------
    identity : Identity
        Whose role: local rank 0 (or an unknown local rank) leads its node.
    sources : iterable of str or mapping of str to interval, optional
        The candidates (default: the sampler's default sources here, see
        :func:`default_sources`). A mapping's keys are used.

    Returns
    -------
    list of str
        For the node's leader, ``sources`` as given; for every other local rank, only its
        per-process sources (:data:`PROCESS_SOURCES`), in the given order.

    Raises
    ------
    ValueError
        A name no source of this build has (the known ones are listed).
    """
    if not isinstance(identity, Identity):
        raise TypeError(f"identity must be a stroboscope.cluster.Identity, got {identity!r}")
    if isinstance(sources, (str, bytes)):
        raise TypeError(f"sources must be a list of source names, got {sources!r}")
    names = default_sources() if sources is None else _names(sources)
    if is_node_leader(identity):
        return names
    return [n for n in names if n in PROCESS_SOURCES]
