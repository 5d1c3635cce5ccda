"""Drop-in replacements for the pure-Python training monitors, one module per system replaced.

- :mod:`.scaffold`: the WandB-style ``SystemMonitor(pid, backend_sender, sample_rate_seconds=2,
  rank=None)`` with its keys (``cpu``, ``memory``, ``network``, ``proc.memory.rssMB``, …);
- :mod:`.aitune`: aitune's ``ParentReceiver(queue)`` and its hardware-metrics API (``annotate``,
  ``collect_hardware_metrics``, ``get_hardware_metrics``, ``snapshot``, ``dump_metrics``, …);
- :mod:`.zeus`: Zeus's ``ZeusMonitor(gpu_indices)`` with ``begin_window``/``end_window``, served
  from the sampled GPU energy counter (no helper process, no synchronisation unless asked).

They translate names and behaviours onto the rooms of the package and hold no machinery.
"""

from __future__ import annotations

from stroboscope._base.lazy import face
from stroboscope.compat._keys import CompatKeys
from stroboscope.compat.aitune import ParentReceiver
from stroboscope.compat.scaffold import SystemMonitor
from stroboscope.compat.zeus import ZeusMonitor

__all__ = ["CompatKeys", "ParentReceiver", "SystemMonitor", "ZeusMonitor"]

__getattr__, __dir__ = face(__name__, __all__)
