"""GPU selection and status: which NVML devices the ``gpu`` source reads, and why none."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

import stroboscope._core as _core
from stroboscope._base.checks import describe

if TYPE_CHECKING:
    import pyarrow as pa

GpusArg = Union[str, Sequence[Union[int, str]], None]
MAX_GPU_INDEX = (1 << 32) - 1  # NVML indices are C unsigned ints
_ACCEPTED = "None, 'cuda' or a list of NVML indices (int) and/or GPU UUIDs (str)"


def gpu_status() -> dict[str, Any]:
    """What NVML says here: library, driver and NVML versions, devices, and why not.

    Keys: ``loaded`` (bool), ``reason`` (why not loaded: the loader's message, a missing symbol or
    the init error with NVML's text), ``library_path``, ``init_error``, ``driver_version``,
    ``nvml_version``, ``device_count``, ``devices`` (index, name, uuid, mig_enabled,
    mig_instances, error, ``unavailable``: metric → why it stays null or has no column, with a
    ``gpm`` entry where the GPU has no GPM metrics or, while a ``gpu_gpm`` source lives, stopped
    giving them), ``held_back`` (of a running source: the NVML calls it makes less often than
    every read because each costs more than 50 µs: ``call``, ``cost_us``, ``every_ms``; no call
    takes more than 1/20 of the polling thread's time), ``notes`` and ``text`` (a readable
    summary).
    The library is taken from ``STROBOSCOPE_NVML_LIBRARY`` when set, else ``libnvidia-ml.so.1``.

    While a ``gpu`` source over every GPU is alive, the per-device part is what its reads found
    (no extra NVML queries); otherwise one probing read of every metric on every GPU finds it.
    """
    return dict(_core.gpu_status())


def _index_of(entry: object, what: str) -> int:
    if isinstance(entry, bool) or not isinstance(entry, (int, str)):
        raise TypeError(
            f"{what} must be an NVML index (int) or a UUID (str), got {describe(entry)}"
        )
    if isinstance(entry, int):
        if not 0 <= entry <= MAX_GPU_INDEX:
            raise ValueError(
                f"{what} must be an NVML index in [0, {MAX_GPU_INDEX}] (see "
                f"stroboscope.gpu_status() for the devices here), got {describe(entry)}"
            )
        return entry
    text = entry.strip()
    if text.isdigit():
        return _index_of(int(text), what)
    index = _core.nvml_index_of_uuid(text)
    if index is None:
        raise ValueError(
            f"{what} {entry!r} matches no GPU UUID that NVML reports here "
            f"(see stroboscope.gpu_status())"
        )
    return int(index)


def resolve_gpus(gpus: GpusArg) -> tuple[list[int], list[str]]:
    """Map the ``gpus`` argument to (NVML indices, column labels); ``([], [])`` means all."""
    if gpus is None:
        return [], []
    if isinstance(gpus, str):
        if gpus != "cuda":
            raise ValueError(f"gpus must be {_ACCEPTED}, got {gpus!r}")
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
    elif isinstance(gpus, Iterable) and not isinstance(gpus, (bytes, bytearray)):
        indices = [_index_of(e, "gpus entry") for e in gpus]
        labels = []
        if not indices:
            raise ValueError("gpus must name at least one device (or be None for all)")
    else:
        raise TypeError(f"gpus must be {_ACCEPTED}, got {describe(gpus)}")
    if len(set(indices)) != len(indices):
        raise ValueError(f"gpus names a device twice: NVML indices {indices}")
    return indices, labels


def gpu_sample_table(rows: Mapping[str, Any], labels: Mapping[int, int]) -> pa.Table:
    """Driver samples (the recorder's columns) as the long table of ``Sampler.gpu_samples()``."""
    import pyarrow as pa  # here: gpu_status() (stroboscope info) needs no pyarrow

    kinds = list(_core.GPU_SAMPLE_KINDS)
    n = len(rows.get("value", ()))
    gpu = [labels.get(int(i), int(i)) for i in rows["gpu"]] if n else []
    return pa.table(
        {
            "time": pa.array(rows["time_ns"] if n else [], pa.int64()).cast(
                pa.timestamp("ns", "UTC")
            ),
            "mono_ns": pa.array(rows["mono_ns"] if n else [], pa.int64()),
            "gpu": pa.array(gpu, pa.int32()),
            "kind": pa.DictionaryArray.from_arrays(
                pa.array(rows["kind"] if n else [], pa.int8()), pa.array(kinds, pa.string())
            ),
            "value": pa.array(rows["value"] if n else [], pa.float64()),
        }
    )
