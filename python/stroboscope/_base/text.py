"""Text a person reads, the one home of its units and numbers: values in their units (bytes in
Ki/Mi/Gi), durations, rates, aligned text tables, and the one escape of control characters
(text for one line of a terminal or a table cell)."""

from __future__ import annotations

import math

__all__ = ["fmt_rate", "fmt_seconds", "fmt_value", "printable", "text_table"]


def printable(text: object) -> str:
    """``text`` for one cell of a text table: a character that would break the row (a newline,
    a tab, any control character) written as its escape (``\\n``), everything else as is."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def fmt_value(value: float | None, unit: str) -> str:
    """A value for a table: bytes in Ki/Mi/Gi, large and tiny numbers in 3 significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    magnitude = abs(value)
    if unit in ("bytes", "bytes/s"):
        for scale, suffix in ((1 << 40, "Ti"), (1 << 30, "Gi"), (1 << 20, "Mi"), (1 << 10, "Ki")):
            if magnitude >= scale:
                return f"{value / scale:.2f} {suffix}"
        return f"{value:.0f}"
    if magnitude >= 1e6 or (magnitude < 1e-2 and magnitude != 0):
        return f"{value:.3g}"
    return f"{value:.2f}"


def fmt_seconds(seconds: float | None) -> str:
    """``0.001`` → ``"1 ms"``, ``2.5`` → ``"2.5 s"``; ``"-"`` for None."""
    if seconds is None:
        return "-"
    if seconds >= 999.5:
        return f"{seconds:.0f} s"
    seconds = float(f"{seconds:.3g}")  # rounded first: 0.9999 ms is "1 ms", not "1e+03 µs"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def fmt_rate(value: float | None, unit: str) -> str:
    """A counter's rate: ``"1.50 Mi/s"`` for bytes, ``"3.00 mJ/s"`` for another unit."""
    text = fmt_value(value, unit)
    if text == "-":
        return text
    return f"{text}/s" if unit == "bytes" else f"{text} {unit}/s".replace(" /s", "/s")


def text_table(header: tuple[str, ...], rows: list[tuple[str, ...]], left: int = 1) -> str:
    """Columns padded to their widest cell; the first ``left`` columns left-aligned; control
    characters in a cell escaped (:func:`printable`), so each row stays one line."""
    header = tuple(printable(h) for h in header)
    rows = [tuple(printable(v) for v in r) for r in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        cells = [
            (v.ljust(w) if i < left else v.rjust(w)) for i, (v, w) in enumerate(zip(r, widths))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
