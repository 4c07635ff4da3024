"""Shared by the survival test and bench/survive.py: `podway run` in a subprocess with a
persistent state folder, a bounded request loop through Envoy, and kill -9 of either process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from podway.envoy.engine import admin

from .harness import get


@dataclass
class Load:
    """Sequential requests to loopback until stopped (or ``limit`` requests), counting each
    failure with the time it happened."""

    port: int
    host: str
    limit: int = 200_000
    ok: int = 0
    failures: list[tuple[float, str]] = field(default_factory=list)
    last_ok: float = 0.0
    answered_by: str = ""

    async def run(self, stop: asyncio.Event) -> None:
        for _ in range(self.limit):
            if stop.is_set():
                return
            try:
                status, body = await get(self.port, self.host, "/")
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
                self.failures.append((time.monotonic(), type(exc).__name__))
                await asyncio.sleep(0.01)
                continue
            if status != 200:
                self.failures.append((time.monotonic(), str(status)))
                continue
            self.ok += 1
            self.last_ok = time.monotonic()
            self.answered_by = str(body.get("name", ""))


async def start_podway(root: Path, state: Path, http_port: int, https_port: int,
                       status: Path | None = None, *, sotw: bool = False,
                       log: Path | None = None, log_level: str = "warning"
                       ) -> asyncio.subprocess.Process:
    """`podway run` on ``root`` with state folder ``state``; ``status``: its status file
    (written once the first snapshot is in the cache); ``sotw``: state-of-the-world xDS;
    ``log``: a file its log (and Envoy's) is appended to, so a failure can show it."""
    extra = (("--status-file", str(status)) if status is not None else ()) + (
        ("--sotw",) if sotw else ())
    with contextlib.ExitStack() as files:
        err = files.enter_context(log.open("ab")) if log is not None \
            else asyncio.subprocess.DEVNULL
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "podway", "run", "--manifests", str(root), "--address",
            "127.0.0.1", "--http-port", str(http_port), "--https-port", str(https_port),
            "--drain-s", "0.5", "--log-level", log_level, "--state-dir", str(state), *extra,
            stdout=asyncio.subprocess.DEVNULL, stderr=err)


async def serving(port: int, host: str) -> bool:
    """One request answered 200 through Envoy."""
    probe = Load(port, host, limit=1)
    await probe.run(asyncio.Event())
    return probe.ok == 1


async def xds_connected(state: Path) -> bool:
    """Envoy's xDS stream is up (``control_plane.connected_state``), asked over its admin
    socket in the state folder."""
    try:
        stats = await admin.stats(f"unix:{state / 'admin.sock'}", "control_plane.connected")
    except (OSError, TimeoutError):
        return False
    return stats.get("control_plane.connected_state") == 1


def envoy_pid(state: Path) -> int | None:
    try:
        return int(json.loads((state / "envoy.json").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


async def until(check: object, limit_s: float) -> float:
    """Poll a sync or async predicate until it holds; the seconds it took."""
    began = time.monotonic()
    async with asyncio.timeout(limit_s):
        while True:
            result = check()  # type: ignore[operator]
            if asyncio.iscoroutine(result):
                result = await result
            if result:
                return time.monotonic() - began
            await asyncio.sleep(0.02)


async def kill9(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    await process.wait()


async def stop(process: asyncio.subprocess.Process, limit_s: float = 15) -> int:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(limit_s):
                await process.wait()
        except TimeoutError:
            await kill9(process)
    assert process.returncode is not None
    return process.returncode


def kill_envoy(state: Path, pid: int | None = None) -> None:
    """Clean-up of last resort: an Envoy whose Podway is gone is nobody's child."""
    pid = pid or envoy_pid(state)
    if pid is not None and alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
