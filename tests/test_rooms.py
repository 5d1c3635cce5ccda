"""The rooms of the Python layer (DESIGN.md, "Python layout"): every run-time import of the package
follows the room table, and no module sits outside a room.

Imports under ``if TYPE_CHECKING:`` are left out, as the table says; an import inside a function is
counted (it runs). The face (``stroboscope/__init__.py``) and ``__main__`` may name any room.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import stroboscope

PACKAGE = Path(stroboscope.__file__).parent

# room -> the rooms it may import (its own room is always allowed).
ROOMS: dict[str, frozenset[str]] = {
    "_base": frozenset(),
    "formats": frozenset({"_base"}),
    "analysis": frozenset({"formats", "_base"}),
    "sampling": frozenset({"analysis", "formats", "_base", "_core"}),
    "recording": frozenset({"sampling", "analysis", "formats", "_base"}),
    "scopes": frozenset({"recording", "sampling", "analysis", "formats", "_base"}),
    "export": frozenset({"analysis", "formats", "_base"}),
    "cluster": frozenset(
        {"export", "scopes", "recording", "sampling", "analysis", "formats", "_base"}
    ),
    "senders": frozenset({"analysis", "formats", "_base"}),
}
ROOMS["compat"] = frozenset(set(ROOMS) | {"_core"})
ROOMS["cli"] = frozenset(set(ROOMS) | {"compat", "_core"})
FACE = {"__init__", "__main__", "_core"}


def room_of(module: str) -> str:
    """``stroboscope.formats.spool`` -> ``formats``; a top-level module is its own name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def module_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every run-time import of the package in ``tree``."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "stroboscope":
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - node.level + 1]
                target = ".".join(anchor + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "stroboscope":
                if target == "stroboscope" or (node.level and not node.module):
                    # ``from . import x``, ``from stroboscope import x``: x is a module or room.
                    for alias in node.names:
                        yield node.lineno, f"{target}.{alias.name}"
                else:
                    yield node.lineno, target
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in {"import_module", "__import__"} and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    yield node.lineno, arg.value
        stack.extend(ast.iter_child_nodes(node))


def violations() -> list[str]:
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_of(path)
        room = room_of(module)
        if path.parent == PACKAGE and path.stem in FACE:
            continue
        if room not in ROOMS:
            found.append(f"{path.relative_to(PACKAGE)}: outside every room")
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for line, target in _imports(tree, module, path.name == "__init__.py"):
            to = room_of(target)
            if to in ("", room) or to in ROOMS[room]:
                continue
            found.append(f"{path.relative_to(PACKAGE)}:{line}: {room} imports {target}")
    return found


# Imports against the table still being moved, each "file: room imports module" (no line number,
# so an edit elsewhere in the file does not break the list). The list may only shrink: a new
# import against the table fails, and so does an entry that no longer happens (remove it).
NOT_YET: set[str] = {
    "cluster/_roles.py: cluster imports stroboscope._core",
    "recording/_events_write.py: recording imports stroboscope._core",
    "sampling/_scope_log.py: sampling imports stroboscope.export.traces",
    "senders/prometheus.py: senders imports stroboscope.cluster._prom_http",
}


def test_every_import_follows_the_room_table() -> None:
    found = {line.split(":")[0] + ":" + line.split(":", 2)[-1] for line in violations()}
    new = sorted(found - NOT_YET)
    assert not new, f"{len(new)} import(s) against the room table:\n" + "\n".join(new)
    gone = sorted(NOT_YET - found)
    assert not gone, "no longer against the table, remove from NOT_YET:\n" + "\n".join(gone)


def test_the_checker_sees_an_import_against_the_flow(tmp_path: Path) -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..export import x\n"
    source += "def f():\n    from stroboscope.cli import main\n"
    tree = ast.parse(source)
    seen = [t for _, t in _imports(tree, "stroboscope.formats.spool", False)]
    assert seen == ["stroboscope.cli"]
    assert room_of("stroboscope.formats.spool") == "formats"
    assert "cli" not in ROOMS["formats"]


if __name__ == "__main__":
    for line in violations():
        print(line)
