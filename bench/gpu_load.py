"""A known GPU workload for bench/gpu_check.py: back-to-back half-precision matrix multiplies on
every visible GPU, from torch or cupy (whichever is installed), on a thread per device until
stopped. Without either, no load: the checks then run on an idle GPU and say so."""

from __future__ import annotations

import importlib
import threading
from typing import Any, Callable

SIZE = 8192  # 2 x 8192^3 = 1.1 TFLOP per multiply: milliseconds on a data-centre GPU


class Load:
    """Matrix multiplies on every visible GPU until :meth:`stop`; ``what`` says with what."""

    def __init__(self) -> None:
        self.what = "none (neither torch with CUDA nor cupy is installed): the GPU is idle"
        self.multiplies = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        work = _torch_work() or _cupy_work()
        if work is None:
            return
        self.what, devices, step = work
        for d in range(devices):
            t = threading.Thread(target=self._run, args=(step, d), daemon=True)
            self._threads.append(t)

    def _run(self, step: Callable[[int], Callable[[], None]], device: int) -> None:
        once = step(device)
        while not self._stop.is_set():
            once()
            with self._lock:
                self.multiplies += 1

    def start(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)

    @property
    def running(self) -> bool:
        return bool(self._threads)


def _torch_work() -> tuple[str, int, Callable[[int], Callable[[], None]]] | None:
    try:
        torch: Any = importlib.import_module("torch")
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None

    def step(device: int) -> Callable[[], None]:
        a = torch.randn(SIZE, SIZE, device=f"cuda:{device}", dtype=torch.float16)
        b = torch.randn(SIZE, SIZE, device=f"cuda:{device}", dtype=torch.float16)

        def once() -> None:
            (a @ b).sum().item()  # .item() waits for the multiply: one at a time in flight

        return once

    n = torch.cuda.device_count()
    return f"torch {torch.__version__}: {SIZE}x{SIZE} fp16 matmul loop on {n} GPU(s)", n, step


def _cupy_work() -> tuple[str, int, Callable[[int], Callable[[], None]]] | None:
    try:
        cupy: Any = importlib.import_module("cupy")
        n = int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # not installed, or no CUDA runtime/device
        return None

    def step(device: int) -> Callable[[], None]:
        with cupy.cuda.Device(device):
            a = cupy.random.standard_normal((SIZE, SIZE), dtype=cupy.float32).astype(cupy.float16)
            b = cupy.random.standard_normal((SIZE, SIZE), dtype=cupy.float32).astype(cupy.float16)

        def once() -> None:
            with cupy.cuda.Device(device):
                float((a @ b).sum())

        return once

    return f"cupy {cupy.__version__}: {SIZE}x{SIZE} fp16 matmul loop on {n} GPU(s)", n, step
