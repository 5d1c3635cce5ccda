"""The checks module is a standard-library leaf: importing it (and so the senders, which check
their arguments through it) loads no room of the package and never the compiled ``_core``."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import stroboscope

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
PACKAGE = Path(stroboscope.__file__).parent
#: The stdlib leaves at the package's top (the ``_base`` room of the layout).


def loaded_after(statement: str) -> list[str]:
    code = f"""
        import sys
        {statement}
        print(" ".join(sorted(m for m in sys.modules if m.startswith("stroboscope"))))
        """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
        check=True,
    )
    return out.stdout.split()


def package_imports(path: Path) -> set[str]:
    """The modules of the package that ``path`` imports, by its source."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n for n in names if n.startswith("stroboscope."))
    return found


def test_the_checks_module_imports_only_other_leaves() -> None:
    imported = package_imports(PACKAGE / "_base" / "checks.py")
    assert imported, "the leaf reads files through _files"
    assert {name.split(".")[1] for name in imported} == {"_base"}, imported
    loaded = loaded_after("import stroboscope._base.checks")
    assert all(m == "stroboscope" or m.startswith("stroboscope._base") for m in loaded), loaded


def test_the_senders_load_no_compiled_core() -> None:
    statement = "import stroboscope.senders, stroboscope.senders.csv_file, stroboscope.senders.log"
    loaded = loaded_after(statement)
    assert (
        "stroboscope._base.checks" in loaded
    )  # they check through it, and the checks need no core
    assert "stroboscope._core" not in loaded and "stroboscope.sampling" not in loaded, loaded
