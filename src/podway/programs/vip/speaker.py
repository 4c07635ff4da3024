"""Run BIRD for one engine host: announce its VIPs, withdraw them while Envoy is unhealthy, and
on a stop withdraw first, wait, then let the caller drain.

The protocol stays BIRD's; this is only its supervisor: the configuration is rewritten
(``podway.programs.vip.bird.engine_config``) and applied with ``birdc configure``, which changes
announcements without resetting BGP sessions. BIRD runs in the foreground as a child
(``bird -f``) with its control socket and files in ``workdir``; ``prefix`` runs it elsewhere
(the tests use ``ip netns exec NS``); what it writes to its stderr goes to ``bird.log`` there.
Stopping terminates BIRD, whose BGP Cease tells the routers at once.

Invariants: ``announce`` returns only after BIRD accepted the new configuration; ``stop`` leaves
no process behind, also when cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from podway.base.children import die_with_parent, run_command
from podway.base.errors import EnvironmentProblem
from podway.programs.vip.bird import BgpSettings, engine_config

log = logging.getLogger(__name__)


class BirdSpeaker:
    def __init__(self, settings: BgpSettings, *, workdir: Path,
                 prefix: Sequence[str] = ()) -> None:
        self.settings = settings
        self.workdir = workdir
        self.prefix = tuple(prefix)
        self.config = workdir / "bird.conf"
        self.socket = workdir / "bird.ctl"
        self.log = workdir / "bird.log"  # what BIRD writes to its stderr
        self._proc: asyncio.subprocess.Process | None = None
        self.vips: tuple[str, ...] = ()

    async def start(self, vips: Sequence[str]) -> None:
        bird = shutil.which("bird")
        if bird is None:
            raise EnvironmentProblem("bird (BIRD 2) is not installed: apt-get install bird2")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write(vips)
        # BIRD's own output goes to a file: a pipe nobody reads while it runs would stall it
        # once full (with ``log stderr`` in its configuration, say).
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            self._proc = await asyncio.create_subprocess_exec(
                *self.prefix, bird, "-f", "-c", str(self.config), "-s", str(self.socket),
                "-P", str(self.workdir / "bird.pid"),
                stdout=asyncio.subprocess.DEVNULL, stderr=fd,
                # A signal to our process group must not reach BIRD: stop() withdraws first.
                start_new_session=True, preexec_fn=die_with_parent(signal.SIGTERM))
        finally:
            os.close(fd)
        for _ in range(200):  # the control socket appears once the configuration is read
            if self.socket.exists() and await self._birdc("show status", check=False):
                return
            if self._proc.returncode is not None:
                break
            await asyncio.sleep(0.025)
        await self.stop()
        err = _tail(self.log, start)
        raise EnvironmentProblem(f"bird did not start: {err} (its output: {self.log})")

    def _write(self, vips: Sequence[str]) -> None:
        text = engine_config(self.settings, vips)
        tmp = self.config.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        # 0600 from the start: it may hold the BGP password
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
            out.write(text)
        tmp.replace(self.config)
        self.vips = tuple(vips)

    def rewrite(self, vips: Sequence[str]) -> None:
        """Write the configuration for ``vips`` without applying it (the file again matches
        what BIRD runs after a refused ``announce``)."""
        self._write(vips)

    async def _birdc(self, command: str, *, check: bool = True) -> str:
        birdc = shutil.which("birdc") or "birdc"
        code, out, _ = await run_command(
            *self.prefix, birdc, "-s", str(self.socket), *command.split(),
            stderr=asyncio.subprocess.STDOUT)
        text = out.decode(errors="replace")
        if check and code != 0:
            raise EnvironmentProblem(f"birdc {command}: {text.strip()}")
        return text if code == 0 else ""

    async def announce(self, vips: Sequence[str]) -> None:
        """Announce exactly ``vips`` (empty: withdraw all); returns once BIRD runs it."""
        self._write(vips)
        out = await self._birdc("configure")
        if "Reconfigured" not in out and "Reconfiguration in progress" not in out:
            raise EnvironmentProblem(f"bird refused the configuration: {out.strip()}")

    async def established(self) -> int:
        """How many BGP sessions are up."""
        out = await self.show_protocols()
        return sum(1 for line in out.splitlines() if " BGP " in line and "Established" in line)

    async def show_protocols(self) -> str:
        """``birdc show protocols`` ("" while BIRD does not answer)."""
        return await self.birdc_text("show protocols")

    async def birdc_text(self, command: str) -> str:
        """What ``birdc COMMAND`` prints ("" while BIRD does not answer)."""
        return await self._birdc(command, check=False)

    def kill(self) -> None:
        """SIGKILL BIRD: no Cease is sent (a dead host, for test beds)."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    async def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.shield(asyncio.wait_for(proc.wait(), 5))
        except (TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise


def _tail(path: Path, start: int, limit: int = 2000) -> str:
    """The last ``limit`` bytes ``path`` got after offset ``start``, as text."""
    with path.open("rb") as f:
        f.seek(start)
        return f.read()[-limit:].decode(errors="replace").strip()


async def follow_health(speaker: BirdSpeaker, vips: Sequence[str],
                        healthy: Callable[[], Awaitable[bool]], *, interval: float = 0.2,
                        fall: int = 2, rise: int = 2) -> None:
    """Announce ``vips`` while ``healthy()`` holds, withdraw after ``fall`` failed checks in a
    row, announce again after ``rise`` good ones. Runs until cancelled."""
    announced = bool(speaker.vips)
    streak = 0
    while True:
        ok = await healthy()
        streak = streak + 1 if ok != announced else 0
        if streak >= (rise if not announced else fall):
            announced = ok
            streak = 0
            log.warning("engine %s: %s VIPs", "healthy" if ok else "unhealthy",
                        "announcing" if ok else "withdrawing")
            await speaker.announce(vips if ok else ())
        await asyncio.sleep(interval)
