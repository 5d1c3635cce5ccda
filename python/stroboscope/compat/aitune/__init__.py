"""aitune's monitoring API and receiver, on stroboscope: replace the import line and keep going.

``from aitune.utils.monitoring import annotate`` becomes
``from stroboscope.compat.aitune import annotate``; the same holds for every name below, with
aitune 0.6.0's behaviours (``AITUNE_HARDWARE_METRICS``, ``AITUNE_HARDWARE_METRICS_PATH``, rows
every 0.1 s plus one when a scope of another name opens, the dump at exit). The readings come
from a :class:`stroboscope.Sampler` and the scopes are :mod:`stroboscope.scopes`' (so a native
sampler sees them too); the module and backend columns are the labels ``module`` and
``backend`` (``stroboscope.scopes.labels(module=..., backend=...)``, or
:func:`with_backend_context`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stroboscope._base.lazy import face
from stroboscope.compat.aitune._receiver import ParentReceiver

# The monitoring names load on first use, so the receiver alone costs no scopes or pandas.
_LAZY = {
    "annotate": "._annotate",
    "annotate_with_nvtx": "._annotate",
    "collect_hardware_metrics": "._annotate",
    "with_backend_context": "._annotate",
    "dump_metrics": "._monitoring",
    "disable_hardware_metrics": "._monitoring",
    "enable_hardware_metrics": "._monitoring",
    "get_hardware_metrics": "._monitoring",
    "snapshot": "._monitoring",
    "read_journal": "._journal",
}

if TYPE_CHECKING:
    from stroboscope.compat.aitune._annotate import (
        annotate,
        annotate_with_nvtx,
        collect_hardware_metrics,
        with_backend_context,
    )
    from stroboscope.compat.aitune._journal import read_journal
    from stroboscope.compat.aitune._monitoring import (
        disable_hardware_metrics,
        dump_metrics,
        enable_hardware_metrics,
        get_hardware_metrics,
        snapshot,
    )

__all__ = [
    "ParentReceiver",
    "annotate",
    "annotate_with_nvtx",
    "collect_hardware_metrics",
    "disable_hardware_metrics",
    "dump_metrics",
    "enable_hardware_metrics",
    "get_hardware_metrics",
    "read_journal",
    "snapshot",
    "with_backend_context",
]


__getattr__, __dir__ = face(__name__, __all__, _LAZY)
