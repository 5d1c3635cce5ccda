"""A Hugging Face ``transformers`` callback:
``Trainer(..., callbacks=[StroboscopeTrainerCallback("run.parquet")])``.

It samples from ``on_train_begin`` to ``on_train_end``, scopes every optimizer step
(``train_step``, label ``step``), each epoch (``train_epoch``, label ``epoch``) and each
evaluation (``validation``), adds a window of system metrics (``system/cpu.util_pct``,
``system/proc.rss_bytes``, GPU…, aggregated since the previous log) to every log the trainer
makes (``logging_steps``): into the ``logs`` that the callbacks after this one receive (so put
it before the reporting integrations, see :func:`add_to`) and into the trainer's
``state.log_history``. The whole recording is written, with its provenance, when training ends.

``transformers`` has no hook before an evaluation starts: the ``validation`` scope opens at the
first ``on_prediction_step`` (after the first evaluation batch) and closes at ``on_evaluate``.

The hooks live in :class:`TrainerHooks`, a plain class; :data:`StroboscopeTrainerCallback` is
that class on ``transformers.TrainerCallback``, made on first use, so this module imports
without ``transformers``.
"""

from __future__ import annotations

import os
from typing import Any

from stroboscope._base.extras import missing_extra
from stroboscope.compat._training import TrainingRecorder

__all__ = ["StroboscopeTrainerCallback", "TrainerHooks", "add_to", "trainer_callback_base"]  # noqa: F822 (made on first use)


class TrainerHooks:
    """The hooks of :data:`StroboscopeTrainerCallback` (see the module docstring).

    Parameters
    ----------
    path : str or os.PathLike, optional
        Where the recording is written when training ends (``.parquet``/``.pq``/``.csv``);
        ``None`` logs windows only.
    **options
        :class:`~stroboscope.compat._training.TrainingRecorder` options: ``interval``,
        ``prefix``, ``aggregate`` and any :class:`stroboscope.Sampler` keyword.
    """

    def __init__(self, path: str | os.PathLike[str] | None = "stroboscope.parquet", **options: Any):
        self.recorder = TrainingRecorder(path, **options)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.start()

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.open_scope("train_epoch", epoch=int(state.epoch or 0))

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.close_scope("train_epoch")

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.open_scope("train_step", step=int(state.global_step))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.close_scope("train_step")

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.open_scope("validation")  # open once per evaluation

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.close_scope("validation")

    def on_predict(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.close_scope("validation")

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        metrics = self.recorder.window()
        if not metrics:
            return
        if logs is not None:
            logs.update(metrics)
        history = getattr(state, "log_history", None)
        if history and history[-1].get("step") == state.global_step:
            history[-1].update(metrics)  # the entry the trainer appended for this log

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.finish()


def trainer_callback_base() -> type:
    """``transformers.TrainerCallback``.

    Raises
    ------
    ImportError
        ``transformers`` is not installed; the message says what to install.
    """
    try:
        from transformers import TrainerCallback
    except ImportError as exc:
        raise missing_extra("StroboscopeTrainerCallback", "transformers", exc) from exc
    base: type = TrainerCallback
    return base


def add_to(trainer: Any, callback: TrainerHooks) -> None:
    """Put ``callback`` first among ``trainer``'s callbacks, so the logs the reporting
    integrations (W&B, TensorBoard, MLflow…) receive already hold its window."""
    trainer.callback_handler.callbacks.insert(0, callback)


def __getattr__(name: str) -> Any:
    if name != "StroboscopeTrainerCallback":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = type(
        "StroboscopeTrainerCallback",
        (TrainerHooks, trainer_callback_base()),
        {"__module__": __name__, "__doc__": __doc__},
    )
    globals()[name] = cls
    return cls
