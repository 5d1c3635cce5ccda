"""TensorBoard sender: each metric as a scalar, written with tensorboardX, one run per rank.

TensorBoard treats every directory under ``--logdir`` that holds event files as a run and draws
the runs of a tag in one chart. So in a job of several processes each rank writes to its own run
directory, ``{logdir}/rank_{r}``, under the same tags: ``tensorboard --logdir {logdir}`` shows one
line per rank, and a rank's rows never interleave with another's in one event file.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stroboscope._base.checks import check_path, check_seconds, check_str
from stroboscope._base.extras import missing_extra
from stroboscope.senders._base import BuiltinSender, StatsDict, flatten_event
from stroboscope.senders._rank import RankLabel, rank_label

if TYPE_CHECKING:
    from stroboscope._base.identity import Identity


class TensorBoardSender(BuiltinSender):
    """Write each metric of each event as a TensorBoard scalar (tag = flattened key).

    Uses ``tensorboardX`` (light: no TensorFlow or PyTorch needed), falling back to
    ``torch.utils.tensorboard`` when only PyTorch is installed.

    Parameters
    ----------
    logdir : str or os.PathLike
        Directory of the event files (with a rank: the parent of the rank's run directory);
        created with mode 0700 when missing, and the event file this sender writes is made 0600.
    flush_secs : float
        How often the writer flushes to disk, in seconds (default 10).
    prefix : str
        Put in front of every tag, e.g. ``"system/"`` (default none).
    rank : int, optional
        Global rank of this process (default: from the launcher's environment when the job has
        more than one process, see :mod:`stroboscope.senders._rank`).
    identity : Identity, optional
        This process's identity (``stroboscope.cluster.identity()``), instead of ``rank``.

    The event file is opened at the first event, in :attr:`run_dir`. Under
    ``SystemMonitor(..., rank=r)`` the monitor gives this sender its rank before that (see
    :meth:`label_rank`) and publishes the keys without its ``rank{r}.`` prefix.

    The step of each scalar is the number of events published before it (or ``step=`` when the
    caller passes one), and its wall time is the end of the published window.
    """

    def __init__(
        self,
        logdir: str | os.PathLike[str],
        *,
        flush_secs: float = 10.0,
        prefix: str = "",
        rank: int | None = None,
        identity: Identity | None = None,
    ) -> None:
        super().__init__()
        self.logdir = Path(check_path("logdir", logdir))
        self._flush_secs = check_seconds("flush_secs", flush_secs)
        self.prefix = check_str("prefix", prefix)
        self._writer_cls = _summary_writer_class()
        self._rank = RankLabel(rank, identity, "TensorBoardSender")
        if not self.logdir.exists():
            self.logdir.mkdir(mode=0o700, parents=True)
        self._writer: Any = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def rank(self) -> int | None:
        """The rank whose run directory this sender writes (None: not labelled by rank)."""
        return self._rank.rank

    @property
    def run_dir(self) -> Path:
        """Where the event file goes: ``logdir/rank_{r}`` with a rank, else ``logdir``."""
        if self._rank.rank is None:
            return self.logdir
        return self.logdir / rank_label(self._rank.rank)

    def label_rank(self, rank: int) -> bool:
        """Take ``SystemMonitor``'s rank as this sender's (see the class notes); True.

        Raises RuntimeError when the event file is already open in another directory.
        """
        with self._lock:
            if self._writer is not None and self._rank.rank != rank:
                raise RuntimeError(
                    f"TensorBoardSender already writes to {str(self.run_dir)!r}; a rank must "
                    f"be given before the first event"
                )
            self._rank.adopt(rank)
        return True

    def _open(self) -> Any:
        # Called with the lock held, at the first event: the rank is final by then.
        if self._writer is None:
            run_dir = self.run_dir
            if not run_dir.exists():
                run_dir.mkdir(mode=0o700, parents=True)
            before = set(run_dir.glob("events.out.tfevents.*"))
            writer = self._writer_cls(str(run_dir), flush_secs=self._flush_secs)
            _ensure_file(writer)
            for created in set(run_dir.glob("events.out.tfevents.*")) - before:
                os.chmod(created, 0o600)
            self._writer = writer
        return self._writer

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        """Add every metric of ``event`` as a scalar at the next step."""
        flat = flatten_event(event)
        walltime = self._timestamp(kwargs)
        with self._lock:
            if self._closed:
                raise RuntimeError(f"TensorBoardSender({str(self.run_dir)!r}) is closed")
            step = self._next_step(kwargs)
            writer = self._open()
            for key, value in flat.items():
                writer.add_scalar(self.prefix + key, value, global_step=step, walltime=walltime)

    def close(self) -> None:
        """Flush and close the event file (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._writer is not None:
                self._writer.close()

    def __repr__(self) -> str:
        return f"TensorBoardSender({str(self.run_dir)!r})"


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
