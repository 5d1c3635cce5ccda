"""A writable copy of the recorded /proc tree ``tests/data/proc/basic`` whose counters a test
advances between deterministic ticks (:meth:`Sampler.tick_now`), so every value a source reads
is known by hand: no sleeping, no dependence on what the machine happens to be doing.

The sources keep their files open, so every rewrite goes over the same inode, in place.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from _paths import DATA

PID = 6767  # the process recorded in tests/data/proc/basic


def _rewrite(path: Path, text: str) -> None:
    with open(path, "r+") as f:
        f.write(text)
        f.truncate()


class FakeProc:
    """``tests/data/proc/basic`` copied to ``root``, with settable CPU and network counters.

    Parameters
    ----------
    root : Path
        A new directory for the copy (pass it as ``proc_root``, with ``pid=PID``).
    """

    def __init__(self, root: Path) -> None:
        shutil.copytree(DATA / "proc" / "basic", root)
        self.root = root
        self._stat_rest = (root / "stat").read_text().splitlines()[1:]
        self._dev_lines = (root / "net" / "dev").read_text().splitlines()
        self._disk_lines = (root / "diskstats").read_text().splitlines()
        self._pid_stat = (root / str(PID) / "stat").read_text().split()
        self.user_ticks = 10_000  # aggregate "cpu" line, in USER_HZ ticks
        self.idle_ticks = 100_000
        self.eth0_sent = 1_000  # bytes
        self.eth0_recv = 2_000
        self.vda_written_sectors = 5_000  # 512-byte sectors
        self.pid_utime = 17  # USER_HZ ticks of process PID
        self._write()

    def advance(
        self,
        *,
        user: int = 0,
        idle: int = 0,
        sent: int = 0,
        recv: int = 0,
        written_sectors: int = 0,
        pid_utime: int = 0,
    ) -> None:
        """Add to the counters (USER_HZ ticks, bytes, sectors) and rewrite the files."""
        self.user_ticks += user
        self.idle_ticks += idle
        self.eth0_sent += sent
        self.eth0_recv += recv
        self.vda_written_sectors += written_sectors
        self.pid_utime += pid_utime
        self._write()

    def _write(self) -> None:
        cpu = f"cpu  {self.user_ticks} 0 0 {self.idle_ticks} 0 0 0 0 0 0"
        _rewrite(self.root / "stat", "\n".join([cpu, *self._stat_rest]) + "\n")
        fields = list(self._pid_stat)
        fields[13] = str(self.pid_utime)  # field 14 of /proc/PID/stat: utime
        _rewrite(self.root / str(PID) / "stat", " ".join(fields) + "\n")
        disks = []
        for line in self._disk_lines:
            parts = line.split()
            if parts[2] == "vda":
                parts[9] = str(self.vda_written_sectors)  # field 10: sectors written
                line = " ".join(parts)
            disks.append(line)
        _rewrite(self.root / "diskstats", "\n".join(disks) + "\n")
        lines = []
        for line in self._dev_lines:
            if line.strip().startswith("eth0:"):
                line = f"  eth0: {self.eth0_recv} 10 0 0 0 0 0 0 {self.eth0_sent} 10 0 0 0 0 0 0"
            lines.append(line)
        _rewrite(self.root / "net" / "dev", "\n".join(lines) + "\n")


def many_cores_proc(root: Path, cores: int) -> Path:
    """``tests/data/proc/basic`` with a /proc/stat of ``cores`` CPUs (for the ring-size bound)."""
    shutil.copytree(DATA / "proc" / "basic", root)
    lines = [f"cpu  {cores * 100} 0 0 {cores * 1000} 0 0 0 0 0 0"]
    lines += [f"cpu{k} 100 0 0 1000 0 0 0 0 0 0" for k in range(cores)]
    (root / "stat").write_text("\n".join(lines) + "\nctxt 1\nbtime 1700000000\n")
    return root
