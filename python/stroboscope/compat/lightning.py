"""A PyTorch Lightning callback: ``Trainer(callbacks=[StroboscopeCallback("run.parquet")])``.

It samples while ``fit`` runs, scopes every training step (``train_step``, label ``step``), each
training epoch (``train_epoch``, label ``epoch``) and each validation loop (``validation``),
logs a window of system metrics (``system/cpu.util_pct``, ``system/proc.rss_bytes``, GPU…,
aggregated since the previous window) to every logger of the trainer each
``log_every_n_steps`` steps (the trainer's own setting unless given), and writes the whole
recording, with its provenance, when ``fit`` ends (or fails). See
:class:`stroboscope.compat._training.TrainingRecorder` for the options.

The hooks live in :class:`LightningHooks`, a plain class; :data:`StroboscopeCallback` is that
class on Lightning's own ``Callback`` base (``lightning.pytorch``, or the older
``pytorch_lightning``), made on first use, so this module imports without Lightning.
"""

from __future__ import annotations

import os
from typing import Any

from stroboscope._base.checks import check_int
from stroboscope._base.extras import missing_extra
from stroboscope.compat._training import TrainingRecorder

__all__ = ["LightningHooks", "StroboscopeCallback", "lightning_callback_base"]  # noqa: F822 (made on first use)


class LightningHooks:
    """The hooks of :data:`StroboscopeCallback` (see the module docstring).

    Parameters
    ----------
    path : str or os.PathLike, optional
        Where the recording is written when ``fit`` ends (``.parquet``/``.pq``/``.csv``);
        ``None`` logs windows only.
    log_every_n_steps : int, optional
        Steps between logged windows (default: the trainer's ``log_every_n_steps``).
    **options
        :class:`~stroboscope.compat._training.TrainingRecorder` options: ``interval``,
        ``prefix``, ``aggregate`` and any :class:`stroboscope.Sampler` keyword.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = "stroboscope.parquet",
        *,
        log_every_n_steps: int | None = None,
        **options: Any,
    ) -> None:
        if log_every_n_steps is not None:
            check_int("log_every_n_steps", log_every_n_steps, 1, unit="steps", also="None")
        self.recorder = TrainingRecorder(path, **options)
        self.log_every_n_steps = log_every_n_steps
        self._steps = 0

    def _log_window(self, trainer: Any) -> None:
        metrics = self.recorder.window()
        if metrics:
            for logger in getattr(trainer, "loggers", None) or []:
                logger.log_metrics(metrics, step=int(trainer.global_step))

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.recorder.start()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.recorder.open_scope("train_epoch", epoch=int(trainer.current_epoch))

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self.recorder.open_scope("train_step", step=int(trainer.global_step))

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.recorder.close_scope("train_step")
        self._steps += 1
        every = self.log_every_n_steps or int(getattr(trainer, "log_every_n_steps", 50) or 50)
        if self._steps % every == 0:
            self._log_window(trainer)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.recorder.close_scope("train_epoch")

    def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.recorder.open_scope("validation", sanity_check=bool(trainer.sanity_checking))

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.recorder.close_scope("validation")

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._log_window(trainer)  # the last steps' window
        self.recorder.finish()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.recorder.finish()  # what was recorded up to the failure is written

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.recorder.finish()  # a no-op after on_fit_end


def lightning_callback_base() -> type:
    """Lightning's ``Callback`` class (``lightning.pytorch``, else ``pytorch_lightning``).

    Raises
    ------
    ImportError
        Neither is installed; the message says what to install.
    """
    try:
        from lightning.pytorch import Callback
    except ImportError as first:  # the package the extra installs: its error is the one told
        try:
            from pytorch_lightning import Callback
        except ImportError:
            raise missing_extra("StroboscopeCallback", "lightning", first) from first
    base: type = Callback
    return base


def __getattr__(name: str) -> Any:
    if name != "StroboscopeCallback":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = type(
        "StroboscopeCallback",
        (LightningHooks, lightning_callback_base()),
        {"__module__": __name__, "__doc__": __doc__},
    )
    globals()[name] = cls
    return cls
