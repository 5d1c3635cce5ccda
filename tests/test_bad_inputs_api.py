"""Bad arguments of the public constructors and functions beyond the Sampler's own (those are
in tests/sampling/test_sampler_bad_inputs.py): each refused when given, through the checks module,
with an exception of the right type whose message names the argument, the value and what is
accepted.

A row is ``(id, call, exception type, pattern)``; ``call`` gets a :class:`Ctx`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pytest
import stroboscope
from _refusals import Ctx, assert_refused, params
from stroboscope._base.identity import Identity
from stroboscope.compat import SystemMonitor, aitune
from stroboscope.compat._training import TrainingRecorder
from stroboscope.compat.aitune import snapshot as aitune_snapshot
from stroboscope.compat.lightning import LightningHooks
from stroboscope.compat.zeus import ZeusMonitor
from stroboscope.formats.dataset import write_part
from stroboscope.formats.writers import write_parquet
from stroboscope.senders._base import as_sender
from stroboscope.senders._dispatch import SenderWorker


def monitor(**kwargs: object) -> Callable[[Ctx], object]:
    """``stroboscope.compat.SystemMonitor`` of this process to a plain callable, with ``kwargs``."""
    return lambda ctx: SystemMonitor(
        os.getpid(),
        lambda event: None,
        **kwargs,  # type: ignore[arg-type]
    )


def empty_part(ctx: Ctx) -> object:
    rows = pa.table(
        {"time": pa.array([], pa.timestamp("ns", "UTC")), "mono_ns": pa.array([], pa.int64())}
    )
    return write_part(
        rows, ctx.tmp / "work" / "root", identity=Identity("h"), name="part-1.parquet"
    )


def zeus_key(ctx: Ctx) -> object:
    ctx.monkeypatch.setenv("STROBOSCOPE_NVML_LIBRARY", str(ctx.tmp / "absent.so"))
    with ZeusMonitor() as zeus:  # no GPU here: windows measure time only
        zeus.begin_window("step\udc80")
    return zeus


def zeus_indices(ctx: Ctx) -> object:
    ctx.monkeypatch.setenv("STROBOSCOPE_NVML_LIBRARY", str(ctx.tmp / "absent.so"))
    return ZeusMonitor(gpu_indices=[0, -1])


def tick_now(n: object) -> object:
    """``tick_now`` of a sampler that never started: ``n`` is checked first."""
    return stroboscope.Sampler(0.01, sources=["memory"]).tick_now(n)  # type: ignore[arg-type]


def energy_timeout(timeout: object) -> object:
    """``end_energy_window`` of a sampler that never started: the timeout is checked first."""
    sampler = stroboscope.Sampler(0.01, sources=["memory"])
    return sampler.end_energy_window("w", timeout=timeout)  # type: ignore[arg-type]


BOOL = r" must be True or False, got "
SURROGATE = r" holds a lone surrogate \('\\udc80' at index \d\), which UTF-8 cannot encode"
PENDING = r"^max_pending must be an int >= 1 \(events a slow sender may have queued\), got "
BAD_INPUTS: list[tuple[str, Callable[[Ctx], object], type[Exception], str]] = [
    (
        "Sampler-crash_safe-str",
        lambda ctx: stroboscope.Sampler(0.01, sources=["memory"], crash_safe="no"),  # type: ignore[arg-type]
        TypeError,
        "^crash_safe" + BOOL + "str 'no'",
    ),
    (
        "SystemMonitor-max_pending-nan",
        monitor(max_pending=math.nan),
        TypeError,
        PENDING + "float nan",
    ),
    ("SystemMonitor-max_pending-str", monitor(max_pending="5"), TypeError, PENDING + "str '5'"),
    ("SystemMonitor-max_pending-0", monitor(max_pending=0), ValueError, PENDING + "int 0"),
    (
        "SystemMonitor-rank-negative",
        monitor(rank=-1),
        ValueError,
        r"^rank must be an int >= 0 \(the process's global rank, or None\), got int -1",
    ),
    ("SystemMonitor-extended-str", monitor(extended="yes"), TypeError, "^extended" + BOOL + "str"),
    ("SystemMonitor-crash_safe-str", monitor(crash_safe="no"), TypeError, "^crash_safe" + BOOL),
    (
        "SystemMonitor-gpu_interval-negative",
        monitor(gpu_interval=-1),
        ValueError,
        r"^gpu_interval must be a finite number of seconds in \[0\.0001, 3600\], got int -1",
    ),
    (
        "SenderWorker-max_pending-nan",
        lambda ctx: SenderWorker(as_sender(print), math.nan),  # type: ignore[arg-type]
        TypeError,
        r"^max_pending must be an int >= 1 \(events\), got float nan",
    ),
    ("write_part-empty", empty_part, ValueError, r"^table has no rows: a part holds at least one"),
    (
        "write_parquet-compression-int",
        lambda ctx: write_parquet(pa.table({"a": [1]}), "x.parquet", compression=5),  # type: ignore[arg-type]
        TypeError,
        r"^compression must be a Parquet codec \('none', 'snappy', 'gzip', 'brotli', 'lz4', "
        r"'zstd'\) that this pyarrow has, got int 5",
    ),
    (
        "write_parquet-compression-unknown",
        lambda ctx: write_parquet(pa.table({"a": [1]}), "x.parquet", compression="zip"),
        ValueError,
        r"^compression must be a Parquet codec \('none', .*'zstd'\) that this pyarrow has, got "
        r"str 'zip'",
    ),
    (
        "provenance-command-int",
        lambda ctx: stroboscope.Sampler(0.01, sources=["memory"]).provenance(command=5),  # type: ignore[arg-type]
        TypeError,
        r"^command must be None or a list of str \(the command line\), got int 5",
    ),
    (
        "provenance-command-str",
        lambda ctx: stroboscope.Sampler(0.01, sources=["memory"]).provenance(command="ls -l"),  # type: ignore[arg-type]
        TypeError,
        r"^command must be None or a list of str \(the command line\), got str 'ls -l'",
    ),
    (
        "provenance-command-item",
        lambda ctx: stroboscope.Sampler(0.01, sources=["memory"]).provenance(command=["ls", 5]),  # type: ignore[list-item]
        TypeError,
        r"^command\[1\] must be a str \(one word of the command line\), got int 5",
    ),
    (
        "Identity-rank-negative",
        lambda ctx: Identity("h", rank=-3),
        ValueError,
        r"^rank must be an int >= 0 or None, got int -3",
    ),
    (
        "Identity-rank-beyond-world",
        lambda ctx: Identity("h", rank=4, world_size=4),
        ValueError,
        r"^conflicting rank variables: rank=4 \(argument\) >= world_size=4 \(argument\)",
    ),
    (
        "Identity-host-empty",
        lambda ctx: Identity(""),
        ValueError,
        r"^host must be a non-empty str, got an empty str",
    ),
    (
        "Identity-job-surrogate",
        lambda ctx: Identity("h", job="j\udc80"),
        ValueError,
        r"^job 'j\\udc80'" + SURROGATE,
    ),
    (
        "Identity-job-int",
        lambda ctx: Identity("h", job=5),  # type: ignore[arg-type]
        TypeError,
        r"^job must be a non-empty str or None, got int 5",
    ),
    (
        "annotate-name-surrogate",
        lambda ctx: stroboscope.annotate("step\udc80"),
        ValueError,
        r"^name 'step\\udc80'" + SURROGATE,
    ),
    (
        "annotate-label-surrogate",
        lambda ctx: stroboscope.annotate("step", phase="a\udc80"),
        ValueError,
        r"^annotate\(\): label phase 'a\\udc80'" + SURROGATE,
    ),
    (
        # samples_by_scope() adds a scope_depth column: a label of that name would clash there
        "annotate-label-reserved",
        lambda ctx: stroboscope.annotate("step", scope_depth=1),
        ValueError,
        r"^annotate\(\): label 'scope_depth' is a column of the scope tables",
    ),
    (
        "annotate-color-unknown",
        lambda ctx: stroboscope.annotate("step", color="notacolour"),
        ValueError,
        r"^color must be None, an ARGB int in \[0, 0xFFFFFFFF\], one of nvtx's colour names "
        r"\('blue', .*\), '#rrggbb' or '#rrggbbaa'.*, got str 'notacolour'",
    ),
    (
        "annotate-color-int-range",
        lambda ctx: stroboscope.annotate("step", color=2**32),
        ValueError,
        r"^color must be None, an ARGB int in \[0, 0xFFFFFFFF\].*, got int 4294967296",
    ),
    (
        "annotate-color-negative",
        lambda ctx: stroboscope.annotate(color=-1),  # the decorator form: refused as made
        ValueError,
        r"^color must be None, an ARGB int .*, got int -1",
    ),
    (
        "annotate-color-float",
        lambda ctx: stroboscope.annotate("step", color=1.5),  # type: ignore[arg-type]
        TypeError,
        r"^color must be None, an ARGB int .*, got float 1.5",
    ),
    (
        "annotate-color-bool",
        lambda ctx: stroboscope.annotate("step", color=True),
        TypeError,
        r"^color must be None, an ARGB int .*, got bool True",
    ),
    (
        "annotate-label-nan",
        lambda ctx: stroboscope.annotate("step", loss=math.nan),
        ValueError,
        r"^annotate\(\): label loss=nan must be a str, a bool, an int or a finite float",
    ),
    (
        "labels-label-inf",
        lambda ctx: stroboscope.labels(lr=-math.inf),
        ValueError,
        r"^labels\(\): label lr=-inf must be a str, a bool, an int or a finite float",
    ),
    (
        "aitune-annotate-color",
        lambda ctx: aitune.annotate("step", color="notacolour"),
        ValueError,
        r"^color must be None, an ARGB int .*, got str 'notacolour'",
    ),
    (
        "aitune-annotate_with_nvtx-color",
        lambda ctx: aitune.annotate_with_nvtx(color=2**40),
        ValueError,
        r"^color must be None, an ARGB int .*, got int 1099511627776",
    ),
    (
        "labels-key-surrogate",
        lambda ctx: stroboscope.labels(**{"k\udc80": 1}),
        ValueError,
        r"^labels\(\): label name 'k\\udc80'" + SURROGATE,
    ),
    ("zeus-key-surrogate", zeus_key, ValueError, r"^key 'step\\udc80'" + SURROGATE),
    (
        "ZeusMonitor-gpu_indices-negative",
        zeus_indices,
        ValueError,
        r"^gpu_indices\[1\] must be an int >= 0 \(a device index\), got int -1",
    ),
    (
        "Sampler-tick_now-float",
        lambda ctx: tick_now(1.5),
        TypeError,
        r"^n must be an int \[1, 1073741824\] \(ticks\), got float 1.5",
    ),
    (
        "LightningHooks-log_every_n_steps-nan",
        lambda ctx: LightningHooks(ctx.tmp / "run.parquet", log_every_n_steps=math.nan),  # type: ignore[arg-type]
        TypeError,
        r"^log_every_n_steps must be an int >= 1 \(steps\) or None, got float nan",
    ),
    (
        "end_energy_window-timeout-inf",
        lambda ctx: energy_timeout(math.inf),
        ValueError,
        r"^timeout must be a finite number of seconds >= 0, or None, got float inf",
    ),
    (
        "end_energy_window-timeout-str",
        lambda ctx: energy_timeout("1"),
        TypeError,
        r"^timeout must be a number of seconds \(int or float\), got str '1'",
    ),
    (
        "aitune-snapshot-None",
        lambda ctx: aitune_snapshot(None),  # type: ignore[arg-type]
        TypeError,
        r"^path must be a str path or os\.PathLike, got None",
    ),
    (
        "aitune-snapshot-empty",
        lambda ctx: aitune_snapshot(""),
        ValueError,
        r"^path is an empty path; give a non-empty path",
    ),
    (
        "aitune-snapshot-bytes",
        lambda ctx: aitune_snapshot(b"x.csv"),  # type: ignore[arg-type]
        TypeError,
        r"^path must be a str path or os\.PathLike, got bytes b'x\.csv'",
    ),
    (
        "TrainingRecorder-interval-nan",
        lambda ctx: TrainingRecorder(None, interval=math.nan),
        ValueError,
        r"^interval must be a finite number of seconds in \[0\.0001, 3600\], got float nan",
    ),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), params(BAD_INPUTS))
def test_bad_argument_is_refused_naming_it(
    call: Callable[[Ctx], object],
    exc: type[Exception],
    pattern: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert_refused(call, exc, pattern, tmp_path, monkeypatch)


def test_valid_text_and_arguments_still_pass(tmp_path: Path) -> None:
    ident = Identity("h", rank=3, world_size=4, job="j")
    assert (ident.rank, ident.world_size, ident.job) == (3, 4, "j")
    scope = stroboscope.annotate("étape ✓", phase="前向")
    assert scope.name == "étape ✓"
    table = pa.table({"time": pa.array([5], pa.timestamp("ns", "UTC")), "mono_ns": [7]})
    path = write_part(table, tmp_path / "root", identity=ident, name="part-1.parquet")
    assert path.endswith(os.path.join("job=j", "host=h", "rank=3", "part-1.parquet"))
