"""The W&B sender beside a training loop that logs its own steps: the monitor's windows must not
move the user's step axis (W&B's ``run.log(..., commit=False)`` merges them into the step being
built) and its keys are charted against their own step metric (``run.define_metric``). Checked
with the real wandb in offline mode, reading the run file back."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from _senders import _wandb_records

STEPS = 20


def _run_file_records(tmp_path: Path, want_loss: int) -> tuple[list[dict[str, Any]], list[Any]]:
    """History rows and metric definitions of the offline run file, waiting (bounded) for
    wandb's service to write ``want_loss`` rows holding ``loss``."""
    pytest.importorskip("wandb")
    from wandb.proto import wandb_internal_pb2

    [run_file] = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    deadline = time.monotonic() + 120  # wandb's service writes the file on its own schedule
    while True:
        history, metrics = [], []
        for raw in _wandb_records(run_file):
            record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
            record.ParseFromString(raw)
            kind = record.WhichOneof("record_type")
            if kind == "history":
                items = record.history.item
                history.append(
                    {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}
                )
            elif kind == "metric":
                metrics.append(record.metric)
        if sum("loss" in h for h in history) >= want_loss or time.monotonic() > deadline:
            return history, metrics
        time.sleep(0.2)


def test_user_steps_stay_0_to_19_with_the_monitor_publishing_between_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "cache"))
    pytest.importorskip("wandb")
    import wandb
    from stroboscope.senders.wandb import WandbSender

    run = wandb.init(project="p", dir=str(tmp_path))
    try:
        sender = WandbSender()  # the active run: the user's, whose steps are the user's
        assert sender.run is run
        for i in range(STEPS):
            # one window, or two (the second one the step keeps), before each training step
            if i % 3 == 0:
                sender.publish({"cpu": 1000.0 + i}, timestamp=1e9 + i - 0.5)
            event: dict[str, Any] = {"cpu": 2.0 * i, "network": {"sent": 10 * i}}
            sender.publish(event, timestamp=1e9 + i)
            wandb.log({"loss": float(i)})
        sender.close()  # leaves the user's run open
        wandb.log({"loss": float(STEPS)})
    finally:
        run.finish()
    history, metrics = _run_file_records(tmp_path, STEPS + 1)
    with_loss = [h for h in history if "loss" in h]
    # the user's losses at the user's steps 0..20, one row each
    assert [(h["_step"], h["loss"]) for h in with_loss] == [(i, float(i)) for i in range(21)]
    # each step carries the monitor's last window before it, with that window's time
    for i, row in enumerate(with_loss[:STEPS]):
        assert row["cpu"] == 2.0 * i and row["network.sent"] == 10 * i, row
        assert row["stroboscope.time_s"] == 1e9 + i, row
    assert "cpu" not in with_loss[STEPS]  # after close() nothing more from the monitor
    # the monitor's keys are charted against its own step metric, the time of each window
    steps = {m.name: m.step_metric for m in metrics if m.name}
    assert steps.get("cpu") == steps.get("network.sent") == "stroboscope.time_s", steps
    assert "loss" not in steps  # the user's own metrics keep W&B's step
