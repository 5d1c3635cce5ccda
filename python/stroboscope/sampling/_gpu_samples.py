"""The driver's buffered GPU samples of a sampler, a part of
:class:`stroboscope.sampling.CoreSampler`: the recorder that reads them on its own thread, the
labels of the devices, and :meth:`GpuSamples.frame`, their long table."""

from __future__ import annotations

from collections.abc import Sequence

import stroboscope._core as _core
from stroboscope.sampling._frame import Frame
from stroboscope.sampling._gpu import gpu_sample_table

_BUFFERED = 1 << 18  # samples the recorder keeps between two reads


class GpuSamples:
    """The devices' column labels and, when asked, the recorder of their buffered samples.

    Parameters
    ----------
    devices : sequence of int
        NVML indices of the ``gpu`` source's devices (empty: every device NVML sees, as the
        recorder finds them).
    labels : sequence of str
        The column label of each of ``devices`` (``gpu.LABEL.*``); empty: the NVML index.
    every_s : float or None
        Read the driver's sample buffers every ``every_s`` seconds on the recorder's own thread
        (its devices then give the labels); None: no recorder.
    """

    def __init__(self, devices: Sequence[int], labels: Sequence[str], every_s: float | None):
        found = list(devices)
        self.recorder: _core.GpuSampleRecorder | None = None
        if every_s is not None:
            self.recorder = _core.GpuSampleRecorder(found, round(every_s * 1e9), _BUFFERED)
            found = list(self.recorder.devices)
        self.labels: dict[int, int] = {
            idx: (int(labels[i]) if labels else idx) for i, idx in enumerate(found)
        }
        """NVML index -> the label of ``gpu.LABEL.*`` (for the provenance and the exporters)."""

    def start(self) -> None:
        """Start the recorder's thread (nothing without a recorder)."""
        if self.recorder is not None:
            self.recorder.start()

    def stop(self) -> None:
        """Stop and join the recorder's thread; its samples are kept."""
        if self.recorder is not None:
            self.recorder.stop()

    def after_fork_in_child(self) -> None:
        """In a forked child, forget the recorder's thread (only the forking thread is there)."""
        if self.recorder is not None:
            self.recorder.forget_thread_after_fork()

    def frame(self, *, drain: bool = False) -> Frame:
        """The buffered samples in long form (see :meth:`CoreSampler.gpu_samples`); with
        ``drain=True`` only those not returned by an earlier drain. Empty without a recorder."""
        if self.recorder is None:
            return Frame(gpu_sample_table({}, {}))
        rows = self.recorder.take() if drain else self.recorder.peek()
        return Frame(gpu_sample_table(rows, self.labels), rows_lost=int(rows["dropped"]))
