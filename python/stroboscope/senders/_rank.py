"""The rank a sender labels its backend's run with (W&B, MLflow, TensorBoard).

Backends built for training group one process's metrics by run, not by key: W&B labels each
writer of a shared run with ``x_label`` (its system metrics arrive as ``key/l:label``), MLflow
filters runs by tag, TensorBoard overlays the runs that are the subdirectories of a log
directory. So those senders keep the metric keys as they are and put the rank in the run.

Where the rank comes from, first match wins:

1. ``rank=`` or ``identity=`` given to the sender (explicit);
2. ``SystemMonitor(..., rank=r)`` through :meth:`BuiltinSender.label_rank` (explicit too: it
   overrides a rank read from the environment, and conflicts with one given to the sender);
3. the launcher's environment (``RANK``, ``SLURM_PROCID``, ... through
   :func:`stroboscope._base.identity.detect_identity`), used only when the job has more than one
   process: a ``WORLD_SIZE=1`` run is labelled like a plain single-process one.
"""

from __future__ import annotations

import dataclasses
import logging
import socket

from stroboscope._base.checks import check_int, describe
from stroboscope._base.identity import Identity, detect_identity

_LOG = logging.getLogger("stroboscope.senders")


def _detected(rank: int | None, owner: str) -> Identity:
    """The environment's identity; where its variables conflict, a sender still works: it is
    logged once, and the run is labelled with the given rank only (a sender never refuses to
    start over a launcher's variables it does not need)."""
    try:
        return detect_identity(rank=rank)
    except ValueError as exc:
        _LOG.warning("stroboscope: %s labels no rank from the environment: %s", owner, exc)
        given = {} if rank is None else {"rank": "argument"}
        return Identity(host=socket.gethostname(), rank=rank, sources=given)


def rank_label(rank: int) -> str:
    """The label of ``rank`` in runs, tags and directories: ``rank_{rank}``.

    The spelling of W&B's own multi-process example (``x_label="rank_0"``), used for all three
    backends so that one rank reads the same everywhere.
    """
    return f"rank_{rank}"


class RankLabel:
    """Resolves and holds the identity and rank a sender labels its run with.

    Parameters
    ----------
    rank : int, optional
        Global rank given to the sender (>= 0).
    identity : Identity, optional
        Identity given to the sender (default: detected from the environment).
    owner : str
        The sender's class name, for error messages.
    """

    def __init__(self, rank: int | None, identity: Identity | None, owner: str) -> None:
        self.owner = owner
        if rank is not None:
            check_int(f"{owner}: rank", rank, 0, also="None")
        if identity is not None and not isinstance(identity, Identity):
            raise TypeError(
                f"{owner}: identity must be a stroboscope Identity (see "
                f"stroboscope.cluster.identity()), got {describe(identity)}"
            )
        # Explicit: the caller named the rank (here or in an identity it made); a rank read from
        # the environment labels only a job of more than one process.
        self.explicit = rank is not None or (identity is not None and identity.rank is not None)
        if identity is None:
            identity = _detected(rank, owner)  # an explicit rank wins over the environment
        elif rank is not None and identity.rank not in (None, rank):
            raise ValueError(
                f"{owner}: rank={rank} disagrees with identity.rank={identity.rank}; give one"
            )
        elif rank is not None:
            sources = {**identity.sources, "rank": "argument"}
            identity = dataclasses.replace(identity, rank=rank, sources=sources)
        self.identity: Identity = identity
        labelled = identity.rank is not None and (self.explicit or identity.world_size != 1)
        self.rank: int | None = identity.rank if labelled else None

    def adopt(self, rank: int) -> bool:
        """Take the rank a ``SystemMonitor`` was given; return whether the label changed.

        Raises
        ------
        ValueError
            The sender was given another rank explicitly.
        """
        if self.rank == rank:
            return False
        if self.explicit and self.rank is not None:
            raise ValueError(
                f"{self.owner} labels rank {self.rank} (given to it), but SystemMonitor was given "
                f"rank={rank}; give the same rank to both, or to one of them"
            )
        sources = {**self.identity.sources, "rank": "SystemMonitor(rank=...)"}
        self.identity = dataclasses.replace(self.identity, rank=rank, sources=sources)
        self.rank = rank
        self.explicit = True
        return True

    def tags(self) -> dict[str, str]:
        """Identity labels for a run's tags (``rank``, ``hostname``, ``job``, ... and
        ``world_size``), or nothing when the run is not labelled with a rank."""
        if self.rank is None:
            return {}
        tags = self.identity.labels()
        tags["rank"] = str(self.rank)
        if self.identity.world_size is not None:
            tags["world_size"] = str(self.identity.world_size)
        return tags
