"""The examples in examples/ run as a user runs them (a subprocess, outputs in a temporary
directory), and their outputs are checked.

The W&B and receiver examples need no torch and always run (wandb is a test dependency). The
PyTorch loop, the Lightning and the transformers examples run where those frameworks are
importable (CI installs them: .ci/run), and are skipped with the reason shown where not.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from _binaries import python_module
from _paths import ROOT
from stroboscope.sampling._provenance import from_schema

EXAMPLES = ROOT / "examples"


def _run(name: str, out: Path, **env: str) -> str:
    """Run an example with ``--out out``: a folder not made yet, as a user names it."""
    assert not out.exists()
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


# torch pinned beside each framework: any other release than the CPU wheel is GBs of CUDA
_INSTALL = {"wandb": "pip install wandb", "torch": "pip install torch==2.13.0"}


def _needs(*modules: str) -> None:
    for module in modules:
        python_module(module, install=_INSTALL.get(module, f"pip install torch==2.13.0 {module}"))


def _wandb_history(run_file: Path) -> list[dict[str, Any]]:
    """The history records of an offline run file, through tests/_senders.py's reader."""
    from _senders import _wandb_records
    from wandb.proto import wandb_internal_pb2

    out = []
    for raw in _wandb_records(run_file):
        record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            out.append(
                {
                    i.key or ".".join(i.nested_key): json.loads(i.value_json)
                    for i in record.history.item
                }
            )
    return out


def test_system_monitor_with_wandb_offline(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "new"
    _needs("wandb")
    stdout = _run(
        "system_monitor_wandb.py",
        out,
        WANDB_MODE="offline",
        WANDB_CONFIG_DIR=str(tmp_path / "config"),
        WANDB_CACHE_DIR=str(tmp_path / "cache"),
    )
    [run_file] = list(out.glob("wandb/offline-run-*/run-*.wandb"))
    last_rss = float(stdout.split("process RSS ")[1].split()[0])
    # wandb's service process writes the run file on its own schedule: wait (bounded).
    deadline = time.monotonic() + 30
    history = _wandb_history(run_file)
    # SystemMonitor(rank=0) hands the rank to the W&B sender, which labels keys as W&B's own
    # multi-process runs do ({key}/l:{x_label}) instead of the monitor's "rank0." prefix.
    rss_key = "proc.memory.rssMB/l:rank_0"
    while (not history or history[-1].get(rss_key) != last_rss) and (time.monotonic() < deadline):
        time.sleep(0.2)
        history = _wandb_history(run_file)
    assert history, "no event reached the W&B run"
    # The last event the monitor published is the last record of the run, keys and values.
    assert history[-1][rss_key] == last_rss
    keys = {f"{k}/l:rank_0" for k in ("cpu", "memory", "network.sent", "disk")}
    assert keys <= set(history[-1]) and not any(k.startswith("rank0.") for k in history[-1])


def test_receiver_fed_by_a_sampler(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "new"
    pytest.importorskip("pandas")  # the receiver's get_metrics() is a DataFrame
    stdout = _run("receiver_fed_by_sampler.py", out)
    worker = int(stdout.split("from worker ")[1].split(";")[0])
    with open(out / "receiver.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["window"]) for r in rows] == list(range(8))
    assert {int(r["pid"]) for r in rows} == {worker} and worker != os.getpid()
    for r in rows:
        assert int(r["rows"]) >= 1  # each window's rows were drained from the worker's sampler
        assert 1 << 20 < float(r["proc.rss_bytes"]) < 1 << 34  # a Python process's RSS


def test_torch_training_loop_with_scopes(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "new"
    _needs("torch", "pandas")
    for room in ("stroboscope.scopes", "stroboscope.analysis.scopes"):
        if importlib.util.find_spec(room) is None:
            pytest.skip(f"{room} (scopes and their summary) is not installed")
    stdout = _run("torch_training_loop.py", out)
    for scope in ("epoch", "train_step", "forward", "backward", "optimizer", "validation"):
        assert scope in stdout
    prov = from_schema(pq.read_schema(out / "run.parquet"))
    assert prov is not None and prov["rows"] == pq.read_table(out / "run.parquet").num_rows


def test_lightning_callback_example(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "new"
    _needs("torch", "lightning")
    _run("lightning_callback.py", out)
    [metrics] = list(out.glob("lightning_logs/version_*/metrics.csv"))
    with open(metrics, newline="") as f:
        logged = [r for r in csv.DictReader(f) if r.get("system/proc.rss_bytes")]
    # 2 epochs of 16 steps, a window every 4 steps (the trainer's log_every_n_steps) and the
    # last: each one the sampler took rows in (a few tiny steps may pass between two rows).
    steps = [int(r["step"]) for r in logged]
    assert steps and set(steps) <= {4, 8, 12, 16, 20, 24, 28, 32} and steps == sorted(steps)
    table = pq.read_table(out / "run.parquet")
    prov = from_schema(table.schema)
    assert prov is not None and prov["rows"] == table.num_rows
    assert prov["cmdline"][1].endswith("lightning_callback.py")  # the training process


def test_transformers_callback_example(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "new"
    _needs("torch", "transformers", "accelerate")
    stdout = _run("transformers_callback.py", out)
    carried = int(stdout.split(" logs carry system metrics")[0].split()[-1])
    # 2 epochs of 8 steps, logging_steps=4: 4 training logs, 2 evaluations and the final one,
    # each carrying a window when the sampler took rows since the previous log.
    assert 1 <= carried <= 7
    table = pq.read_table(out / "run.parquet")
    prov = from_schema(table.schema)
    assert prov is not None and prov["rows"] == table.num_rows
