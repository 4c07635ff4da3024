"""A stop signal stops `podway run` promptly at start-up: SIGTERM while it parses a big folder
(its Envoy up, waiting for its first config) ends the parse at the next document and stops
Envoy without waiting for a drain (it serves nothing yet), instead of finishing the parse (the
interpreter's exit waits for the parse thread) and waiting ``--drain-s`` (issue 24: two SIGTERMs
were ignored for over 10 s on a loaded machine)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from pathlib import Path

import pytest

from .harness import free_port
from .survive import alive, envoy_pid, kill9, kill_envoy, until

pytestmark = pytest.mark.e2e

OBJECTS = 60_000  # Services and EndpointSlices: seconds of parsing even on a quiet machine


def _big_folder(root: Path) -> None:
    docs = []
    for i in range(OBJECTS // 2):
        docs.append(f"""apiVersion: v1
kind: Service
metadata: {{name: s{i}, namespace: big}}
spec: {{ports: [{{name: http, port: 80, targetPort: 8080}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: s{i}-x, namespace: big, labels: {{kubernetes.io/service-name: s{i}}}}}
ports: [{{name: http, port: 8080}}]
endpoints: [{{addresses: [127.0.0.1], conditions: {{ready: true}}}}]
""")
    (root / "big.yaml").write_text("---\n".join(docs))


async def test_sigterm_while_parsing_a_big_folder_stops_the_parse_and_envoy(
        tmp_path: Path, short_dir: Path) -> None:
    root, state, log = tmp_path / "m", short_dir / "s", tmp_path / "podway.log"
    root.mkdir()
    _big_folder(root)
    with log.open("ab") as err:
        podway = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "podway", "run", "--manifests", str(root), "--address",
            "127.0.0.1", "--http-port", str(free_port()), "--https-port", str(free_port()),
            "--drain-s", "60", "--log-level", "info", "--state-dir", str(state),
            "--status-file", str(tmp_path / "status.yaml"),
            stdout=asyncio.subprocess.DEVNULL, stderr=err)
    pid = None
    try:
        # Envoy is started beside the parse: once it runs, the parse is under way.
        await until(lambda: envoy_pid(state) is not None, 60)
        pid = envoy_pid(state)
        assert pid is not None
        assert not (tmp_path / "status.yaml").exists()  # no first state yet: still parsing
        podway.send_signal(signal.SIGTERM)
        began = time.monotonic()
        async with asyncio.timeout(40):  # a drain alone would take 60 s
            code = await podway.wait()
        took = time.monotonic() - began
        text = log.read_text(errors="replace")
        assert code == 0, text[-2000:]
        assert not alive(pid)
        assert "stopped parsing" in text, text[-2000:]
        assert "big.yaml" in text, text[-2000:]
        assert "serves no listener: stopping it without a drain" in text, text[-2000:]
        assert not (tmp_path / "status.yaml").exists()
        print(f"exited {took:.2f} s after SIGTERM")
    finally:
        with contextlib.suppress(ProcessLookupError):
            await kill9(podway)
        kill_envoy(state, pid)
