"""aitune's receiver: ``ParentReceiver(queue)``. Names and behaviours are translated onto
:mod:`stroboscope.recording`; this module holds no machinery of its own.

``ParentReceiver`` keeps the surface of the pure-Python receiver: ``start``, ``stop``,
``snapshot(path, reset_metrics=True)`` (CSV for any name but ``.parquet``/``.pq``, as before),
``get_metrics()`` → pandas DataFrame, and a CSV dump of every row taken when the main process
dies. Beyond it: a row that cannot be written never stops the receiver (it is refused and
counted), and ``rows_received``, ``rows_refused`` and ``stats()`` say what happened to every row
taken from the queue (received, refused, written with text values or renamed keys, lost to a
full disk).
"""

from __future__ import annotations

from stroboscope.recording.receiver import Receiver


class ParentReceiver(Receiver):
    """Collects dict rows from ``queue`` on a thread, journaled to a crash-safe file.

    The drop-in name of :class:`stroboscope.recording.receiver.Receiver`; see it for the
    parameters, the journal format and the crash dump.
    """

    def __repr__(self) -> str:
        state = "running" if self.running else "not running"
        return f"<stroboscope.compat.aitune.ParentReceiver rows={self.rows_received} {state}>"


__all__ = ["ParentReceiver"]
