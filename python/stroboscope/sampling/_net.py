"""Whole-machine network byte totals, read once with the network source's own parser."""

from __future__ import annotations

import stroboscope._core as _core


def net_dev_totals(include_loopback: bool, proc_root: str = "/proc") -> tuple[int, int]:
    """Bytes sent and received by all interfaces since boot, from ``PROC_ROOT/net/dev``.

    Parameters
    ----------
    include_loopback : bool
        Count ``lo`` too.
    proc_root : str
        The procfs root (a recorded tree in tests).

    Returns
    -------
    (sent, recv) : tuple of int
        Bytes.
    """
    sent, recv = _core.net_dev_totals(proc_root, include_loopback)
    return int(sent), int(recv)
