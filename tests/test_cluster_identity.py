"""Identity detection: each launcher's environment as it sets it, real launch stacks (srun
torchrun, mpirun in sbatch), Kubernetes with a namespace file, explicit arguments, conflicts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from stroboscope._base.identity import Identity, detect_identity
from stroboscope.sampling import CoreSampler as Sampler
from stroboscope.sampling._provenance_identity import rank_of

# srun -N2 --ntasks-per-node=1 torchrun --nproc-per-node=4: the second node's third worker.
SRUN_TORCHRUN = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOBID": "4242",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_NTASKS": "2",
    "SLURM_NODEID": "1",
    "SLURM_NNODES": "2",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "RANK": "6",
    "LOCAL_RANK": "2",
    "WORLD_SIZE": "8",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1",
    "GROUP_WORLD_SIZE": "2",
    "TORCHELASTIC_RUN_ID": "rdzv-7",
}

CASES: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("nothing", {}, {"rank": None, "world_size": None, "launcher": None, "job": None}),
    (
        "torchrun",
        {
            "RANK": "3",
            "LOCAL_RANK": "1",
            "WORLD_SIZE": "4",
            "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "1",
            "GROUP_WORLD_SIZE": "2",
            "TORCHELASTIC_RUN_ID": "run-9",
        },
        {
            "rank": 3,
            "local_rank": 1,
            "world_size": 4,
            "local_world_size": 2,
            "node_rank": 1,
            "job": "run-9",
            "launcher": "torchrun",
            "sources": {"rank": "RANK", "node_rank": "GROUP_RANK", "job": "TORCHELASTIC_RUN_ID"},
        },
    ),
    (
        "torchrun, default run id is no job",
        {"RANK": "0", "WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "none"},
        {"rank": 0, "world_size": 1, "job": None, "launcher": "torchrun"},
    ),
    (
        # srun -n 6 --ntasks-per-node=3 over two nodes: task 4 is the second node's second.
        "slurm",
        {
            "SLURM_JOB_ID": "77",
            "SLURM_PROCID": "4",
            "SLURM_LOCALID": "1",
            "SLURM_NTASKS": "6",
            "SLURM_NODEID": "1",
            "SLURM_NNODES": "2",
            "SLURM_STEP_TASKS_PER_NODE": "3(x2)",
            "SLURM_TASKS_PER_NODE": "8(x2)",
        },
        {
            "rank": 4,
            "local_rank": 1,
            "world_size": 6,
            "local_world_size": 3,
            "node_rank": 1,
            "job": "77",
            "launcher": "slurm",
            "sources": {"local_world_size": "SLURM_STEP_TASKS_PER_NODE", "job": "SLURM_JOB_ID"},
        },
    ),
    (
        "slurm batch step, uneven tasks per node, legacy names",
        {
            "SLURM_JOBID": "78",
            "SLURM_PROCID": "0",
            "SLURM_NPROCS": "5",
            "SLURM_NODEID": "2",
            "SLURM_TASKS_PER_NODE": "2(x2),1",
        },
        {"rank": 0, "world_size": 5, "local_world_size": 1, "node_rank": 2, "job": "78"},
    ),
    (
        "srun torchrun: the innermost launcher wins, the scheduler names the job",
        SRUN_TORCHRUN,
        {
            "rank": 6,
            "local_rank": 2,
            "world_size": 8,
            "local_world_size": 4,
            "node_rank": 1,
            "job": "4242",
            "launcher": "torchrun",
            "sources": {"rank": "RANK", "job": "SLURM_JOB_ID"},
        },
    ),
    (
        "mpirun (Open MPI) inside an sbatch script",
        {
            "SLURM_JOB_ID": "900",
            "SLURM_PROCID": "0",
            "SLURM_NTASKS": "1",
            "SLURM_LOCALID": "0",
            "OMPI_COMM_WORLD_RANK": "5",
            "OMPI_COMM_WORLD_SIZE": "8",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
            "OMPI_COMM_WORLD_NODE_RANK": "1",  # a local rank across jobs, not a node index
        },
        {
            "rank": 5,
            "local_rank": 1,
            "world_size": 8,
            "local_world_size": 4,
            "node_rank": None,
            "job": "900",
            "launcher": "openmpi",
        },
    ),
    (
        "mpiexec (MPICH Hydra)",
        {"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1"},
        {"rank": 2, "world_size": 3, "local_rank": 0, "local_world_size": 1, "launcher": "mpich"},
    ),
    (
        "Open MPI and PMI agreeing",
        {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "PMI_RANK": "1"},
        {"rank": 1, "world_size": 2, "launcher": "openmpi"},
    ),
    (
        "STROBOSCOPE_JOB names the job over the scheduler",
        {"STROBOSCOPE_JOB": "exp-1", "SLURM_JOB_ID": "5"},
        {"job": "exp-1", "launcher": None, "sources": {"job": "STROBOSCOPE_JOB"}},
    ),
    (
        "empty values are unset",
        {"RANK": "", "WORLD_SIZE": " ", "SLURM_PROCID": "2", "SLURM_NTASKS": "4"},
        {"rank": 2, "world_size": 4, "launcher": "slurm"},
    ),
]


@pytest.mark.parametrize(("env", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_launcher_environments(env: dict[str, str], expected: dict[str, Any]) -> None:
    ident = detect_identity(env)
    assert ident.host == socket.gethostname()
    assert ident.sources["host"] == "socket.gethostname()"
    for key, value in expected.items():
        if key == "sources":
            assert {k: ident.sources.get(k) for k in value} == value
        else:
            assert getattr(ident, key) == value, key
    assert ident.pod is ident.namespace is ident.container is None


def test_kubernetes_pod_with_a_namespace_file(tmp_path: Path) -> None:
    ns = tmp_path / "namespace"
    ns.write_text("training\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "trainer-0"}
    ident = detect_identity(env, namespace_file=str(ns))
    assert (ident.pod, ident.namespace, ident.container) == ("trainer-0", "training", None)
    assert ident.launcher == "kubernetes" and ident.rank is None
    assert ident.sources["pod"] == "HOSTNAME" and ident.sources["namespace"] == str(ns)
    # The downward API's variables win over the defaults; a PyTorchJob's torchrun sets ranks.
    env |= {
        "POD_NAME": "job-worker-1",
        "POD_NAMESPACE": "team-a",
        "CONTAINER_NAME": "pytorch",
        "RANK": "9",
        "WORLD_SIZE": "16",
    }
    ident = detect_identity(env, namespace_file=str(ns))
    assert (ident.pod, ident.namespace, ident.container) == ("job-worker-1", "team-a", "pytorch")
    assert (ident.launcher, ident.rank) == ("torchrun", 9)
    assert ident.labels() == {
        "hostname": socket.gethostname(),
        "rank": "9",
        "pod": "job-worker-1",
        "namespace": "team-a",
        "container": "pytorch",
    }
    # No namespace file and no variable: unknown. Outside Kubernetes, HOSTNAME is no pod.
    missing = str(tmp_path / "absent")
    assert (
        detect_identity({"KUBERNETES_SERVICE_HOST": "x"}, namespace_file=missing).namespace is None
    )
    assert detect_identity({"HOSTNAME": "laptop"}, namespace_file=str(ns)).pod is None


def test_explicit_arguments_win() -> None:
    ident = detect_identity(
        SRUN_TORCHRUN, rank=7, local_rank=3, world_size=16, node_rank=0, job="mine", host="h1"
    )
    assert (ident.rank, ident.local_rank, ident.world_size, ident.node_rank) == (7, 3, 16, 0)
    assert (ident.job, ident.host, ident.local_world_size) == ("mine", "h1", 4)
    assert {k: ident.sources[k] for k in ("rank", "job", "host")} == dict.fromkeys(
        ("rank", "job", "host"), "argument"
    )
    assert ident.sources["local_world_size"] == "LOCAL_WORLD_SIZE"
    # A variable that is overridden is not read, so a broken one does not matter then.
    assert detect_identity({"RANK": "x", "WORLD_SIZE": "4"}, rank=1).rank == 1
    # The argument completes what env:// lacks.
    assert detect_identity({"RANK": "2"}, world_size=3).world_size == 3


CONFLICTS: list[tuple[str, dict[str, str], dict[str, Any], tuple[str, ...]]] = [
    ("non-integer RANK", {"RANK": "one", "WORLD_SIZE": "2"}, {}, ("RANK='one'",)),
    ("negative LOCAL_RANK", {"LOCAL_RANK": "-1"}, {}, ("LOCAL_RANK='-1'",)),
    ("RANK without WORLD_SIZE", {"RANK": "1"}, {}, ("RANK=1", "WORLD_SIZE")),
    ("WORLD_SIZE without RANK", {"WORLD_SIZE": "4"}, {}, ("WORLD_SIZE=4", "RANK")),
    ("rank >= world size", {"RANK": "4", "WORLD_SIZE": "4"}, {}, ("RANK=4", "WORLD_SIZE=4")),
    ("world size 0", {"RANK": "0", "WORLD_SIZE": "0"}, {}, ("WORLD_SIZE=0",)),
    (
        "local rank >= local world size",
        {"RANK": "1", "WORLD_SIZE": "8", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
        {},
        ("LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"),
    ),
    (
        "local world larger than the world",
        {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "4"},
        {},
        ("LOCAL_WORLD_SIZE=4", "WORLD_SIZE=2"),
    ),
    (
        "node index past the node count",
        {"SLURM_PROCID": "0", "SLURM_NODEID": "2", "SLURM_NNODES": "2"},
        {},
        ("SLURM_NODEID=2", "SLURM_NNODES=2"),
    ),
    (
        "Open MPI and MPICH disagree",
        {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "PMI_RANK": "2"},
        {},
        ("OMPI_COMM_WORLD_RANK=1", "PMI_RANK=2"),
    ),
    (
        "SLURM_NTASKS and SLURM_NPROCS disagree",
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_NPROCS": "2"},
        {},
        ("SLURM_NTASKS='4'", "SLURM_NPROCS='2'"),
    ),
    (
        "SLURM_JOB_ID and SLURM_JOBID disagree",
        {"SLURM_JOB_ID": "1", "SLURM_JOBID": "2"},
        {},
        ("SLURM_JOB_ID='1'", "SLURM_JOBID='2'"),
    ),
    (
        "node index beyond Slurm's tasks-per-node list",
        {"SLURM_PROCID": "0", "SLURM_NODEID": "3", "SLURM_TASKS_PER_NODE": "2(x2)"},
        {},
        ("SLURM_NODEID=3", "SLURM_TASKS_PER_NODE='2(x2)'"),
    ),
    (
        "unreadable tasks-per-node list",
        {"SLURM_PROCID": "0", "SLURM_NODEID": "0", "SLURM_TASKS_PER_NODE": "2x"},
        {},
        ("SLURM_TASKS_PER_NODE='2x'",),
    ),
    (
        "an argument against a variable",
        {"RANK": "1", "WORLD_SIZE": "4"},
        {"rank": 4},
        ("rank=4 (argument)", "WORLD_SIZE=4"),
    ),
]


@pytest.mark.parametrize(
    ("env", "kwargs", "names"), [c[1:] for c in CONFLICTS], ids=[c[0] for c in CONFLICTS]
)
def test_conflicts_name_the_variables(
    env: dict[str, str], kwargs: dict[str, Any], names: tuple[str, ...]
) -> None:
    with pytest.raises(ValueError) as info:
        detect_identity(env, **kwargs)
    for name in names:
        assert name in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"rank": -1}, ValueError),
        ({"rank": True}, TypeError),
        ({"world_size": 2.0}, TypeError),
        ({"job": ""}, ValueError),
        ({"host": 3}, TypeError),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error, match=next(iter(kwargs))):
        detect_identity({}, **kwargs)


def test_dict_round_trip_and_labels() -> None:
    ident = detect_identity(SRUN_TORCHRUN, host="node-b")
    data = json.loads(json.dumps(ident.to_dict()))
    assert Identity.from_dict(data) == ident
    assert data["sources"]["rank"] == "RANK" and data["launcher"] == "torchrun"
    assert ident.labels() == {"job": "4242", "hostname": "node-b", "rank": "6", "local_rank": "2"}
    with pytest.raises(ValueError, match="host"):
        Identity.from_dict({"rank": 1})
    with pytest.raises(TypeError):
        ident.sources["rank"] = "x"  # type: ignore[index]


def test_default_environment_is_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("STROBOSCOPE_JOB", raising=False)
    assert (detect_identity().rank, detect_identity().world_size) == (1, 2)


@pytest.mark.parametrize("conflict", [False, True], ids=["srun torchrun", "conflicting"])
def test_provenance_carries_the_monitored_process_identity(conflict: bool) -> None:
    """A sampler watching another process records that process's identity, read from its
    /proc/PID/environ; a conflicting environment leaves the identity unknown and says why."""
    env = dict(SRUN_TORCHRUN)
    if conflict:
        env["WORLD_SIZE"] = "6"  # RANK=6 >= WORLD_SIZE=6
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # Until the child has exec'd, /proc/PID/environ is still the parent's: wait for it.
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        s = Sampler(0.01, pid=child.pid, sources=["process"])
        s.tick_now(1)
        prov = s.snapshot().provenance
        s.close()
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert prov is not None
    expected = None if conflict else detect_identity({**os.environ, **env}).to_dict()
    assert prov["identity"] == expected
    if conflict:
        assert "RANK=6" in prov["identity_error"] and "WORLD_SIZE=6" in prov["identity_error"]
        assert (prov["rank"], prov["world_size"], prov["local_rank"]) == (None, None, None)
    else:
        assert "identity_error" not in prov
        assert (prov["rank"], prov["world_size"], prov["local_rank"]) == (6, 8, 2)
        assert prov["identity"]["job"] == "4242" and prov["identity"]["node_rank"] == 1


def test_provenance_prefers_the_identity_a_sampler_was_given() -> None:
    class Given(Sampler):
        identity = Identity(host="elsewhere", rank=3, world_size=4)

    s = Given(0.01, sources=["memory"])
    s.tick_now(1)
    prov = s.snapshot().provenance
    s.close()
    assert prov is not None and prov["identity"]["host"] == "elsewhere"
    assert (prov["rank"], prov["world_size"]) == (3, 4)


def test_provenance_rank_of_follows_the_innermost_launcher() -> None:
    """``mpirun`` inside an ``sbatch`` script: every rank inherits the batch step's
    SLURM_PROCID=0; the provenance's rank is Open MPI's (it was Slurm's 0 before identity)."""
    env = dict(CASES[6][1])
    assert CASES[6][0].startswith("mpirun")
    assert rank_of(env) == {"rank": 5, "world_size": 8, "local_rank": 1}
    assert rank_of({**env, "OMPI_COMM_WORLD_RANK": "9"}) == dict.fromkeys(
        ("rank", "world_size", "local_rank")
    )  # 9 >= 8: a conflict, so unknown (the provenance keeps the reason)
