"""The daemon's process supervisor: start, restart on exit, record pids, stop in order.

Every process is recorded in the state folder (``pids/<what>``) while it runs, so ``lab down``
finds it even if the daemon is gone; a process that exits is started again after a backoff
(0.2 s doubling to 5 s) until ``stop``; stopping sends SIGTERM, then SIGKILL after a grace.
Output goes to ``logs/<what>.log``; a caller may also read stdout lines (``on_line``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from podway.base.tasks import cancel_and_wait
from podway.programs.lab.state import LabState

log = logging.getLogger("podway.programs.lab.processes")


@dataclass
class Supervised:
    what: str
    argv: list[str]
    on_line: Callable[[str], None] | None = None  # stdout lines (else stdout goes to the log)
    on_exit: Callable[[int], None] | None = None  # after each exit, with its status
    on_start: Callable[[], None] | None = None  # after each start
    restarts: int = 0
    pid: int | None = None
    task: asyncio.Task[None] | None = None
    proc: asyncio.subprocess.Process | None = None
    stopping: bool = False
    started: asyncio.Event = field(default_factory=asyncio.Event)


class Supervisor:
    def __init__(self, state: LabState) -> None:
        self.state = state
        self.running: dict[str, Supervised] = {}

    async def start(self, what: str, argv: list[str], *,
                    on_line: Callable[[str], None] | None = None,
                    on_exit: Callable[[int], None] | None = None,
                    on_start: Callable[[], None] | None = None) -> Supervised:
        item = Supervised(what=what, argv=argv, on_line=on_line, on_exit=on_exit,
                          on_start=on_start)
        self.running[what] = item
        item.task = asyncio.create_task(self._keep(item), name=f"lab-proc-{what}")
        await item.started.wait()
        return item

    async def _keep(self, item: Supervised) -> None:
        delay = 0.2
        logfile = self.state.logs / f"{item.what}.log"
        while not item.stopping:
            # A local log file, opened once per start: blocking is negligible.
            with open(logfile, "ab") as out:  # noqa: ASYNC230
                proc = await asyncio.create_subprocess_exec(
                    *item.argv, stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE if item.on_line else out, stderr=out,
                    start_new_session=True)
            item.proc, item.pid = proc, proc.pid
            self.state.record(item.what, proc.pid)
            item.started.set()
            if item.on_start is not None:
                item.on_start()
            if item.on_line is not None and proc.stdout is not None:
                with open(logfile, "ab") as out:  # noqa: ASYNC230 (stdout kept in the log too)
                    async for raw in proc.stdout:
                        out.write(raw)
                        out.flush()
                        item.on_line(raw.decode(errors="replace").strip())
            code = await proc.wait()
            self.state.forget(item.what)
            item.pid = None
            if item.on_exit is not None:
                item.on_exit(code)
            if item.stopping:
                return
            log.warning("%s exited with %s; restarting in %.1fs", item.what, code, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            item.restarts += 1

    def log_path(self, what: str) -> Path:
        return self.state.logs / f"{what}.log"

    async def terminate(self, what: str, *, grace: float) -> None:
        """SIGTERM, and wait up to ``grace`` for the exit (no restart after it); the record
        stays, so a ``stop`` after it (or instead of its end, if cancelled) still kills."""
        item = self.running.get(what)
        if item is None:
            return
        item.stopping = True  # also when it is between restarts: no restart after this
        proc = item.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await proc.wait()

    async def stop(self, what: str, *, grace: float = 5.0) -> None:
        item = self.running.pop(what, None)
        if item is None:
            return
        item.stopping = True
        proc = item.proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                async with asyncio.timeout(grace):
                    await proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        if item.task is not None:
            await cancel_and_wait(item.task)
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        self.state.forget(what)

    async def stop_all(self) -> None:
        await asyncio.gather(*(self.stop(w) for w in list(self.running)))
