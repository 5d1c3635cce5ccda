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
