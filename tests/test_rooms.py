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
    tree: ast.AST, module: str, is_package: bool, names: bool = False, typed: bool = False
) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every run-time import of the package in ``tree``; with
    ``names``, ``from m import x`` gives ``m.x`` (x may be a module: the caller resolves it);
    with ``typed``, the imports under ``if TYPE_CHECKING:`` too."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node.test) and not typed:
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


def _face_names(tree: ast.AST, module: str) -> dict[str, str]:
    """A face's names -> the module it takes each from (``from .x import n``, also under
    ``TYPE_CHECKING``, and the targets of its lazy ``{"n": ".x"}`` maps)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            base = module.split(".")[: len(module.split(".")) - node.level + 1]
            source = ".".join([*base, node.module]) if node.level else node.module
            for alias in node.names:
                out[alias.asname or alias.name] = source
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if (
                    isinstance(key, ast.Constant)
                    and isinstance(key.value, str)
                    and isinstance(value, ast.Constant)
                    and isinstance(value.value, str)
                    and value.value.startswith(".")
                ):
                    out.setdefault(key.value, module + value.value)
    return out


def file_graph(package: Path = PACKAGE, typed: bool = False) -> dict[str, set[str]]:
    """File -> the files of the package it imports at run time (with ``typed``, also under
    ``TYPE_CHECKING``), as paths relative to ``package``. ``from p import m`` of a module ``m``
    is an import of ``p/m.py`` (not of ``p/__init__.py``); a name is resolved to the longest
    module that holds it, and a name a face takes from a module of its own to that module (the
    face only passes it on)."""
    files = {module_of(p, package): p for p in sorted(package.rglob("*.py"))}
    trees = {m: ast.parse(p.read_text(encoding="utf-8"), str(p)) for m, p in files.items()}
    faces = {m: _face_names(trees[m], m) for m, p in files.items() if p.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        edges = set()
        for _, target in _imports(trees[module], module, path.name == "__init__.py", True, typed):
            if room_of(target) == "_core":
                continue  # the extension: no file of this graph
            while target and target not in files:
                holder, _, name = target.rpartition(".")
                source = faces.get(holder, {}).get(name)
                if source is not None and source.startswith(holder + ".") and source != module:
                    target = source
                else:
                    target = holder
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


def test_no_circle_of_imports_between_files() -> None:
    """No two files import each other, even through imports made only for the type checker: a
    circle is a seam cut in the wrong place (merge the files, or move what both need down)."""
    found = [" <-> ".join(c) for c in circles(file_graph(typed=True))]
    assert not found, f"{len(found)} circle(s) of imports:\n" + "\n".join(found)


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


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def doors_broken(package: Path = PACKAGE) -> list[str]:
    """Imports that go past a room's face: of another room's private module
    (``stroboscope.sampling._checks``), or of a private name of another file (``from .x import
    _y``). Imports for the type checker count too: a door is a door whoever walks through it."""
    files = {module_of(p, package): p for p in sorted(package.rglob("*.py"))}
    found: list[str] = []
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        where = path.relative_to(package)
        for line, target in _imports(tree, module, path.name == "__init__.py", True, True):
            mod = target
            while mod and mod not in files:
                mod = mod.rpartition(".")[0]
            name = target[len(mod) + 1 :] if target != mod else ""
            if mod == "stroboscope._core" or room_of(mod) in ("", "_core"):
                continue
            inner = mod.split(".")[2:]  # the parts below the room
            if room_of(mod) != room_of(module) and any(_private(p) for p in inner):
                found.append(f"{where}:{line}: {room_of(module)} enters {mod} (private)")
            elif name and _private(name) and mod != module:
                found.append(f"{where}:{line}: takes {name} from {mod} (private)")
    return found


def test_rooms_are_used_through_their_doors() -> None:
    found = doors_broken()
    assert not found, f"{len(found)} import(s) past a face:\n" + "\n".join(found)


def test_the_checker_sees_a_private_door(tmp_path: Path) -> None:
    package = tmp_path / "stroboscope"
    for room in ("a", "b"):
        (package / room).mkdir(parents=True)
        (package / room / "__init__.py").write_text("")
    sources = {
        "__init__.py": "",
        "a/_inner.py": "x = 1\n_y = 2\n",
        "a/face.py": "from stroboscope.a._inner import x\n",  # its own room: fine
        "a/peek.py": "from stroboscope.a._inner import _y\n",  # a private name: not fine
        "b/user.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from stroboscope.a._inner import x\n"  # another room's private module
            "from stroboscope.a import face\n"  # a public module: fine
            "from stroboscope.a.face import __name__ as n\n"  # a dunder is no private name
        ),
    }
    for name, text in sources.items():
        (package / name).write_text(text)
    assert doors_broken(package) == [
        "a/peek.py:1: takes _y from stroboscope.a._inner (private)",
        "b/user.py:3: b enters stroboscope.a._inner (private)",
    ]


if __name__ == "__main__":
    for line in violations():
        print(line)
    for circle in circles(file_graph(typed=True)):
        print("circle: " + " <-> ".join(circle))
    for line in doors_broken():
        print(line)
