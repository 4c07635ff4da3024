"""A serving `podway demo` is an instance `podway status` and `podway explain` can reach: it says
how, and the commands say which instance answered."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .harness import free_port

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).parents[2]


def _podway(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podway", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False, env={**os.environ, "COLUMNS": "80"})


def _quickstart(tmp_path: Path) -> Path:
    """examples/quickstart with every fixed port moved to a free one."""
    manifests = tmp_path / "quickstart"
    shutil.copytree(ROOT / "examples/quickstart", manifests)
    ports = {old: free_port() for old in (18101, 18102, 18103, 18000)}
    for path in manifests.glob("*.yaml"):
        text = path.read_text()
        for old, new in ports.items():
            text = re.sub(rf"\b{old}\b", str(new), text)
        path.write_text(text)
    return manifests


def test_demo_json_is_the_table_as_data_on_stdout_alone(tmp_path: Path) -> None:
    """`podway demo --once -o json`: standard output is one JSON document, the table's rows;
    the progress lines go to standard error."""
    done = _podway("demo", "--once", "-o", "json", "--manifests", str(_quickstart(tmp_path)),
                   "--http-port", str(free_port()), "--https-port", str(free_port()),
                   "--state-dir", str(tmp_path / "state"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) >= 8
    assert set(rows[0]) == {"request", "status", "answered_by", "ms"}
    assert {r["answered_by"] for r in rows} >= {"web-0", "api-0", "echo-tcp-0"}
    assert "started" in done.stderr


def test_the_demo_says_how_to_reach_it_and_status_reaches_it(tmp_path: Path) -> None:
    manifests = _quickstart(tmp_path)
    state = tmp_path / "demo-state"
    http, https = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "podway", "demo", "--manifests", str(manifests), "--http-port",
         str(http), "--https-port", str(https), "--state-dir", str(state)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "80"})
    try:
        assert proc.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or ()],
                         daemon=True).start()
        hint = ""
        deadline = time.monotonic() + 90
        while not hint:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail("the demo never said how to reach it")
            if line.startswith("ask it:"):
                hint = line.strip()
        assert hint == (f"ask it: podway status --state-dir {state}; podway explain "
                        f"http://127.0.0.1:{http}/ --state-dir {state}")
        done = _podway("status", "--state-dir", str(state), "-o", "json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert f"asking the instance in {state}" in done.stderr
        assert json.loads(done.stdout)["state"]["generation"] >= 1
        done = _podway("explain", f"https://shop.example.com:{https}/", "--state-dir", str(state),
                       cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "verdict: served by pool/" in done.stdout, done.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
