"""Children tied to their parent: the preexec hook does no unsafe work after fork; a command
run to its end is killed and reaped when its caller is cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from podway.base import children
from podway.base.children import die_with_parent
from tests.waiting import eventually


def test_die_with_parent_loads_nothing_in_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """The preexec hook was resolved in the parent: the forked child never calls dlopen."""
    preexec = die_with_parent()
    assert preexec is not None

    def no_dlopen(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("dlopen in the forked child")

    monkeypatch.setattr(ctypes, "CDLL", no_dlopen)
    done = subprocess.run([sys.executable, "-c", "print('ran')"], preexec_fn=preexec,
                          capture_output=True, text=True, check=False, timeout=30)
    assert (done.returncode, done.stdout) == (0, "ran\n")


def test_child_of_a_parent_already_gone_exits_instead_of_running(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """If the parent is gone before prctl took effect (ppid changed), the child exits."""
    monkeypatch.setattr(os, "getpid", lambda: 1)  # "the parent" is a pid that is not ours
    preexec = die_with_parent()
    assert preexec is not None
    monkeypatch.undo()
    done = subprocess.run([sys.executable, "-c", "print('ran')"], preexec_fn=preexec,
                          capture_output=True, text=True, check=False, timeout=30)
    assert (done.returncode, done.stdout) == (1, "")


async def test_run_command_gives_status_output_and_error_and_feeds_input() -> None:
    code, out, err = await children.run_command("sh", "-c", "cat; echo oops >&2; exit 3",
                                                stdin=b"hello")
    assert (code, out, err) == (3, b"hello", b"oops\n")
    code, out, err = await children.run_command(
        "sh", "-c", "echo both; echo err >&2", stderr=asyncio.subprocess.STDOUT)
    assert (code, out, err) == (0, b"both\nerr\n", b"")
    with pytest.raises(FileNotFoundError):
        await children.run_command("/nonexistent/podway-test-tool")


async def _started(path: Path) -> int:
    """The pid a test command wrote to ``path`` once it runs."""
    text: str = await eventually(lambda: path.exists() and path.read_text().strip(), within=10)
    return int(text)


async def test_a_cancelled_command_is_killed_and_reaped_before_the_cancellation_goes_on(
        tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    task = asyncio.create_task(children.run_command(
        "sh", "-c", f"echo $$ > {pid_file}; exec sleep 30"))
    pid = await _started(pid_file)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not Path(f"/proc/{pid}").exists()  # killed, and reaped: not even a zombie


@pytest.mark.parametrize("cancels", [1, 2])
async def test_a_pipe_a_grandchild_holds_does_not_hold_the_cancellation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cancels: int) -> None:
    """The killed command's pipes are drained for ``DRAIN_S`` at most: a grandchild that
    still holds one (and is not ours to kill) cannot hold the caller forever. Cancelled again
    while it drains (``cancels`` 2: a stop behind a timeout), the pipes are closed all the
    same."""
    monkeypatch.setattr(children, "DRAIN_S", 0.2 if cancels == 1 else 30)
    pid_file = tmp_path / "pid"
    fds_before = set(os.listdir("/proc/self/fd"))
    task = asyncio.create_task(children.run_command(
        "sh", "-c", f"sleep 30 & echo $! > {pid_file}; wait"))
    grandchild = await _started(pid_file)
    try:
        task.cancel()
        if cancels == 2:
            for _ in range(5):  # into the drain: the command killed, the grandchild holding on
                await asyncio.sleep(0.02)
            assert not task.done()
            task.cancel()
        async with asyncio.timeout(5):
            with pytest.raises(asyncio.CancelledError):
                await task
        for _ in range(3):  # the pipes' connection_lost runs on the next turns of the loop
            await asyncio.sleep(0)
        # Our ends of its pipes are closed while the loop runs, the grandchild still alive:
        # none is left for the garbage collector to close after the loop has gone (CI saw
        # "Event loop is closed" from BaseSubprocessTransport.__del__ in a later test).
        assert set(os.listdir("/proc/self/fd")) <= fds_before
        assert Path(f"/proc/{grandchild}").exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, signal.SIGKILL)
