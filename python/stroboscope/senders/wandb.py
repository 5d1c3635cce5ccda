"""Weights & Biases sender: each event through ``wandb.log``, keys labelled per rank.

W&B's own multi-process runs label each writer with the ``x_label`` setting, and its system
monitor (wandb-core) sends every system metric of a labelled writer as ``{key}/l:{label}``, so
one chart shows a line per label. This sender does the same with its keys: each key is logged as
``{prefix}{key}/l:{label}``, where the label is the run's ``x_label`` when the run has one (W&B's
system metrics of this process and ours then share it), else ``rank_{rank}`` when the sender
knows a rank (see :mod:`stroboscope.senders._rank`); unlabelled keys stay as they were.

The user's step axis is the user's: in a run this sender did not start (the training's own run),
each window is logged with ``commit=False``, which W&B documents as accumulating data into the
step being built, so the window rides with the training's next ``wandb.log`` and ``_step`` counts
the training's steps only. Every key is declared with ``run.define_metric(key,
step_metric=TIME_KEY)``, W&B's documented custom x-axis, and each window carries its publish time
(UTC seconds) under ``TIME_KEY`` (hidden from W&B's automatic charts), so the monitor's charts
have the windows' own time axis whichever step they ride with.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any

from stroboscope._base.extras import missing_extra
from stroboscope.senders._base import BuiltinSender, StatsDict, flatten_event
from stroboscope.senders._rank import RankLabel, rank_label

TIME_KEY = "stroboscope.time_s"
"""The step metric of every key this sender logs: the window's publish time, UTC seconds (with
the sender's prefix and label, like the other keys)."""

if TYPE_CHECKING:
    from stroboscope._base.identity import Identity


class WandbSender(BuiltinSender):
    """Log each event to a W&B run with ``run.log`` (keys flattened: ``network.sent``).

    Parameters
    ----------
    run : wandb run, optional
        The run to log to. Default: the active run (``wandb.run``) when there is one, else a new
        run started with ``wandb.init(**init_kwargs)``, which this sender finishes at
        :meth:`close` (a run it did not start is left open).
    commit : bool, optional
        Passed to ``run.log``. Default: ``False`` for a run this sender did not start (the
        window merges into the training step being built and never advances W&B's step; W&B
        keeps one row per step, so when windows come faster than training steps, the last
        window before each step is the one in the run's history: use a file sender to keep
        every window), ``True`` for a run it started (each window its own step: log your
        training to a run of your own and pass it, or pass ``commit=False``).
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

    W&B's own system monitor keeps sampling beside this one; to turn it off, start the run with
    ``wandb.init(..., settings=wandb.Settings(x_disable_stats=True))``.
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
        self._commit_given = commit
        self.commit = self._owns_run if commit is None else commit
        self.prefix = prefix
        self._defined: set[str] = set()  # keys given their step metric (define_metric) already
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
        """Log ``event`` with ``run.log`` and its publish time (``timestamp=``, default now)
        under the step metric; ``step=`` is passed on when given (see the class notes)."""
        flat = flatten_event(event)
        if not flat:
            return  # nothing measured yet: do not advance W&B's step for an empty event
        label = self.label
        suffix = "" if label is None else f"/l:{label}"
        data: dict[str, Any] = {f"{self.prefix}{k}{suffix}": v for k, v in flat.items()}
        time_key = f"{self.prefix}{TIME_KEY}{suffix}"
        timestamp = kwargs.get("timestamp")
        data[time_key] = float(time.time() if timestamp is None else timestamp)
        log_kwargs: dict[str, Any] = {"commit": self.commit}
        if kwargs.get("step") is not None:  # W&B's rules for an explicit step apply
            log_kwargs = {"step": int(kwargs["step"])}
            if self._commit_given is not None:
                log_kwargs["commit"] = self._commit_given
        with self._lock:
            if self._closed:
                raise RuntimeError("WandbSender is closed")
            if time_key not in self._defined:
                self.run.define_metric(time_key, hidden=True)
                self._defined.add(time_key)
            for key in data.keys() - self._defined:
                self.run.define_metric(key, step_metric=time_key)
                self._defined.add(key)
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
