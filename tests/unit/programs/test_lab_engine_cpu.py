"""``lab compare``'s engine CPU: the process tree of one ``podway engine --node-id``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from podway.programs.lab.compare import engine_cpu

BURN = ("import time\nend = time.process_time() + 0.3\n"
        "while time.process_time() < end: pass\ntime.sleep(30)\n")


def test_engine_cpu_counts_the_engine_and_its_children_and_only_them() -> None:
    """A stand-in "engine" (argv names --node-id) whose child burns 0.3 s of CPU: its figure
    holds the child's work; another node id, none running, is None."""
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.executable, '-c', "
         f"{BURN!r}])", "engine", "--node-id", "lab-x-edge"])
    try:
        deadline = time.monotonic() + 20  # a loaded machine: the burn's wall time varies
        while (engine_cpu("lab-x-edge") or 0) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.1)
        # The child's 0.3 s of work (the parent alone uses a fraction of that).
        assert (engine_cpu("lab-x-edge") or 0) >= 0.3
        assert engine_cpu("lab-x-edge-kernel") is None
    finally:
        for child in _children(parent.pid):  # the burner, by its pid, then its parent
            os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait()


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                if entry.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
        except (OSError, ValueError):
            continue
    return out
