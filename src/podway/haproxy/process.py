"""Supervise HAProxy for Podway and apply each new IR with the least disturbance.

* Master-worker mode (``-W``) with the master CLI on ``master.sock`` and the worker's runtime
  API on ``runtime.sock``, both mode 0600 in the engine's private folder (0700).
* ``apply(ir)`` renders (``podway.haproxy.render``) and compares with what runs:
  - only members changed → ``set server`` commands on their slots (no reload);
  - only map rows changed (hosts, plain routes) → each changed map swapped atomically with
    ``prepare map``/``commit map`` (no reload);
  - anything else (a listener, a backend, a rule, a certificate, more members than slots) →
    the new config is checked (``haproxy -c``) and the master reloads: listening sockets are
    handed over (``expose-fd listeners``), old workers finish their connections. Members the
    running worker does not count up start at weight 0 and are marked down in the new one
    (``health.unproven``), which would count every server up until a check fails.
  A runtime command HAProxy refuses falls back to a reload, so the running state is always the
  rendered one. Every file is rewritten either way, so a reload or a restart starts from it.
* Make before break (``podway.engines.handover``): a member added at runtime takes no request
  before its first check, so a change that takes ready members out of a checked pool while
  none it keeps or gets is up is served with the leaving members held beside the others; a
  watcher (``HOLD_POLL_S``) serves the IR as given once another is up or the bound ends.
* A master that dies is started again after a doubling backoff (``podway.base.backoff``),
  which starts over once a master has lived ``stable_after_s`` (as the Envoy engine's).
* A clean stop ends HAProxy (SIGTERM to the master; with ``drain_s``, SIGUSR1 first: it stops
  accepting and finishes its connections for up to that long) and removes the folder (it holds
  keys).
* HAProxy outlives a Podway crash (its own session, files in the folder). A Podway started
  again on the same folder starts its own HAProxy, and once that one answers, gracefully stops
  the one left behind (SIGUSR1: it stops accepting and finishes its connections); the new one
  takes the old one's listening sockets (``-x`` on its runtime socket), so both accept on them
  meanwhile and no connection is refused. Not adopted as the Envoy engine's is: the new HAProxy
  starts from the new rendering.
* One owner per address and port: listeners bind without SO_REUSEPORT (``noreuseport``), so a
  second instance (another Podway, any process of the same user) cannot split a port's
  connections by accident; its HAProxy does not start and the port is refused. ``reuse_port``
  (``podway engine --listener-reuse-port``, set by the chart) opts in: a new engine pod's
  HAProxy binds beside the old one's on a node, which drains and stops (a rolling update with
  surge).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from podway.base.backoff import Backoff
from podway.base.children import run_command
from podway.base.errors import PodwayError
from podway.engines import handover
from podway.haproxy import health, runtime
from podway.haproxy import slots as slotting
from podway.haproxy.backends import backend_name, weighed_zero
from podway.haproxy.binds import LOADING_FAILED, bind_failures
from podway.haproxy.health import View
from podway.haproxy.names import proxy_name
from podway.haproxy.render import Rendered, RenderOptions, render
from podway.haproxy.report import Unsupported
from podway.ir import IR

log = logging.getLogger(__name__)

HAPROXY = "/usr/sbin/haproxy"
HOLD_POLL_S = 0.1  # how often a hold looks whether a new member passed its first check
FEW_POOLS = 32  # up to this many pools' health is asked of HAProxy backend by backend


class HAProxyError(PodwayError):
    """HAProxy would not start, or refused a configuration; ``refused``: (IR listener, reason)
    of each listener whose port it could not bind (``binds``), when that was why; ``start``:
    HAProxy did not start (``run`` tries it again on the same configuration)."""

    def __init__(self, message: str, refused: tuple[tuple[str, str], ...] = (), *,
                 start: bool = False) -> None:
        super().__init__(message)
        self.refused = refused
        self.start = start


@dataclass(frozen=True, slots=True, kw_only=True)
class HAProxyOptions:
    folder: Path  # private (made 0700): config, maps, certificates, sockets, log
    binary: str = HAPROXY
    threads: int = 1
    ready_s: float = 10.0  # how long a start or a reload may take
    stable_after_s: float = 10.0  # a master that lived this long resets the restart backoff
    reuse_port: bool = False  # listeners bind with SO_REUSEPORT (``RenderOptions.reuse_port``)
    # A stop first lets HAProxy finish its connections for up to this long (SIGUSR1: it stops
    # accepting; a successor bound beside it takes the new ones), then ends it. 0: at once.
    drain_s: float = 0.0


@dataclass(slots=True)
class Counters:
    starts: int = 0
    started: int = 0  # starts whose worker came up (a failed start is retried by ``run``)
    reloads: int = 0
    server_edits: int = 0  # runtime set-server commands
    map_swaps: int = 0
    took_over: int = 0  # HAProxys left running by an earlier Podway, stopped once ours served
    unsupported: tuple[Unsupported, ...] = field(default=())


class HAProxyEngine:
    """One supervised HAProxy, programmed from successive IRs."""

    def __init__(self, opts: HAProxyOptions) -> None:
        self.opts = opts
        self.counters = Counters()
        self._rendered: Rendered | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._started = asyncio.Event()
        self.folder = opts.folder
        self.runtime_socket = opts.folder / "runtime.sock"
        self.master_socket = opts.folder / "master.sock"
        self.config_path = opts.folder / "haproxy.cfg"
        self.pid_file = opts.folder / "master.pid"
        self._holds = handover.Holds()  # the IR given, as served, and the held pools
        self._watcher: asyncio.Task[None] | None = None

    @property
    def rendered(self) -> Rendered | None:
        return self._rendered

    async def wait_ready(self, limit_s: float = 30.0) -> None:
        async with asyncio.timeout(limit_s):
            await self._started.wait()

    async def apply(self, ir: IR) -> str:
        """Make HAProxy serve ``ir``; says how: "start", "reload", "runtime" or "unchanged"."""
        async with self._lock:
            return await self._apply(ir)

    async def _apply(self, ir: IR) -> str:
        changed = self._holds.changed(ir)
        losing = self._holds.losing(ir, changed)
        # Empty while HAProxy does not answer: every such change is held (bounded).
        view = (await self.health(only=losing) if losing else None) or {}
        served = self._holds.serve(ir, changed, view, time.monotonic())
        before = self._rendered
        options = RenderOptions(
            folder=str(self.folder), runtime_socket=str(self.runtime_socket),
            slots=before.slots if before else {},
            backups=before.backups if before else {}, threads=self.opts.threads,
            reuse_port=self.opts.reuse_port)
        after = render(served, options)
        self.counters.unsupported = after.unsupported
        if self._holds.holds and (self._watcher is None or self._watcher.done()):
            self._watcher = asyncio.create_task(self._watch_holds(), name="haproxy-holds")
        if before is not None and before.config == after.config and \
                before.files == after.files:
            return "unchanged"
        self._write(after)
        if self._process is None or self._process.returncode is not None:
            await self._check(after)
            self._rendered = after
            await self._start(ir)
            return "start"
        if before is not None and before.skeleton == after.skeleton:
            try:
                await self._runtime(before, after)
                self._rendered = after
                return "runtime"
            except (runtime.RuntimeApiError, OSError, TimeoutError) as e:
                log.warning("haproxy runtime change failed, reloading instead: %s", e)
        await self._check(after)
        # Members the running HAProxy does not count up (new, pending, down) start at weight 0
        # in the new worker, which would count every server up until a check fails.
        seen = await self.health()
        unproven = health.unproven(after, seen) if seen is not None else {}
        if unproven:
            self._write(dataclasses.replace(after, config=weighed_zero(after.config, unproven)))
        self._rendered = after
        try:
            await self._reload(ir)
        except HAProxyError:
            # The workers of ``before`` serve on: a later apply of ``after`` is a change.
            self._rendered = before
            raise
        finally:
            if unproven:
                self._write(after)  # a restart starts from the plain rendering
        await self._prove(after, unproven)
        return "reload"

    async def _prove(self, rendered: Rendered, unproven: Mapping[str, frozenset[str]]) -> None:
        """The slots a reload wrote at weight 0 marked down, then weighed (``slots.proving``)."""
        for backend, names in unproven.items():
            for line in slotting.proving(backend, rendered.servers[backend], names):
                try:
                    await runtime.checked(self.runtime_socket, line)
                except (runtime.RuntimeApiError, OSError, TimeoutError) as e:
                    log.warning("haproxy: after a reload, %s failed: %s", line, e)
                self.counters.server_edits += 1

    async def _watch_holds(self) -> None:
        """While pools are held: once another member of one is up, or its hold's bound passed,
        serve the last IR given again without it."""
        while self._holds.holds:
            await asyncio.sleep(HOLD_POLL_S)
            view = await self.health(only=tuple(self._holds.holds))
            async with self._lock:
                given = self._holds.given
                if given is None or not self._holds.settle(view, time.monotonic()):
                    continue
                try:
                    await self._apply(given)
                except HAProxyError as e:  # the next IR given is applied as usual
                    log.warning("haproxy: ending a member hold failed: %s", e)

    async def health(self, only: tuple[str, ...] | None = None) -> View | None:
        """Every member's health as HAProxy sees it now (``podway.haproxy.health``); None
        while HAProxy does not answer. ``only``: these pools' members alone, asked of HAProxy
        backend by backend when they are few (a whole ``show stat`` is megabytes at 10,000
        pools; one question a pool costs a round trip each)."""
        rendered = self._rendered
        if rendered is None:
            return None
        if only is None or len(only) > FEW_POOLS:
            text = await self.stats()
            if text is None:
                return None
            stats = health.parse_stat(text)
        else:
            stats = {}
            for pool in only:
                part = await self.stats(proxy=backend_name(pool))
                if part is None:
                    return None
                stats.update(health.parse_stat(part))
        return health.view(rendered, stats, only)

    async def stats(self, limit_s: float = 5.0, proxy: str = "") -> str | None:
        """HAProxy's ``show stat`` (every proxy's and server's counters, CSV; ``proxy``: that
        backend's servers alone); None while it does not answer."""
        line = f"show stat {proxy} 4 -1" if proxy else "show stat"
        try:
            return await runtime.command(self.runtime_socket, line, limit_s=limit_s)
        except (OSError, TimeoutError):
            return None

    async def run(self) -> None:
        """Keep HAProxy running until cancelled; then stop it."""
        backoff = Backoff()
        failures = 0
        try:
            while True:
                process = self._process
                if process is None:
                    await asyncio.sleep(0.05)
                    continue
                began = time.monotonic()
                code = await process.wait()
                if self._process is not process:
                    continue
                lived = time.monotonic() - began
                # Consecutive failures only: a master that served a while starts over.
                failures = 1 if lived >= self.opts.stable_after_s else failures + 1
                log.warning("haproxy master exited with %s after %.1f s; starting it again",
                            code, lived)
                await asyncio.sleep(backoff.delay(failures))
                async with self._lock:
                    if self._rendered is not None:
                        self._write(self._rendered)
                        try:
                            await self._start()
                        except HAProxyError as e:  # a port still taken: tried again later
                            log.warning("%s; starting it again", e)
        finally:
            if self._watcher is not None:
                self._watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._watcher
            await self._stop()
            # The folder holds private keys: a clean stop leaves nothing behind.
            shutil.rmtree(self.folder, ignore_errors=True)

    # -- files and process ---------------------------------------------------------------------

    def _write(self, rendered: Rendered) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.folder.chmod(0o700)
        for name, content in (*rendered.files.items(), ("haproxy.cfg", rendered.config)):
            target = self.folder / name
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = target.with_name(f".{target.name}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(content)
            tmp.replace(target)

    async def _check(self, rendered: Rendered) -> None:
        code, out, _ = await run_command(self.opts.binary, "-c", "-q", "-f",
                                         str(self.config_path), stderr=asyncio.subprocess.STDOUT)
        if code != 0:
            lines = [ln for ln in out.decode(errors="replace").splitlines() if "ALERT" in ln]
            raise HAProxyError("haproxy refused the rendered configuration: "
                               + (lines[0] if lines else out.decode(errors="replace")[:300]))
        del rendered

    async def _start(self, ir: IR | None = None) -> None:
        """Start HAProxy on the written configuration; ``HAProxyError`` (naming each listener
        of ``ir`` whose port it could not bind) when its worker does not come up."""
        left = self._left_behind()
        before = await runtime.worker_pid(self.runtime_socket) if left else None
        log_path = self.folder / "haproxy.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        log_file = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        # Taking over from one left behind: its listening sockets, from its runtime socket
        # (``expose-fd listeners``), so no port has to be bound twice (``noreuseport``).
        take = ["-x", str(self.runtime_socket)] if left is not None else []
        try:
            self._process = await asyncio.create_subprocess_exec(
                self.opts.binary, "-W", "-S", f"{self.master_socket},mode,600",
                "-p", str(self.pid_file), "-f", str(self.config_path), *take,
                stdin=asyncio.subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                start_new_session=True)
        finally:
            os.close(log_file)
        self.counters.starts += 1
        if await self._worker_up(before) is None:
            frontends = {proxy_name("fe", ls.name): ls.name for ls in ir.listeners} if ir else {}
            raise HAProxyError(f"haproxy did not start; see {log_path}",
                               refused=bind_failures(self._log_since(offset), frontends),
                               start=True)
        self.counters.started += 1
        if left is not None:
            # Ours serves now (both accepted on the same sockets meanwhile: ours took them with
            # -x); the one left behind stops accepting and finishes its connections.
            with contextlib.suppress(ProcessLookupError):
                os.kill(left, signal.SIGUSR1)
            self.counters.took_over += 1
            log.info("haproxy: took over from the HAProxy (master pid %d) an earlier Podway "
                     "left running in %s", left, self.folder)
        self._started.set()

    def _left_behind(self) -> int | None:
        """The master pid of a HAProxy an earlier Podway left running on this folder (it
        crashed, or was killed), or None. Only a live haproxy with this folder's config."""
        if self._process is not None:
            return None
        try:
            pid = int(self.pid_file.read_text(encoding="utf-8").split()[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            return None
        if str(self.config_path).encode() in cmdline and any(b"haproxy" in a for a in cmdline):
            return pid
        return None

    async def _reload(self, ir: IR) -> None:
        old = await runtime.worker_pid(self.runtime_socket)
        assert self._process is not None
        log_path = self.folder / "haproxy.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        self._process.send_signal(signal.SIGUSR2)
        self.counters.reloads += 1
        if await self._worker_up(old, log_from=offset) is None:
            lines = self._log_since(offset)
            frontends = {proxy_name("fe", ls.name): ls.name for ls in ir.listeners}
            raise HAProxyError(f"haproxy did not reload; see {log_path}",
                               refused=bind_failures(lines, frontends))

    def _log_since(self, offset: int) -> list[str]:
        try:
            with open(self.folder / "haproxy.log", "rb") as f:
                f.seek(offset)
                return f.read(1 << 20).decode(errors="replace").splitlines()
        except OSError:
            return []

    async def _worker_up(self, old: int | None, *, log_from: int | None = None) -> int | None:
        """The pid of a worker other than ``old`` answering on the runtime socket; None when
        none comes in time, the master exits, or (``log_from``: the log's offset before a
        reload) the master logged that loading the configuration failed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.opts.ready_s
        while loop.time() < deadline:
            pid = await runtime.worker_pid(self.runtime_socket)
            if pid is not None and pid != old:
                return pid
            if self._process is not None and self._process.returncode is not None:
                return None
            if log_from is not None and any(LOADING_FAILED in line
                                            for line in self._log_since(log_from)):
                return None
            await asyncio.sleep(0.02)
        return None

    async def _runtime(self, before: Rendered, after: Rendered) -> None:
        for backend, states in after.servers.items():
            for line in slotting.commands(backend, before.servers[backend], states):
                await runtime.checked(self.runtime_socket, line)
                self.counters.server_edits += 1
        for name, rows in after.maps.items():
            if before.maps.get(name) != rows:
                await runtime.replace_map(self.runtime_socket, str(self.folder / name), rows)
                self.counters.map_swaps += 1

    async def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        if self.opts.drain_s > 0:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGUSR1)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.opts.drain_s):
                    await process.wait()
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            async with asyncio.timeout(5):
                await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
