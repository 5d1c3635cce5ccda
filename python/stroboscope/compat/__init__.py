"""Drop-in replacements for the pure-Python training monitors, each whole in its own module or
package with the machinery only it needs.

- :mod:`.scaffold`: the WandB-style ``SystemMonitor(pid, backend_sender, sample_rate_seconds=2,
  rank=None)`` with its keys (``cpu``, ``memory``, ``network``, ``proc.memory.rssMB``, …) and
  its window publisher (:mod:`._publisher`, which ``stroboscope record --publish-every`` uses
  too);
- :mod:`.aitune`: aitune's ``ParentReceiver(queue)`` (its journal and intake) and its
  hardware-metrics API (``annotate``, ``collect_hardware_metrics``, ``get_hardware_metrics``,
  ``snapshot``, ``dump_metrics``, …) with its scope collector;
- :mod:`.zeus`: Zeus's ``ZeusMonitor(gpu_indices)`` with ``begin_window``/``end_window``, served
  from the sampled GPU energy counter (no helper process, no synchronisation unless asked);
- :mod:`.lightning`, :mod:`.transformers`: training callbacks on one recording of a run
  (:mod:`._training`).

Not here: sampling, crash safety or formats of our own; those are the rooms below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stroboscope._base.lazy import face
from stroboscope.compat._keys import CompatKeys
from stroboscope.compat.aitune import ParentReceiver
from stroboscope.compat.scaffold import SystemMonitor
from stroboscope.compat.zeus import ZeusMonitor

__all__ = [
    "CompatKeys",
    "ParentReceiver",
    "SystemMonitor",
    "WindowPublisher",
    "ZeusMonitor",
]

_DOORS = {  # what the rooms above use
    "WindowPublisher": "._publisher",
}

__getattr__, __dir__ = face(__name__, __all__, _DOORS)

if TYPE_CHECKING:
    from stroboscope.compat._publisher import WindowPublisher
