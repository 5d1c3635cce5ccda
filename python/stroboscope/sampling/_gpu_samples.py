"""The driver's buffered GPU samples of a sampler (a mixin of
:class:`stroboscope.sampling.CoreSampler`): the recorder that reads them on its own thread, the
labels of the devices, and :meth:`GpuSamples.gpu_samples`, their long table."""

from __future__ import annotations

from collections.abc import Sequence

import stroboscope._core as _core
from stroboscope.sampling._frame import Frame
from stroboscope.sampling._gpu import gpu_sample_table

_BUFFERED = 1 << 18  # samples the recorder keeps between two reads


class GpuSamples:
    """The driver-sample side of :class:`stroboscope.sampling.CoreSampler` (a mixin)."""

    _gpu_recorder: _core.GpuSampleRecorder | None
    _gpu_labels: dict[int, int]

    def _open_gpu_samples(
        self, devices: Sequence[int], labels: Sequence[str], every_s: float | None
    ) -> None:
        """The devices' column labels (NVML index -> the label of ``gpu.LABEL.*``, for the
        provenance and the exporters) and, with ``every_s``, the recorder of their buffered
        samples, read every ``every_s`` seconds (its devices then give the labels)."""
        self._gpu_recorder = None
        found = list(devices)
        if every_s is not None:
            self._gpu_recorder = _core.GpuSampleRecorder(found, round(every_s * 1e9), _BUFFERED)
            found = list(self._gpu_recorder.devices)
        self._gpu_labels = {idx: (int(labels[i]) if labels else idx) for i, idx in enumerate(found)}

    def gpu_samples(self, *, drain: bool = False) -> Frame:
        """Every GPU sample the driver buffered, at the driver's own resolution, in long form.

        Columns: ``time`` (``timestamp[ns, UTC]``, the driver's timestamp), ``mono_ns`` (the same
        instant on the clock of :func:`time.monotonic_ns`), ``gpu`` (the device's column label),
        ``kind`` (``power_w``, ``gpu_util_pct``, ``mem_util_pct``, ``sm_clock_mhz``,
        ``mem_clock_mhz``) and ``value``. NVML utilisation is an average over the driver's own
        window (1/6 s to 1 s depending on the GPU). With ``drain=True`` only rows not returned
        by an earlier drain. Empty without the ``gpu`` source.
        """
        recorder = self._gpu_recorder
        if recorder is None:
            return Frame(gpu_sample_table({}, {}))
        rows = recorder.take() if drain else recorder.peek()
        return Frame(gpu_sample_table(rows, self._gpu_labels), rows_lost=int(rows["dropped"]))
