"""Benchmark: the data plane outlives Podway; figures for kill -9 of Podway and of Envoy.

Runs `podway run` (a subprocess, persistent state folder) in front of two echo backends and
keeps a request loop going through Envoy (``--workers`` concurrent loops, one connection per
request, loopback only). Then, for each of ``--rounds`` rounds:

1. kill -9 of Podway; Envoy serves on alone for ``--down-s``; a new Podway starts, adopts the
   running Envoy, and an edit (the Ingress switches backend, so the other pool is removed)
   must then apply. Figures: requests failed (target 0), requests served while Podway was
   down, time from the restart to "adopted" (the new Podway's log line), to Envoy's xDS stream
   being back, and to the edit being served. Twice: with the edit made once Envoy is back on
   xDS, and made while Podway was down (then the new Podway's first push carries it).
2. kill -9 of Envoy: Podway starts a new one. Figures: requests failed, and time from the kill
   to the first request served again.

    .venv/bin/python bench/survive.py [--rounds 3] [--workers 4] [--down-s 2] [--sotw]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

# bench/xds.py would shadow the "xds" protobuf package Envoy's modules import.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from podway.envoy.engine import admin  # noqa: E402 - after the sys.path fix above
from podway.programs.demo import read_response  # noqa: E402 - after the sys.path fix above
from podway.tools.echo import Identity  # noqa: E402 - after the sys.path fix above
from podway.tools.echo.server import EchoOptions, serve  # noqa: E402 - after the sys.path fix above

INGRESS = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: web, namespace: default}}
spec:
  ingressClassName: podway
  rules:
  - host: shop.test
    http:
      paths:
      - path: /
        pathType: Prefix
        backend: {{service: {{name: {backend}, port: {{number: 80}}}}}}
"""

BACKEND = """apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec: {{selector: {{app: {name}}}, ports: [{{name: http, port: 80, targetPort: {port}}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: default
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: http, port: {port}, protocol: TCP}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {{ready: true}}
"""


def free_port() -> int:
    """A free port below the kernel's ephemeral range (see tests/e2e/harness.py)."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


@dataclass
class Load:
    port: int
    ok: int = 0
    failed: list[float] = field(default_factory=list)  # monotonic times of failures
    served_at: list[float] = field(default_factory=list)  # of successes, last few only
    last_name: str = ""

    async def worker(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                async with asyncio.timeout(5):
                    reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                    try:
                        writer.write(b"GET / HTTP/1.1\r\nHost: shop.test\r\n"
                                     b"Connection: close\r\n\r\n")
                        status, body = await read_response(reader)
                    finally:
                        writer.close()
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
                self.failed.append(time.monotonic())
                await asyncio.sleep(0.005)
                continue
            if status != 200:
                self.failed.append(time.monotonic())
                continue
            self.ok += 1
            self.served_at = [*self.served_at[-999:], time.monotonic()]
            self.last_name = str(json.loads(body).get("name", ""))


async def until(check: object, limit_s: float = 60) -> float:
    began = time.monotonic()
    async with asyncio.timeout(limit_s):
        while not check():  # type: ignore[operator]  # noqa: ASYNC110 - polls other processes
            await asyncio.sleep(0.005)
    return time.monotonic() - began


class Podway:
    def __init__(self, root: Path, state: Path, http_port: int, *, sotw: bool = False) -> None:
        self.root, self.state, self.http_port = root, state, http_port
        self.sotw = sotw
        self.process: asyncio.subprocess.Process | None = None
        self.adopted_at = 0.0

    async def start(self) -> None:
        self.adopted_at = 0.0
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "podway", "run", "--manifests", str(self.root),
            "--address", "127.0.0.1", "--http-port", str(self.http_port), "--https-port",
            str(free_port()), "--drain-s", "0.5", "--log-level", "warning",
            "--state-dir", str(self.state), *(("--sotw",) if self.sotw else ()),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        asyncio.get_running_loop().create_task(self._watch(self.process))

    async def _watch(self, process: asyncio.subprocess.Process) -> None:
        assert process.stderr is not None
        async for line in process.stderr:
            if b"adopted the running Envoy" in line:
                self.adopted_at = time.monotonic()

    async def kill9(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 20)
            except TimeoutError:
                await self.kill9()

    def envoy_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, KeyError):
            return int(json.loads((self.state / "envoy.json").read_text())["pid"])
        return None


async def xds_connected(state: Path) -> bool:
    """Envoy's xDS stream is up, asked over its admin socket in the state folder."""
    try:
        _, body = await admin.request(f"unix:{state / 'admin.sock'}",
                                      "/stats?filter=control_plane.connected_state")
    except (OSError, TimeoutError):
        return False
    return body.strip().endswith(": 1")


async def until_async(check: Callable[[], Awaitable[bool]], limit_s: float = 60) -> float:
    began = time.monotonic()
    async with asyncio.timeout(limit_s):
        while not await check():  # noqa: ASYNC110 - polls another process
            await asyncio.sleep(0.005)
    return time.monotonic() - began


async def kill_podway(podway: Podway, load: Load, *, down_s: float, backend: str,
                      edit_while_down: bool) -> str:
    """kill -9 of Podway, Envoy alone for ``down_s``, a restart adopts it, an edit applies
    (made once Envoy is back on xDS, or while Podway was down)."""
    envoy = podway.envoy_pid()
    failed, ok = len(load.failed), load.ok
    await podway.kill9()
    if edit_while_down:
        write(podway.root, "ingress.yaml", INGRESS.format(backend=backend))
    await asyncio.sleep(down_s)  # Podway is down: the load keeps going meanwhile
    served_down = load.ok - ok
    restarted = time.monotonic()
    await podway.start()
    connected_s = await until_async(lambda: xds_connected(podway.state))
    edited = time.monotonic()
    if not edit_while_down:
        write(podway.root, "ingress.yaml", INGRESS.format(backend=backend))
    await until(lambda: load.last_name == backend)
    edit_s = time.monotonic() - (restarted if edit_while_down else edited)
    await until(lambda: podway.adopted_at > 0)
    return (f"failed={len(load.failed) - failed} served_while_down={served_down} "
            f"restart_to_adopted={podway.adopted_at - restarted:.2f}s "
            f"restart_to_xds_reconnected={connected_s:.2f}s "
            f"{'restart' if edit_while_down else 'edit'}_to_edit_served={edit_s:.2f}s "
            f"same_envoy={podway.envoy_pid() == envoy}")


async def kill_envoy(podway: Podway, load: Load) -> str:
    """kill -9 of Envoy: Podway starts a new one; time until a request is served again."""
    failed = len(load.failed)
    envoy = podway.envoy_pid()
    assert envoy is not None
    killed = time.monotonic()
    os.kill(envoy, signal.SIGKILL)
    await until(lambda: podway.envoy_pid() not in (None, envoy))
    await until(lambda: bool(load.served_at) and load.served_at[-1] > killed
                and (not load.failed or load.failed[-1] < load.served_at[-1]))
    first_ok = next(t for t in load.served_at if t > killed)
    return f"failed={len(load.failed) - failed} kill_to_serving={first_ok - killed:.2f}s"


def write(root: Path, name: str, text: str) -> None:
    tmp = root / f".{name}.tmp"
    tmp.write_text(text)
    tmp.replace(root / name)


async def main(rounds: int, workers: int, down_s: float, *, sotw: bool) -> None:
    work = Path(tempfile.mkdtemp(prefix="pw-bench-", dir="/tmp"))
    root, state = work / "m", work / "s"
    root.mkdir()
    stop = asyncio.Event()
    echoes = []
    for name in ("blue", "green"):
        port = free_port()
        started = asyncio.Event()
        echoes.append(asyncio.create_task(serve(EchoOptions(
            port=port, identity=Identity(name=name)), started=started)))
        await started.wait()
        write(root, f"{name}.yaml", BACKEND.format(name=name, port=port))
    write(root, "ingress.yaml", INGRESS.format(backend="blue"))
    load = Load(free_port())
    podway = Podway(root, state, load.port, sotw=sotw)
    loops: list[asyncio.Task[None]] = []
    try:
        await podway.start()
        probe = Load(load.port)
        probe_stop = asyncio.Event()
        probe_task = asyncio.create_task(probe.worker(probe_stop))
        await until(lambda: probe.ok > 0)
        probe_stop.set()
        await probe_task
        loops = [asyncio.create_task(load.worker(stop)) for _ in range(workers)]
        await until(lambda: load.ok > 100)
        backend = "blue"
        print(f"xds={'state of the world' if sotw else 'delta'} workers={workers} "
              f"down_s={down_s}")
        for n in range(1, rounds + 1):
            for while_down in (False, True):
                backend = "green" if backend == "blue" else "blue"
                label = "edit while down" if while_down else "edit after adoption"
                print(f"round {n} kill -9 podway, {label}: " + await kill_podway(
                    podway, load, down_s=down_s, backend=backend, edit_while_down=while_down))
            print(f"round {n} kill -9 envoy: " + await kill_envoy(podway, load))
        print(f"total requests ok={load.ok} failed={len(load.failed)}")
    finally:
        stop.set()
        for task in loops:
            with contextlib.suppress(Exception):
                await task
        await podway.stop()
        envoy = podway.envoy_pid()
        if envoy is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(envoy, signal.SIGKILL)
        print(f"state folder removed on stop: {not state.exists()}")
        for task in echoes:
            task.cancel()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--down-s", type=float, default=2.0)
    parser.add_argument("--sotw", action="store_true", help="state-of-the-world xDS")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.workers, args.down_s, sotw=args.sotw))
