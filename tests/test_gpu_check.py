"""bench/gpu_check.py, the real-hardware check, runs where there is no GPU: it says why and exits
0; on the fake NVML it goes through every section and writes its Markdown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import stroboscope

ROOT = Path(__file__).resolve().parent.parent


def run_check(env_extra: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    package_root = str(Path(stroboscope.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_check.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_without_a_gpu_it_says_why_and_exits_0(tmp_path: Path) -> None:
    md = tmp_path / "check.md"
    absent = str(tmp_path / "libnvidia-ml-absent.so")
    done = run_check({"STROBOSCOPE_NVML_LIBRARY": absent}, "--markdown", str(md))
    assert done.returncode == 0, done.stderr
    assert "no GPU to check here" in done.stdout and absent in done.stdout
    assert md.read_text().startswith("## GPU check, ") and absent in md.read_text()


def test_every_section_on_the_fake(fake_libs: dict[str, Path], tmp_path: Path) -> None:
    script = tmp_path / "gpus.txt"
    script.write_text("devices 2\nset 0 util 42\nset 0 sm_clock 1755\n")
    md = tmp_path / "check.md"
    done = run_check(
        {"FAKE_NVML_SCRIPT": str(script)},
        "--library", str(fake_libs["new"]), "--latency-seconds", "0.5", "--rate-seconds",
        "0.3", "--energy-seconds", "0.1", "--tick-seconds", "0.3", "--markdown", str(md),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for section in range(1, 8):
        assert f"[FAKE] {section}. " in out, section
    sections = ("latency", "rate", "samples", "energy", "values", "tick", "energy windows")
    assert not [
        ln for ln in out.splitlines() if ln.strip().startswith(sections) and " failed: " in ln
    ]
    # Our columns beside the others: the scripted values, in the label's units.
    assert "| utilization % | 42.0 |" in out and "| SM clock MHz | 1,755.0 |" in out
    assert "| /proc + gpu every 10 ms |" in out
    assert md.read_text().count("[FAKE]") >= 7


def test_the_gpu_bench_inner_harness_builds(tmp_path: Path) -> None:
    """bench/gpu_bench.py compiles NvmlSource::read from the repository's sources into a harness;
    a source file missing from its list (it lacked the GPM, process-tree and /proc helpers, and
    the first run on a real H200 lost the inner-read columns to a link error) fails here."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu_bench
    finally:
        sys.path.remove(str(ROOT / "bench"))
    exe = gpu_bench.compile_inner(tmp_path)
    assert exe is not None and exe.exists()
