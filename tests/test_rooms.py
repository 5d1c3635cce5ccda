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


def module_of(path: Path, package: Path = PACKAGE) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    tree: ast.AST, module: str, is_package: bool, names: bool = False
) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every run-time import of the package in ``tree``; with
    ``names``, ``from m import x`` gives ``m.x`` (x may be a module: the caller resolves it)."""
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
                if names or target == "stroboscope" or (node.level and not node.module):
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


def test_every_import_follows_the_room_table() -> None:
    found = violations()
    assert not found, f"{len(found)} import(s) against the room table:\n" + "\n".join(found)


def test_the_checker_sees_an_import_against_the_flow(tmp_path: Path) -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..export import x\n"
    source += "def f():\n    from stroboscope.cli import main\n"
    tree = ast.parse(source)
    seen = [t for _, t in _imports(tree, "stroboscope.formats.spool", False)]
    assert seen == ["stroboscope.cli"]
    assert room_of("stroboscope.formats.spool") == "formats"
    assert "cli" not in ROOMS["formats"]


def file_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """File -> the files of the package it imports at run time, as paths relative to
    ``package``. ``from p import m`` of a module ``m`` is an import of ``p/m.py`` (not of
    ``p/__init__.py``); a name is resolved to the longest module that holds it."""
    files = {module_of(p, package): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges = set()
        for _, target in _imports(tree, module, path.name == "__init__.py", names=True):
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != module:
                edges.add(str(files[target].relative_to(package)))
        graph[str(path.relative_to(package))] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one file, each sorted
    (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


# Circles of run-time imports between files still being broken, each its files sorted and joined
# by " <-> ". The list may only shrink: a new circle fails, and so does an entry that is gone.
CIRCLES_NOT_YET: set[str] = set()


def test_no_circle_of_imports_between_files() -> None:
    found = {" <-> ".join(c) for c in circles(file_graph())}
    new = sorted(found - CIRCLES_NOT_YET)
    assert not new, f"{len(new)} circle(s) of run-time imports:\n" + "\n".join(new)
    gone = sorted(CIRCLES_NOT_YET - found)
    assert not gone, "no longer a circle, remove from CIRCLES_NOT_YET:\n" + "\n".join(gone)


def test_the_checker_sees_a_circle(tmp_path: Path) -> None:
    package = tmp_path / "stroboscope"
    (package / "d").mkdir(parents=True)
    sources = {
        "__init__.py": "",
        "a.py": "from stroboscope import b\nfrom stroboscope.c import y\n",
        "b.py": "def f():\n    from stroboscope.a import x\n",  # counted: it runs
        # type-only: no circle with a
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n",
        # d/e.py imports d/_f.py, not the d/__init__.py that imports it
        "d/__init__.py": "from stroboscope.d.e import z\n",
        "d/e.py": "from stroboscope.d import _f\n",
        "d/_f.py": "",
    }
    for name, text in sources.items():
        (package / name).write_text(text)
    graph = file_graph(package)
    assert graph["a.py"] == {"b.py", "c.py"} and graph["d/e.py"] == {"d/_f.py"}
    assert circles(graph) == [["a.py", "b.py"]]


if __name__ == "__main__":
    for line in violations():
        print(line)
    for circle in circles(file_graph()):
        print("circle: " + " <-> ".join(circle))
