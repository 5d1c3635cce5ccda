"""A rank's sampler: :func:`rank_sampler` makes the one :class:`stroboscope.Sampler` with the
sources and GPUs of this process's role on its node."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from stroboscope._base.identity import Identity, detect_identity
from stroboscope.cluster._roles import (
    PROCESS_SOURCES,
    default_sources,
    owned_gpus,
    rank_sources,
)
from stroboscope.recording.sampler import Sampler

_OPTION_KEYS = ("pid", "proc_root", "sys_root", "cgroup_root", "disk_paths")


def _plan(
    ident: Identity,
    sources: Iterable[str] | Mapping[str, float | None] | None,
    gpus: Any,
    kwargs: Mapping[str, Any],
) -> tuple[list[str] | dict[str, float | None], dict[str, Any]]:
    """(sources, gpu keywords) for this rank: its role's sources, and the ``gpus`` argument."""
    if sources is None:
        candidates: list[str] = default_sources(
            **{k: kwargs[k] for k in _OPTION_KEYS if k in kwargs}
        )
    elif isinstance(sources, (str, bytes)):
        raise TypeError(f"sources must be a list or dict of source names, got {sources!r}")
    else:
        candidates = list(sources)
    names = rank_sources(ident, candidates)
    gpu_kw: dict[str, Any] = {}
    if isinstance(gpus, str) and gpus == "auto":
        pass  # the leader keeps "gpu" where its sources have it: every GPU; others none
    else:
        # Asked for explicitly: this rank records those GPUs whatever its role.
        gpu_kw["gpus"] = owned_gpus(ident) if gpus == "owned" else gpus
        if gpus == "owned" and not gpu_kw["gpus"]:
            raise ValueError(
                f"gpus='owned' but local rank {ident.local_rank} owns no GPU here "
                "(stroboscope.cluster.owned_gpus); give gpus='auto' or a list"
            )
        if "gpu" not in names:
            names.append("gpu")
    if not names:
        raise ValueError(
            f"local rank {ident.local_rank} records per-process sources only "
            f"({', '.join(PROCESS_SOURCES)}), and sources={list(candidates)!r} has none: "
            "host-wide sources are recorded once per node, by local rank 0"
        )
    if isinstance(sources, Mapping):
        return {n: sources.get(n) for n in names}, gpu_kw
    return names, gpu_kw


def rank_sampler(
    interval: float = 0.001,
    *,
    identity: Identity | None = None,
    sources: Iterable[str] | Mapping[str, float | None] | None = None,
    gpus: Any = "auto",
    dataset: str | os.PathLike[str] | None = None,
    **kwargs: Any,
) -> Sampler:
    """A :class:`stroboscope.Sampler` for one rank of a distributed job.

    Local rank 0 (or a process whose local rank is unknown) records the host-wide sources and
    every GPU as well as its own process; every other local rank records its process only, so a
    host-wide column is written once per node (:func:`stroboscope.cluster.rank_sources`;
    :func:`stroboscope.cluster.is_node_leader` says which role ``sampler.identity`` has).

    Parameters
    ----------
    interval : float
        Base sampling interval in seconds (as :class:`stroboscope.Sampler`).
    identity : Identity, optional
        Who this process is (default :func:`stroboscope.cluster.identity`, from the
        environment). Kept as the sampler's ``identity`` and in every frame's provenance.
    sources : list of str or dict of str to float, optional
        Candidates, filtered by the role (default: the sampler's default sources here).
    gpus : "auto", "owned", None, "cuda" or sequence of int or str
        ``"auto"`` (default): the leader records every GPU where the ``gpu`` source is
        available, other ranks none. ``"owned"``: this rank's own GPUs
        (:func:`stroboscope.cluster.owned_gpus`), on any rank. Anything else is passed to
        :class:`stroboscope.Sampler` as ``gpus=`` and adds the ``gpu`` source on any rank.
    dataset : path, optional
        Root of a partitioned dataset this rank writes its segments to (passed on; with it, a
        single-process run is given a job of its own, ``run-STAMP``, in ``identity``).
    **kwargs
        Every other keyword of :class:`stroboscope.Sampler` (``pid``, ``spool``, ...).

    Returns
    -------
    stroboscope.Sampler
        Not started, as the class makes it.
    """
    if identity is not None and not isinstance(identity, Identity):
        raise TypeError(
            f"identity must be a stroboscope.cluster.Identity or None, got {identity!r}"
        )
    ident = identity if identity is not None else detect_identity()
    chosen, gpu_kw = _plan(ident, sources, gpus, kwargs)
    return Sampler(interval, sources=chosen, dataset=dataset, identity=ident, **gpu_kw, **kwargs)
