"""The ``nvtx`` package, imported once on first use: the one lazy loader for every NVTX range the
package opens (:class:`stroboscope.annotate` with ``nvtx=``, aitune's ``annotate_with_nvtx``).
"""

from __future__ import annotations

import functools
from types import ModuleType

__all__ = ["nvtx_module"]


@functools.cache
def nvtx_module() -> ModuleType | None:
    """The ``nvtx`` module, or None when it cannot be imported (looked up once per process;
    ``nvtx_module.cache_clear()`` looks again)."""
    try:
        import nvtx  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return nvtx  # type: ignore[no-any-return,unused-ignore]
