"""What the training-framework callbacks share: a recording of one training run.

:class:`TrainingRecorder` is the recording the callbacks (:mod:`stroboscope.compat.lightning`,
:mod:`stroboscope.compat.transformers`) drive: the machinery is
:class:`stroboscope.recording._training.TrainingRecording` (a :class:`stroboscope.Sampler` on a
crash-safe spool beside the output, scopes opened and closed by the framework's hooks through
:func:`stroboscope.annotate`, windows of metrics since the previous one for the trainer's
logger); this class names the output, hands it the scopes and writes the whole recording at the
end with its provenance, as ``stroboscope record`` writes it. The framework is never imported
here.
"""

from __future__ import annotations

import os
from typing import Any

from stroboscope.analysis.windows import Aggregate
from stroboscope.formats.writers import output_format
from stroboscope.recording._finish import finish
from stroboscope.recording._training import TrainingRecording
from stroboscope.scopes import annotate


class TrainingRecorder(TrainingRecording):
    """A recording of one training run, driven by a framework's callback hooks.

    Parameters
    ----------
    path : str or os.PathLike, optional
        Where the recording is written when training ends (``.parquet``/``.pq`` or ``.csv``; a
        CSV gets its provenance sidecar). ``None`` keeps nothing on disk: only the windows are
        logged. While training runs the rows are in ``PATH.spool`` (and its segments) beside
        it, so they survive a crash: ``stroboscope recover PATH.spool -o FILE``.
    interval : float
        Sampling interval in seconds (default 0.01).
    prefix : str
        Put before every metric name in a window (default ``"system/"``).
    aggregate : {"mean", "max", "last"}
        How a window reduces each column (counters and counts always give their last value).
    **sampler_options
        Passed to :class:`stroboscope.Sampler` (``sources``, ``pid``, ``gpus``, ``capacity``…).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = "stroboscope.parquet",
        *,
        interval: float = 0.01,
        prefix: str = "system/",
        aggregate: Aggregate = "mean",
        **sampler_options: Any,
    ) -> None:
        if path is not None:
            output_format(path)  # a bad suffix is refused before training starts
        super().__init__(
            None if path is None else f"{os.fspath(path)}.spool",
            interval=interval,
            prefix=prefix,
            aggregate=aggregate,
            scope=annotate,
            **sampler_options,
        )
        self.path = None if path is None else os.fspath(path)
        self.written: str | None = None
        """The path the recording was written to (None until :meth:`finish` wrote it)."""

    def finish(self) -> str | None:
        """Close the open scopes, stop the sampler and write the recording (every row, from
        the spool and its segments, with its provenance); return the path written. A second
        call does nothing."""
        sampler = self.close()
        if sampler is None:
            return self.written
        if self.path is None or self._spool is None:
            return None
        finish(sampler, self.path)
        self.written = self.path
        return self.path
