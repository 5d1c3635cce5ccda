"""GPU selection and status: which NVML devices the ``gpu`` source reads, and why none."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Union

from stroboscope import _core

GpusArg = Union[str, Sequence[Union[int, str]], None]


def gpu_status() -> dict[str, Any]:
    """What NVML says here: library, driver and NVML versions, devices, and why not.

    Keys: ``loaded`` (bool), ``reason`` (why not loaded: the loader's message, a missing symbol or
    the init error with NVML's text), ``library_path``, ``init_error``, ``driver_version``,
    ``nvml_version``, ``device_count``, ``devices`` (index, name, uuid, mig_enabled,
    mig_instances, error, ``unavailable``: metric → why it stays null), ``notes`` and ``text`` (a
    readable summary). The library is taken from ``STROBOSCOPE_NVML_LIBRARY`` when set, else
    ``libnvidia-ml.so.1``.
    """
    return dict(_core.gpu_status())


def _index_of(entry: int | str, what: str) -> int:
    if isinstance(entry, bool):
        raise TypeError(f"{what} must be an NVML index (int) or a UUID (str), got {entry!r}")
    if isinstance(entry, int):
        if entry < 0:
            raise ValueError(f"{what} must be a non-negative NVML index, got {entry}")
        return entry
    if isinstance(entry, str):
        text = entry.strip()
        if text.isdigit():
            return int(text)
        index = _core.nvml_index_of_uuid(text)
        if index is None:
            raise ValueError(
                f"{what} {entry!r} matches no GPU UUID that NVML reports here "
                f"(see stroboscope.gpu_status())"
            )
        return int(index)
    raise TypeError(f"{what} must be an NVML index (int) or a UUID (str), got {entry!r}")


def resolve_gpus(gpus: GpusArg) -> tuple[list[int], list[str]]:
    """Map the ``gpus`` argument to (NVML indices, column labels); ``([], [])`` means all."""
    if gpus is None:
        return [], []
    if isinstance(gpus, str):
        if gpus != "cuda":
            raise ValueError(
                f"gpus must be None, 'cuda' or a list of NVML indices/UUIDs, got {gpus!r}"
            )
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return [], []
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        # CUDA stops at the first invalid entry (e.g. -1): so do we.
        kept: list[str] = []
        for e in entries:
            if e.lstrip("-").isdigit() and int(e) < 0:
                break
            kept.append(e)
        if not kept:
            raise ValueError(
                f"gpus='cuda' but CUDA_VISIBLE_DEVICES={visible!r} hides every GPU; "
                "leave the 'gpu' source out"
            )
        indices = [_index_of(e, "CUDA_VISIBLE_DEVICES entry") for e in kept]
        labels = [str(i) for i in range(len(indices))]  # CUDA ordinals: gpu.0 is cuda:0
    else:
        indices = [_index_of(e, "gpus entry") for e in gpus]
        labels = []
        if not indices:
            raise ValueError("gpus must name at least one device (or be None for all)")
    if len(set(indices)) != len(indices):
        raise ValueError(f"gpus names a device twice: NVML indices {indices}")
    return indices, labels
