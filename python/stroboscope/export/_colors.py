"""Colours of the report, in one home: the colour of each scope name (the same in the PNG plots
and the zooming page) and the palette of lines."""

from __future__ import annotations

from collections.abc import Iterable

PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
"""Ten distinct colours (matplotlib's ``tab10``, Bokeh's ``Category10``), as ``#rrggbb``."""


def scope_colors(names: Iterable[str]) -> dict[str, str]:
    """A colour per distinct scope name, in order of first appearance, cycling ``PALETTE``."""
    out: dict[str, str] = {}
    for name in names:
        if name not in out:
            out[name] = PALETTE[len(out) % len(PALETTE)]
    return out
