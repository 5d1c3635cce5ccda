"""The rolling dataset writer: drains a sampler's ring into parts of a partitioned dataset.

``Sampler(dataset=ROOT)`` (and ``stroboscope record --dataset ROOT``) write this process's rows
every ``segment_seconds`` as a Parquet part of its partition ``ROOT/job=J/host=H/rank=R/``
(:mod:`stroboscope.formats.dataset`), with the sampler's provenance and the identity in each;
at stop, what is left becomes a last part and the scope intervals of the sampler's runs are
written to ``ROOT/_scopes/``.

It is :class:`~stroboscope.recording.segments.SegmentWriter` with another destination: the same
thread, cursor, retry with backoff and counters (:class:`SegmentStatus`, in
``Sampler.dataset_status``): a part that cannot be written leaves its rows in the ring (and in
the spool, when the sampler has one) and is tried again; rows the ring overwrote before a part
took them are counted as lost.

At construction the writer claims its partition (``_owner.json``): a partition that another run
holds is refused there, before anything is recorded, and so is a root that cannot be written.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from stroboscope._base.files import regular_source
from stroboscope._base.identity import Identity, detect_identity
from stroboscope.formats.dataset import (
    ensure_root,
    partition,
    partition_dir,
    write_part,
    write_scopes,
)
from stroboscope.formats.dataset_owner import claim_partition, release_partition
from stroboscope.formats.provenance import attach, iso_utc
from stroboscope.formats.segments import FIRST_ROW_KEY
from stroboscope.recording.segments import SegmentWriter
from stroboscope.sampling import Frame, for_table

if TYPE_CHECKING:
    import stroboscope._core as _core
    from stroboscope.sampling import CoreSampler as Sampler

_LOG = logging.getLogger("stroboscope.recording")


def run_stamp(ns: int) -> str:
    """A run's start as a sortable file-name stamp: ``20261203T130501123456Z`` (UTC, µs)."""
    text = iso_utc(ns)  # 2026-12-03T13:05:01.123456789Z
    return text[:19].replace("-", "").replace(":", "") + text[20:26] + "Z"


def check_identity(identity: object, dataset: object) -> Identity | None:
    """``identity`` as given (an :class:`Identity` or None); detected from the environment when
    None and a ``dataset`` is to be written (conflicting variables raise ValueError there)."""
    if identity is not None and not isinstance(identity, Identity):
        raise TypeError(
            f"identity must be a stroboscope Identity (stroboscope.cluster.identity()) or None, "
            f"got {type(identity).__name__}"
        )
    if identity is None and dataset is not None:
        identity = detect_identity()
    if dataset is not None and identity is not None:
        identity = own_job(identity)
    return identity


def own_job(identity: Identity, *, now_ns: int | None = None) -> Identity:
    """``identity``, with a job id of its own (``run-STAMP``) when it has none and is a single
    process (no world size, or 1): each such run is then a job, and a second run into the same
    root needs no new name. Ranks of a job without a job id cannot agree on a made-up one: they
    keep ``job=none`` and a rerun into that root is refused, naming ``--job``."""
    if identity.job is not None or (identity.world_size or 1) > 1:
        return identity
    stamp = run_stamp(time.time_ns() if now_ns is None else now_ns)
    return dataclasses.replace(
        identity,
        job=f"run-{stamp}",
        sources={**identity.sources, "job": "made for this single-process run"},
    )


def _restart_count() -> int:
    """The launcher's restart count of this process (0 when none says)."""
    for name in ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"):
        text = os.environ.get(name, "").strip()
        if text.isdigit():
            return int(text)
    return 0


def open_partition(root: str | os.PathLike[str], identity: Identity) -> tuple[str, dict[str, Any]]:
    """Make ``root`` a dataset and claim ``identity``'s partition for a new run; return the
    root and the owner record (``run``, ``pid``, ``start_time``, ...).

    Raises
    ------
    ValueError
        When the root is not a dataset, another run holds the partition, or the root cannot be
        written (the OSError's text, naming the path, is kept).
    """
    now = time.time_ns()
    owner: dict[str, Any] = {
        "run": f"{run_stamp(now)}-{os.getpid()}",
        "pid": os.getpid(),
        "host": identity.host,
        "start_ns": now,
        "start_time": iso_utc(now),
        "identity": identity.to_dict(),
        # A restart of the same rank (torchrun elastic, a Slurm requeue) takes the claim over.
        "restart": _restart_count(),
    }
    try:
        top = ensure_root(root)
        claim_partition(top, identity, owner)
    except OSError as exc:
        job, host, rank = partition(identity)
        raise ValueError(
            f"dataset {os.fspath(root)!r} cannot be written for job {job!r} host {host!r} rank "
            f"{rank} ({type(exc).__name__}: {exc}); give a directory you can write"
        ) from None
    return top, owner


class DatasetWriter(SegmentWriter):
    """Writes a sampler's rows as parts of its partition in a dataset, every ``segment_seconds``
    (or sooner when ``segment_rows`` wait); at :meth:`stop`, the rest and the scope intervals.

    ``core`` is the extension's sampler; ``sampler`` the Python one, held weakly (the sampler's
    finalizer holds this writer), for its provenance and scope intervals.
    """

    def __init__(
        self,
        core: _core.Sampler,
        sampler: Sampler,
        root: str | os.PathLike[str],
        identity: Identity,
        segment_seconds: float,
        segment_rows: int,
    ) -> None:
        top, owner = open_partition(root, identity)
        super().__init__(core, partition_dir(top, identity), segment_seconds, segment_rows)
        self._seq = 0
        self.root = top
        self.identity = identity
        self.owner = owner
        self._stamp = str(owner["run"]).rsplit("-", 1)[0]
        self._sampler = weakref.ref(sampler)
        self._provenance: dict[str, Any] = {}
        self._anchor_ns: int | None = None  # realtime - monotonic, from the latest part
        self.scopes_written = 0
        self._scopes_path: str | None = None
        self._scopes_table: pa.Table | None = None  # the intervals last written
        self._given: pa.Table | None = None  # the intervals finish() gave (a command's too)
        self._released = False  # the owner file given back (nothing was recorded)

    def start(self) -> None:
        # No events sidecar: scope intervals go to the dataset's _scopes tree at stop.
        if self._thread is not None and self._thread.is_alive():
            return
        if self._released:  # stopped before it recorded anything, now started again
            claim_partition(self.root, self.identity, self.owner)
            self._released = False
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="stroboscope-dataset", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread, write what is left as a last part (``STOP_ATTEMPTS`` tries), then
        the scope intervals. A failure is counted and logged, never raised: the rows stay in the
        ring (and the spool)."""
        self._join_thread()
        if not self._last_flush():
            _LOG.warning(
                "%d rows are in no part of dataset %s (%s); they stay in the sampler's ring "
                "(and its spool, when it has one)",
                self.rows_unwritten,
                self.root,
                self.last_error,
            )
        written = int(self._core.stats()["rows_written"])
        self.write_scope_intervals()
        if written == 0 and self.segments_written == 0 and not self._released:
            # Nothing recorded (a set-up that failed after the claim, a sampler never started):
            # give the partition back, so a retry of the same job and rank is not refused.
            here = partition_dir(self.root, self.identity)
            self._released = release_partition(here, str(self.owner["run"]))

    def _failed(self, exc: BaseException, rows: int) -> None:
        self.errors += 1
        self.rows_unwritten = rows
        self.last_error = f"{type(exc).__name__}: {exc}"
        self._log(
            logging.WARNING,
            "part of dataset %s not written (%s); %d rows wait in the ring, retrying",
            self.root,
            self.last_error,
            rows,
        )

    def _current_provenance(self) -> dict[str, Any]:
        sampler = self._sampler()
        if sampler is not None:
            self._provenance = sampler.provenance()
        return {**self._provenance, "run": self.owner["run"]}

    def flush(self) -> None:
        """Write the rows not yet in a part as the next part (nothing when there are none).

        Raises whatever the write raised, after counting it; the rows stay in the ring and the
        next flush tries them again.
        """
        with self._lock:
            frame = Frame(self._core.copy_since(self._cursor))
            self.rows_lost += frame.rows_lost
            if len(frame) == 0:
                self.rows_unwritten = 0
                return
            name = f"part-{self._stamp}-{self._seq + 1:06d}.parquet"
            try:
                table = frame.to_arrow()
                prov = for_table(self._current_provenance(), table, rows_lost=frame.rows_lost)
                prov["rows_lost"] = self.rows_lost
                anchor = (prov.get("clock") or {}).get("anchor_ns")
                table = attach(table, prov)
                meta = dict(table.schema.metadata or {})
                meta[FIRST_ROW_KEY] = str(frame.first_row).encode()
                table = table.replace_schema_metadata(meta)
                write_part(table, self.root, identity=self.identity, name=name)
            except Exception as exc:
                landed = self._landed(name)
                if landed is not None:  # renamed into place, then a later step failed
                    self._seq += 1  # that name is taken: the next part gets the next one
                    self.segments_written += 1
                    self._cursor = landed
                else:
                    self._cursor = frame.first_row  # copied again by the next try
                self._failed(exc, max(frame.first_row + len(frame) - self._cursor, 0))
                raise
            self._anchor_ns = anchor if anchor is not None else self._anchor_ns
            self._seq += 1
            self._cursor = frame.first_row + len(frame)
            self.segments_written += 1
            self.rows_unwritten = 0

    def _landed(self, name: str) -> int | None:
        """The row after the last one of the part ``name`` if it is in place (its rename went
        through although the write then failed, e.g. fsync of the directory), else None."""
        path = os.path.join(partition_dir(self.root, self.identity), name)
        try:
            with regular_source(path, "part") as src:  # a FIFO: refused, not awaited
                meta = pq.read_metadata(src)
            first = int((meta.schema.to_arrow_schema().metadata or {})[FIRST_ROW_KEY])
        except (OSError, KeyError, ValueError, pa.ArrowException):
            return None
        return first + int(meta.num_rows)

    def write_scope_intervals(self, intervals: pa.Table | None = None) -> str | None:
        """Write the scope intervals of the sampler's runs so far (or ``intervals``: those and
        the ones a recorded command's processes wrote, :func:`stroboscope.recording.finish`) as
        this run's scopes file (replacing the one an earlier stop wrote; a reader sees one or
        the other, whole); return its path, or None when there is none or the write failed
        (counted)."""
        sampler = self._sampler()
        if sampler is None:
            return None  # collected without close(): its event windows went with it
        with self._lock:
            try:
                if intervals is not None:  # the whole run's, a later stop writes them again
                    self._given = intervals
                table = sampler.scope_intervals() if self._given is None else self._given
                if table.num_rows == 0 and self.scopes_written == 0:
                    return None
                if self._scopes_table is not None and table.equals(self._scopes_table):
                    return self._scopes_path  # stop() then close(): nothing new
                prov = self._current_provenance()
                clock = dict(prov.get("clock") or {})
                clock["anchor_ns"] = self._anchor_ns  # begin_ns/end_ns are CLOCK_MONOTONIC
                prov.update(clock=clock, rows=table.num_rows)
                name = f"scopes-{self._stamp}.parquet"
                path = write_scopes(
                    attach(table, prov), self.root, identity=self.identity, name=name
                )
            except Exception as exc:
                self._log(
                    logging.WARNING,
                    "scope intervals of dataset %s not written (%s: %s)",
                    self.root,
                    type(exc).__name__,
                    exc,
                )
                return None
            self.scopes_written += 1
            self._scopes_path, self._scopes_table = path, table
            return path
