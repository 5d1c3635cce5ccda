"""docs/metrics.md is generated from the C++ registry: regenerate it and compare."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _paths import ROOT


def test_metrics_doc_matches_registry(
    fake_libs: dict[str, Path], fake_amdsmi: Path, tmp_path: Path
) -> None:
    env = dict(os.environ)
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "docs" / "gen_metrics.py"),
            "--nvml-library",
            str(fake_libs["new"]),
            "--amdsmi-library",
            str(fake_amdsmi),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    committed = (ROOT / "docs" / "metrics.md").read_text()
    assert out.stdout == committed, (
        "docs/metrics.md is out of date: run python docs/gen_metrics.py --nvml-library "
        "<libfake_nvml.so> --amdsmi-library <libfake_amdsmi.so> > docs/metrics.md"
    )
    for name in ["cpu.util_pct", "mem.available_bytes", "gpu.{i}.power_w", "proc.rss_bytes"]:
        assert f"| `{name}` |" in committed


def test_the_readmes_ring_memory_is_the_samplers() -> None:
    # The README's figure for the default set without GPUs, against a sampler of that set.
    import re

    import stroboscope

    text = " ".join((ROOT / "README.md").read_text().split())
    found = re.search(
        r"the default set \((\d+) columns without GPUs\) at the default capacity of ([\d,]+) "
        r"rows is ([\d.]+) MiB \(`stats\(\)\.ring_bytes`\)",
        text,
    )
    assert found, "the README's ring memory sentence changed: update this test with it"
    columns, capacity, mib = int(found[1]), int(found[2].replace(",", "")), float(found[3])
    gpus = {"gpu", "gpu_gpm", "amd_gpu"}
    default = [s["name"] for s in stroboscope.available_sources() if s["default"]]
    st = stroboscope.Sampler(0.001, sources=[n for n in default if n not in gpus]).stats()
    assert (st.num_columns, st.capacity, round(st.ring_bytes / 2**20, 2)) == (
        columns,
        capacity,
        mib,
    )
