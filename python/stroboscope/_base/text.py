"""Text for one line of a terminal or a table cell: the one escape of control characters."""

from __future__ import annotations

__all__ = ["printable"]


def printable(text: object) -> str:
    """``text`` for one cell of a text table: a character that would break the row (a newline,
    a tab, any control character) written as its escape (``\\n``), everything else as is."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
