"""Disk and network counters against bytes this test moves itself.

Each check brackets the sampler's two reads between two reads of the kernel's own files made in
Python (``/sys/block/*/stat``, ``/proc/net/dev``): the bytes we moved <= the sampler's delta <=
the bracketing delta. Other processes may move bytes at the same time (the bracket then widens,
the verdict holds); nothing depends on timing.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from stroboscope.sampling import CoreSampler as Sampler


def _block_device_of(path: Path) -> str | None:
    """The whole block device (name in /sys/block) holding ``path``, or None (tmpfs, overlay)."""
    st = os.stat(path)
    node = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not node.exists():
        return None
    real = node.resolve()
    if (real / "partition").exists():
        real = real.parent
    return real.name if (Path("/sys/block") / real.name).exists() else None


def _sys_block_written_bytes() -> int:
    total = 0
    for dev in Path("/sys/block").iterdir():
        fields = (dev / "stat").read_text().split()
        total += int(fields[6]) * 512
    return total


def test_disk_write_bytes_count_an_o_direct_write(tmp_path: Path) -> None:
    device = _block_device_of(tmp_path)
    if device is None:
        pytest.skip(f"no block device backs {tmp_path} (tmpfs or overlay): nothing to count on")
    size = 4 << 20
    buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT wants
    buf.write(os.urandom(size))
    s = Sampler(0.001, sources={"diskio": None}, capacity=64)  # every tick: both reads
    try:
        if s.stats().source("diskio").interface != "/sys/block/*/stat":
            pytest.skip("diskio fell back to /proc/diskstats here")
        try:
            fd = os.open(tmp_path / "direct.bin", os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
        except OSError as exc:
            pytest.skip(f"O_DIRECT refused by the filesystem holding {tmp_path}: {exc}")
        py0 = _sys_block_written_bytes()
        s.tick_now(1)
        try:
            assert os.write(fd, buf) == size
            os.fsync(fd)
        finally:
            os.close(fd)
        s.tick_now(1)
        py1 = _sys_block_written_bytes()
        col = s.snapshot().to_arrow().column("disk.write_bytes").to_pylist()
    finally:
        s.close()
    delta = col[1] - col[0]
    assert size <= delta <= py1 - py0, (size, delta, py1 - py0, device)


def _net_dev_bytes(include_lo: bool) -> tuple[int, int]:
    sent = recv = 0
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == "lo" and not include_lo:
            continue
        f = rest.split()
        recv += int(f[0])
        sent += int(f[8])
    return sent, recv


def _send_over_loopback(n: int) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    got = bytearray()

    def receive() -> None:
        conn, _ = server.accept()
        with conn:
            while len(got) < n and (chunk := conn.recv(1 << 16)):
                got.extend(chunk)

    t = threading.Thread(target=receive)
    t.start()
    with socket.create_connection(server.getsockname()) as c:
        c.sendall(b"x" * n)
    t.join()
    server.close()
    assert len(got) == n


@pytest.mark.parametrize("include_lo", [True, False])
def test_network_counts_loopback_only_when_asked(include_lo: bool) -> None:
    # Traffic over loopback: counted when asked and left out otherwise (veth: the test below).
    n = 1 << 20
    s = Sampler(0.001, sources={"network": None}, net_include_loopback=include_lo, capacity=64)
    try:
        # /proc/net/dev read on both sides of each tick: the bytes between our two reads are
        # bracketed by [inner delta, outer delta] of the same interfaces.
        py0 = _net_dev_bytes(include_lo)
        s.tick_now(1)
        inner0 = _net_dev_bytes(include_lo)
        _send_over_loopback(n)
        inner1 = _net_dev_bytes(include_lo)
        s.tick_now(1)
        py1 = _net_dev_bytes(include_lo)
        table = s.snapshot().to_arrow()
    finally:
        s.close()
    sent = table.column("net.sent_bytes").to_pylist()
    recv = table.column("net.recv_bytes").to_pylist()
    d_sent, d_recv = sent[1] - sent[0], recv[1] - recv[0]
    assert d_sent <= py1[0] - py0[0] and d_recv <= py1[1] - py0[1]
    assert d_sent >= inner1[0] - inner0[0] and d_recv >= inner1[1] - inner0[1]
    if include_lo:  # lo sends and receives every byte (plus TCP/IP headers)
        assert d_sent >= n and d_recv >= n
    else:
        # Only what other interfaces moved meanwhile: counting lo too would add its n bytes to
        # at least the inner delta of the others (however busy they were).
        assert d_sent < n + inner1[0] - inner0[0] and d_recv < n + inner1[1] - inner0[1]


@contextlib.contextmanager
def _veth_pair() -> Iterator[str]:
    """A veth pair ``stbfid<pid>a`` <-> ``...b``, both up, removed afterwards; skips the test
    where this process may not make one (CAP_NET_ADMIN, the ip tool)."""
    ip = shutil.which("ip")
    if ip is None:
        pytest.skip("no ip(8) to make a veth pair")
    a, b = f"stbfid{os.getpid() % 100000}a", f"stbfid{os.getpid() % 100000}b"
    made = subprocess.run(
        [ip, "link", "add", a, "type", "veth", "peer", "name", b], capture_output=True, text=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot make a veth pair here (needs CAP_NET_ADMIN): {made.stderr.strip()}")
    try:
        for name in (a, b):
            subprocess.run([ip, "link", "set", name, "up"], check=True)
        # The kernel brings the carrier up and attaches the qdisc later, from a work item (a
        # frame sent before that is dropped uncounted): wait for both ends to say so.
        deadline = time.monotonic() + 60
        for name in (a, b):
            while True:
                shown = subprocess.run(
                    [ip, "-o", "link", "show", "dev", name], capture_output=True, text=True
                ).stdout
                if "state UP" in shown and "qdisc noop" not in shown:
                    break
                assert time.monotonic() < deadline, f"{name} not up after 60 s: {shown}"
                time.sleep(0.01)
        yield a
    finally:
        subprocess.run([ip, "link", "del", a], capture_output=True)


def test_network_counts_bytes_sent_over_a_veth_pair() -> None:
    # Raw Ethernet frames out of one end of a veth pair: the kernel counts each frame's bytes once
    # as sent (on that end) and once as received (on the other), neither of them loopback.
    frames, size = 200, 1000
    with _veth_pair() as end:
        try:
            raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        except PermissionError as exc:
            pytest.skip(f"no raw socket here (needs CAP_NET_RAW): {exc}")
        with raw:
            raw.bind((end, 0))
            # Broadcast to a local-experimental EtherType (0x88B5, IEEE 802): nobody answers it.
            frame = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + b"\x88\xb5"
            frame += b"x" * (size - len(frame))
            s = Sampler(0.001, sources={"network": None}, capacity=64)
            try:
                py0 = _net_dev_bytes(include_lo=False)
                s.tick_now(1)
                for _ in range(frames):
                    assert raw.send(frame) == size
                s.tick_now(1)
                py1 = _net_dev_bytes(include_lo=False)
                table = s.snapshot().to_arrow()
            finally:
                s.close()
    sent = table.column("net.sent_bytes").to_pylist()
    recv = table.column("net.recv_bytes").to_pylist()
    d_sent, d_recv = sent[1] - sent[0], recv[1] - recv[0]
    assert frames * size <= d_sent <= py1[0] - py0[0]
    assert frames * size <= d_recv <= py1[1] - py0[1]
