"""The drop-in ``SystemMonitor`` publishing to Weights & Biases (offline: no account, no network).

Where a training script had a pure-Python monitor thread, the same constructor now samples in
stroboscope's C++ thread and publishes one aggregated event per ``sample_rate_seconds``::

    python examples/system_monitor_wandb.py --out /tmp/run

Needs ``pip install 'stroboscope[wandb]'``. Prints the offline run's directory
(``wandb sync DIR`` uploads it later) and the last event published.
"""

from __future__ import annotations

import argparse
import os
import time

from stroboscope.compat import SystemMonitor
from stroboscope.senders.wandb import WandbSender


def busy(seconds: float) -> int:
    """Some CPU work standing in for training steps."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += sum(i * i for i in range(2000))
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="directory for the offline W&B run")
    parser.add_argument("--seconds", type=float, default=1.5, help="how long to work")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_SILENT", "true")
    sender = WandbSender(project="stroboscope-example", mode="offline", dir=args.out)
    monitor = SystemMonitor(os.getpid(), sender, sample_rate_seconds=0.5, rank=0)
    monitor.start()
    try:
        busy(args.seconds)
    finally:
        monitor.shutdown()  # publishes the last window, then finishes the run it started
    print(f"wandb offline run in {sender.run.dir}")
    print(
        f"last event: cpu {monitor.sampler.get('rank0.cpu')} %, "
        f"process RSS {monitor.sampler.get('rank0.proc.memory.rssMB')} MB"
    )


if __name__ == "__main__":
    main()
