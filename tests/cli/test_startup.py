"""What the command imports to start: ``--version`` none of the commands' modules and neither numpy
nor pyarrow; ``info`` only its own module and what listing the sources needs (no numpy, no
pyarrow); ``import stroboscope`` the version only. Checked in a fresh interpreter through
``sys.modules`` (the speed itself is measured in bench/, not here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import stroboscope

HEAVY = ("numpy", "pyarrow", "pandas")


def _modules_after(code: str) -> dict[str, object]:
    """Runs ``code`` (which prints JSON of what it found) in a fresh interpreter."""
    # The stroboscope this test imports (the source tree with its built extension, or the
    # installed package): the tree alone has no _core in a fresh clone that pip installed.
    env = {**os.environ, "PYTHONPATH": str(Path(stroboscope.__file__).resolve().parent.parent)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


_RUN = """
import contextlib, io, json, sys
from stroboscope.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main({argv!r})
mods = sorted(sys.modules)
print(json.dumps({{
    "code": code,
    "printed": out.getvalue(),
    "heavy": [m for m in mods if m.split(".")[0] in {heavy!r}],
    "ours": [m for m in mods if m.startswith("stroboscope.")],
}}))
"""


def test_version_imports_no_command_and_neither_numpy_nor_pyarrow() -> None:
    import stroboscope

    got = _modules_after(_RUN.format(argv=["--version"], heavy=HEAVY))
    assert got["code"] == 0
    assert got["printed"] == f"stroboscope {stroboscope.__version__}\n"
    assert got["heavy"] == []
    assert got["ours"] == [
        "stroboscope._base",
        "stroboscope._base.lazy",
        "stroboscope._base.text",  # the error path's escape: imported before any error
        "stroboscope._base.version",
        "stroboscope.cli",
    ]


def test_info_imports_its_own_module_only_and_neither_numpy_nor_pyarrow() -> None:
    got = _modules_after(_RUN.format(argv=["info"], heavy=HEAVY))
    assert got["code"] == 0
    assert "sources:" in str(got["printed"]) and "gpus:" in str(got["printed"])
    assert got["heavy"] == []
    ours = set(got["ours"])  # type: ignore[call-overload]
    assert "stroboscope.cli.info" in ours
    assert not ours & {
        "stroboscope.cli.record",
        "stroboscope.cli.report",
        "stroboscope.cli.recover",
    }
    assert not {m for m in ours if m.startswith(("stroboscope.analysis", "stroboscope.formats"))}


def test_import_stroboscope_loads_the_version_only() -> None:
    got = _modules_after(
        "import json, sys; import stroboscope; "
        "print(json.dumps({'ours': sorted(m for m in sys.modules if m.startswith('stroboscope')),"
        f" 'heavy': sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})}}))"
    )
    assert got["heavy"] == []
    assert got["ours"] == [
        "stroboscope",
        "stroboscope._base",
        "stroboscope._base.lazy",
        "stroboscope._base.version",
    ]


def test_help_still_lists_every_command() -> None:
    got = _modules_after(_RUN.format(argv=["--help"], heavy=HEAVY))
    assert got["code"] == 0
    for name in ("record", "recover", "report", "info"):
        assert f"    {name}" in str(got["printed"])
