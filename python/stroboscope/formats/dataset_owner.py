"""The owner record of a dataset's partition (``ROOT/job=J/host=H/rank=R/_owner.json``,
:mod:`stroboscope.formats.dataset`): the one run that writes a rank's partition claims it
exclusively, a restarted rank takes it over, and a run that recorded nothing gives it back."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from stroboscope._base.files import read_regular
from stroboscope._base.identity import Identity
from stroboscope.formats.dataset import SMALL_FILE, ensure_root, fsync_dir, make_partition
from stroboscope.formats.partitions import partition

__all__ = ["OWNER", "claim_partition", "read_owner", "release_partition"]

OWNER = "_owner.json"
"""In each partition directory: the run that writes it (see :func:`claim_partition`)."""


def claim_partition(
    root: str | os.PathLike[str], identity: Identity, owner: Mapping[str, Any]
) -> str:
    """Make ``identity``'s sample partition this run's: write ``owner`` (JSON: ``run``, ``pid``,
    ``start_time``, ...) to its ``_owner.json``, exclusively; return the partition directory.

    Raises
    ------
    ValueError
        When another run (another ``owner["run"]``) claimed the partition before, naming the
        root, job, host, rank and that run's pid and start time: two runs in one partition
        would be read as one rank. Give a fresh job id or another root.
    """
    top = ensure_root(root)
    directory = make_partition(top, identity, "samples")
    path = os.path.join(directory, OWNER)
    text = json.dumps(dict(owner), sort_keys=True).encode() + b"\n"
    fd, tmp = tempfile.mkstemp(prefix=".owner.", suffix=".tmp", dir=directory)  # 0600, ours
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)  # atomic and exclusive: of two runs claiming at once, one wins
    except FileExistsError:
        other = read_owner(directory)
        if other.get("run") != owner.get("run") and _restarted(other, owner):
            os.replace(tmp, path)  # the same rank of the same job, restarted: it carries on
        elif other.get("run") != owner.get("run"):
            job, host, rank = partition(identity)
            raise ValueError(
                f"dataset {top!r} already holds job {job!r} host {host!r} rank {rank} of another "
                f"run (pid {other.get('pid')}, started {other.get('start_time')}): give a fresh "
                f"job id (--job NAME, STROBOSCOPE_JOB, or identity=) or another dataset root"
            ) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    fsync_dir(directory)
    return directory


def _restarted(other: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    """Whether ``owner`` is a restart of the run ``other`` that claimed the partition: a higher
    launcher restart count (torchrun's TORCHELASTIC_RESTART_COUNT, Slurm's SLURM_RESTART_COUNT,
    kept as ``restart``) on the same host, the other run's process gone. Its parts are named by
    their run's stamp, so the two runs' parts never collide."""
    try:
        mine, theirs = int(owner.get("restart") or 0), int(other.get("restart") or 0)
        pid = int(other.get("pid") or 0)
    except (TypeError, ValueError):
        return False
    if mine <= theirs or other.get("host") != owner.get("host"):
        return False
    if pid <= 0 or pid == owner.get("pid"):  # the same pid number: another pid namespace
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive, another user's
    return False


def release_partition(directory: str | os.PathLike[str], run: str) -> bool:
    """Remove ``directory``'s owner file if ``run`` holds it (a run that recorded nothing gives
    its partition back, so a retry of the same job is not refused); True when removed."""
    if read_owner(directory).get("run") != run:
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(directory, OWNER))
    return True


def read_owner(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The owner record of a partition directory (empty when absent or unreadable)."""
    try:
        value = json.loads(
            read_regular(os.path.join(directory, OWNER), "owner record", limit=SMALL_FILE)
        )
    except (ValueError, RecursionError):  # absent, not a regular file, not JSON
        return {}
    return value if isinstance(value, dict) else {}
