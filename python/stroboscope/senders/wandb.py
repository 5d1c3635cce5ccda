"""Weights & Biases sender: each event through ``wandb.log``, keys labelled per rank.

W&B's own multi-process runs label each writer with the ``x_label`` setting, and its system
monitor (wandb-core) sends every system metric of a labelled writer as ``{key}/l:{label}``, so
one chart shows a line per label. This sender does the same with its keys: each key is logged as
``{prefix}{key}/l:{label}``, where the label is the run's ``x_label`` when the run has one (W&B's
system metrics of this process and ours then share it), else ``rank_{rank}`` when the sender
knows a rank (see :mod:`stroboscope.senders._rank`); unlabelled keys stay as they were.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from stroboscope.senders._base import BuiltinSender, StatsDict, flatten_event, missing_extra
from stroboscope.senders._rank import RankLabel, rank_label

if TYPE_CHECKING:
    from stroboscope._identity import Identity


class WandbSender(BuiltinSender):
    """Log each event to a W&B run with ``run.log`` (keys flattened: ``network.sent``).

    Parameters
    ----------
    run : wandb run, optional
        The run to log to. Default: the active run (``wandb.run``) when there is one, else a new
        run started with ``wandb.init(**init_kwargs)``, which this sender finishes at
        :meth:`close` (a run it did not start is left open).
    commit : bool, optional
        Passed to ``run.log``: ``False`` merges the metrics into the training step that is being
        built instead of advancing W&B's step (default: W&B's own default).
    prefix : str
        Put in front of every key, e.g. ``"system/"`` (default none).
    rank : int, optional
        Global rank of this process (default: from the launcher's environment when the job has
        more than one process, see :mod:`stroboscope.senders._rank`).
    identity : Identity, optional
        This process's identity (``stroboscope.cluster.identity()``), instead of ``rank``.
    **init_kwargs
        ``wandb.init`` arguments for the run started here (``project=``, ``mode="offline"``, …).
        When a rank is known, the run's settings get ``x_label="rank_{rank}"`` unless they carry
        a label already; in ``mode="shared"`` (all ranks writing to one run, ``id=`` the primary's
        run id) also ``x_primary`` and ``x_update_finish_state`` true on rank 0 only, as W&B's
        distributed-training guide asks, unless given.

    Notes
    -----
    Under ``SystemMonitor(..., rank=r)`` the monitor gives this sender its rank (see
    :meth:`label_rank`) and publishes the keys without its ``rank{r}.`` prefix. A run started
    before the rank was known keeps its settings; the keys still get the ``/l:rank_{r}`` label.
    """

    def __init__(
        self,
        *,
        run: Any = None,
        commit: bool | None = None,
        prefix: str = "",
        rank: int | None = None,
        identity: Identity | None = None,
        **init_kwargs: Any,
    ) -> None:
        super().__init__()
        try:
            import wandb
        except ImportError as exc:
            raise missing_extra("WandbSender", "wandb", exc) from exc
        self._rank = RankLabel(rank, identity, "WandbSender")
        self._owns_run = False
        if run is None:
            run = wandb.run
        if run is None:
            if self._rank.rank is not None:
                init_kwargs = labelled_init_kwargs(init_kwargs, self._rank.rank)
            run = wandb.init(**init_kwargs)
            self._owns_run = True
        elif init_kwargs:
            raise TypeError(
                f"wandb.init arguments {sorted(init_kwargs)} were given, but a run already exists "
                f"({run.id}); pass them only when the sender should start its own run"
            )
        self.run = run
        self.commit = commit
        self.prefix = prefix
        self._lock = threading.Lock()
        self._closed = False

    @property
    def rank(self) -> int | None:
        """The rank this sender labels its keys with (None: not labelled by rank)."""
        return self._rank.rank

    @property
    def label(self) -> str | None:
        """The ``/l:`` label of every key: the run's ``x_label``, else ``rank_{rank}``, else
        None (keys unlabelled)."""
        settings = getattr(self.run, "settings", None)
        x_label = getattr(settings, "x_label", None)
        if x_label:
            return str(x_label)
        return None if self._rank.rank is None else rank_label(self._rank.rank)

    def label_rank(self, rank: int) -> bool:
        """Take ``SystemMonitor``'s rank as this sender's (see the class notes); True."""
        self._rank.adopt(rank)
        return True

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        """Log ``event`` with ``run.log`` (``step=`` is passed on when given)."""
        flat = flatten_event(event)
        if not flat:
            return  # nothing measured yet: do not advance W&B's step for an empty event
        label = self.label
        suffix = "" if label is None else f"/l:{label}"
        data = {f"{self.prefix}{k}{suffix}": v for k, v in flat.items()}
        log_kwargs: dict[str, Any] = {}
        if self.commit is not None:
            log_kwargs["commit"] = self.commit
        if kwargs.get("step") is not None:
            log_kwargs["step"] = int(kwargs["step"])
        with self._lock:
            if self._closed:
                raise RuntimeError("WandbSender is closed")
            self.run.log(data, **log_kwargs)

    def close(self) -> None:
        """Finish the run if this sender started it (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._owns_run:
                self.run.finish()

    def __repr__(self) -> str:
        return f"WandbSender(run={getattr(self.run, 'id', None)!r})"


def labelled_init_kwargs(init_kwargs: dict[str, Any], rank: int) -> dict[str, Any]:
    """``wandb.init`` arguments with the settings W&B's multi-process runs use for ``rank``.

    ``x_label`` becomes ``rank_{rank}`` unless the settings carry a label; in shared mode
    (``mode="shared"`` given to init or in the settings) ``x_primary`` and
    ``x_update_finish_state`` become ``rank == 0`` unless set. The caller's settings object is
    not modified.
    """
    import wandb

    out = dict(init_kwargs)
    given = out.get("settings")
    if given is None:
        settings = wandb.Settings()
    elif isinstance(given, dict):
        settings = wandb.Settings(**given)
    elif isinstance(given, wandb.Settings):
        settings = given.model_copy()
    else:
        raise TypeError(f"settings must be a wandb.Settings or a dict, got {type(given).__name__}")
    if not settings.x_label:
        settings.x_label = rank_label(rank)
    mode = out.get("mode")
    if mode is None:
        given_mode = "mode" in settings.model_fields_set
        mode = settings.mode if given_mode else os.environ.get("WANDB_MODE")
    if mode == "shared":
        if "x_primary" not in settings.model_fields_set:
            settings.x_primary = rank == 0
        if "x_update_finish_state" not in settings.model_fields_set:
            settings.x_update_finish_state = rank == 0
    out["settings"] = settings
    return out
