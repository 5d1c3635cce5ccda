"""proc_tree keeps few file descriptors: a tree larger than the soft RLIMIT_NOFILE allows is
followed whole, and what is not followed is reported in ``stats()``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# Run in a child interpreter: it lowers its own soft RLIMIT_NOFILE to 64 and starts 60 sleeping
# children. Holding 2 descriptors per member (as proc_tree did) needs 122 for the tree alone.
_CHILD = textwrap.dedent(
    """
    import json, resource, subprocess, sys
    import stroboscope

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    kids = [subprocess.Popen(["sleep", "60"]) for _ in range(60)]
    try:
        s = stroboscope.Sampler(0.001, sources=["proc_tree"])
        s.tick_now(1)
        table = s.snapshot().to_arrow()
        st = s.stats().source("proc_tree")
        out = {
            "count": table.column("proc.tree.count").to_pylist()[-1],
            "untracked": table.column("proc.tree.untracked").to_pylist()[-1],
            "not_followed": st.not_followed,
            "reason": st.reason,
        }
        # The host can still open files of its own.
        files = [open(sys.executable, "rb") for _ in range(16)]
        out["host_opened"] = len(files)
        for f in files:
            f.close()
        s.close()
    finally:
        for k in kids:
            k.kill()
            k.wait()
    print(json.dumps(out))
    """
)


def test_proc_tree_follows_a_tree_larger_than_the_fd_limit() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {
        "count": 61,  # the child interpreter and its 60 sleeping children
        "untracked": 0,
        "not_followed": 0,
        "reason": None,
        "host_opened": 16,
    }
