"""Which GPUs a process drives: ``CUDA_VISIBLE_DEVICES`` and the local rank, resolved to NVML
UUIDs (:func:`owned_gpus`). The provenance records it for every run with an identity, so that a
report picks each rank's GPU by UUID; :mod:`stroboscope.cluster` offers it to users.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from stroboscope._base.identity import Identity


def _visible(text: str) -> list[str]:
    """CUDA_VISIBLE_DEVICES entries, up to the first invalid one (as CUDA reads it)."""
    kept: list[str] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry or (entry.lstrip("-").isdigit() and int(entry) < 0):
            break
        kept.append(entry)
    return kept


def _uuid_of(entry: str, devices: list[dict[str, Any]]) -> str:
    """The UUID a CUDA_VISIBLE_DEVICES entry names: an NVML index, a GPU UUID (or a unique
    prefix of one, as CUDA accepts) or a MIG instance's UUID."""
    if entry.isdigit():
        for d in devices:
            if int(d["index"]) == int(entry):
                return str(d["uuid"])
        raise ValueError(
            f"CUDA_VISIBLE_DEVICES entry {entry!r} is no GPU here: NVML sees "
            f"{len(devices)} device(s) (stroboscope.gpu_status())"
        )
    candidates = [str(d["uuid"]) for d in devices if d.get("uuid")]
    for d in devices:
        candidates += [str(m["uuid"]) for m in d.get("mig_instances") or [] if m.get("uuid")]
    matches = [u for u in candidates if u == entry] or [
        u for u in candidates if u.startswith(entry)
    ]
    if len(matches) != 1:
        what = "matches no" if not matches else "matches more than one"
        raise ValueError(
            f"CUDA_VISIBLE_DEVICES entry {entry!r} {what} GPU or MIG UUID here "
            f"(stroboscope.gpu_status() lists them)"
        )
    return matches[0]


def owned_gpus(identity: Identity, *, environ: Mapping[str, str] | None = None) -> list[str]:
    """The UUIDs of the GPUs ``identity``'s process drives, resolved through NVML
    (:func:`stroboscope.sampling.gpu_status`).

    With ``CUDA_VISIBLE_DEVICES`` set, its entries (NVML indices, GPU UUIDs or their unique
    prefixes, MIG UUIDs) up to the first invalid one, as CUDA reads them: the only one when it
    lists one, else the ``local_rank``-th (the ``cuda:LOCAL_RANK`` convention), or all of them
    when the local rank is unknown. Without it, the ``local_rank``-th NVML device, or every
    device when the local rank is unknown. Indices are NVML's (PCI bus order), which is CUDA's
    only under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.

    Returns
    -------
    list of str
        UUIDs (``GPU-...`` or ``MIG-...``); empty without NVML, without GPUs, or for a local
        rank past the devices there are (a rank may own no GPU).

    Raises
    ------
    ValueError
        A ``CUDA_VISIBLE_DEVICES`` entry that names no GPU here, naming it.
    """
    if not isinstance(identity, Identity):
        raise TypeError(f"identity must be a stroboscope.cluster.Identity, got {identity!r}")
    env: Mapping[str, str] = os.environ if environ is None else environ
    # Here, not at import: reading a recovered frame's provenance loads no extension.
    from stroboscope.sampling._gpu import gpu_status

    status = gpu_status()
    if not status.get("loaded"):
        return []
    devices = sorted(status.get("devices") or [], key=lambda d: int(d["index"]))
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        uuids = [_uuid_of(e, devices) for e in _visible(visible)]
    else:
        uuids = [str(d["uuid"]) for d in devices if d.get("uuid")]
    if len(uuids) == 1 and visible is not None:
        return uuids
    local = identity.local_rank
    if local is None:
        return uuids
    return uuids[local : local + 1]
