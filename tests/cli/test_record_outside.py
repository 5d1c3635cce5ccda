"""The README's recipes, end to end with real processes: ``stroboscope record -o run.parquet --
python train.py`` records the scopes of the command and of the worker it forks, and ``report``
shows them; ``torchrun --nproc-per-node 2 -m stroboscope record --dataset D --job exp1 --
python train.py`` (a real ``torch.distributed.run``, gloo on the CPU) gives ``report D`` the
per-rank step times and the scope table."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from stroboscope.export.cluster_report import build_cluster_report
from stroboscope.formats.provenance import from_schema
from stroboscope.recording import _finish

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
CLI = [sys.executable, "-m", "stroboscope"]


def _run(
    argv: list[str], cwd: Path, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """``argv`` in ``cwd`` with this test run's import path (and ``env`` added), output kept."""
    return subprocess.run(
        argv, cwd=cwd, env={**ENV, **env}, capture_output=True, text=True, timeout=timeout
    )


TRAIN_PY = [sys.executable, "train.py"]
RECORD_RANK = ["-m", "stroboscope", "record", "-q", "--dataset", "runs", "--job", "exp1"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def _shared_events_missing() -> str | None:
    """Why the recorder cannot read shared events in this build (None: it can)."""
    try:
        _finish.read_shared_intervals(os.path.dirname(__file__))  # a directory with no events
    except ImportError as exc:
        return f"this build has no shared events reader ({exc})"
    except Exception:
        return None
    return None


pytestmark = pytest.mark.skipif(
    _shared_events_missing() is not None, reason=str(_shared_events_missing())
)

BUSY = """
import time
def busy(ms):
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass
"""

TRAIN = (
    BUSY
    + """
import os
import stroboscope

worker = os.fork()  # a data-loader-like worker
if worker == 0:
    for batch in range(3):
        with stroboscope.annotate("load", batch=batch):
            busy(5)
    os._exit(0)
for step in range(5):
    with stroboscope.annotate("step", step=step):
        with stroboscope.annotate("forward"):
            busy(5)
os.waitpid(worker, 0)
"""
)


def test_record_a_command_gets_its_scopes_and_its_workers(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    run = _run(
        [*CLI, "record", "-q", "--interval", "0.005", "-o", "run.parquet", "--", *TRAIN_PY],
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert "scopes: 13 calls recorded to run.scopes.parquet" in run.stdout
    scopes = pq.read_table(tmp_path / "run.scopes.parquet")
    names = scopes.column("name").to_pylist()
    assert sorted(names) == sorted(["step"] * 5 + ["forward"] * 5 + ["load"] * 3)
    assert scopes.column("end_ns").null_count == 0
    command_pid = (from_schema(pq.read_schema(tmp_path / "run.parquet")) or {})["pid"]

    def pids(name: str) -> set[int]:
        return set(scopes.filter(pc.equal(scopes.column("name"), name)).column("pid").to_pylist())

    assert pids("step") == pids("forward") == {command_pid}
    (worker,) = pids("load")
    assert worker != command_pid  # the forked worker's own
    # on the recording's clock: every call lies within its rows
    rows = pq.read_table(tmp_path / "run.parquet", columns=["mono_ns"]).column("mono_ns")
    assert pc.min(rows).as_py() <= pc.min(scopes.column("begin_ns")).as_py()
    assert pc.max(scopes.column("end_ns")).as_py() <= pc.max(rows).as_py()
    report = _run([*CLI, "report", "run.parquet"], tmp_path)
    assert report.returncode == 0, report.stderr
    table = report.stdout.split("scopes")[-1]
    for name in ("step", "forward", "load"):
        assert name in table


TRAIN_DIST = (
    BUSY
    + """
import torch
import torch.distributed as dist
import stroboscope

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1000)
for step in range(6):
    with stroboscope.annotate("train_step", step=step):
        busy(30 if rank == 1 else 10)
        dist.all_reduce(t)
dist.destroy_process_group()
"""
)


def test_torchrun_of_two_ranks_gives_the_report_step_times_per_rank(tmp_path: Path) -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (.ci/run installs the CPU build)")
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN_DIST))
    run = _run([*TORCHRUN, *RECORD_RANK, "--", *TRAIN_PY], tmp_path, 300, OMP_NUM_THREADS="1")
    assert run.returncode == 0, run.stdout + run.stderr
    report = build_cluster_report(tmp_path / "runs")
    assert report.step == "train_step"
    assert [(r.job, r.rank) for r in report.rows] == [("exp1", 0), ("exp1", 1)]
    for row in report.rows:
        assert row.step is not None and row.step.count == 6 and row.step.open == 0
    slow, fast = report.rows[1].step, report.rows[0].step
    assert slow is not None and fast is not None
    assert slow.median_s is not None and slow.median_s >= 0.03
    text = _run([*CLI, "report", "runs"], tmp_path)
    assert text.returncode == 0, text.stderr
    assert "step: 'train_step'" in text.stdout
    assert "no rank recorded scopes" not in text.stdout
    assert "stragglers:" in text.stdout
    scopes = text.stdout.split("\nscopes:\n")[1]
    assert "train_step" in scopes.splitlines()[2]  # the scope table's first row: both ranks


KILLED = """
import os, sys, time
import stroboscope

for step in range(3):
    with stroboscope.annotate("step", step=step):
        time.sleep(0.01)
open("started", "w").write(os.environ["STROBOSCOPE_EVENTS_DIR"])
with stroboscope.annotate("held"):  # still open when the recorder is killed
    time.sleep(120)
"""


def _wait_for(path: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def test_a_killed_recorder_still_leaves_the_commands_scopes_beside_the_dump(
    tmp_path: Path,
) -> None:
    """SIGKILL of the recorder: its command dies with it, the watchdog writes FILE from the
    spool and then the scope intervals beside it, every edge written before the kill."""
    (tmp_path / "train.py").write_text(KILLED)
    recorder = subprocess.Popen(
        [*CLI, "record", "-q", "-o", "run.parquet", "--", *TRAIN_PY],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(tmp_path / "started")
    finally:
        recorder.kill()
        recorder.wait()
    _wait_for(tmp_path / "run.scopes.parquet")
    _wait_for(tmp_path / "run.parquet")
    scopes = pq.read_table(tmp_path / "run.scopes.parquet")
    assert scopes.column("name").to_pylist() == ["step", "step", "step", "held"]
    assert scopes.column("end_ns").null_count == 1  # "held" was open when it died
    events_dir = Path((tmp_path / "started").read_text())
    deadline = time.monotonic() + 30
    while events_dir.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not events_dir.exists()
