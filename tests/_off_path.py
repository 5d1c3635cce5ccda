"""Run the tests that drive an optional program (Chromium, Prometheus, tmux:
:func:`_binaries.binary`) with those programs off the PATH, as on a machine that lacks them:
each such test must skip with its reason and leave nothing behind (``filterwarnings=error``
turns a leaked file into an error).

``python tests/_off_path.py [pytest arguments]`` (``.ci/run`` does, after installing them for the
main run). The test files are found, not listed: those that call ``binary`` themselves or import
a helper module of ``tests/`` that does. The PATH keeps every other program (a directory of links
to all that the PATH finds, less the optional ones), and ``STROBOSCOPE_TEST_REQUIRE`` loses their
names, so their tests skip instead of failing. Exits with pytest's status, or 1 where no test
skipped for want of one of them (the run would then prove nothing).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from _binaries import REQUIRE_VARIABLE

TESTS = Path(__file__).resolve().parent

# Every name under which a test looks a program up (the first argument of each binary() call).
OPTIONAL = ("chromium", "chromium-browser", "prometheus", "tmux")


def _imports(tree: ast.AST) -> set[str]:
    """Top-level module names a file imports (``import x``, ``from x import ...``)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def _calls_binary(tree: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "binary"
        for n in ast.walk(tree)
    )


def optional_program_tests() -> list[Path]:
    """The test files that use an optional program, directly or through a ``tests/_*.py``."""
    trees = {p: ast.parse(p.read_text(), str(p)) for p in TESTS.rglob("*.py")}
    helpers = {p.stem: t for p, t in trees.items() if p.parent == TESTS and p.stem.startswith("_")}
    users = {name for name, t in helpers.items() if name != "_binaries" and _calls_binary(t)}
    grown = True
    while grown:  # helpers that use a helper that uses one
        more = {n for n, t in helpers.items() if _imports(t) & users} - users
        users |= more
        grown = bool(more)
    return sorted(
        p
        for p, t in trees.items()
        if p.name.startswith("test_") and (_calls_binary(t) or _imports(t) & users)
    )


def path_without(names: tuple[str, ...], into: Path) -> str:
    """A PATH of one directory, ``into``, holding a link to every program the PATH finds now
    except ``names`` (the first of each name, as the PATH would find it)."""
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or not os.path.isdir(d):
            continue
        for entry in os.scandir(d):
            link = into / entry.name
            if entry.name in names or link.exists() or link.is_symlink():
                continue
            if os.access(entry.path, os.X_OK) and not entry.is_dir():
                link.symlink_to(entry.path)
    return str(into)


def main(pytest_args: list[str]) -> int:
    files = optional_program_tests()
    if not files:
        print("no test file uses an optional program: nothing to run", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="strobo-off-path-") as tmp:
        bin_dir = Path(tmp) / "bin"
        bin_dir.mkdir()
        path = path_without(OPTIONAL, bin_dir)
        still = [n for n in OPTIONAL if shutil.which(n, path=path)]
        if still:
            print(f"still on the PATH: {still}", file=sys.stderr)
            return 1
        required = os.environ.get(REQUIRE_VARIABLE, "").split()
        env = dict(os.environ, PATH=path)
        env[REQUIRE_VARIABLE] = " ".join(n for n in required if n not in OPTIONAL)
        report = Path(tmp) / "report.xml"
        print(f"== without {', '.join(OPTIONAL)} on the PATH: {len(files)} test files", flush=True)
        args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}"]
        status = subprocess.run([*args, *pytest_args, *map(str, files)], env=env).returncode
        if status != 0:
            return status
        skips = [s.get("message", "") for s in ET.parse(report).iter("skipped")]
        why = [m for m in skips if any(f"{n} is not installed" in m for n in OPTIONAL)]
        if not why:
            print("no test skipped for want of an optional program", file=sys.stderr)
            return 1
        print(f"{len(why)} test(s) skipped for want of an optional program, as they should")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
