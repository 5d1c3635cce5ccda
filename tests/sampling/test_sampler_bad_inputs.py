"""The table of bad inputs: every one is refused before anything is allocated or created, with
an exception of the right type whose message names the argument and says what is accepted.

A row is ``(id, call, exception type, pattern)``; ``call`` gets a :class:`Ctx` (a temporary
directory and a monkeypatch) and makes the object, and ``pattern`` is searched in the message.
"""

from __future__ import annotations

import ast
import gc
import math
import os
import re
from pathlib import Path
from typing import Callable

import pytest
import stroboscope
from _fake_proc import PID, many_cores_proc
from _refusals import Ctx, assert_refused, params
from stroboscope.compat import SystemMonitor
from stroboscope.sampling import CoreSampler


def base(**kwargs: object) -> Callable[[Ctx], object]:
    """A plain ``stroboscope.sampling.CoreSampler`` at 10 ms with ``kwargs``."""
    return lambda ctx: CoreSampler(0.01, **kwargs)  # type: ignore[arg-type]


def colliding_disks(ctx: Ctx) -> object:
    """Two directories whose names give one column prefix (``disk.<...>a_b.``)."""
    for name in ("a_b", "a/b"):
        (ctx.tmp / name).mkdir(parents=True)
    return CoreSampler(0.01, sources=["disk"], disk_paths=[ctx.tmp / "a_b", ctx.tmp / "a/b"])


def spooled(spool: object) -> Callable[[Ctx], object]:
    """``stroboscope.Sampler`` (the recording one) with a spool."""
    return lambda ctx: stroboscope.Sampler(
        0.01,
        sources=["memory"],
        spool=spool,  # type: ignore[arg-type]
        capacity=1024,
        segment_seconds=1,
    )


def spool_with_nul(ctx: Ctx) -> object:
    return stroboscope.Sampler(
        0.01, sources=["memory"], spool=str(ctx.tmp / "ab\0cd.spool"), capacity=4096
    )


def ring_file_with_nul(ctx: Ctx) -> object:
    return CoreSampler(0.01, sources=["memory"], ring_file=str(ctx.tmp / "r\0ing"))


def gpus_without_nvml(ctx: Ctx) -> object:
    gc.collect()  # the library is chosen again once no sampler holds it
    ctx.monkeypatch.setenv("STROBOSCOPE_NVML_LIBRARY", str(ctx.tmp / "none" / "libnvidia-ml.so.1"))
    return CoreSampler(0.01, gpus=[0])


def many_cores(ctx: Ctx) -> object:
    root = many_cores_proc(ctx.tmp / "proc", 8192)
    return CoreSampler(0.01, pid=PID, sources=["cpu_cores"], proc_root=str(root))


def copy_since_huge(ctx: Ctx) -> object:
    return CoreSampler(0.01, sources=["memory"]).copy_since(2**70)


KNOWN = r"known sources: cpu, cpu_cores"
FINITE = r"^interval must be a finite number of seconds in \[0\.0001, 3600\], got "
WITHIN = r"^interval must be within \[0\.0001, 3600\] seconds \(100 µs to 1 h\), got "
CAPACITY = r"^capacity must be within \[2, 1073741824\] rows, got "
BAD_INPUTS: list[tuple[str, Callable[[Ctx], object], type[Exception], str]] = [
    # -- numbers -------------------------------------------------------------------------------
    ("interval-0", lambda ctx: CoreSampler(0), ValueError, FINITE + "int 0"),
    (
        "interval-negative",
        lambda ctx: CoreSampler(-1.0),
        ValueError,
        FINITE + "float -1.0",
    ),
    ("interval-nan", lambda ctx: CoreSampler(math.nan), ValueError, FINITE + "float nan"),
    ("interval-inf", lambda ctx: CoreSampler(math.inf), ValueError, FINITE + "float inf"),
    (
        "interval-50us",
        lambda ctx: CoreSampler(0.00005),
        ValueError,
        WITHIN + "float 5e-05",
    ),
    ("interval-3601s", lambda ctx: CoreSampler(3601.0), ValueError, WITHIN + "float 3601"),
    (
        "interval-str",
        lambda ctx: CoreSampler("1"),  # type: ignore[arg-type]
        TypeError,
        r"^interval must be a number of seconds \(int or float\), got str '1'",
    ),
    (
        "interval-bool",
        lambda ctx: CoreSampler(True),
        TypeError,
        r"^interval must be a number of seconds \(int or float\), got bool True",
    ),
    ("capacity-1", base(capacity=1), ValueError, CAPACITY + "int 1"),
    ("capacity-0", base(capacity=0), ValueError, CAPACITY + "int 0"),
    ("capacity-2**40", base(capacity=1 << 40), ValueError, CAPACITY + "int 1099511627776"),
    (
        "capacity-float",
        base(capacity=2.5),
        TypeError,
        r"^capacity must be an int \(rows\), got float 2\.5",
    ),
    (
        "rate_window-negative",
        base(sources=["network"], rate_window=-1),
        ValueError,
        r"^rate_window must be a number of seconds in \[0, 3600\], got int -1",
    ),
    (
        "interval-beyond-float",
        lambda ctx: CoreSampler(10**400),
        ValueError,
        r"^interval must be a finite number of seconds in \[0\.0001, 3600\], got an int of 401",
    ),
    (
        "interval-beyond-float-spooled",
        lambda ctx: stroboscope.Sampler(10**400, spool=str(ctx.tmp / "s")),
        ValueError,
        r"^interval must be a finite number of seconds in \[0\.0001, 3600\]",
    ),
    (
        "cpu_window-beyond-float",
        base(cpu_window=10**400),
        ValueError,
        r"^cpu_window must be a number of seconds in \[0, 3600\], got an int of 401",
    ),
    (
        "source-interval-beyond-float",
        base(sources={"cpu": 10**400}),
        ValueError,
        r"^sources\['cpu'\] must be a finite number of seconds in \[0\.0001, 3600\]",
    ),
    (
        "capacity-2**30",
        base(sources=["memory"], capacity=2**30),
        ValueError,
        r"^capacity=1073741824 rows x 6 columns \(mono_ns 1, memory 5\) x 8 bytes needs a "
        r"49\.00 GiB ring, over the limit of 1024 MiB; lower capacity to at most 16777216 rows",
    ),
    (
        "8192-cores-default-capacity",
        many_cores,
        ValueError,
        r"^capacity=65536 rows x 8193 columns \(mono_ns 1, cpu_cores 8192\) .* over the limit "
        r"of 1024 MiB; lower capacity to at most 8192 rows",
    ),
    (
        "copy_since-beyond-int64",
        copy_since_huge,
        ValueError,
        r"^first_row must be a row index in \[0, 2\*\*63 - 1\], got an int of 22 digits",
    ),
    (
        "gpu_sample_interval-spooled",
        lambda ctx: stroboscope.Sampler(
            0.01, sources=["memory"], spool="run.spool", capacity=4096, gpu_sample_interval=-1
        ),
        ValueError,
        r"^gpu_sample_interval must be a finite number of seconds in \[0\.0001, 3600\], got "
        r"int -1",
    ),
    # -- booleans ------------------------------------------------------------------------------
    (
        "net_include_loopback-str",
        base(sources=["network"], net_include_loopback="no"),
        TypeError,
        r"^net_include_loopback must be True or False, got str 'no'",
    ),
    (
        "include_own_threads-str",
        base(sources=["process"], include_own_threads="yes"),
        TypeError,
        r"^include_own_threads must be True or False, got str 'yes'",
    ),
    (
        "gpu_samples-int",
        base(sources=["memory"], gpu_samples=0),
        TypeError,
        r"^gpu_samples must be True or False, got int 0",
    ),
    # -- sources -------------------------------------------------------------------------------
    (
        "sources-int",
        base(sources=5),
        TypeError,
        r"^sources must be a list of source names .* or a \{name: interval_s\} mapping, got int 5",
    ),
    (
        "sources-bytes-entry",
        base(sources=[b"cpu"]),
        TypeError,
        r"^sources entries must be source names \(str\), got bytes b'cpu'; " + KNOWN,
    ),
    (
        "sources-unknown",
        base(sources=["cpux"]),
        ValueError,
        r"^unknown source 'cpux' in sources; " + KNOWN,
    ),
    ("sources-empty", base(sources=[]), ValueError, r"^sources must name at least one source"),
    (
        "sources-twice",
        base(sources=["cpu", "cpu"]),
        ValueError,
        r"^source 'cpu' is listed twice in sources",
    ),
    (
        "sources-not-a-multiple",
        base(sources={"memory": 0.015}),
        ValueError,
        r"^sources\['memory'\] = 0\.015 s must be a whole multiple of the base interval 0\.01 s",
    ),
    (
        "sources-one-string",
        base(sources="cpu"),
        TypeError,
        r"^sources must be a list .* not a string; did you mean sources=\['cpu'\]\?",
    ),
    (
        "sources-comma-string",
        base(sources="cpu,memory"),
        TypeError,
        r"^sources must be a list .* not a string; did you mean sources=\['cpu', 'memory'\]\?",
    ),
    # -- paths ---------------------------------------------------------------------------------
    (
        "disk_paths-bytes",
        base(sources=["disk"], disk_paths=[b"/"]),
        TypeError,
        r"^disk_paths\[0\] must be a str path or os\.PathLike, got bytes b'/'",
    ),
    (
        "disk_paths-int",
        base(sources=["disk"], disk_paths=5),
        TypeError,
        r"^disk_paths must be a sequence of directory paths \(str or os\.PathLike\), got int 5",
    ),
    (
        "disk_paths-one-prefix",
        colliding_disks,
        ValueError,
        r"^disk_paths entries '.*a_b' and '.*a/b' both map to the column prefix 'disk\..*a_b\.'"
        r": keep one of them",
    ),
    (
        "proc_root-missing",
        lambda ctx: CoreSampler(0.01, sources=["memory"], proc_root=ctx.tmp / "absent"),
        ValueError,
        r"^proc_root '.*absent' is not an existing directory",
    ),
    (
        "sys_root-missing",
        lambda ctx: CoreSampler(0.01, sources=["memory"], sys_root=ctx.tmp / "absent"),
        ValueError,
        r"^sys_root '.*absent' is not an existing directory; give the directory that stands "
        r"for /sys \(default '/sys'\)",
    ),
    (
        "cgroup_root-missing",
        lambda ctx: CoreSampler(0.01, sources=["memory"], cgroup_root=str(ctx.tmp / "no-cg")),
        ValueError,
        r"^cgroup_root '.*no-cg' is not an existing directory; .*'/sys/fs/cgroup'",
    ),
    (
        "segment_seconds-nan-without-spool",
        lambda ctx: stroboscope.Sampler(0.01, sources=["memory"], segment_seconds=math.nan),
        ValueError,
        r"^segment_seconds must be a finite number of seconds",
    ),
    (
        "proc_root-bytes",
        base(sources=["memory"], proc_root=b"/proc"),
        TypeError,
        r"^proc_root must be a str path or os\.PathLike, got bytes b'/proc'",
    ),
    (
        "spool-bytes",
        spooled(b"run.spool"),
        TypeError,
        r"^spool must be a str path or os\.PathLike, got bytes b'run\.spool'",
    ),
    ("spool-empty", spooled(""), ValueError, r"^spool is an empty path; give a non-empty path"),
    (
        "spool-nul",
        spool_with_nul,
        ValueError,
        r"^spool '.*ab\\x00cd\.spool' contains a NUL byte, which no file path can hold",
    ),
    (
        "ring_file-nul",
        ring_file_with_nul,
        ValueError,
        r"^ring_file '.*r\\x00ing' contains a NUL byte",
    ),
    # -- processes and GPUs --------------------------------------------------------------------
    ("pid-str", base(pid="x"), TypeError, r"^pid must be an int \(a process id\) or None, got str"),
    (
        "pid-absent",
        base(pid=999_999_999),
        ValueError,
        r"^pid 999999999 does not exist \(no /proc/999999999/stat\)",
    ),
    ("pid-negative", base(pid=-3), ValueError, r"^pid must be a positive process id, got int -3"),
    (
        "disk_paths-absent",
        base(sources=["disk"], disk_paths=["/no/such/dir"]),
        ValueError,
        r"^disk_paths entry '/no/such/dir' is not an existing directory",
    ),
    (
        "available_sources-pid-str",
        lambda ctx: stroboscope.available_sources(pid="x"),  # type: ignore[arg-type]
        TypeError,
        r"^pid must be an int \(a process id\) or None, got str 'x'",
    ),
    (
        "SystemMonitor-pid-str",
        lambda ctx: SystemMonitor("x", lambda event: None),  # type: ignore[arg-type]
        TypeError,
        r"^pid must be an int \(a process id\) or None, got str 'x'",
    ),
    (
        "SystemMonitor-pid-negative",
        lambda ctx: SystemMonitor(-5, lambda event: None),
        ValueError,
        r"^pid must be a positive process id, got int -5",
    ),
    (
        "dump_path-nul",
        lambda ctx: stroboscope.Sampler(
            0.01, sources=["memory"], crash_safe=True, dump_path=str(ctx.tmp / "d\0ump.csv")
        ),
        ValueError,
        r"^dump_path .*NUL",
    ),
    (
        "gpus-index-beyond-uint",
        base(sources=["gpu"], gpus=[2**40]),
        ValueError,
        r"^gpus entry must be an NVML index in \[0, 4294967295\] .* got int 1099511627776",
    ),
    (
        "gpus-int",
        base(gpus=0),
        TypeError,
        r"^gpus must be None, 'cuda' or a list of NVML indices \(int\) and/or GPU UUIDs \(str\)",
    ),
    (
        "gpus-without-nvml",
        gpus_without_nvml,
        RuntimeError,
        r"^gpus=\[0\] was given but no GPU can be read here, so the default sources leave 'gpu' "
        r"out: .*NVML",
    ),
    (
        "gpus-without-gpu-source",
        base(sources=["memory"], gpus=[0]),
        ValueError,
        r"^gpus=\[0\] was given but 'gpu' is not in sources; add 'gpu' to sources",
    ),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), params(BAD_INPUTS))
def test_bad_input_is_refused_naming_the_argument(
    call: Callable[[Ctx], object],
    exc: type[Exception],
    pattern: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert_refused(call, exc, pattern, tmp_path, monkeypatch)


def test_the_suggested_sources_list_is_valid() -> None:
    with pytest.raises(TypeError) as info:
        CoreSampler(0.01, sources="memory, cpu")
    match = re.search(r"did you mean sources=(\[.*?\])\?", str(info.value))
    assert match is not None, str(info.value)
    suggested = ast.literal_eval(match.group(1))
    assert suggested == ["memory", "cpu"]
    s = CoreSampler(0.01, sources=suggested)
    assert [src.name for src in s.stats().sources] == ["memory", "cpu"]


def test_path_objects_are_accepted_where_paths_are(tmp_path: Path) -> None:
    by_str = CoreSampler(0.01, sources=["disk"], disk_paths=["/", str(tmp_path)])
    by_path = CoreSampler(0.01, sources=["disk"], disk_paths=[Path("/"), tmp_path])
    assert by_path.columns == by_str.columns
    by_path.tick_now(1)
    vfs = os.statvfs("/")
    total = by_path.snapshot().to_arrow().column("disk.total_bytes")[0].as_py()
    assert total == vfs.f_blocks * vfs.f_frsize
    single = CoreSampler(0.01, sources=["disk"], disk_paths=tmp_path)
    assert single.columns == CoreSampler(0.01, sources=["disk"], disk_paths=[tmp_path]).columns


def test_one_directory_named_two_ways_is_measured_once(tmp_path: Path) -> None:
    """``/x``, ``/x/``, ``/x/y/..`` and a link to ``/x`` are one directory: measured once,
    under the first spelling (not refused as two paths of one column prefix)."""
    (tmp_path / "y").mkdir()
    (tmp_path / "link").symlink_to(tmp_path, target_is_directory=True)
    once = CoreSampler(0.01, sources=["disk"], disk_paths=[tmp_path])
    spelt: list[str | Path] = [tmp_path, f"{tmp_path}/", tmp_path / "y" / "..", tmp_path / "link"]
    assert CoreSampler(0.01, sources=["disk"], disk_paths=spelt).columns == once.columns


def test_the_ring_bound_counts_what_the_ring_allocates() -> None:
    from stroboscope import _core
    from stroboscope.sampling._checks import ring_bytes

    s = CoreSampler(0.01, capacity=1000)
    options = _core.SourceOptions()
    columns = 1 + sum(len(_core.source_columns(src.name, options)) for src in s.stats().sources)
    assert columns == len(s.columns) - 1  # every column but time lives in the ring
    assert ring_bytes(1024, columns) == s.stats().ring_bytes
