"""MLflow sender: each event as a batch of metrics on one run, one run per rank.

In a job of several processes the rank goes into the run, not into the metric keys: every rank
logs to a run of its own, named ``{run_name}-rank_{r}`` (``{job}-rank_{r}``, or ``rank_{r}``,
when no name is given) and tagged with the identity (``rank``, ``world_size``, ``local_rank``,
``hostname``, ``job``, and ``pod``/``namespace``/``container`` in Kubernetes), so
``search_runs(filter_string="tags.job = '...'")`` finds a job's ranks and their charts compare
under one key. (MLflow's own system-metrics monitor instead puts a ``node_id`` in the key of a
run that several nodes share; one run per rank keeps keys equal across ranks.)
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, Any

from stroboscope._base.checks import check_str
from stroboscope._base.extras import missing_extra
from stroboscope.senders._base import BuiltinSender, StatsDict, flatten_event
from stroboscope.senders._rank import RankLabel, rank_label

if TYPE_CHECKING:
    from stroboscope._base.identity import Identity

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
        when there is one, else a new run, which this sender ends at :meth:`close`. A given run
        gets the rank tags too; one already tagged with another rank is refused (ValueError):
        ranks must not share a run.
    experiment_name : str, optional
        Experiment of the new run (created when missing); default MLflow's default experiment.
    run_name : str, optional
        Name of the new run (``-rank_{r}`` is appended when a rank is known).
    tracking_uri : str, optional
        Tracking server or store (e.g. ``"file:///tmp/mlruns"``); default MLflow's own setting.
    prefix : str
        Put in front of every key (default none). Characters MLflow does not allow in a key
        become ``_``.
    rank : int, optional
        Global rank of this process (default: from the launcher's environment when the job has
        more than one process, see :mod:`stroboscope.senders._rank`).
    identity : Identity, optional
        This process's identity (``stroboscope.cluster.identity()``), instead of ``rank``.

    Notes
    -----
    Under ``SystemMonitor(..., rank=r)`` the monitor gives this sender its rank (see
    :meth:`label_rank`), which tags the run (and renames it, when this sender made it), and
    publishes the keys without its ``rank{r}.`` prefix.
    """

    def __init__(
        self,
        *,
        run_id: str | None = None,
        experiment_name: str | None = None,
        run_name: str | None = None,
        tracking_uri: str | None = None,
        prefix: str = "",
        rank: int | None = None,
        identity: Identity | None = None,
    ) -> None:
        super().__init__()
        given = {
            "run_id": run_id,
            "experiment_name": experiment_name,
            "run_name": run_name,
            "tracking_uri": tracking_uri,
        }
        for name, value in given.items():
            if value is not None:
                check_str(name, value, empty=False, also="None")
        self.prefix = check_str("prefix", prefix)
        try:
            import mlflow
            from mlflow.entities import Metric
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise missing_extra("MlflowSender", "mlflow", exc) from exc
        self._metric_cls = Metric
        self._rank = RankLabel(rank, identity, "MlflowSender")
        self._base_name = run_name
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
            run = self.client.create_run(
                experiment_id or "0", run_name=self._run_name(), tags=self._rank.tags()
            )
            run_id = run.info.run_id
            self._owns_run = True
        self.run_id: str = run_id
        if not self._owns_run:
            self._tag_run()
        self._lock = threading.Lock()
        self._closed = False

    @property
    def rank(self) -> int | None:
        """The rank this sender's run is tagged with (None: not labelled by rank)."""
        return self._rank.rank

    def label_rank(self, rank: int) -> bool:
        """Take ``SystemMonitor``'s rank as this sender's (see the class notes); True."""
        if self._rank.adopt(rank):
            if self._owns_run:
                self.client.update_run(self.run_id, name=self._run_name())
            self._tag_run()
        return True

    def _run_name(self) -> str | None:
        if self._rank.rank is None:
            return self._base_name
        base = self._base_name or self._rank.identity.job
        label = rank_label(self._rank.rank)
        return f"{base}-{label}" if base else label

    def _tag_run(self) -> None:
        tags = self._rank.tags()
        if not tags:
            return
        have = self.client.get_run(self.run_id).data.tags.get("rank")
        if have is not None and have != tags["rank"]:
            raise ValueError(
                f"MlflowSender: run {self.run_id} is tagged rank={have}, but this process is rank "
                f"{tags['rank']}; ranks must not share a run (give each its own run, or none and "
                f"let the sender make one)"
            )
        for key, value in tags.items():
            self.client.set_tag(self.run_id, key, value)

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
