"""The layout rule of tests/README.md: every test file sits in a folder named for a room of the
package (or at tests/ itself), test file names are unique, and no test file imports another."""

from __future__ import annotations

import ast
from collections import Counter

from _paths import ROOT, TESTS

PACKAGE = ROOT / "python" / "stroboscope"


def test_every_test_folder_is_a_room_of_the_package() -> None:
    rooms = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    folders = {p.parent.name for p in TESTS.glob("*/test_*.py")}
    assert folders <= rooms, f"test folders that are no room of the package: {folders - rooms}"
    assert not list(TESTS.glob("*/*/test_*.py")), "one level of folders: tests/<room>/test_*.py"


def test_test_file_names_are_unique_and_no_test_imports_another() -> None:
    files = [*TESTS.glob("test_*.py"), *TESTS.glob("*/test_*.py")]
    twice = [name for name, n in Counter(p.name for p in files).items() if n > 1]
    assert not twice, f"test file names used twice (pytest imports them by name): {twice}"
    names = {p.stem for p in files}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported = [node.module]
            else:
                continue
            shared = names.intersection(imported)
            assert not shared, (
                f"{path.relative_to(TESTS)} imports test file(s) {shared}: make a helper"
            )
