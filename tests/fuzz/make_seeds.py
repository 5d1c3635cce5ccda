"""Write the seed corpora of the libFuzzer harnesses from the recorded trees in tests/data.

    python tests/fuzz/make_seeds.py OUT_DIR

makes ``OUT_DIR/<harness>/`` for every harness in tests/fuzz: the parser harnesses get copies of
the matching recorded files (the regression inputs under ``proc/overflow`` and
``cgroup/overflow`` among them); ``fuzz_trees`` gets each recorded case in its record format
(see fuzz_trees.cpp): the case's files, a tick, its ``.1`` snapshots, a tick. Inputs kept under
``tests/fuzz/regressions/<harness>/`` (crashes found and fixed) are added to their harness's.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import struct
import sys
from collections.abc import Iterable
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"
REGRESSIONS = Path(__file__).resolve().parent / "regressions"

# Harness -> globs under tests/data of the files it parses.
PARSER_SEEDS: dict[str, tuple[str, ...]] = {
    "fuzz_proc_stat": ("proc/*/stat", "proc/*/stat.1"),
    "fuzz_meminfo": ("proc/*/meminfo", "proc/*/meminfo.1"),
    "fuzz_net_dev": ("proc/*/net/dev", "proc/*/net/dev.1"),
    "fuzz_diskstats": ("proc/*/diskstats", "proc/*/diskstats.1"),
    "fuzz_loadavg": ("proc/*/loadavg", "proc/*/loadavg.1"),
    "fuzz_pressure": ("proc/*/pressure/*", "cgroup/**/*.pressure"),
    "fuzz_pid": ("proc/*/[0-9]*/stat*", "proc/*/[0-9]*/status*", "proc/*/[0-9]*/io*"),
    "fuzz_cgroup": ("proc/*/[0-9]*/cgroup", "cgroup/**/*"),
    "fuzz_netlink": ("netlink/*.bin",),
}

# The file list of fuzz_trees.cpp (kFiles), in order: a record's selector is its index here.
TREE_FILES: tuple[str, ...] = (
    "proc/stat",
    "proc/meminfo",
    "proc/net/dev",
    "proc/diskstats",
    "proc/loadavg",
    "proc/pressure/cpu",
    "proc/pressure/memory",
    "proc/pressure/io",
    "proc/42/stat",
    "proc/42/statm",
    "proc/42/status",
    "proc/42/io",
    "proc/42/cgroup",
    "proc/43/stat",
    "proc/43/statm",
    "proc/sys/kernel/pid_max",
    "cgroup/cgroup.controllers",
    "cgroup/cpu.max",
    "cgroup/cpu.stat",
    "cgroup/memory.max",
    "cgroup/memory.current",
)
TICK = len(TREE_FILES)
# Proc cases whose cgroup tree is a flat v2 root, as fuzz_trees lays it out.
TREE_CGROUP_CASES: dict[str, str] = {
    "overflow": "overflow",
    "cgroup_ns": "ns_root",
    "basic": "ns_root",
}
MAX_RECORD = 0xFFFF


def _tiny_elf() -> bytes:
    """A minimal ELF64 shared object: one PT_LOAD, a .dynsym and a .symtab, each naming
    ``_PyRuntime`` and ``Py_Version`` (the names the stack reader looks up), and their strings."""
    strtab = b"\0_PyRuntime\0Py_Version\0"
    sym = struct.Struct("<IBBHQQ")  # Elf64_Sym: name, info, other, shndx, value, size
    syms = sym.pack(0, 0, 0, 0, 0, 0) + sym.pack(1, 0x11, 0, 1, 0x4000, 64)
    syms += sym.pack(12, 0x11, 0, 1, 0x4040, 4)
    ehdr, phdr, shdr = 64, 56, 64
    str_at = ehdr + phdr
    sym_at = str_at + len(strtab)
    sh_at = sym_at + len(syms)
    shn = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr
    sections = shn.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    sections += shn.pack(0, 3, 0, 0, str_at, len(strtab), 0, 0, 1, 0)  # SHT_STRTAB
    sections += shn.pack(0, 11, 0, 0, sym_at, len(syms), 1, 1, 8, sym.size)  # SHT_DYNSYM
    sections += shn.pack(0, 2, 0, 0, sym_at, len(syms), 1, 1, 8, sym.size)  # SHT_SYMTAB
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, ehdr, sh_at, 0, ehdr, phdr, 1, shdr, 4, 0
    )
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, 0x1000, 0x1000, sh_at, sh_at, 0x1000)
    return header + load + strtab + syms + sections


def _str_object(kind: int, ascii: bool, text: str) -> bytes:
    """A compact str object in CPython 3.12's layout (fuzz_py_unicode.cpp), prefixed by the
    output room byte that harness reads first."""
    data_at = 40 if ascii else 56
    cps = [ord(c) for c in text]
    obj = bytearray(data_at + (len(cps) + 1) * kind)
    struct.pack_into("<q", obj, 16, len(cps))
    struct.pack_into("<I", obj, 32, (kind << 2) | 0x20 | (0x40 if ascii else 0) | 0x80)
    for i, cp in enumerate(cps):
        obj[data_at + i * kind : data_at + (i + 1) * kind] = cp.to_bytes(kind, "little")
    return bytes([200]) + bytes(obj)


# The stack reader's harnesses: seeds made here, none recorded under tests/data.
GENERATED_SEEDS: dict[str, tuple[bytes, ...]] = {
    "fuzz_py_elf": (_tiny_elf(),),
    "fuzz_py_maps": (
        b"55d0c0a00000-55d0c0a02000 r--p 00000000 fe:00 260131     /usr/bin/python3.11\n"
        b"7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 \n"
        b"7f1e2d400000-7f1e2d600000 r-xp 00200000 fe:00 1234   /lib/libpython3.11.so.1.0\n"
        b"7ffc1c5e7000-7ffc1c608000 rw-p 00000000 00:00 0                  [stack]\n",
    ),
    "fuzz_py_unicode": (
        _str_object(1, True, "module.<locals>.f"),
        _str_object(1, False, "caf\u00e9"),
        _str_object(2, False, "\u03bbx"),
        _str_object(4, False, "\U0001f600"),
    ),
}


def _write_unique(out: Path, content: bytes) -> None:
    """Store ``content`` under its hash (duplicates collapse, as in a libFuzzer corpus)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / hashlib.sha1(content).hexdigest()).write_bytes(content)


def _record(selector: int, content: bytes) -> bytes:
    content = content[:MAX_RECORD]
    return struct.pack("<BH", selector, len(content)) + content


def _pid_dirs(case: Path) -> list[Path]:
    return sorted(
        (d for d in case.iterdir() if d.is_dir() and d.name.isdigit()), key=lambda d: int(d.name)
    )


def _tree_seed(proc_case: Path, cgroup_case: Path | None) -> bytes:
    """One recorded case as fuzz_trees records: base files, a tick, the .1 files, a tick."""
    pids = _pid_dirs(proc_case)
    renames = {p.name: str(42 + i) for i, p in enumerate(pids[:2])}

    def source_of(rel: str) -> Path | None:
        top, _, rest = rel.partition("/")
        base = cgroup_case if top == "cgroup" else proc_case
        if base is None:
            return None
        m = re.match(r"(4[23])/(.*)", rest)
        if m:
            orig = [k for k, v in renames.items() if v == m.group(1)]
            return base / orig[0] / m.group(2) if orig else None
        return base / rest

    def rename_pids(content: bytes) -> bytes:
        for old, new in renames.items():
            content = re.sub(rb"\b" + old.encode() + rb"\b", new.encode(), content)
        return content

    snapshots: list[bytes] = [b"", b""]
    for i, rel in enumerate(TREE_FILES):
        src = source_of(rel)
        for k, suffix in enumerate(("", ".1")):
            if src is not None and Path(str(src) + suffix).is_file():
                content = rename_pids(Path(str(src) + suffix).read_bytes())
                snapshots[k] += _record(i, content)
    return snapshots[0] + _record(TICK, b"") + snapshots[1] + _record(TICK, b"")


def _files(globs: Iterable[str]) -> list[Path]:
    return sorted({p for g in globs for p in DATA.glob(g) if p.is_file()})


def main(argv: list[str] | None = None) -> int:
    """Write every harness's seed directory under the output directory; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory to create the corpora in")
    out: Path = parser.parse_args(argv).out
    for harness, globs in PARSER_SEEDS.items():
        for f in _files(globs):
            _write_unique(out / harness, f.read_bytes())
    for case in sorted(p for p in (DATA / "proc").iterdir() if p.is_dir()):
        cg = TREE_CGROUP_CASES.get(case.name)
        _write_unique(out / "fuzz_trees", _tree_seed(case, DATA / "cgroup" / cg if cg else None))
    for harness, seeds in GENERATED_SEEDS.items():
        for seed in seeds:
            _write_unique(out / harness, seed)
    # Inputs that once crashed a harness stay in its corpus: each run replays them first.
    for crash in sorted(REGRESSIONS.glob("*/*")):
        _write_unique(out / crash.parent.name, crash.read_bytes())
    for harness in (*PARSER_SEEDS, "fuzz_trees", *GENERATED_SEEDS):
        print(f"{harness}: {len(list((out / harness).iterdir()))} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
