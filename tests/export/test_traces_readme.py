"""The README's torch.profiler example (its section "torch.profiler traces") runs as written, in
a temporary directory, and gives what the README says: the merged trace has the 10 ``step``
scopes beside torch's ops, and the table has each op's figures."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from _binaries import python_module
from _paths import ROOT

HEADING = "### torch.profiler traces"


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(HEADING) :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, f"no python block under {HEADING!r} in README.md"
    return found.group(1)


def test_the_readme_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    python_module("torch", install="pip install torch==2.13.0")
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {"__name__": "__readme__"}
    exec(compile(readme_example(), "README.md", "exec"), scope)
    printed = capsys.readouterr().out
    events = json.loads((tmp_path / "merged.json").read_text())["traceEvents"]
    steps = [e for e in events if e.get("cat") == "scope"]
    assert sorted(int(e["args"]["step"]) for e in steps) == list(range(10))
    assert any(e.get("cat") == "cpu_op" for e in events)
    assert "aten::addmm" in printed and "cpu_pct_mean" in printed
    table: Any = scope["ops"]  # the example's DataFrame
    ops = table.droplevel("category")
    assert ops.loc["aten::addmm", "launches"] == 10  # the Linear's forward, once a step
    assert ops["matched"].sum() > 0 and ops["cpu_pct_mean"].notna().any()
