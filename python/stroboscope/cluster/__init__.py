"""From one process to a cluster: who each rank is, what it records, and exporters.

>>> from stroboscope import cluster
>>> me = cluster.identity()                  # rank, local rank, host, job... from the launcher
>>> with cluster.rank_sampler(0.01) as s:    # local rank 0: host + GPUs + its process;
...     ...                                  # other local ranks: their process only

Names load on first use (PEP 562): ``identity`` costs the standard library only; the
exporters load their own dependencies when asked for. See docs/cluster.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stroboscope._base.identity import Identity, detect_identity
from stroboscope._base.lazy import face

identity = detect_identity
"""This process's :class:`Identity` (:func:`detect_identity`: the launcher's variables, explicit
arguments first)."""

__all__ = [
    "HOST_SOURCES",
    "PROCESS_SOURCES",
    "Identity",
    "OTelExporter",
    "PrometheusExporter",
    "detect_identity",
    "identity",
    "is_node_leader",
    "owned_gpus",
    "rank_sampler",
    "rank_sources",
]

__getattr__, __dir__ = face(
    __name__,
    __all__,
    {
        "HOST_SOURCES": "._roles",
        "PROCESS_SOURCES": "._roles",
        "is_node_leader": "._roles",
        "rank_sources": "._roles",
        "owned_gpus": "._roles",
        "rank_sampler": "._sampler",
        "PrometheusExporter": ".prometheus",
        "OTelExporter": ".otel",
    },
)

if TYPE_CHECKING:
    from stroboscope.cluster._roles import (
        HOST_SOURCES,
        PROCESS_SOURCES,
        is_node_leader,
        owned_gpus,
        rank_sources,
    )
    from stroboscope.cluster._sampler import rank_sampler
    from stroboscope.cluster.otel import OTelExporter
    from stroboscope.cluster.prometheus import PrometheusExporter
