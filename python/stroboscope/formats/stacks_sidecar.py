"""A running recording's stacks beside its spool, so that they survive a SIGKILL of the recorder.

Two Arrow IPC streams, ``SPOOL.stacks.arrows`` (samples, the schema of
:data:`stroboscope.formats.stacks.SAMPLES_SCHEMA`) and ``SPOOL.stack_frames.arrows`` (the frames
of the stacks new in each batch, :data:`~stroboscope.formats.stacks.FRAMES_SCHEMA`), created
0600, appended one batch per drain (the frames first: a sample never names a stack the frames
stream lacks) and flushed to the kernel at once, so a process killed between two drains loses
only the samples read since the last (a quarter of a second). :func:`read_sidecar` reads them
back, a batch cut short by the kill left out; :func:`write_sidecar_stacks` writes them beside a
recording (``record``'s own FILE, the watchdog's dump of a killed recorder, ``stroboscope
recover``'s output), a batch at a time.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc

from stroboscope._base.files import open_private, open_regular_file
from stroboscope.formats.stacks import FRAMES_SCHEMA, SAMPLES_SCHEMA, write_stacks_parts

SAMPLES_SIDECAR = ".stacks.arrows"
"""The samples stream beside a spool: ``SPOOL`` + this."""
FRAMES_SIDECAR = ".stack_frames.arrows"
"""The frames stream beside a spool: ``SPOOL`` + this."""


def sidecar_paths(spool: str | os.PathLike[str]) -> tuple[str, str]:
    """The samples and frames streams of the spool ``spool``."""
    base = os.fspath(spool)
    return base + SAMPLES_SIDECAR, base + FRAMES_SIDECAR


class StacksSidecar:
    """The writer of a spool's stacks streams (see the module's text)."""

    def __init__(self, spool: str | os.PathLike[str]) -> None:
        samples_path, frames_path = sidecar_paths(spool)
        self._files: list[BinaryIO] = []
        try:
            for path in (frames_path, samples_path):
                self._files.append(open_private(path))
            self._frames = pa.ipc.new_stream(self._files[0], FRAMES_SCHEMA)
            self._samples = pa.ipc.new_stream(self._files[1], SAMPLES_SCHEMA)
        except BaseException:
            for f in self._files:
                f.close()
            raise

    def write(self, samples: pa.RecordBatch, frames: pa.RecordBatch) -> None:
        """Append one drain's batches (frames first) and hand them to the kernel."""
        if frames.num_rows:
            self._frames.write_batch(frames)
            self._files[0].flush()
        if samples.num_rows:
            self._samples.write_batch(samples)
            self._files[1].flush()

    def close(self) -> None:
        """End both streams and close the files."""
        for writer in (self._frames, self._samples):
            with contextlib.suppress(pa.ArrowException, OSError, ValueError):
                writer.close()
        for f in self._files:
            f.close()


def _batches(path: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The whole batches of ``schema`` in the stream at ``path``, one at a time (a batch cut
    short at its end left out)."""
    with open_regular_file(path, "stacks sidecar") as f:
        try:
            reader = pa.ipc.open_stream(f)
            while True:
                batch = reader.read_next_batch()
                if batch.schema.equals(schema):
                    yield batch
        except StopIteration:
            pass
        except (pa.ArrowInvalid, OSError, EOFError):
            pass  # cut short by the kill: what came before is whole


def _read_stream(path: str, schema: pa.Schema) -> pa.Table:
    """The whole batches of the stream at ``path`` as one table."""
    return pa.Table.from_batches(list(_batches(path, schema)), schema=schema)


def read_sidecar(spool: str | os.PathLike[str]) -> tuple[pa.Table, pa.Table] | None:
    """The stacks recorded beside ``spool`` as ``(samples, frames)`` tables, or None when it has
    no samples stream. Samples naming a stack whose frames were not written are left out."""
    samples_path, frames_path = sidecar_paths(spool)
    if not os.path.exists(samples_path):
        return None
    frames = (
        _read_stream(frames_path, FRAMES_SCHEMA)
        if os.path.exists(frames_path)
        else FRAMES_SCHEMA.empty_table()
    )
    samples = _read_stream(samples_path, SAMPLES_SCHEMA)
    known = pc.is_in(samples.column("stack_id"), value_set=pc.unique(frames.column("stack_id")))
    return samples.filter(known), frames


def write_sidecar_stacks(
    spool: str | os.PathLike[str],
    path: str | os.PathLike[str],
    *,
    provenance: Mapping[str, Any] | None = None,
) -> tuple[int, tuple[str, str]] | None:
    """Write the stacks recorded beside ``spool`` beside the recording ``path``
    (:func:`stroboscope.formats.stacks.write_stacks_parts`), streamed a batch at a time: every
    sample, in memory bounded whatever the recording's length. Samples naming a stack whose
    frames were not written are left out, as :func:`read_sidecar` leaves them.

    Returns
    -------
    (int, (str, str)) or None
        The samples written and the two files' paths; None when ``spool`` has no samples stream.
    """
    samples_path, frames_path = sidecar_paths(spool)
    if not os.path.exists(samples_path):
        return None
    frames = (
        _read_stream(frames_path, FRAMES_SCHEMA)
        if os.path.exists(frames_path)
        else FRAMES_SCHEMA.empty_table()
    )
    known = pc.unique(frames.column("stack_id"))

    def parts() -> Iterator[pa.RecordBatch]:
        for batch in _batches(samples_path, SAMPLES_SCHEMA):
            yield batch.filter(pc.is_in(batch.column("stack_id"), value_set=known))

    rows = sum(b.num_rows for b in parts())  # a first pass: the count the provenance states
    return rows, write_stacks_parts(parts(), frames, path, rows=rows, provenance=provenance)


def remove_sidecar(spool: str | os.PathLike[str]) -> None:
    """Remove the stacks streams of ``spool`` (once written elsewhere)."""
    for path in sidecar_paths(spool):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
