"""Node roles: which sources a rank records, which GPUs it owns (against the fake NVML's scripted
devices), and two real processes with a torchrun-like environment splitting host and process
columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import stroboscope
from _fake_nvml import ScriptFn, script_fixture
from stroboscope import _core, cluster
from stroboscope._base.identity import Identity
from stroboscope.cluster import HOST_SOURCES, PROCESS_SOURCES, owned_gpus, rank_sources
from stroboscope.cluster._roles import default_sources
from stroboscope.formats.dataset import open_dataset
from stroboscope.sampling._plan import source_options

LEADER = Identity(host="h", rank=4, local_rank=0, world_size=8, local_world_size=4)
FOLLOWER = Identity(host="h", rank=5, local_rank=1, world_size=8, local_world_size=4)
ALONE = Identity(host="h")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def nvml(
    fake_libs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ScriptFn]:
    """Call with a fake NVML script before asking NVML anything (tests/fake_nvml)."""

    yield from script_fixture(fake_libs, tmp_path, monkeypatch)


FOUR_GPUS = """
devices 4
uuid 0 GPU-aaaaaaaa-0000-0000-0000-000000000000
uuid 1 GPU-bbbbbbbb-0000-0000-0000-000000000000
uuid 2 GPU-cccccccc-0000-0000-0000-000000000000
uuid 3 GPU-cccccccd-0000-0000-0000-000000000000
mig 3 on 2
"""
UUIDS = [f"GPU-{c * 8}-0000-0000-0000-000000000000" for c in "abc"] + [
    "GPU-cccccccd-0000-0000-0000-000000000000"
]
MIG_1 = "MIG-00000000-fake-0003-0000-000000000001"  # the fake library's second instance of 3


def test_every_registry_source_has_one_scope() -> None:
    names = list(_core.source_names())
    assert sorted(HOST_SOURCES + PROCESS_SOURCES) == sorted(names)
    assert not set(HOST_SOURCES) & set(PROCESS_SOURCES)
    assert set(PROCESS_SOURCES) == {"process", "process_io", "threads", "proc_tree"}
    # Independent of the lists: a per-process source's columns are the process's (proc.*,
    # threads.*), a host-wide source's never are.
    options = source_options(None, "/proc", "/sys", "/sys/fs/cgroup", ("/",))
    for name in names:
        if name in ("gpu", "gpu_gpm", "amd_gpu"):
            continue  # no NVML or amdsmi here: their columns need a device
        prefixes = {c["name"].split(".")[0] for c in _core.source_columns(name, options)}
        if name in PROCESS_SOURCES:
            assert prefixes <= {"proc", "threads"}, name
        else:
            assert not prefixes & {"proc", "threads"}, name


def test_rank_sources_by_role() -> None:
    defaults = default_sources()
    assert "cpu" in defaults and "process" in defaults
    assert rank_sources(LEADER) == defaults == rank_sources(ALONE)
    assert rank_sources(FOLLOWER) == [n for n in defaults if n in PROCESS_SOURCES]
    asked = ["threads", "cpu", "memory", "process", "gpu", "load"]
    assert rank_sources(LEADER, asked) == asked
    assert rank_sources(FOLLOWER, asked) == ["threads", "process"]
    assert rank_sources(FOLLOWER, {"cpu": 0.1, "process_io": None}) == ["process_io"]
    assert rank_sources(FOLLOWER, ["cpu"]) == []


@pytest.mark.parametrize(
    ("identity", "sources", "error", "text"),
    [
        (LEADER, ["cpu", "cpus"], ValueError, "unknown source 'cpus'; known: amd_gpu, cgroup, cpu"),
        (LEADER, "cpu", TypeError, "list of source names"),
        (LEADER, [3], TypeError, "got 3"),
        ({"rank": 0}, None, TypeError, "identity must be"),
    ],
)
def test_rank_sources_bad_input(
    identity: object, sources: object, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=text):
        rank_sources(identity, sources)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("local_rank", "visible", "expected"),
    [
        (2, None, [UUIDS[2]]),  # the LOCAL_RANK-th device
        (None, None, UUIDS),  # local rank unknown: every device
        (5, None, []),  # more local ranks than GPUs: this one owns none
        (3, "2", [UUIDS[2]]),  # one visible device: that one, whatever the local rank
        (1, f"{UUIDS[3]},{UUIDS[1]}", [UUIDS[1]]),  # cuda:LOCAL_RANK among the visible
        (None, "GPU-bbbb,0", [UUIDS[1], UUIDS[0]]),  # a unique UUID prefix, as CUDA takes
        (0, MIG_1, [MIG_1]),  # a MIG instance
        (1, "1,-1,2", [UUIDS[1]]),  # CUDA stops at the first invalid entry
    ],
)
def test_owned_gpus(
    nvml: ScriptFn, local_rank: int | None, visible: str | None, expected: list[str]
) -> None:
    nvml(FOUR_GPUS)
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    ident = Identity(host="h", local_rank=local_rank)
    assert owned_gpus(ident, environ=env) == expected


@pytest.mark.parametrize(
    ("visible", "text"),
    [
        ("GPU-ffff", "'GPU-ffff' matches no GPU or MIG UUID"),
        ("GPU-cccccc", "'GPU-cccccc' matches more than one"),
        ("7", "'7' is no GPU here: NVML sees 4"),
    ],
)
def test_owned_gpus_refuses_what_names_no_gpu(nvml: ScriptFn, visible: str, text: str) -> None:
    nvml(FOUR_GPUS)
    with pytest.raises(ValueError, match=text):
        owned_gpus(LEADER, environ={"CUDA_VISIBLE_DEVICES": visible})


def test_owned_gpus_without_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STROBOSCOPE_NVML_LIBRARY", str(tmp_path / "absent" / "libnvidia-ml.so.1"))
    assert owned_gpus(LEADER, environ={"CUDA_VISIBLE_DEVICES": "0"}) == []


def _gpu_labels(columns: list[str]) -> set[str]:
    return {c.split(".")[1] for c in columns if c.startswith("gpu.") and c.split(".")[1].isdigit()}


def _leads(s: stroboscope.Sampler) -> bool:
    """Whether the rank sampler ``s`` records its node's host-wide sources (its role)."""
    assert s.identity is not None
    return cluster.is_node_leader(s.identity)


def test_sampler_roles_and_gpus(nvml: ScriptFn) -> None:
    nvml(FOUR_GPUS)
    s = cluster.rank_sampler(0.01, identity=LEADER)
    names = [c.name for c in s.columns]
    assert s.identity is LEADER and _leads(s)
    s.close()
    assert _gpu_labels(names) == {"0", "1", "2", "3"}  # every GPU of the node
    assert "cpu.util_pct" in names and "proc.rss_bytes" in names
    s = cluster.rank_sampler(0.01, identity=FOLLOWER)
    names = [c.name for c in s.columns]
    assert not _leads(s) and not _gpu_labels(names) and "cpu.util_pct" not in names
    assert {n.split(".")[0] for n in names} - {"time", "mono_ns"} == {"proc"}
    s.close()
    # Its own GPU, asked for: the local-rank-th device, on a rank that is not the leader.
    s = cluster.rank_sampler(0.01, identity=FOLLOWER, gpus="owned", sources=["process"])
    assert _gpu_labels([c.name for c in s.columns]) == {"1"}
    s.close()
    # Intervals of a dict survive the filter.
    s = cluster.rank_sampler(0.01, identity=FOLLOWER, sources={"cpu": None, "process": 0.03})
    assert {x.name: x.every for x in s.stats().sources} == {"process": 3}
    s.close()


def test_the_provenance_records_the_owned_gpus(
    nvml: ScriptFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank's provenance names the GPUs it drives by UUID, whichever rank records them (the
    report picks a rank's GPU columns by it), and says why when its CUDA_VISIBLE_DEVICES
    names no GPU here; a process with neither a local rank nor that variable gets no key."""
    from stroboscope.sampling._provenance import provenance

    nvml(FOUR_GPUS)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    with cluster.rank_sampler(0.01, identity=FOLLOWER) as s:
        assert provenance(s)["owned_gpus"] == [UUIDS[3]]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    with cluster.rank_sampler(0.01, identity=FOLLOWER) as s:
        p = provenance(s)
        assert p["owned_gpus"] is None and "'7' is no GPU here" in p["owned_gpus_error"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with cluster.rank_sampler(0.01, identity=ALONE, sources=["process"]) as s:
        assert "owned_gpus" not in provenance(s)


def test_sampler_bad_input(nvml: ScriptFn) -> None:
    nvml(FOUR_GPUS)
    with pytest.raises(ValueError, match="local rank 1 records per-process sources only"):
        cluster.rank_sampler(0.01, identity=FOLLOWER, sources=["cpu", "memory"])
    with pytest.raises(ValueError, match="local rank 5 owns no GPU"):
        cluster.rank_sampler(0.01, identity=Identity(host="h", local_rank=5), gpus="owned")
    with pytest.raises(TypeError, match="identity must be"):
        cluster.rank_sampler(0.01, identity={"rank": 0})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sources must be"):
        cluster.rank_sampler(0.01, identity=LEADER, sources="cpu")


CHILD = """
import json, os, sys
import pyarrow.compute as pc
import pyarrow.parquet as pq
from stroboscope import cluster
s = cluster.rank_sampler(0.01)
s.tick_now(3)
with open("/proc/self/statm") as f:  # this process's RSS, read beside the sampler's last row
    rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
frame = s.snapshot()
s.close()
pq.write_table(frame.to_arrow(), sys.argv[1])
leader = cluster.is_node_leader(s.identity)
said = {"pid": os.getpid(), "leader": leader, "rank": s.identity.rank, "rss": rss}
print(json.dumps(said))
"""


def test_two_ranks_split_host_and_process_columns(tmp_path: Path) -> None:
    """Two real processes as torchrun starts them on one node: local rank 0 records the host
    and itself, local rank 1 only itself."""
    base = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES",)}
    base |= {  # (the children import stroboscope as this process does: installed, or PYTHONPATH)
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "0",
        "TORCHELASTIC_RUN_ID": "two-ranks",
        "STROBOSCOPE_NVML_LIBRARY": str(tmp_path / "no-nvml.so"),  # no GPU columns either way
    }
    procs = []
    for rank in (0, 1):
        env = base | {"RANK": str(rank), "LOCAL_RANK": str(rank)}
        out = tmp_path / f"rank{rank}.parquet"
        procs.append(
            (
                out,
                subprocess.Popen(
                    [sys.executable, "-c", CHILD, str(out)], env=env, stdout=subprocess.PIPE
                ),
            )
        )
    results = []
    try:
        for out, proc in procs:
            stdout, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0
            results.append((json.loads(stdout), pq.read_table(out)))
    finally:  # a failed rank must not leave the other running into the next test
        for _, proc in procs:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    (said0, table0), (said1, table1) = results
    assert (said0["rank"], said0["leader"], said1["rank"], said1["leader"]) == (0, True, 1, False)
    cols0, cols1 = set(table0.column_names), set(table1.column_names)
    assert {"cpu.util_pct", "mem.used_bytes", "proc.rss_bytes"} <= cols0
    assert "proc.rss_bytes" in cols1
    assert not {c for c in cols1 if c.startswith(("cpu.", "mem.", "net.", "disk."))}
    # Each frame says whose it is: its process, its rank, the job.
    for said, table in results:
        prov = json.loads(table.schema.metadata[b"stroboscope.provenance"])
        assert prov["pid"] == said["pid"] and prov["rank"] == said["rank"]
        assert prov["identity"]["job"] == "two-ranks"
        assert prov["identity"]["local_rank"] == said["rank"]
        assert table.num_rows == 3
        # The proc.* columns are that process's own (its RSS as /proc/self/statm said).
        assert table.column("proc.rss_bytes")[-1].as_py() == pytest.approx(said["rss"], rel=0.05)


def _run_until_rows(samplers: list[stroboscope.Sampler], rows: int) -> None:
    """Start, wait (up to a minute, however busy the machine) for ``rows`` ticks each, stop."""
    for s in samplers:
        s.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(s.stats().ticks_taken < rows for s in samplers):
        time.sleep(0.01)
    for s in samplers:
        s.stop()


def test_sampler_writes_its_role_into_a_dataset(tmp_path: Path) -> None:
    """dataset= and identity= reach the recording sampler: each rank writes its own partition,
    the follower's without host columns, and open_dataset unifies them."""
    root = tmp_path / "ds"
    lead = Identity(host="n1", rank=0, local_rank=0, world_size=2, local_world_size=2, job="j")
    follow = Identity(host="n1", rank=1, local_rank=1, world_size=2, local_world_size=2, job="j")
    samplers = [
        cluster.rank_sampler(0.01, identity=who, dataset=root, sources=["memory", "process"])
        for who in (lead, follow)
    ]
    _run_until_rows(samplers, 3)
    for s in samplers:
        assert s.dataset == os.fspath(root)
        s.close()
    parts = {
        int(p.parent.name.removeprefix("rank=")): pq.read_table(p)
        for p in root.glob("job=j/host=n1/rank=*/part-*.parquet")
    }
    assert set(parts) == {0, 1}
    assert "mem.used_bytes" in parts[0].column_names
    assert "mem.used_bytes" not in parts[1].column_names
    for rank, part in parts.items():
        prov = json.loads(part.schema.metadata[b"stroboscope.provenance"])
        assert prov["identity"] == (lead, follow)[rank].to_dict()
    table = open_dataset(root).to_table()
    by_rank = {r: table.filter(pc.equal(table["rank"], r)) for r in (0, 1)}
    assert (
        by_rank[1].num_rows >= 3 and by_rank[1]["mem.used_bytes"].null_count == by_rank[1].num_rows
    )
    assert by_rank[0]["mem.used_bytes"].null_count < by_rank[0].num_rows
    assert by_rank[1]["proc.rss_bytes"].null_count == 0
