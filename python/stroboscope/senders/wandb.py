"""Weights & Biases sender: each event through ``wandb.log``."""

from __future__ import annotations

import threading
from typing import Any

from stroboscope.senders._base import BuiltinSender, StatsDict, flatten_event, missing_extra


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
    **init_kwargs
        ``wandb.init`` arguments for the run started here (``project=``, ``mode="offline"``, …).
    """

    def __init__(
        self,
        *,
        run: Any = None,
        commit: bool | None = None,
        prefix: str = "",
        **init_kwargs: Any,
    ) -> None:
        super().__init__()
        try:
            import wandb
        except ImportError as exc:
            raise missing_extra("WandbSender", "wandb", exc) from exc
        self._owns_run = False
        if run is None:
            run = wandb.run
        if run is None:
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

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        """Log ``event`` with ``run.log`` (``step=`` is passed on when given)."""
        flat = flatten_event(event)
        if not flat:
            return  # nothing measured yet: do not advance W&B's step for an empty event
        data = {self.prefix + k: v for k, v in flat.items()}
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
