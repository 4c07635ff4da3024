"""Private by default: another local user (``nobody``) can neither reach xDS (so no key), nor
Envoy's admin (so no ``POST /healthcheck/fail``), nor read the state folder; and neither Podway
nor Envoy listens on TCP for any of it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from podway.envoy.engine import admin
from podway.programs.standalone import Standalone, StandaloneOptions
from podway.translate import TranslateOptions

from .harness import free_port

pytestmark = pytest.mark.e2e

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"  # readable by nobody (the venv's may live under /root)

# Run as nobody: try each socket (and send admin a mutating call), read each file.
PROBE = r"""
import json, os, socket, sys
state = sys.argv[1]
out = {}
for name in ("xds.sock", "admin.sock"):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(os.path.join(state, name))
        s.sendall(b"POST /healthcheck/fail HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")
        out[name] = "connected"
    except PermissionError:
        out[name] = "denied"
    except OSError as exc:
        out[name] = type(exc).__name__
    finally:
        s.close()
for name in ("bootstrap.json", "envoy.json", "envoy.log", "."):
    try:
        path = os.path.join(state, name)
        os.listdir(path) if name == "." else open(path, "rb").read()
        out[name] = "read"
    except PermissionError:
        out[name] = "denied"
print(json.dumps(out))
"""


def _as_nobody(state: Path) -> dict[str, str]:
    done = subprocess.run([SYSTEM_PYTHON, "-c", PROBE, str(state)], user=NOBODY, group=NOBODY,
                          extra_groups=[], capture_output=True, text=True, check=True,
                          timeout=30)
    result: dict[str, str] = json.loads(done.stdout)
    return result


def _tcp_listen_ports(pid: int) -> set[int]:
    """TCP ports a process listens on (its socket inodes matched in /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a probe as nobody")
@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason="no /usr/bin/python3")
async def test_another_local_user_reaches_neither_xds_nor_admin(tmp_path: Path,
                                                               short_dir: Path) -> None:
    """As nobody: xDS and admin sockets refuse the connection and the state files are
    unreadable, even with the state folder opened up (the sockets and files are 0600); admin
    still reports LIVE afterwards (no health-check failure got in); TCP listeners are only the
    traffic ports."""
    root = tmp_path / "m"
    shutil.copytree(Path(__file__).parents[2] / "examples" / "quickstart", root)
    os.chmod(short_dir, 0o755)  # only Podway's own protection counts below
    state = short_dir / "s"
    http_port, https_port = free_port(), free_port()
    standalone = Standalone(StandaloneOptions(
        manifests=root, state_dir=state, drain_s=0,
        translate=TranslateOptions(address="127.0.0.1", http_port=http_port,
                                   https_port=https_port)))
    task = asyncio.create_task(standalone.run())
    try:
        async with asyncio.timeout(30):
            await standalone.pipeline.wait_for(lambda s: s.generation >= 1)
            engine = await standalone.engine()
            assert engine is not None
            await engine.wait_ready()
        assert standalone.server.port == 0  # no TCP xDS listener at all
        assert engine.pid is not None
        assert _tcp_listen_ports(engine.pid) <= {http_port, https_port, 18000}
        denied = dict.fromkeys(("xds.sock", "admin.sock", "bootstrap.json", "envoy.json",
                                "envoy.log", "."), "denied")
        assert _as_nobody(state) == denied
        os.chmod(state, 0o755)  # a careless admin opens the folder: files and sockets hold
        assert _as_nobody(state) == {**denied, ".": "read"}
        assert await admin.is_ready(await engine.wait_started())
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
