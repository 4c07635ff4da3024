"""The data plane outlives Podway: kill -9 of `podway run` fails no request, a restarted
Podway adopts the running Envoy and applies edits — also an edit made while it was down that
removes the pool Envoy still routes to (delta and state of the world); kill -9 of Envoy is
repaired by Podway."""

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

from podway.base.tasks import cancel_and_wait

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
    """shop.test/ → ``backend``: only that pool (cluster) exists, so switching removes one."""
    return SHOP_INGRESS.replace("name: web, port", f"name: {backend}, port")


def _write(root: Path, name: str, text: str) -> None:
    tmp = root / f".{name}.tmp"
    tmp.write_text(text)
    tmp.replace(root / name)


@pytest.mark.parametrize("sotw", [False, True], ids=["delta", "sotw"])
async def test_kill_9_of_podway_fails_no_request_and_a_restart_adopts_envoy(
        tmp_path: Path, short_dir: Path, sotw: bool) -> None:
    """Under a request loop, three rounds: kill -9 of podway, requests keep succeeding, and
    while Podway is down the Ingress moves to the other Service (the new config removes the
    pool Envoy still routes to); a new podway adopts Envoy (same pid) and serves the edit.
    Then an edit on the adopted stream switches back. 0 failed requests throughout; SIGTERM
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
    status = tmp_path / "status.yaml"
    log = tmp_path / "podway.log"  # every Podway's, info level: shown when the test fails
    podway = await start_podway(root, state, http_port, free_port(), status, sotw=sotw,
                                log=log, log_level="info")
    processes = [podway]
    pid = None
    began = time.monotonic()
    marks: list[tuple[str, float]] = []
    try:
        await until(lambda: envoy_pid(state) is not None, 30)
        pid = envoy_pid(state)
        assert pid is not None
        await until(lambda: serving(http_port, "shop.test"), 30)
        tasks.append(asyncio.create_task(load.run(stop_load)))
        await until(lambda: load.ok >= 20, 30)
        for target in ("green", "blue", "green"):
            marks.append(("kill", time.monotonic()))
            await kill9(podway)
            await until(lambda: _not(xds_connected(state)), 30)  # Envoy saw Podway go
            served = load.ok
            await until(lambda n=served: load.ok >= n + 20, 30)  # Podway gone: Envoy serves on
            _write(root, "ingress.yaml", _ingress(target))  # made while Podway is down
            status.unlink(missing_ok=True)
            marks.append(("restart", time.monotonic()))
            podway = await start_podway(root, state, http_port, free_port(), status, sotw=sotw,
                                        log=log, log_level="info")
            processes.append(podway)
            await until(lambda t=target: load.answered_by == t, 30)
            marks.append((target, time.monotonic()))
            assert alive(pid)
        await until(status.exists, 30)  # the new Podway's first snapshot is in its cache
        await until(lambda: xds_connected(state), 30)
        _write(root, "ingress.yaml", _ingress("blue"))  # on the adopted stream
        await until(lambda: load.answered_by == "blue", 30)
        marks.append(("blue", time.monotonic()))
        assert envoy_pid(state) == pid  # adopted, not replaced
        stop_load.set()
        await tasks[-1]
        assert load.ok > 0
        assert load.failures == [], (
            f"failed requests {[(round(t - began, 3), what) for t, what in load.failures]}")
        assert await stop(podway) == 0
        assert not alive(pid)
        assert not state.exists()
    except (AssertionError, TimeoutError) as exc:  # what was done when, and what Podway said
        exc.add_note(f"steps {[(what, round(t - began, 3)) for what, t in marks]}; "
                     f"{load.ok} requests answered, answered last by {load.answered_by!r}")
        exc.add_note(f"podway's log ({log}), last lines:\n{_tail(log)}")
        raise
    finally:
        stop_load.set()
        for process in processes:
            if process.returncode is None:
                await kill9(process)
        kill_envoy(state, pid)
        await cancel_and_wait(*tasks)


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
        await cancel_and_wait(echo)


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(unreadable: {exc})"


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
