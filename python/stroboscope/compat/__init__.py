"""Drop-in replacements for the pure-Python training monitors.

``from stroboscope import SystemMonitor, AbstractBackendSender`` replaces the WandB-style
``SystemMonitor(pid, backend_sender, sample_rate_seconds=2, rank=None)`` and its sender interface
with the same surface and keys, sampled in C++.
"""

from __future__ import annotations

from stroboscope.compat._keys import CompatKeys
from stroboscope.compat._monitor import SystemMonitor
from stroboscope.compat._window import WindowAggregator, WindowInfo
from stroboscope.senders._base import AbstractBackendSender, GPUHandle, SamplerDict, StatsDict

__all__ = [
    "AbstractBackendSender",
    "CompatKeys",
    "GPUHandle",
    "SamplerDict",
    "StatsDict",
    "SystemMonitor",
    "WindowAggregator",
    "WindowInfo",
]
