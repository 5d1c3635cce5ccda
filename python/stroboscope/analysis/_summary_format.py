"""The per-scope summary as a plain-text table for the command line."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from stroboscope.analysis.column_stats import printable

if TYPE_CHECKING:
    import pandas

# (header, value columns shown "a / b", count column, kind of value)
_FIGURES: tuple[tuple[str, tuple[str, ...], str | None, str], ...] = (
    ("calls", ("calls",), None, "int"),
    ("total", ("total_s",), None, "s"),
    ("mean", ("mean_s",), None, "s"),
    ("p50", ("p50_s",), None, "s"),
    ("p99", ("p99_s",), None, "s"),
    ("max", ("max_s",), None, "s"),
    ("excl", ("exclusive_s",), None, "s"),
    ("cpu % mean/max", ("cpu_pct_mean", "cpu_pct_max"), "cpu_pct_n", "num"),
    ("rss max/growth", ("rss_bytes_max", "rss_bytes_growth"), "rss_bytes_n", "bytes"),
    ("gpu % mean/max", ("gpu_util_pct_mean", "gpu_util_pct_max"), "gpu_util_pct_n", "num"),
    ("gpu mem max", ("gpu_mem_bytes_max",), "gpu_mem_bytes_n", "bytes"),
    ("power W mean/max", ("power_w_mean", "power_w_max"), "power_w_n", "num"),
    ("energy J", ("energy_j",), "energy_j_n", "num"),
)


def _value(v: Any, kind: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    x = float(v)
    if kind == "int":
        return str(int(x))
    if kind == "s":
        for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
            if abs(x) >= scale:
                return f"{x / scale:.3g} {unit}"
        return f"{x * 1e9:.0f} ns"
    if kind == "bytes":
        for scale, suffix in ((1 << 30, " GiB"), (1 << 20, " MiB"), (1 << 10, " KiB")):
            if abs(x) >= scale:
                return f"{x / scale:.3g}{suffix}"
        return f"{x:.0f} B"
    return f"{x:.4g}"


def format_summary(df: pandas.DataFrame) -> str:
    """``summary()``'s DataFrame as an aligned text table: one line per scope and labels, the
    durations, then each metric figure with its reading count in brackets (``[n]``). Figures
    the frame did not have are left out; control characters in a name or label are escaped
    (:func:`~stroboscope.analysis.column_stats.printable`), so each row stays one line."""
    header = [printable(n) for n in df.index.names]
    shown = [f for f in _FIGURES if all(c in df.columns for c in f[1])]
    header += [f[0] for f in shown]
    rows: list[list[str]] = []
    for key, row in zip(df.index, df.itertuples(index=False)):
        values = dict(zip(df.columns, row))
        keys = key if isinstance(key, tuple) else (key,)
        cells = [
            "-" if k is None or (isinstance(k, float) and math.isnan(k)) else printable(k)
            for k in keys
        ]
        for _, columns, count, kind in shown:
            text = " / ".join(_value(values[c], kind) for c in columns)
            if count is not None and count in values:
                text += f" [{int(values[count])}]"
            cells.append(text)
        rows.append(cells)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    labels = len(df.index.names)
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append(
            "  ".join(
                v.ljust(w) if i < labels else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))
            )
        )
    return "\n".join(lines)
