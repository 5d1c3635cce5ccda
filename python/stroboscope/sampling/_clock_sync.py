"""How well this host's realtime clock is disciplined: the kernel's NTP state from adjtimex(2).

Two hosts' timestamps can only be compared to within the error of both realtime clocks. The
kernel keeps that error for whoever disciplines the clock (chronyd, ntpd, systemd-timesyncd,
PTP's phc2sys): ``maxerror`` (a bound, µs, grown by 500 ppm between updates) and ``esterror``
(the daemon's estimate, µs), and the ``STA_UNSYNC`` status bit, set while no daemon vouches for
the clock. :func:`clock_sync` reads them with ``modes = 0`` (read-only: no privilege needed,
nothing changed) and returns a small JSON-able fact for the provenance.

Linux only; elsewhere (or where the call fails, e.g. a seccomp filter) the fact says why.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from typing import Any

STA_UNSYNC = 0x0040
"""``status`` bit: the clock is not synchronised (no daemon has vouched for it)."""
TIME_ERROR = 5
"""adjtimex's return value when the clock is not synchronised (``TIME_BAD``)."""
STATES = {
    0: "TIME_OK",
    1: "TIME_INS",
    2: "TIME_DEL",
    3: "TIME_OOP",
    4: "TIME_WAIT",
    5: "TIME_ERROR",
}
"""adjtimex's return values (the leap-second state machine; TIME_ERROR: unsynchronised)."""


class _Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class Timex(ctypes.Structure):
    """``struct timex`` of <sys/timex.h> (glibc, LP64 and ILP32 without 64-bit time)."""

    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),  # µs
        ("esterror", ctypes.c_long),  # µs
        ("status", ctypes.c_int),
        ("constant", ctypes.c_long),
        ("precision", ctypes.c_long),  # µs
        ("tolerance", ctypes.c_long),
        ("time", _Timeval),
        ("tick", ctypes.c_long),
        ("ppsfreq", ctypes.c_long),
        ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int),
        ("stabil", ctypes.c_long),
        ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long),
        ("stbcnt", ctypes.c_long),
        ("tai", ctypes.c_int),
        # The kernel's reserved tail (11 ints), and room to spare: the kernel writes the whole
        # struct it knows, so ours must never be shorter.
        ("_reserved", ctypes.c_int * 32),
    ]


def parse_timex(tx: Timex, state: int) -> dict[str, Any]:
    """The fact for a filled ``tx`` and adjtimex's return value ``state``.

    Returns
    -------
    dict
        ``source`` ("adjtimex"), ``synchronized`` (False when ``STA_UNSYNC`` is set or the state
        is ``TIME_ERROR``), ``state`` (name), ``status`` (the raw bits), ``maxerror_ns`` (the
        kernel's bound on the clock's error), ``esterror_ns`` (the estimate), ``reason`` (None).
    """
    unsync = bool(tx.status & STA_UNSYNC) or state == TIME_ERROR
    return {
        "source": "adjtimex",
        "synchronized": not unsync,
        "state": STATES.get(state, str(state)),
        "status": int(tx.status),
        "maxerror_ns": int(tx.maxerror) * 1000,
        "esterror_ns": int(tx.esterror) * 1000,
        "reason": None,
    }


def _unknown(reason: str) -> dict[str, Any]:
    return {
        "source": "adjtimex",
        "synchronized": None,
        "state": None,
        "status": None,
        "maxerror_ns": None,
        "esterror_ns": None,
        "reason": reason,
    }


@functools.lru_cache(maxsize=1)
def _adjtimex() -> Any:
    """The C library's adjtimex, typed (looked up once: provenance is taken for every frame)."""
    if not sys.platform.startswith("linux"):
        raise OSError(f"adjtimex is Linux only (platform {sys.platform})")
    try:
        call = ctypes.CDLL(None, use_errno=True).adjtimex  # the libc this process runs on
    except (OSError, AttributeError) as exc:
        raise OSError(f"adjtimex not found in the C library: {exc}") from None
    call.argtypes = [ctypes.POINTER(Timex)]
    call.restype = ctypes.c_int
    return call


def read_timex() -> tuple[Timex, int]:
    """One read-only adjtimex(2) call (``modes = 0``): the filled struct and the clock state.
    OSError when the call fails or does not exist (not Linux, no C library)."""
    call = _adjtimex()
    tx = Timex()
    tx.modes = 0  # read only
    state = int(call(ctypes.byref(tx)))
    if state < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"adjtimex failed: {os.strerror(err)} (errno {err})")
    return tx, state


def clock_sync() -> dict[str, Any]:
    """This host's clock synchronisation as the kernel reports it (see :func:`parse_timex`);
    on failure every figure is None and ``reason`` says why (reports then list it as "not
    available")."""
    try:
        tx, state = read_timex()
    except OSError as exc:
        return _unknown(exc.strerror if exc.strerror else str(exc))
    return parse_timex(tx, state)
