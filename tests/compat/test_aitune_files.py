"""stroboscope.compat.aitune: the files it writes and its environment variables (aitune 0.6.0's
``AITUNE_HARDWARE_METRICS``, ``AITUNE_HARDWARE_METRICS_PATH``, the per-rank names, the dump at
exit), several in a child interpreter so the variables are read at import as aitune reads them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pandas")  # the pandas extra: aitune's tables are DataFrames
import pandas as pd
import stroboscope
from stroboscope.compat import aitune
from stroboscope.compat.aitune import _dump, _monitoring


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "hardware_metrics_"),
        ({"RANK": "1", "WORLD_SIZE": "4"}, "hardware_metrics_*.rank-1-of-4.csv"),
        ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3"}, "*.rank-2-of-3.csv"),
        ({"RANK": "x", "OMPI_COMM_WORLD_RANK": "5", "WORLD_SIZE": "8"}, "*.rank-5-of-8.csv"),
    ],
)
def test_dump_file_names(
    env: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_monitoring, "HARDWARE_METRICS_PATH", None)
    df = pd.DataFrame({"host_memory_used": [1 << 30], "module_name": ["m"], "backend": ["b"]})
    aitune.dump_metrics(df)
    (written,) = list(tmp_path.iterdir())
    assert written.match(expected if "*" in expected else expected + "*.csv")
    if "*" not in expected:
        assert ".rank-" not in written.name
    monkeypatch.setattr(_monitoring, "HARDWARE_METRICS_PATH", str(tmp_path / "out.dat"))
    aitune.dump_metrics(df)
    stem = "out" if not env else "out.rank-"
    assert [p for p in tmp_path.iterdir() if p.name.startswith(stem)]
    assert _dump.output_path("d/x.csv").parent == Path("d")


def test_dump_writes_nothing_without_a_summary(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    aitune.dump_metrics(pd.DataFrame())
    aitune.dump_metrics(pd.DataFrame({"module_name": [None], "backend": ["b"], "x": [1]}))
    assert list(tmp_path.iterdir()) == []


@contextlib.contextmanager
def disk_full_after(limit: int) -> Iterator[None]:
    """A full disk for this process: no file can grow past ``limit`` bytes (RLIMIT_FSIZE; a
    write past it fails with EFBIG, SIGXFSZ ignored), restored afterwards."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


def test_a_dump_that_fails_half_way_leaves_the_previous_file_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = tmp_path / "hw.csv"
    monkeypatch.setattr(_monitoring, "HARDWARE_METRICS_PATH", str(out))
    small = pd.DataFrame({"host_memory_used": [1 << 30], "module_name": ["m"], "backend": ["b"]})
    aitune.dump_metrics(small)
    before = out.read_bytes()
    assert pd.read_csv(out).equals(small)
    big = pd.DataFrame(
        {"host_memory_used": range(5000), "module_name": ["m"] * 5000, "backend": ["b"] * 5000}
    )
    with disk_full_after(4096), pytest.raises(OSError) as err:
        aitune.dump_metrics(big)  # ~60 kB: the disk fills up after 4 kB
    assert err.value.errno == errno.EFBIG
    assert out.read_bytes() == before  # not truncated, not a partial CSV
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hw.csv"]  # no temporary left
    aitune.dump_metrics(big)  # space back: written whole
    assert pd.read_csv(out).equals(big) and out.stat().st_mode & 0o777 == 0o600


CHILD = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout)
from stroboscope.compat import aitune
from stroboscope.compat.aitune import _monitoring
from stroboscope import scopes
print("enabled", _monitoring.HARDWARE_METRICS_ENABLED, flush=True)
with scopes.labels(module="net", backend="Eager()"):
    with aitune.annotate("step"):
        s = _monitoring.default_session()._sampler
        if s is not None:
            goal = s.stats().rows_written + 2
            while s.stats().rows_written < goal:
                pass
print("df", aitune.get_hardware_metrics() is not None, flush=True)
"""


def run_child(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AITUNE_", "RANK"))}
    clean.pop("WORLD_SIZE", None)
    # the child imports the stroboscope this process imported (installed, or the source tree)
    here = str(Path(stroboscope.__file__).resolve().parent.parent)
    clean["PYTHONPATH"] = os.pathsep.join([here, clean.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


@pytest.mark.parametrize("value", ["1", "true", "True", "yes", "Yes", "YES"])
def test_env_enables_and_exit_dumps_to_the_env_path(tmp_path: Path, value: str) -> None:
    out = tmp_path / "hw.csv"
    proc = run_child(tmp_path, AITUNE_HARDWARE_METRICS=value, AITUNE_HARDWARE_METRICS_PATH=str(out))
    assert "enabled True" in proc.stdout and "df True" in proc.stdout
    assert "Hardware metrics summary" in proc.stdout and "Dumped hardware metrics" in proc.stdout
    df = pd.read_csv(out)
    assert len(df) >= 2 and set(df["scope"]) == {"step"}
    assert set(df["module_name"]) == {"net"} and set(df["backend"]) == {"Eager()"}
    assert os.stat(out).st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    "env", [{}, {"AITUNE_HARDWARE_METRICS": "0"}, {"AITUNE_HARDWARE_METRICS": "on"}]
)
def test_env_off_collects_nothing(tmp_path: Path, env: dict[str, str]) -> None:
    proc = run_child(tmp_path, **env)
    assert "enabled False" in proc.stdout and "df False" in proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_exit_dump_per_rank(tmp_path: Path) -> None:
    run_child(tmp_path, AITUNE_HARDWARE_METRICS="1", RANK="3", WORLD_SIZE="4")
    (written,) = list(tmp_path.iterdir())
    assert written.name.startswith("hardware_metrics_") and written.name.endswith(
        ".rank-3-of-4.csv"
    )


FORKING = """
import os, sys
from stroboscope import scopes
from stroboscope.compat import aitune
from stroboscope.compat.aitune import _monitoring

def rows(n):
    s = _monitoring.default_session()._sampler
    goal = s.stats().rows_written + n
    while s.stats().rows_written < goal:
        pass

_monitoring.HARDWARE_METRICS_PATH = "parent.csv"
with scopes.labels(module="p", backend="b"), aitune.annotate("in_parent"):
    rows(2)
pid = os.fork()
if pid == 0:  # the child's own session, started by its own scope, dumps at the child's exit
    _monitoring.HARDWARE_METRICS_PATH = "child.csv"
    with scopes.labels(module="c", backend="b"), aitune.annotate("in_child"):
        rows(2)
    sys.exit(0)
_, status = os.waitpid(pid, 0)
print("child status", status, flush=True)
"""


def test_a_forked_child_dumps_its_own_rows_only(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AITUNE_", "RANK"))}
    env.pop("WORLD_SIZE", None)
    here = str(Path(stroboscope.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([here, env.get("PYTHONPATH", "")])
    env["AITUNE_HARDWARE_METRICS"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", FORKING],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "child status 0" in done.stdout, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["child.csv", "parent.csv"]
    assert set(pd.read_csv(tmp_path / "parent.csv")["scope"]) == {"in_parent"}
    assert set(pd.read_csv(tmp_path / "child.csv")["scope"]) == {"in_child"}
