"""The checked arguments every source needs, and the error for ``gpus`` without the ``gpu``
source (split from :mod:`stroboscope.sampling._sampler` to keep it readable)."""

from __future__ import annotations

from stroboscope import _core
from stroboscope.sampling._checks import check_dir_paths, check_path, check_pid


def source_options(
    pid: object, proc_root: object, sys_root: object, cgroup_root: object, disk_paths: object
) -> _core.SourceOptions:
    """The checked arguments every source needs (the roots, the pid, the disk paths)."""
    options = _core.SourceOptions()
    options.proc_root = check_path("proc_root", proc_root)
    options.sys_root = check_path("sys_root", sys_root)
    options.cgroup_root = check_path("cgroup_root", cgroup_root)
    options.pid = check_pid(pid, options.proc_root)
    options.disk_paths = check_dir_paths("disk_paths", disk_paths)
    return options


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
