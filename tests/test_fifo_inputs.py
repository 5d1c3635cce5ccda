"""A FIFO (or any file that is not a regular one) where a user names a file is refused with a
clear error, never waited on: open(2) of a FIFO blocks until a writer comes, so every reader
opens with O_NONBLOCK and checks the file type first (``_files.open_regular`` in Python,
``open_regular_file`` / ``not_regular_reason`` in C++).

Each case runs in a child process with a 60 s limit: a reader that blocks shows up as a
timeout, not as a hung test run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _fake_proc import PID, FakeProc

LIMIT_S = 60
FIFO_WORDS = "is a FIFO, not a regular file"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env.update(extra)
    return env


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stroboscope", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
    )


def _python(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
    )


def _recording(path: Path) -> Path:
    table = pa.table(
        {
            "time": pa.array([1_000, 2_000], pa.timestamp("ns", tz="UTC")),
            "mono_ns": pa.array([10, 20], pa.int64()),
            "cpu.util_pct": [1.0, 2.0],
        }
    )
    pq.write_table(table, path)
    return path


def _dataset_with_fifo_marker(tmp: Path) -> Path:
    root = tmp / "root"
    (root / "job=j" / "host=h" / "rank=0").mkdir(parents=True)
    _recording(root / "job=j" / "host=h" / "rank=0" / "part-1-000000.parquet")
    os.mkfifo(root / "_stroboscope_dataset.json")
    return root


def _csv_with_fifo_sidecar(tmp: Path) -> Path:
    (tmp / "run.csv").write_text("time,mono_ns\n")
    os.mkfifo(tmp / "run.csv.meta.json")
    return tmp / "run.csv"


CLI_CASES = [
    ("report-fifo", lambda tmp: ["report", "fifo.parquet"], "recording fifo.parquet"),
    ("info-fifo", lambda tmp: ["info", "fifo.parquet"], "recording fifo.parquet"),
    ("info-sidecar-fifo", lambda tmp: ["info", "fifo.meta.json"], "sidecar fifo.meta.json"),
    (
        "info-csv-whose-sidecar-is-a-fifo",
        lambda tmp: ["info", str(_csv_with_fifo_sidecar(tmp))],
        "sidecar ",
    ),
    (
        "report-scopes-fifo",
        lambda tmp: ["report", str(_recording(tmp / "run.parquet")), "--scopes", "fifo.parquet"],
        "--scopes fifo.parquet",
    ),
    (
        "report-dataset-marker-fifo",
        lambda tmp: ["report", str(_dataset_with_fifo_marker(tmp))],
        "dataset marker ",
    ),
]


@pytest.mark.parametrize(
    ("make_args", "named"),
    [pytest.param(make, named, id=name) for name, make, named in CLI_CASES],
)
def test_the_cli_refuses_a_fifo_with_one_line(
    make_args: object, named: str, tmp_path: Path
) -> None:
    os.mkfifo(tmp_path / "fifo.parquet")
    os.mkfifo(tmp_path / "fifo.meta.json")
    args = make_args(tmp_path)  # type: ignore[operator]
    got = _cli(args, tmp_path)
    assert got.returncode == 2, (got.stdout, got.stderr)
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in got.stderr, got.stderr
    assert named in lines[0] and FIFO_WORDS in lines[0], lines[0]


API_CASES = [
    (
        "read_journal",
        "from stroboscope.compat.aitune import read_journal\nread_journal('fifo')",
        "journal fifo " + FIFO_WORDS,
    ),
    (
        "open_dataset-marker",
        "import os\nos.mkdir('root')\nos.mkfifo('root/_stroboscope_dataset.json')\n"
        "from stroboscope import open_dataset\nopen_dataset('root')",
        "dataset marker root/_stroboscope_dataset.json " + FIFO_WORDS,
    ),
    (
        "attribution-trace",
        "from stroboscope.analysis.attribution import _load_events\n_load_events('fifo', ['x'])",
        "trace fifo " + FIFO_WORDS,
    ),
    (
        "chrome-trace",
        "from stroboscope.formats.chrome_trace import read_trace\nread_trace('fifo')",
        "trace fifo " + FIFO_WORDS,
    ),
    (
        "net_dev_totals",
        "import os\nos.makedirs('p/net')\nos.mkfifo('p/net/dev')\n"
        "from stroboscope.sampling import net_dev_totals\nnet_dev_totals(False, 'p')",
        "cannot read p/net/dev: a FIFO, not a regular file",
    ),
]


@pytest.mark.parametrize(
    ("code", "words"), [pytest.param(code, words, id=name) for name, code, words in API_CASES]
)
def test_readers_refuse_a_fifo(code: str, words: str, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    got = _python(code, tmp_path)
    assert got.returncode == 1, (got.stdout, got.stderr)
    last = got.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: ") and words in last, got.stderr


def test_owner_record_and_namespace_file_that_are_fifos_are_ignored(tmp_path: Path) -> None:
    code = """
    import os
    os.mkfifo('_owner.json')
    os.mkfifo('namespace')
    with open('regular', 'w') as f:
        f.write('team')
    from stroboscope.formats.dataset_owner import read_owner
    from stroboscope._base.identity import detect_identity
    print(read_owner('.'))
    for path in ('namespace', 'regular'):
        env = {'KUBERNETES_SERVICE_HOST': 'k'}
        print(detect_identity(env, namespace_file=path).namespace)
    """
    got = _python(code, tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["{}", "None", "team"]


def _proc_with_fifo(tmp: Path, name: str) -> Path:
    proc = FakeProc(tmp / "proc").root
    (proc / name).unlink()
    os.mkfifo(proc / name)
    return proc


@pytest.mark.parametrize(
    ("name", "sources", "words"),
    [
        ("stat", "['cpu']", "stat (cpu"),
        ("meminfo", "['memory']", "meminfo"),
        (f"{PID}/stat", "['memory']", f"pid {PID}: "),
    ],
)
def test_a_sampler_refuses_a_fifo_under_proc_root(
    name: str, sources: str, words: str, tmp_path: Path
) -> None:
    proc = _proc_with_fifo(tmp_path, name)
    code = f"""
    from stroboscope.sampling import CoreSampler as Sampler
    try:
        Sampler(0.01, sources={sources}, pid={PID}, proc_root={str(proc)!r})
    except Exception as exc:
        print(type(exc).__name__, exc)
    """
    got = _python(code, tmp_path)
    assert got.returncode == 0, got.stderr
    assert words in got.stdout and "a FIFO, not a regular file" in got.stdout, got.stdout


def test_the_cmdline_under_proc_root_that_is_a_fifo_is_unknown(
    tmp_path: Path, fake_proc: FakeProc
) -> None:
    proc = fake_proc.root
    os.mkfifo(proc / str(PID) / "cmdline")
    code = f"""
    from stroboscope.sampling._provenance import read_cmdline
    print(read_cmdline({PID}, {str(proc)!r}))
    """
    got = _python(code, tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "None"


@pytest.mark.parametrize(
    ("variable", "source"),
    [("STROBOSCOPE_NVML_LIBRARY", "gpu"), ("STROBOSCOPE_AMDSMI_LIBRARY", "amd_gpu")],
)
def test_a_gpu_library_that_is_a_fifo_is_unavailable_with_why(
    variable: str, source: str, tmp_path: Path
) -> None:
    lib = tmp_path / "lib.so"
    os.mkfifo(lib)
    code = f"""
    import stroboscope
    info = {{s["name"]: s for s in stroboscope.available_sources()}}[{source!r}]
    print(info["available"], info["reason"])
    """
    got = _python(code, tmp_path, **{variable: str(lib)})
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("False "), got.stdout
    assert f"{lib} is a FIFO, not a regular file" in got.stdout, got.stdout
