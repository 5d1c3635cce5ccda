"""The ``nvtx`` package, imported once on first use: the one lazy loader for every NVTX range the
package opens (:class:`stroboscope.annotate` with ``nvtx=``, aitune's ``annotate_with_nvtx``),
and the one check of the colour such a range is given (:func:`check_color`).
"""

from __future__ import annotations

import functools
import math
from types import ModuleType

__all__ = ["NVTX_COLOR_NAMES", "check_color", "nvtx_module"]


@functools.cache
def nvtx_module() -> ModuleType | None:
    """The ``nvtx`` module, or None when it cannot be imported (looked up once per process;
    ``nvtx_module.cache_clear()`` looks again)."""
    try:
        import nvtx  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return nvtx  # type: ignore[no-any-return,unused-ignore]


NVTX_COLOR_NAMES = (
    "blue",
    "cyan",
    "darkgreen",
    "green",
    "orange",
    "purple",
    "rapids",
    "red",
    "white",
    "yellow",
)
"""The colour names the ``nvtx`` package resolves itself (without matplotlib)."""

_MAX_ARGB = 0xFFFFFFFF


def check_color(color: object) -> str | int | None:
    """A range colour as the ``nvtx`` package takes it, checked when a scope is made (an
    annotation never raises when entered): None, an ARGB int in [0, 0xFFFFFFFF] or a name of
    :data:`NVTX_COLOR_NAMES` as given; ``'#rrggbb'`` (opaque) or ``'#rrggbbaa'`` as its ARGB
    int; any other colour matplotlib reads (``'tab:blue'``, ``'navy'``), when it is installed,
    as its ARGB int, as ``nvtx`` would make it.

    Raises
    ------
    TypeError
        For a value that is not a str, an int or None (a bool or a float included).
    ValueError
        For an int out of range or a str that names no colour.
    """
    if color is None or (type(color) is str and color in NVTX_COLOR_NAMES):
        return color
    if isinstance(color, int) and not isinstance(color, bool) and 0 <= color <= _MAX_ARGB:
        return int(color)
    if isinstance(color, str):
        argb = _hex_argb(color)
        if argb is None:
            argb = _matplotlib_argb(color)
        if argb is not None:
            return argb
    from stroboscope._base.checks import describe

    names = ", ".join(repr(n) for n in NVTX_COLOR_NAMES)
    why = (
        f"color must be None, an ARGB int in [0, 0xFFFFFFFF], one of nvtx's colour names "
        f"({names}), '#rrggbb' or '#rrggbbaa', or a matplotlib colour when matplotlib is "
        f"installed, got {describe(color)}"
    )
    if isinstance(color, (str, int)) and not isinstance(color, bool):
        raise ValueError(why)
    raise TypeError(why)


def _hex_argb(text: str) -> int | None:
    """``'#rrggbb'`` (alpha ff) or ``'#rrggbbaa'`` as an ARGB int; None for any other text."""
    digits = text[1:]
    if text[:1] != "#" or len(digits) not in (6, 8) or not set(digits) <= _HEX_DIGITS:
        return None
    value = int(digits, 16)
    if len(digits) == 6:
        return 0xFF000000 | value
    return ((value & 0xFF) << 24) | (value >> 8)


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


@functools.lru_cache(maxsize=256)
def _matplotlib_argb(text: str) -> int | None:
    """A colour matplotlib reads, as the ARGB int ``nvtx`` makes of it (its channels rounded to
    bytes); None without matplotlib or for a name it does not know."""
    try:
        from matplotlib.colors import to_rgba
    except ImportError:
        return None
    try:
        rgba = to_rgba(text)
    except ValueError:
        return None
    if not all(math.isfinite(c) for c in rgba):
        return None
    r, g, b, a = (round(c * 255) for c in rgba)
    return (a << 24) | (r << 16) | (g << 8) | b
