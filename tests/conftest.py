"""Shared fixtures: fail any test that leaves a sampler running; paths to recorded /proc trees."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from stroboscope._base import lifecycle as _lifecycle
from stroboscope.sampling import CoreSampler as Sampler

DATA = Path(__file__).parent / "data"
FAKE_NVML_SOURCE = Path(__file__).parent / "fake_nvml" / "fake_nvml.c"
FAKE_AMDSMI_SOURCE = Path(__file__).parent / "fake_amdsmi" / "fake_amdsmi.c"


@pytest.fixture(autouse=True)
def no_leaked_sampler() -> Iterator[None]:
    """A test that leaves a sampler thread running fails (and the sampler is stopped)."""
    yield
    gc.collect()
    leaked = [s for s in _lifecycle.live(Sampler) if s.running]
    for s in leaked:
        s.close()
    assert not leaked, f"test left {len(leaked)} sampler(s) running: {leaked}"


@pytest.fixture
def data_dir() -> Path:
    return DATA


def _compile_fake_nvml(out: Path, *defines: str, source: Path = FAKE_NVML_SOURCE) -> Path:
    cc = shutil.which(os.environ.get("CC", "")) or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", *defines, "-o", str(out), str(source)],
        check=True,
    )
    return out


@pytest.fixture(scope="session")
def fake_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The fake NVML library (tests/fake_nvml), built with the system C compiler: a current
    driver ("new") and an old one without the _v2/_v3 symbols ("old")."""
    d = tmp_path_factory.mktemp("fake_nvml")
    return {
        "new": _compile_fake_nvml(d / "libfake_nvml.so"),
        "old": _compile_fake_nvml(d / "libfake_nvml_old.so", "-DFAKE_NVML_OLD"),
    }


@pytest.fixture(scope="session")
def fake_amdsmi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libamd_smi (tests/fake_amdsmi), built with the system C compiler."""
    d = tmp_path_factory.mktemp("fake_amdsmi")
    return _compile_fake_nvml(d / "libfake_amdsmi.so", source=FAKE_AMDSMI_SOURCE)
