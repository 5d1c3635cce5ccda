"""A plain-text summary of a recording: per metric column its unit, samples, mean, min, max
and last value."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc


def _fmt(value: float, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    magnitude = abs(value)
    if unit in ("bytes", "bytes/s"):
        for scale, suffix in ((1 << 30, "Gi"), (1 << 20, "Mi"), (1 << 10, "Ki")):
            if magnitude >= scale:
                return f"{value / scale:.2f} {suffix}"
        return f"{value:.0f}"
    if magnitude >= 1e6 or (magnitude < 1e-2 and magnitude != 0):
        return f"{value:.3g}"
    return f"{value:.2f}"


def summarize(table: pa.Table, units: dict[str, str]) -> str:
    """A plain-text table: per metric column its unit, samples, mean, min, max and last value."""
    header = ("column", "unit", "samples", "mean", "min", "max", "last")
    rows: list[tuple[str, ...]] = []
    for name in table.column_names:
        if name in ("time", "mono_ns"):
            continue
        col = table.column(name)
        valid = col.drop_null()
        unit = units.get(name, "")
        if len(valid) == 0:
            rows.append((name, unit, "0", "-", "-", "-", "-"))
            continue
        as_float = valid.cast(pa.float64())
        mm = pc.min_max(as_float)
        rows.append(
            (
                name,
                unit,
                str(len(valid)),
                _fmt(pc.mean(as_float).as_py(), unit),
                _fmt(mm["min"].as_py(), unit),
                _fmt(mm["max"].as_py(), unit),
                _fmt(as_float[-1].as_py(), unit),
            )
        )
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append(
            "  ".join(
                (v.ljust(w) if i < 2 else v.rjust(w)) for i, (v, w) in enumerate(zip(r, widths))
            )
        )
    return "\n".join(lines)
