"""The data plane outlives Podway: kill -9 of `podway run` fails no request, a restarted
Podway adopts the running Envoy and applies edits; kill -9 of Envoy is repaired by Podway."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from .harness import SHOP_INGRESS, backend_manifests, echo_backend, free_port
from .survive import (
    Load,
    alive,
    envoy_pid,
    kill9,
    kill_envoy,
    serving,
    start_podway,
    stop,
    until,
    xds_connected,
)

pytestmark = pytest.mark.e2e


def _ingress(backend: str) -> str:
    """shop.test/ → ``backend``; two more paths keep both pools (clusters) in the config, so an
    edit is a route change only: the test is about adoption, not about cluster removal order
    on a fresh stream (bench/survive.py measures an edit made while Podway is down)."""
    keep = "".join(f"      - {{path: /keep-{b}, pathType: Prefix, backend: {{service: "
                   f"{{name: {b}, port: {{number: 80}}}}}}}}\n" for b in ("blue", "green"))
    return SHOP_INGRESS.replace("name: web, port", f"name: {backend}, port") + keep


async def test_kill_9_of_podway_fails_no_request_and_a_restart_adopts_envoy(
        tmp_path: Path, short_dir: Path) -> None:
    """Under a request loop: kill -9 of podway, requests keep succeeding (0 failed), Envoy
    keeps its pid; a new podway adopts it (no new Envoy) and an edit then applies; SIGTERM
    then stops Envoy and removes the state folder."""
    root, state = tmp_path / "m", short_dir / "s"
    root.mkdir()
    tasks: list[asyncio.Task[None]] = []
    for name in ("blue", "green"):
        port, task = await echo_backend(name)
        tasks.append(task)
        (root / f"{name}.yaml").write_text(backend_manifests(name, port))
    (root / "ingress.yaml").write_text(_ingress("blue"))
    http_port = free_port()
    load = Load(http_port, "shop.test")
    stop_load = asyncio.Event()
    first = await start_podway(root, state, http_port, free_port())
    second: asyncio.subprocess.Process | None = None
    pid = None
    try:
        await until(lambda: envoy_pid(state) is not None, 30)
        pid = envoy_pid(state)
        assert pid is not None
        await until(lambda: serving(http_port, "shop.test"), 30)
        tasks.append(asyncio.create_task(load.run(stop_load)))
        await until(lambda: load.ok >= 20, 30)
        marks = {"kill": time.monotonic()}
        await kill9(first)
        await until(lambda: _not(xds_connected(state)), 30)  # Envoy saw Podway go
        served = load.ok
        await until(lambda: load.ok >= served + 50, 30)  # Podway gone: Envoy serves on
        assert alive(pid)
        status = tmp_path / "status.yaml"
        marks["restart"] = time.monotonic()
        second = await start_podway(root, state, http_port, free_port(), status)
        await until(status.exists, 30)  # the new Podway's first snapshot is in its cache
        await until(lambda: xds_connected(state), 30)  # Envoy is back on the new Podway
        marks["edit"] = time.monotonic()
        (root / "ingress.yaml").write_text(_ingress("green"))  # needs the new Podway
        await until(lambda: load.answered_by == "green", 30)
        marks["green"] = time.monotonic()
        assert envoy_pid(state) == pid  # adopted, not replaced
        stop_load.set()
        await tasks[-1]
        assert load.failures == [], (
            [(round(t - marks["kill"], 3), what) for t, what in load.failures],
            {k: round(v - marks["kill"], 3) for k, v in marks.items()})
        assert await stop(second) == 0
        assert not alive(pid)
        assert not state.exists()
    finally:
        stop_load.set()
        for process in (first, second):
            if process is not None and process.returncode is None:
                await kill9(process)
        kill_envoy(state, pid)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_envoy_killed_under_an_adopting_podway_is_started_again(
        tmp_path: Path, short_dir: Path) -> None:
    """An adopted Envoy is not Podway's child; when it dies (kill -9) Podway still notices
    (pidfd) and starts a new one that serves the same config."""
    root, state = tmp_path / "m", short_dir / "s"
    root.mkdir()
    port, echo = await echo_backend("web")
    (root / "web.yaml").write_text(backend_manifests("web", port) + "---\n" + SHOP_INGRESS)
    http_port = free_port()
    first = await start_podway(root, state, http_port, free_port())
    second: asyncio.subprocess.Process | None = None
    pids: list[int] = []
    try:
        await until(lambda: envoy_pid(state) is not None, 30)
        pids.append(envoy_pid(state) or 0)
        await until(lambda: serving(http_port, "shop.test"), 30)
        await kill9(first)
        second = await start_podway(root, state, http_port, free_port())
        await until(lambda: _adopted_by(pids[0], second), 30)
        os.kill(pids[0], signal.SIGKILL)
        await until(lambda: envoy_pid(state) not in (None, pids[0]), 30)
        pids.append(envoy_pid(state) or 0)
        await until(lambda: serving(http_port, "shop.test"), 30)
        assert await stop(second) == 0
        assert not any(alive(p) for p in pids)
    finally:
        for process in (first, second):
            if process is not None and process.returncode is None:
                await kill9(process)
        for pid in pids:
            kill_envoy(state, pid)
        echo.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await echo


async def _not(check: Coroutine[Any, Any, bool]) -> bool:
    return not await check


def _adopted_by(envoy: int, podway: asyncio.subprocess.Process) -> bool:
    """The adopting Podway holds a pidfd of the Envoy (it supervises it)."""
    fds = Path(f"/proc/{podway.pid}/fd")
    with contextlib.suppress(OSError):
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == "anon_inode:[pidfd]":
                    info = Path(f"/proc/{podway.pid}/fdinfo/{fd.name}").read_text()
                    if f"Pid:\t{envoy}" in info:
                        return True
    return False


async def _engine_cli(state: Path, *flags: str) -> asyncio.subprocess.Process:
    """`podway engine` against an xDS socket nobody serves: Envoy runs (and retries xDS)."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "engine", "--xds", f"unix:{state.parent / 'none.sock'}",
        "--state-dir", str(state), "--drain-s", "0", "--log-level", "warning", *flags,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)


async def test_adoption_needs_the_same_configuration_and_a_live_envoy(short_dir: Path) -> None:
    """After kill -9 of `podway engine`: the same flags adopt the running Envoy; other flags
    drain and replace it (the old one is gone); an Envoy that died meanwhile is replaced."""
    state = short_dir / "e"
    processes: list[asyncio.subprocess.Process] = []
    pids: list[int] = []

    async def engine_then_kill9(*flags: str) -> int:
        process = await _engine_cli(state, *flags)
        processes.append(process)
        await until(lambda: envoy_pid(state) not in (None, *pids) and admin_up(state), 30)
        pid = envoy_pid(state) or 0
        await kill9(process)
        return pid

    try:
        pids.append(await engine_then_kill9())
        again = await _engine_cli(state)
        processes.append(again)
        await until(lambda: _adopted_by(pids[0], again), 30)  # same flags: adopted
        assert envoy_pid(state) == pids[0]
        await kill9(again)
        pids.append(await engine_then_kill9("--concurrency", "2"))  # other flags: replaced
        assert not alive(pids[0])
        os.kill(pids[1], signal.SIGKILL)  # Envoy dies while no Podway runs
        await until(lambda: not alive(pids[1]), 30)
        pids.append(await engine_then_kill9("--concurrency", "2"))  # a dead one: replaced
        assert len(set(pids)) == 3
    finally:
        for process in processes:
            if process.returncode is None:
                await kill9(process)
        for pid in pids:
            kill_envoy(state, pid)


def admin_up(state: Path) -> bool:
    """Envoy's admin socket exists (Envoy is up far enough to be adopted)."""
    return (state / "admin.sock").exists()
