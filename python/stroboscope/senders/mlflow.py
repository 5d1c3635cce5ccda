"""MLflow sender: each event as a batch of metrics on one run."""

from __future__ import annotations

import re
import threading
from typing import Any

from stroboscope.senders._base import BuiltinSender, StatsDict, flatten_event, missing_extra

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_\-./ ]")
_MAX_BATCH = 1000  # metrics per log_batch call that MLflow accepts


class MlflowSender(BuiltinSender):
    """Log each event's metrics to an MLflow run (``log_batch``, the batch form of ``log_metrics``).

    The sender logs through its own ``MlflowClient`` with an explicit run id, not through the
    global ``mlflow.log_metrics``, because MLflow keeps the active run per thread and the sender
    publishes from its own thread.

    Parameters
    ----------
    run_id : str, optional
        Run to log to. Default: the run active in the calling thread (``mlflow.active_run()``)
        when there is one, else a new run, which this sender ends at :meth:`close`.
    experiment_name : str, optional
        Experiment of the new run (created when missing); default MLflow's default experiment.
    run_name : str, optional
        Name of the new run.
    tracking_uri : str, optional
        Tracking server or store (e.g. ``"file:///tmp/mlruns"``); default MLflow's own setting.
    prefix : str
        Put in front of every key (default none). Characters MLflow does not allow in a key
        become ``_``.
    """

    def __init__(
        self,
        *,
        run_id: str | None = None,
        experiment_name: str | None = None,
        run_name: str | None = None,
        tracking_uri: str | None = None,
        prefix: str = "",
    ) -> None:
        super().__init__()
        try:
            import mlflow
            from mlflow.entities import Metric
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise missing_extra("MlflowSender", "mlflow", exc) from exc
        self._metric_cls = Metric
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self._owns_run = False
        if run_id is None:
            active = mlflow.active_run()
            if active is not None and tracking_uri is None:
                run_id = active.info.run_id
        if run_id is None:
            experiment_id = None
            if experiment_name is not None:
                found = self.client.get_experiment_by_name(experiment_name)
                experiment_id = (
                    found.experiment_id
                    if found is not None
                    else self.client.create_experiment(experiment_name)
                )
            run = self.client.create_run(experiment_id or "0", run_name=run_name)
            run_id = run.info.run_id
            self._owns_run = True
        self.run_id: str = run_id
        self.prefix = prefix
        self._lock = threading.Lock()
        self._closed = False

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        """Log every metric of ``event`` at the next step with the window's end as timestamp."""
        flat = flatten_event(event)
        timestamp_ms = round(self._timestamp(kwargs) * 1000)
        with self._lock:
            if self._closed:
                raise RuntimeError(f"MlflowSender(run_id={self.run_id!r}) is closed")
            step = self._next_step(kwargs)
            metrics = [
                self._metric_cls(_NOT_ALLOWED.sub("_", self.prefix + k), v, timestamp_ms, step)
                for k, v in flat.items()
            ]
            for start in range(0, len(metrics), _MAX_BATCH):
                self.client.log_batch(self.run_id, metrics=metrics[start : start + _MAX_BATCH])

    def close(self) -> None:
        """End the run if this sender created it (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._owns_run:
                self.client.set_terminated(self.run_id)

    def __repr__(self) -> str:
        return f"MlflowSender(run_id={self.run_id!r})"
