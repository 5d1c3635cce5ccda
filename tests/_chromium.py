"""Headless Chromium driven through its DevTools protocol over a pipe (``--remote-debugging-pipe``):
open a page, run JavaScript in it (awaiting promises), take screenshots, and collect what the
page printed or threw. No library beyond the standard one; skips (or fails, where
``STROBOSCOPE_TEST_REQUIRE`` names ``chromium``) without the browser."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _binaries import binary


def chromium() -> str:
    """The browser's path (skip or fail without it: :func:`_binaries.binary`)."""
    return binary("chromium", "chromium-browser", install="apt-get install chromium")


class Browser:
    """One headless Chromium with one page target; use as a context manager.

    Attributes
    ----------
    console : list of str
        ``level: text`` of every console message, log entry and uncaught exception, in order.
    """

    def __init__(self, width: int = 1280, height: int = 1600, path: str | None = None) -> None:
        # The browser first: without it the test skips before anything is made that would then
        # leak (a profile directory, pipes: a ResourceWarning, an error under filterwarnings).
        program = path or chromium()
        self._open: set[int] = set()  # our pipe ends not closed yet
        self._proc: subprocess.Popen[bytes] | None = None
        self._to_w = -1
        self._dir = tempfile.TemporaryDirectory(prefix="strobo-chromium-")
        try:
            # fds 3 and 4 of the child: it reads commands from 3 and writes replies to 4
            to_r, self._to_w = self._pipe()
            self._from_r, from_w = self._pipe()
            head = [program, f"--user-data-dir={self._dir.name}", f"--window-size={width},{height}"]
            self._proc = self._launch(head, to_r, from_w)
            self._close(to_r)  # the child's ends, now the child's alone
            self._close(from_w)
            self._start(width, height)
        except BaseException:
            self.close()  # a browser that did not come up leaves nothing behind either
            raise

    def _pipe(self) -> tuple[int, int]:
        r, w = os.pipe()
        self._open.update((r, w))
        return r, w

    def _close(self, fd: int) -> None:
        if fd in self._open:
            self._open.discard(fd)
            os.close(fd)

    def _launch(self, head: list[str], r3: int, w4: int) -> subprocess.Popen[bytes]:
        """Start the browser with ``r3`` as its fd 3 and ``w4`` as its fd 4."""

        def fds() -> None:
            os.dup2(r3, 3)
            os.dup2(w4, 4)

        return subprocess.Popen(
            [
                *head,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            preexec_fn=fds,
            close_fds=False,  # fds 3 and 4 are made in preexec_fn; close_fds would close them
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _start(self, width: int, height: int) -> None:
        self._buf = b""
        self._id = 0
        self._events: list[dict[str, Any]] = []
        self.console: list[str] = []
        self.size = (width, height)
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the browser (closing its command pipe ends it) and remove its profile."""
        self._close(self._to_w)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for fd in list(self._open):
            self._close(fd)
        self._dir.cleanup()

    def _read(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buf:
            import select

            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_r], [], [], left)[0]:
                raise TimeoutError(f"no reply from chromium within {timeout} s")
            chunk = os.read(self._from_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return dict(json.loads(msg))

    def _event(self, msg: dict[str, Any]) -> None:
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"])
            self.console.append(f"{p['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            self.console.append(f"exception: {d.get('exception', {}).get('description', d)}")
        elif method == "Log.entryAdded":
            e = p["entry"]
            self.console.append(f"{e['level']}: {e['text']}")
        self._events.append(msg)

    def call(self, method: str, session: bool = False, timeout: float = 60, **params: Any) -> Any:
        """Send one protocol command (to the page's session when ``session``); its result."""
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self._session
        try:
            os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        except BrokenPipeError:  # it exited before it read: as when it closes its pipe later
            raise RuntimeError("chromium closed its pipe") from None
        while True:
            reply = self._read(timeout)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._event(reply)

    def open(self, url: str, timeout: float = 60) -> None:
        """Navigate to ``url`` and wait for its load event."""
        self._events.clear()
        self.call("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self._events):
            self._event(self._read(max(deadline - time.monotonic(), 0.01)))

    def eval(self, expression: str, timeout: float = 60) -> Any:
        """The value of ``expression`` in the page (a promise awaited), as JSON."""
        got = self.call(
            "Runtime.evaluate",
            session=True,
            timeout=timeout,
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
        )
        if "exceptionDetails" in got:
            d = got["exceptionDetails"]
            raise RuntimeError(f"{expression[:80]}: {d.get('exception', {}).get('description', d)}")
        return got["result"].get("value")

    def screenshot(self, path: Path) -> bytes:
        """A PNG of the viewport, written to ``path``; its bytes."""
        data = base64.b64decode(self.call("Page.captureScreenshot", session=True)["data"])
        path.write_bytes(data)
        return data
