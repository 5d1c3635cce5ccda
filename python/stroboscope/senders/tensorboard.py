"""TensorBoard sender: each metric as a scalar, written with tensorboardX."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from stroboscope.senders._base import BuiltinSender, StatsDict, flatten_event, missing_extra


class TensorBoardSender(BuiltinSender):
    """Write each metric of each event as a TensorBoard scalar (tag = flattened key).

    Uses ``tensorboardX`` (light: no TensorFlow or PyTorch needed), falling back to
    ``torch.utils.tensorboard`` when only PyTorch is installed.

    Parameters
    ----------
    logdir : str or os.PathLike
        Directory of the event files; created with mode 0700 when missing, and the event file
        this sender writes is made 0600.
    flush_secs : float
        How often the writer flushes to disk, in seconds (default 10).
    prefix : str
        Put in front of every tag, e.g. ``"system/"`` (default none).

    The step of each scalar is the number of events published before it (or ``step=`` when the
    caller passes one), and its wall time is the end of the published window.
    """

    def __init__(
        self, logdir: str | os.PathLike[str], *, flush_secs: float = 10.0, prefix: str = ""
    ) -> None:
        super().__init__()
        writer_cls = _summary_writer_class()
        self.logdir = Path(logdir)
        if not self.logdir.exists():
            self.logdir.mkdir(mode=0o700, parents=True)
        before = set(self.logdir.glob("events.out.tfevents.*"))
        self._writer = writer_cls(str(self.logdir), flush_secs=flush_secs)
        _ensure_file(self._writer)
        for created in set(self.logdir.glob("events.out.tfevents.*")) - before:
            os.chmod(created, 0o600)
        self.prefix = prefix
        self._lock = threading.Lock()
        self._closed = False

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        """Add every metric of ``event`` as a scalar at the next step."""
        flat = flatten_event(event)
        walltime = self._timestamp(kwargs)
        with self._lock:
            if self._closed:
                raise RuntimeError(f"TensorBoardSender({str(self.logdir)!r}) is closed")
            step = self._next_step(kwargs)
            for key, value in flat.items():
                self._writer.add_scalar(
                    self.prefix + key, value, global_step=step, walltime=walltime
                )

    def close(self) -> None:
        """Flush and close the event file (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._writer.close()

    def __repr__(self) -> str:
        return f"TensorBoardSender({str(self.logdir)!r})"


def _summary_writer_class() -> Any:
    try:
        from tensorboardX import SummaryWriter  # type: ignore[import-untyped, unused-ignore]
    except ImportError as exc:
        try:
            from torch.utils.tensorboard import (  # type: ignore[import-not-found, unused-ignore]
                SummaryWriter,
            )
        except ImportError:
            raise missing_extra("TensorBoardSender", "tensorboard", exc) from exc
    return SummaryWriter


def _ensure_file(writer: Any) -> None:
    # tensorboardX opens its event file on first use; open it now so its mode can be set before
    # anything is written to it.
    get = getattr(writer, "_get_file_writer", None)
    if callable(get):
        get()
