"""The docs hold what the code does: docs/metrics.md is generated from the C++ registry
(regenerated and compared); the README's Python blocks run as written (a block that cannot run
here is marked in the README with why, and skips with that reason), its synopsis lists every
option of every command's parser, its snippets name the extras they need, and its figures
(ring memory, columns, default intervals) are the code's."""

from __future__ import annotations

import argparse
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
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
    # The README's figure for the default set without GPUs, against a sampler of that set; and
    # the columns of its frames (what `record` prints), `time` and `mono_ns` added.
    import stroboscope

    text = " ".join(README.read_text().split())
    found = re.search(
        r"the default set \((\d+) columns without GPUs\) at the default capacity of ([\d,]+) "
        r"rows is ([\d.]+) MiB \(`stats\(\)\.ring_bytes`; a frame and a recording add `time` "
        r"and `mono_ns`: the (\d+) columns `record` prints\)",
        text,
    )
    assert found, "the README's ring memory sentence changed: update this test with it"
    columns, capacity, mib = int(found[1]), int(found[2].replace(",", "")), float(found[3])
    gpus = {"gpu", "gpu_gpm", "amd_gpu"}
    default = [s["name"] for s in stroboscope.available_sources() if s["default"]]
    with stroboscope.Sampler(0.001, sources=[n for n in default if n not in gpus]) as sampler:
        st = sampler.stats()
        frame_columns = sampler.snapshot().num_columns
    assert (st.num_columns, st.capacity, round(st.ring_bytes / 2**20, 2)) == (
        columns,
        capacity,
        mib,
    )
    assert frame_columns == int(found[4]) == columns + 2


# --- the README's Python blocks run as written --------------------------------------------

README = ROOT / "README.md"

# Names a README block leaves to the reader (their training code), defined before it runs.
PLACEHOLDERS = {
    "train_one_epoch": "def train_one_epoch():\n    time.sleep(0.2)\n",
    "train": "def train():\n    time.sleep(0.2)\n",
    "loader": "loader = [[1.0] * 8 for _ in range(3)]\n",
}
# `<!-- readme-test: skip WHY -->` on the line before a block: it cannot run here, and why.
MARK = re.compile(r"<!-- readme-test: skip (.+?) -->\n$")


def python_blocks() -> list[tuple[int, str, str | None]]:
    """Each ```python block of the README: its first line's number, its code, and the reason
    it is marked not to run (None: it runs)."""
    text = README.read_text()
    blocks = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        before = text[: m.start()]
        mark = MARK.search(before[before.rfind("\n", 0, len(before) - 1) + 1 :])
        blocks.append((before.count("\n") + 2, m.group(1), mark.group(1) if mark else None))
    return blocks


@pytest.mark.parametrize(
    "line, code, skip", python_blocks(), ids=[f"line{b[0]}" for b in python_blocks()]
)
def test_readme_python_block_runs(line: int, code: str, skip: str | None, tmp_path: Path) -> None:
    if skip is not None:
        pytest.skip(f"README.md line {line}: {skip}")
    prelude = "import time\n" + "".join(
        stub for name, stub in PLACEHOLDERS.items() if re.search(rf"\b{name}\b", code)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("STROBOSCOPE_")}
    got = subprocess.run(
        [sys.executable, "-c", prelude + code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert got.returncode == 0, f"README.md line {line} failed:\n{got.stderr[-3000:]}"


def test_readme_blocks_are_found_and_marks_say_why() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 6
    run = [b for b in blocks if b[2] is None]
    assert len(run) >= 4  # most run; the marked ones say why
    assert all(len(b[2]) > 10 for b in blocks if b[2] is not None)


# The extras a call needs, and how the README must say to install them before it.
EXTRAS = {
    "pandas": (r"\.summary\(|to_pandas\(|get_hardware_metrics\(", "[pandas]"),
}


def test_readme_says_the_extra_each_python_block_needs() -> None:
    text = README.read_text()
    for line, code, _ in python_blocks():
        for extra, (calls, install) in EXTRAS.items():
            if re.search(calls, code):
                before = "\n".join(text.splitlines()[: line - 1])
                assert f"'.{install}'" in before or f"stroboscope{install}" in before, (
                    f"README.md line {line} needs the {extra} extra: say `pip install "
                    f"'.{install}'` before it"
                )
    report = text[text.index("## Report") :]
    assert "stroboscope[report]" in report and "'.[report]'" in text[: text.index("## Use it")]


# --- the synopsis and the parsers ---------------------------------------------------------


def synopsis() -> dict[str, str]:
    """The README's command-line synopsis: per command, the text of its lines."""
    text = README.read_text()
    section = text[text.index("## Command line") :]
    block = re.search(r"```text\n(.*?)```", section, re.S)
    assert block is not None, "no ```text synopsis under ## Command line in README.md"
    commands: dict[str, str] = {}
    current = ""
    for raw in block.group(1).splitlines():
        line = raw.split("  # ")[0]
        found = re.match(r"stroboscope (\S+)", line)
        if found:
            current = found.group(1)
        commands[current] = commands.get(current, "") + " " + line
    return commands


def parsers() -> dict[str, argparse.ArgumentParser]:
    from stroboscope.cli import build_parser

    top = build_parser()
    found = {"": top}
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def test_readme_synopsis_lists_every_option_of_every_command() -> None:
    lines = synopsis()
    missing = []
    for command, parser in parsers().items():
        if command == "":
            text = lines.get("--version", "")
        else:
            text = lines.get(command, "")
            if not text:
                missing.append(f"the command {command}")
                continue
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or not action.option_strings:
                continue
            if not any(
                re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text)
                for o in action.option_strings
            ):
                missing.append(f"{command or 'stroboscope'} {'/'.join(action.option_strings)}")
    assert missing == [], f"README.md's synopsis lacks: {missing}"


def test_readme_states_the_default_intervals_and_capacity() -> None:
    from stroboscope import Sampler

    text = " ".join(README.read_text().split())
    found = re.search(
        r"`record` samples every (\d+) ms unless `--interval` says otherwise "
        r"\(a `Sampler` defaults to (\d+) ms\); `--capacity` sets its ring's rows "
        r"\(default (\d+)\)",
        text,
    )
    assert found, "the README's sentence on record's defaults changed: update this test"
    record = {a.dest: a.default for a in parsers()["record"]._actions}
    sampler = inspect.signature(Sampler).parameters
    assert record["interval"] * 1000 == pytest.approx(int(found[1]))
    assert sampler["interval"].default * 1000 == pytest.approx(int(found[2]))
    assert record["capacity"] == sampler["capacity"].default == int(found[3])


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_contents_link_every_section() -> None:
    text = README.read_text()
    sections = [_slug(h) for h in re.findall(r"^## (.+)$", text, re.M)]
    contents = re.search(r"^Contents: (.*?)\n\n", text, re.S | re.M)
    assert contents is not None, "the README has no Contents line"
    linked = re.findall(r"\]\(#([^)]+)\)", contents.group(1))
    assert linked == sections  # every section, in order, each link to a heading
    anchors = set(sections) | {_slug(h) for h in re.findall(r"^###+ (.+)$", text, re.M)}
    assert set(re.findall(r"\]\(#([^)]+)\)", text)) <= anchors  # no link elsewhere dangles
