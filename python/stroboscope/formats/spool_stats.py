"""The recorder's own figures in its spool's header: written by the recorder a few times a
second, read by anyone who follows the spool (``stroboscope top``), read-only.

The block (``spool_layout.STATS_FIELDS``, header bytes 72 to 127) is a sequence word and seven
counters: the sampler's ticks taken and missed, the rows the recorder lost (overwritten in the
ring before a segment took them), the sampler's cost per tick (mean and 99th percentile, ns)
and its thread's CPU time (ns). The C++ core reserves these bytes and never writes them; the one
writer is the recorder's segment thread, which already reads the sampler's stats that often.

A seqlock, with one writer: the writer stores the sequence word odd, then the counters, then
the word even again, each store its own ``pwrite`` (so each is complete in the page cache before
the next begins, and a reader of the shared mapping sees them in that order on x86-64's ordered
stores; elsewhere the reader's check below still catches a torn read of the same publication).
A reader reads the word, the counters, the word again, and keeps the counters only when both
reads of the word are the same even number; a word of 0 means the recorder never published (a
spool of a version before this block, or a recorder that has not yet).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

from stroboscope.formats import spool_layout as _layout

__all__ = ["RecorderStats", "StatsPublisher", "read_recorder_stats"]

_OFFSETS = {name: offset for name, offset, _code in _layout.STATS_FIELDS}
_SEQ = struct.Struct("<Q")
_SEQ_AT = _OFFSETS["stats_seq"]
_BODY_NAMES = tuple(name for name, _o, _c in _layout.STATS_FIELDS[1:])
_BODY = struct.Struct("<" + "Q" * len(_BODY_NAMES))
_BODY_AT = _OFFSETS[_BODY_NAMES[0]]
assert all(_OFFSETS[n] == _BODY_AT + 8 * i for i, n in enumerate(_BODY_NAMES)), "contiguous"
assert _SEQ_AT + 8 == _BODY_AT
_TRIES = 4  # a read that meets the writer mid-publication tries again, then gives up (None)
_MAX = (1 << 64) - 1


@dataclass(frozen=True)
class RecorderStats:
    """The recorder's figures as it last published them.

    Attributes
    ----------
    seq : int
        How many times they were published (each publication adds 2 to the sequence word).
    ticks_taken, ticks_missed : int
        The sampler's ticks (``Sampler.stats()``); scheduled = taken + missed.
    rows_lost : int
        Rows the recorder lost: overwritten in the ring before a segment took them (what its
        summary prints as rows lost).
    cost_mean_ns, cost_p99_ns : int
        The sampler's cost per tick, mean and 99th percentile (ns).
    thread_cpu_ns : int
        CPU time of the sampler's thread so far (ns).
    """

    seq: int
    ticks_taken: int
    ticks_missed: int
    rows_lost: int
    cost_mean_ns: int
    cost_p99_ns: int
    thread_cpu_ns: int

    @property
    def ticks_scheduled(self) -> int:
        """Deadlines passed while sampling: taken + missed."""
        return self.ticks_taken + self.ticks_missed


def read_recorder_stats(buf: Any) -> RecorderStats | None:
    """The figures in a spool's header (``buf``: its mapping or its first 192 bytes), or None
    when the recorder never published them, or was mid-publication at every try."""
    for _ in range(_TRIES):
        (seq,) = _SEQ.unpack_from(buf, _SEQ_AT)
        if seq == 0:
            return None
        if seq & 1:
            continue
        body = _BODY.unpack_from(buf, _BODY_AT)
        (again,) = _SEQ.unpack_from(buf, _SEQ_AT)
        if again == seq:
            return RecorderStats(seq // 2, *body)
    return None


class StatsPublisher:
    """Writes a recorder's figures into its spool's header (the one writer of the block).

    Parameters
    ----------
    spool : str
        The spool its sampler created (it must already exist: it is opened for writing, never
        created or followed through a symlink).
    """

    def __init__(self, spool: str) -> None:
        self._fd = os.open(spool, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self._seq = 0  # the spool was created with zeros here (never published)

    def publish(self, stats: dict[str, Any], rows_lost: int) -> None:
        """Publish the sampler's ``stats`` (``_core.Sampler.stats()``'s dict) and the
        recorder's ``rows_lost``. Raises OSError when the spool cannot be written."""
        if self._fd < 0:
            return
        body = _BODY.pack(
            *(
                min(_MAX, max(0, round(v)))
                for v in (
                    stats["ticks_taken"],
                    stats["ticks_missed"],
                    rows_lost,
                    stats["cost_mean_ns"],
                    stats["cost_p99_ns"],
                    stats["thread_cpu_ns"],
                )
            )
        )
        # Odd, the counters, even: three stores in this order (see the module).
        os.pwrite(self._fd, _SEQ.pack(self._seq + 1), _SEQ_AT)
        os.pwrite(self._fd, body, _BODY_AT)
        self._seq += 2
        os.pwrite(self._fd, _SEQ.pack(self._seq), _SEQ_AT)

    def close(self) -> None:
        """Close the spool (the figures stay in it)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
