"""From one process to a cluster: who each rank is, what it records, and exporters.

>>> from stroboscope import cluster
>>> me = cluster.identity()                  # rank, local rank, host, job... from the launcher
>>> with cluster.Sampler(0.01) as s:         # local rank 0: host + GPUs + its process;
...     ...                                  # other local ranks: their process only

Names load on first use (PEP 562): ``identity`` costs the standard library only; the
exporters load their own dependencies when asked for. See docs/cluster.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from stroboscope._base.identity import Identity, detect_identity

identity = detect_identity
"""This process's :class:`Identity` (:func:`detect_identity`: the launcher's variables, explicit
arguments first)."""

_NAMES = {
    "HOST_SOURCES": "stroboscope.cluster._roles",
    "PROCESS_SOURCES": "stroboscope.cluster._roles",
    "rank_sources": "stroboscope.cluster._roles",
    "owned_gpus": "stroboscope.cluster._roles",
    "Sampler": "stroboscope.cluster._sampler",
    "PrometheusExporter": "stroboscope.cluster.prometheus",
    "OTelExporter": "stroboscope.cluster.otel",
}

__all__ = [
    "HOST_SOURCES",
    "PROCESS_SOURCES",
    "Identity",
    "OTelExporter",
    "PrometheusExporter",
    "Sampler",
    "detect_identity",
    "identity",
    "owned_gpus",
    "rank_sources",
]

if TYPE_CHECKING:
    from stroboscope.cluster._roles import (
        HOST_SOURCES,
        PROCESS_SOURCES,
        owned_gpus,
        rank_sources,
    )
    from stroboscope.cluster._sampler import Sampler
    from stroboscope.cluster.otel import OTelExporter
    from stroboscope.cluster.prometheus import PrometheusExporter


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'stroboscope.cluster' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES))
