"""Who ran a recording, for its provenance: the rank identity of the monitored process (from the
identity a sampler was given, else that process's environment) and the GPUs it drives.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from stroboscope._base.identity import Identity, detect_identity
from stroboscope.sampling._gpu_owner import owned_gpus


def _environ(pid: int) -> Mapping[str, str]:
    """The environment of ``pid``: ours for this process, else ``/proc/PID/environ`` (as it was
    when the process started; empty when it cannot be read)."""
    if pid == os.getpid():
        return os.environ
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        name, eq, value = entry.partition(b"=")
        if eq:
            out[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def identity_of(environ: Mapping[str, str]) -> tuple[Identity | None, str | None]:
    """The :class:`~stroboscope._base.identity.Identity` that ``environ`` gives, or (None, why) when
    its rank variables conflict: a recording keeps the reason rather than failing."""
    try:
        return detect_identity(environ), None
    except ValueError as exc:
        return None, str(exc)


def rank_of(environ: Mapping[str, str]) -> dict[str, int | None]:
    """``rank``, ``world_size`` and ``local_rank`` of :func:`identity_of` (None for each one
    unknown, all None when the variables conflict)."""
    return _ranks(identity_of(environ)[0])


def _ranks(ident: Identity | None) -> dict[str, int | None]:
    """``rank``, ``world_size`` and ``local_rank`` of ``ident`` (all None without one)."""
    return {
        "rank": None if ident is None else ident.rank,
        "world_size": None if ident is None else ident.world_size,
        "local_rank": None if ident is None else ident.local_rank,
    }


def identity_facts(pid: int, given: object) -> dict[str, Any]:
    """``identity`` (``given``, the one a sampler was given, else the one the environment of
    ``pid``, the monitored process, gives), ``identity_error`` when that conflicts, the
    ``rank``/``world_size``/``local_rank`` keys earlier provenance had, and ``owned_gpus``."""
    environ = _environ(pid)
    ident, error = (given, None) if isinstance(given, Identity) else identity_of(environ)
    out: dict[str, Any] = {"identity": None if ident is None else ident.to_dict(), **_ranks(ident)}
    if error is not None:
        out["identity_error"] = error
    if ident is not None and (ident.local_rank is not None or "CUDA_VISIBLE_DEVICES" in environ):
        out.update(_owned(ident, environ))
    return out


def _owned(ident: Identity, environ: Mapping[str, str]) -> dict[str, Any]:
    """``owned_gpus``: the UUIDs of the GPUs the monitored process drives (whichever rank's
    columns hold them), or ``owned_gpus_error`` when its ``CUDA_VISIBLE_DEVICES`` names none."""
    try:
        return {"owned_gpus": owned_gpus(ident, environ=environ)}
    except ValueError as e:
        return {"owned_gpus": None, "owned_gpus_error": str(e)}
