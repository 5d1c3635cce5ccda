"""Rank labels of the W&B, MLflow and TensorBoard senders, read back through the real libraries
in their local modes, and how the drop-in monitor's ``rank`` reaches them without doubling."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stroboscope._base.identity import Identity, detect_identity
from stroboscope.compat import SystemMonitor
from stroboscope.senders._rank import RankLabel, rank_label
from stroboscope.senders.csv_file import CSVSender

LAUNCHER_VARS = re.compile(
    r"(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|NODE_RANK|ROLE_RANK|"
    r"TORCHELASTIC_.*|SLURM_.*|OMPI_.*|PMI_.*|PMIX_.*|MV2_.*|KUBERNETES_.*|POD_.*|"
    r"STROBOSCOPE_.*|WANDB_.*|MLFLOW_.*)"
)
EVENTS: list[dict[str, Any]] = [
    {"cpu": 12.5, "memory": 40.0, "network": {"sent": 100, "recv": 200}},
    {"cpu": 25.0, "memory": 41.0, "network": {"sent": 300, "recv": 500}},
]
T0 = 1_800_000_000.25


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts outside any launcher; it sets the variables it means."""
    for name in list(os.environ):
        if LAUNCHER_VARS.fullmatch(name):
            monkeypatch.delenv(name)
    yield


def torchrun(monkeypatch: pytest.MonkeyPatch, rank: int, world: int, job: str = "j42") -> None:
    env = {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": world, "LOCAL_WORLD_SIZE": world}
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", job)


def publish_all(sender: Any) -> None:
    for i, event in enumerate(EVENTS):
        sender.publish(event, timestamp=T0 + 2 * i)
    sender.close()


# -- where the rank comes from -----------------------------------------------------------------


def test_rank_from_argument_environment_and_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    assert RankLabel(None, None, "S").rank is None  # a plain single process: no label
    assert RankLabel(5, None, "S").rank == 5
    torchrun(monkeypatch, 3, 8)
    detected = RankLabel(None, None, "S")
    assert (detected.rank, detected.explicit) == (3, False)
    assert detected.tags() == {**detect_identity().labels(), "rank": "3", "world_size": "8"}
    assert RankLabel(None, detect_identity(rank=6), "S").rank == 6
    torchrun(monkeypatch, 0, 1)  # torchrun with one process: labelled like a plain process
    assert RankLabel(None, None, "S").rank is None
    assert RankLabel(0, None, "S").rank == 0  # unless the rank is given


def test_bad_rank_arguments() -> None:
    with pytest.raises(TypeError, match="rank must be an int"):
        RankLabel(True, None, "WandbSender")
    with pytest.raises(
        ValueError, match=r"WandbSender: rank must be an int >= 0 or None, got int -1$"
    ):
        RankLabel(-1, None, "WandbSender")
    with pytest.raises(TypeError, match="identity must be a stroboscope Identity"):
        RankLabel(None, {"rank": 1}, "S")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"rank=1 disagrees with identity.rank=2"):
        RankLabel(1, detect_identity(rank=2), "S")


def test_conflicting_launcher_variables_leave_the_sender_working_unlabelled(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    torchrun(monkeypatch, 6, 6)  # RANK=6 >= WORLD_SIZE=6: the identity cannot be detected
    with pytest.raises(ValueError):
        detect_identity()
    with caplog.at_level("WARNING", logger="stroboscope.senders"):
        label = RankLabel(None, None, "TensorBoardSender")
    assert label.rank is None and "RANK=6" in caplog.text and "TensorBoardSender" in caplog.text
    assert RankLabel(2, None, "S").rank == 2  # a rank given still labels


def test_adopting_the_monitors_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    torchrun(monkeypatch, 1, 4)
    detected = RankLabel(None, None, "S")
    assert detected.adopt(3) and detected.rank == 3  # the monitor's rank beats the environment
    assert detected.identity.sources["rank"] == "SystemMonitor(rank=...)"
    assert detected.identity.world_size == 4 and not detected.adopt(3)
    given = RankLabel(1, None, "S")
    assert not given.adopt(1)
    with pytest.raises(ValueError, match=r"S labels rank 1 \(given to it\).*rank=3"):
        given.adopt(3)


# -- W&B ---------------------------------------------------------------------------------------


def _wandb_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "cache"))


def _wandb_keys(tmp_path: Path, want_history: int) -> tuple[list[dict[str, Any]], set[str]]:
    """History rows and the system-metric keys that W&B itself wrote to the offline run file."""
    from test_senders import _wandb_records
    from wandb.proto import wandb_internal_pb2

    [run_file] = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    deadline = time.monotonic() + 120  # wandb's service writes the file on its own schedule
    while True:
        history, stats = [], set()
        for raw in _wandb_records(run_file):
            record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
            record.ParseFromString(raw)
            kind = record.WhichOneof("record_type")
            if kind == "history":
                items = record.history.item
                # (wandb stores a key holding "/" as a one-part nested key)
                history.append(
                    {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}
                )
            elif kind == "stats":
                stats |= {item.key for item in record.stats.item}
        if (len(history) >= want_history and stats) or time.monotonic() > deadline:
            return history, stats
        time.sleep(0.2)


def test_wandb_keys_carry_the_label_wandbs_own_system_metrics_carry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _wandb_env(monkeypatch, tmp_path)
    torchrun(monkeypatch, 3, 8)
    from stroboscope.senders.wandb import WandbSender

    # W&B samples its own system metrics of this process every 0.2 s here (default 15 s).
    sender = WandbSender(
        project="p", dir=str(tmp_path), settings={"x_stats_sampling_interval": 0.2}
    )
    assert sender.run.settings.x_label == "rank_3" and sender.label == "rank_3"
    assert sender.run.settings.x_primary  # one run per rank (not shared): each is its own primary
    sender.publish(EVENTS[0], timestamp=T0)
    time.sleep(0.5)  # (lets W&B's monitor take a sample of its own; the wait below is the check)
    publish_all(sender)
    history, stats = _wandb_keys(tmp_path, 3)
    assert [h["cpu/l:rank_3"] for h in history] == [12.5, 12.5, 25.0]
    assert [h["network.recv/l:rank_3"] for h in history] == [200, 200, 500]
    ours = {k for h in history for k in h if not k.startswith("_")}
    assert all(k.endswith("/l:rank_3") for k in stats)  # W&B's own labelling of this writer ...
    assert {"cpu/l:rank_3", "network.sent/l:rank_3"} <= ours & stats  # ... is ours, key for key


def test_wandb_shared_mode_settings() -> None:
    import wandb
    from stroboscope.senders.wandb import labelled_init_kwargs

    worker = labelled_init_kwargs({"mode": "shared", "id": "abc"}, 2)["settings"]
    assert (worker.x_label, worker.x_primary, worker.x_update_finish_state) == ("rank_2", 0, 0)
    primary = labelled_init_kwargs({"settings": wandb.Settings(mode="shared")}, 0)["settings"]
    assert (primary.x_label, primary.x_primary, primary.x_update_finish_state) == ("rank_0", 1, 1)
    mine = wandb.Settings(mode="shared", x_label="node7", x_primary=True)
    kept = labelled_init_kwargs({"settings": mine}, 5)["settings"]
    assert (kept.x_label, kept.x_primary, kept.x_update_finish_state) == ("node7", True, False)
    assert mine.x_update_finish_state is True  # the caller's settings are not modified
    offline = labelled_init_kwargs({"mode": "offline"}, 4)["settings"]
    assert (offline.x_label, offline.x_primary) == ("rank_4", True)
    with pytest.raises(TypeError, match=r"settings must be a wandb\.Settings or a dict"):
        labelled_init_kwargs({"settings": 3}, 1)


def test_wandb_user_run_label_wins_and_no_rank_means_no_label(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _wandb_env(monkeypatch, tmp_path)
    import wandb
    from stroboscope.senders.wandb import WandbSender

    run = wandb.init(project="p", dir=str(tmp_path), settings=wandb.Settings(x_label="node7"))
    try:
        assert WandbSender(run=run, rank=1).label == "node7"  # the process's own W&B label
    finally:
        run.finish()
    run = wandb.init(project="p", dir=str(tmp_path))
    try:
        plain = WandbSender(run=run)
        assert plain.label is None and plain.rank is None and run.settings.x_label is None
        assert plain.label_rank(3) and plain.label == "rank_3"  # SystemMonitor(rank=3)'s hook
    finally:
        run.finish()


# -- MLflow ------------------------------------------------------------------------------------


def test_mlflow_run_per_rank_with_tags_and_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient
    from stroboscope.senders.mlflow import MlflowSender

    uri = (tmp_path / "mlruns").as_uri()
    torchrun(monkeypatch, 2, 4, job="j42")
    ranked = MlflowSender(tracking_uri=uri, experiment_name="e", run_name="train")
    publish_all(ranked)
    plain = MlflowSender(tracking_uri=uri, experiment_name="e", rank=0, identity=None)
    publish_all(plain)
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(ranked.run_id)
    assert run.info.run_name == "train-rank_2"
    assert {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")} == {
        **detect_identity().labels(),
        "rank": "2",
        "world_size": "4",
    }
    assert run.data.tags["job"] == "j42" and run.data.tags["local_rank"] == "2"
    assert set(run.data.metrics) == {"cpu", "memory", "network.sent", "network.recv"}
    assert client.get_run(plain.run_id).info.run_name == "j42-rank_0"
    found = client.search_runs([run.info.experiment_id], "tags.job = 'j42'")
    assert sorted(r.data.tags["rank"] for r in found) == ["0", "2"]


def test_mlflow_refuses_a_run_tagged_with_another_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from stroboscope.senders.mlflow import MlflowSender

    uri = (tmp_path / "mlruns").as_uri()
    first = MlflowSender(tracking_uri=uri, rank=1)
    again = MlflowSender(tracking_uri=uri, run_id=first.run_id, rank=1)  # same rank: fine
    again.close()
    with pytest.raises(ValueError, match=r"tagged rank=1, but this process is rank 2"):
        MlflowSender(tracking_uri=uri, run_id=first.run_id, rank=2)
    first.close()


def test_mlflow_takes_the_monitors_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient
    from stroboscope.senders.mlflow import MlflowSender

    uri = (tmp_path / "mlruns").as_uri()
    sender = MlflowSender(tracking_uri=uri, run_name="t")
    client = MlflowClient(tracking_uri=uri)
    assert "rank" not in client.get_run(sender.run_id).data.tags  # one process: no rank tag
    assert sender.label_rank(5) and sender.rank == 5  # what SystemMonitor(rank=5) calls
    run = client.get_run(sender.run_id)
    assert run.info.run_name == "t-rank_5" and run.data.tags["rank"] == "5"
    sender.close()


# -- TensorBoard -------------------------------------------------------------------------------


def test_tensorboard_run_directory_per_rank(tmp_path: Path) -> None:
    from stroboscope.senders.tensorboard import TensorBoardSender
    from tensorboard.backend.event_processing import event_multiplexer

    identity = Identity(host="h", rank=1, local_rank=1, world_size=2, local_world_size=2,
                        node_rank=0, job="j", launcher="torchrun", pod=None, namespace=None,
                        container=None, sources={})  # fmt: skip
    for sender in (
        TensorBoardSender(tmp_path, rank=0),
        TensorBoardSender(tmp_path, identity=identity),
    ):
        publish_all(sender)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank_0", "rank_1"]
    mux = event_multiplexer.EventMultiplexer(size_guidance={"scalars": 0})
    mux.AddRunsFromDirectory(str(tmp_path))
    mux.Reload()
    assert set(mux.Runs()) == {"rank_0", "rank_1"}  # what `tensorboard --logdir` shows
    for run in ("rank_0", "rank_1"):
        assert sorted(mux.GetAccumulator(run).Tags()["scalars"]) == [
            "cpu",
            "memory",
            "network.recv",
            "network.sent",
        ]
        assert [e.value for e in mux.Scalars(run, "cpu")] == [12.5, 25.0]


# -- the drop-in monitor -----------------------------------------------------------------------


def test_monitor_rank_labels_builtin_senders_once(tmp_path: Path) -> None:
    from stroboscope.senders.tensorboard import TensorBoardSender
    from tensorboard.backend.event_processing import event_accumulator

    tb = TensorBoardSender(tmp_path / "tb")  # no rank of its own: it takes the monitor's
    csv_sender = CSVSender(tmp_path / "m.csv")  # a file sender does not label ranks
    seen: list[dict[str, Any]] = []
    mon = SystemMonitor(os.getpid(), [tb, csv_sender, seen.append], 60, rank=3)
    assert mon.backend_sender == [tb, csv_sender, mon.backend_sender[2]]  # type: ignore[index]
    mon.start()
    deadline = time.monotonic() + 30
    while mon.raw_sampler.stats().ticks_taken < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    mon.flush()
    mon.shutdown()
    assert tb.rank == 3 and tb.run_dir == tmp_path / "tb" / rank_label(3)
    assert "rank3.memory" in seen[-1] and "rank3.memory" in mon.sampler  # user senders: as before
    assert "rank3.memory" in (tmp_path / "m.csv").read_text().splitlines()[0].split(",")
    acc = event_accumulator.EventAccumulator(str(tb.run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"memory", "network.sent"} <= tags and not any("rank" in t for t in tags)
    assert acc.Scalars("memory")[-1].value == pytest.approx(seen[-1]["rank3.memory"])


def test_monitor_rank_conflicting_with_a_senders_is_refused_before_sampling(
    tmp_path: Path,
) -> None:
    from stroboscope.senders.tensorboard import TensorBoardSender

    tb = TensorBoardSender(tmp_path, rank=1)
    with pytest.raises(ValueError, match=r"labels rank 1 \(given to it\).*rank=3"):
        SystemMonitor(os.getpid(), tb, 60, rank=3)
    tb.close()
    same = TensorBoardSender(tmp_path, rank=2)
    mon = SystemMonitor(os.getpid(), [same], 60, rank=2)  # the same rank twice is fine
    mon.start()
    mon.shutdown()
    assert (tmp_path / "rank_2").is_dir() and not (tmp_path / "rank_1").exists()


def test_monitor_records_a_dataset_partition_for_its_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stroboscope.formats.dataset import open_dataset

    monkeypatch.setenv("STROBOSCOPE_JOB", "j7")
    seen: list[dict[str, Any]] = []
    mon = SystemMonitor(os.getpid(), seen.append, 60, rank=1, dataset=tmp_path / "ds")
    assert mon.raw_sampler.stats().capacity * mon.raw_sampler.interval >= 25  # two 10 s parts
    mon.start()
    deadline = time.monotonic() + 30
    while mon.raw_sampler.stats().rows_written < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    mon.shutdown()
    written = mon.raw_sampler.stats().rows_written  # (readable after close)
    [part_dir] = (tmp_path / "ds").glob("job=*/host=*/rank=*")
    assert (part_dir.parent.parent.name, part_dir.name) == ("job=j7", "rank=1")
    table = open_dataset(tmp_path / "ds").to_table()
    assert table.num_rows == written >= 5  # every sampled row, in the rank's partition
    assert set(table.column("rank").to_pylist()) == {1}
    assert set(table.column("job").to_pylist()) == {"j7"}
    mono = table.column("mono_ns").to_pylist()
    assert mono == sorted(mono) and len(set(mono)) == len(mono)
    assert "rank1.memory" in seen[-1]  # the senders' keys are unchanged by the dataset
