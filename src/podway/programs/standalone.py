"""Standalone mode: file source + pipeline + xDS server + one supervised Envoy.

One process tree, no cluster, no root. Everything between the folder and the cache is the
``Pipeline`` (``podway.pipeline``); this module only wires it: the file source feeds it, the xDS
server serves its cache and reports engines' ACKs/NACKs back to it, and the status file is
rewritten from each state it publishes. Readers (tests, the demo, benchmarks) await states:
``standalone.pipeline.wait_for(lambda s: s.generation >= n)``.

The status file (``podway.status``) is rewritten atomically from every published state.
Optional loopback-only servers, each a reader of the same states: ``/metrics`` (Podway's
registries, then Envoy's own stats) and the dashboard (``podway.readers.dashboard``).
The admin endpoint (``podway.readers.admin_api``: state, config, live ``explain``) listens on
``podway.sock`` in the engine's private state folder, or on ``admin_socket`` when given.
The admin endpoint and the dashboard are mounted by ``podway.readers.surfaces``, as in the
controller. With ``gc`` set (``podway run`` sets it) the process's garbage collector follows
``podway.programs.gc_policy`` while it serves, as the controller's does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from podway.base.errors import EnvironmentProblem
from podway.base.netaddr import HostPort
from podway.engines.member_health import MemberHealthReports, Refusal
from podway.envoy.engine import admin
from podway.envoy.engine.bootstrap import EnvoyStats
from podway.envoy.engine.local import LocalEngineOptions, colocated_engine
from podway.envoy.engine.process import Engine
from podway.envoy.engine.state import StateDir, open_state
from podway.envoy.xds.protocol import Event
from podway.envoy.xds.server import ServerTLS, XdsServer
from podway.ir import IR, EngineKind, Listener
from podway.pipeline import Pipeline, Rejection, State
from podway.programs.gc_policy import GcPolicy, keep_settled
from podway.readers import surfaces
from podway.readers.surfaces import SOCKET_NAME
from podway.sources.files import FileSource
from podway.sources.prefetch import Prefetch
from podway.translate import TranslateOptions

if TYPE_CHECKING:  # imported where used: not on the way to the first configuration
    from podway.haproxy.process import HAProxyEngine
    from podway.kernel.engine import KernelEngine
    from podway.readers.dashboard.engine_view import Sample
    from podway.readers.engine_health import View
    from podway.status.file import StatusFile

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class StandaloneOptions:
    manifests: Path
    translate: TranslateOptions = field(default_factory=TranslateOptions)
    xds_address: str = ""  # "": only the engine's private socket; "host:port" or "unix:/path"
    xds_tls: ServerTLS | None = None
    xds_unauthenticated: bool = False  # opt-in: clear-text loopback TCP (never sent Secrets)
    state_dir: Path | None = None  # the engine's folder; None: ephemeral (no adoption)
    delta: bool = True  # the engine uses incremental xDS
    status_file: Path | None = None
    engine: bool = True  # False: serve xDS only (engines connect with ``podway engine``)
    # "envoy": one supervised Envoy serves everything but the listeners the IR gives the kernel
    # (``Listener.engine``), which the kernel engine serves beside it; "kernel": only the kernel
    # engine runs (with ``translate.l4_engine`` KERNEL it gets every L4 listener it can serve;
    # nothing else is served, and the engine logs each listener it leaves out); "haproxy":
    # podway.haproxy (haproxy.cfg + maps + runtime API, in the state folder's ``haproxy/``),
    # with the kernel engine beside it for the listeners the IR gives the kernel, as Envoy.
    engine_kind: str = "envoy"
    envoy_path: str | None = None
    envoy_log_level: str = "warning"
    concurrency: int = 1
    drain_s: float = 2.0
    # Listeners bind with SO_REUSEPORT (the controller's --listener-reuse-port): an engine's
    # successor binds its ports beside it, so a hand-over loses no connection.
    listener_reuse_port: bool = False
    node_id: str = "podway-standalone"
    envoy_stats: EnvoyStats = EnvoyStats.BOUNDED  # DETAILED: per-pool stats too (costly)
    metrics: HostPort | None = None  # /metrics and /healthz; None: not served
    dashboard: HostPort | None = None  # the dashboard; None: not served
    dashboard_refresh_s: float = 2.0  # how often a watched dashboard samples the engine
    # The admin endpoint's unix socket; None: ``podway.sock`` in the state folder (no engine,
    # no state folder: no admin endpoint).
    admin_socket: Path | None = None
    # True (``podway run``): a listener port of the first configuration that is already in use
    # (another Podway instance, another program) stops the start with one line (exit 2);
    # False: the listener is refused and reported, the rest serves (embedded, tests).
    exclusive_ports: bool = False
    # The garbage collector's policy while serving (``podway.programs.gc_policy``); None: left alone
    # (embedded, tests); ``podway run`` sets ``GcPolicy()``.
    gc: GcPolicy | None = None
    haproxy_path: str = "/usr/sbin/haproxy"
    # the kernel engine's per-member packet/byte counters (a lookup on every forwarded packet;
    # podway.kernel.ruleset); its per-member connection counters are always there
    member_traffic_counters: bool = False
    # The first load's big files parsed by a process started with the command
    # (``podway.sources.prefetch``; ``podway run`` starts it before its own imports).
    prefetch: Prefetch | None = None


class Standalone:
    """File source + pipeline + xDS server + (optionally) one supervised Envoy."""

    def __init__(self, opts: StandaloneOptions) -> None:
        if opts.translate.oidc_key is None:
            # OIDC sessions are signed with a key of this process's own: a restart starts
            # new sessions (users log in again), nothing to keep or leak on disk.
            opts = replace(opts, translate=replace(opts.translate, oidc_key=os.urandom(32)))
        self.opts = opts
        self.pipeline = Pipeline(FileSource(opts.manifests, prefetch=opts.prefetch),
                                 translate=opts.translate,
                                 detailed_stats=opts.envoy_stats is EnvoyStats.DETAILED,
                                 reuse_port=opts.listener_reuse_port, clusters_first=True)
        # The engine here connects over a private unix socket in its state folder (no TLS or
        # client certificate needed), whatever else the server listens on.
        self.server = XdsServer(self.pipeline.cache, opts.xds_address, tls=opts.xds_tls,
                                on_event=self._on_event,
                                unauthenticated=opts.xds_unauthenticated)
        self.event_hooks: list[Callable[[Event], None]] = []  # e.g. benchmarks timing ACKs
        # Engines' reports (``podway engine``): the listeners they could not serve after
        # accepting them count as their rejections (issue 23.2); member health is not used here.
        self.health_reports = MemberHealthReports()
        self.server.handlers.append(self.health_reports.handler(self.server))
        self.pipeline.hear_refusals(self.health_reports)
        self._engine: asyncio.Future[Engine | None] | None = None
        self.haproxy: HAProxyEngine | None = None  # with engine_kind "haproxy", once running
        self.haproxy_generation = 0  # the newest generation HAProxy serves (readers poll it)
        self.kernel: KernelEngine | None = None  # with engine_kind "kernel", once it runs

    async def engine(self) -> Engine | None:
        """The supervised engine once it exists (None with ``engine=False``)."""
        return await self._engine_future()

    def _engine_future(self) -> asyncio.Future[Engine | None]:
        if self._engine is None:
            self._engine = asyncio.get_running_loop().create_future()
        return self._engine

    async def run(self) -> None:
        """Serve until cancelled."""
        with contextlib.ExitStack() as stack:
            state = stack.enter_context(open_state(self.opts.state_dir)) if self.opts.engine \
                else None
            await self.server.start(local=state.xds_socket if state else None)
            engine = None
            try:
                if state is not None and self.opts.engine_kind == "haproxy":
                    self.haproxy = self._haproxy(state)
                elif state is not None and self.opts.engine_kind == "envoy":
                    engine = self._envoy(state)
                if not self._engine_future().done():
                    self._engine_future().set_result(engine)
                async with asyncio.TaskGroup() as group:
                    group.create_task(self.pipeline.run(), name="standalone-pipeline")
                    group.create_task(log_listeners(
                        self.pipeline, _bound(engine) if engine is not None else None),
                        name="standalone-listeners")
                    if self.opts.gc is not None:
                        group.create_task(keep_settled(self.pipeline, self.opts.gc),
                                          name="standalone-gc")
                    status = self._status_file()
                    if status is not None and self.haproxy is None:
                        group.create_task(status.follow(self.pipeline),
                                          name="standalone-status-file")
                    if engine is not None:
                        group.create_task(engine.run(), name="standalone-engine")
                        if self.opts.exclusive_ports:
                            group.create_task(self._claim_ports(engine),
                                              name="standalone-ports")
                    if self.haproxy is not None:
                        from podway.programs.haproxy_follow import follow as follow_haproxy

                        group.create_task(self.haproxy.run(), name="standalone-haproxy")
                        # It writes the status file too: with what HAProxy cannot serve.
                        group.create_task(follow_haproxy(self.pipeline, self.haproxy,
                                                         self._haproxy_applied, status),
                                          name="standalone-haproxy-follow")
                    if self.opts.engine and self.opts.engine_kind == "kernel":
                        group.create_task(self._kernel(), name="standalone-kernel")
                    elif self.opts.engine and self.opts.engine_kind in ("envoy", "haproxy"):
                        # Beside Envoy or HAProxy (each idles on the port: a switch back is free).
                        group.create_task(self._kernel_when_asked(), name="standalone-kernel")
                    if self.opts.metrics is not None:
                        group.create_task(self._serve_metrics(self.opts.metrics, engine),
                                          name="standalone-metrics")
                    admin = self.opts.admin_socket or (
                        state.path / SOCKET_NAME if state is not None else None)
                    if admin is not None or self.opts.dashboard is not None:
                        group.create_task(self._surfaces(admin, engine),
                                          name="standalone-surfaces")
            finally:
                await self.server.stop(grace=0.5)

    def _haproxy(self, state: StateDir) -> HAProxyEngine:
        from podway.haproxy.process import HAProxyEngine, HAProxyOptions

        return HAProxyEngine(HAProxyOptions(folder=state.path / "haproxy",
                                            binary=self.opts.haproxy_path,
                                            threads=self.opts.concurrency))

    def _status_file(self) -> StatusFile | None:
        from podway.status.file import StatusFile

        return StatusFile(self.opts.status_file) if self.opts.status_file is not None else None

    async def _kernel_when_asked(self) -> None:
        """Beside Envoy or HAProxy: the kernel engine, from the first IR in which a Service asks
        for it (``podway.io/engine: kernel``), serving only those listeners (the other engine
        keeps its own listener on the port, idle: the kernel DNATs the port's packets before
        they reach it, and takes new connections back to it when the Service switches back)."""
        await self.pipeline.wait_for(lambda s: any(
            ls.engine is EngineKind.KERNEL for ls in s.ir.listeners))
        await self._kernel()

    async def _kernel(self) -> None:
        """The kernel engine, following the pipeline's IR; its table stays when it stops."""
        from podway.kernel.engine import KernelEngine
        from podway.programs.kernel import HostPorts, forgetter, watch_conntrack, writer

        out = writer()
        self.kernel = KernelEngine(out.write, every_l4=False, forget=forgetter(),
                                   alone=self.opts.engine_kind == "kernel", resolve=HostPorts(),
                                   traffic_counters=self.opts.member_traffic_counters)
        log.info("kernel engine: writing nftables through %s", out.kind)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(watch_conntrack(), name="kernel-conntrack-fill")
                group.create_task(self.kernel.run(ir_states(self.pipeline)), name="kernel-engine")
        finally:
            out.close()

    async def _claim_ports(self, engine: Engine) -> None:
        """At start: every listener bound, or ``EnvironmentProblem`` for one whose port is in
        use — two instances never share an address and port (see ``listening``)."""
        await self.pipeline.wait_for(lambda s: s.generation >= 1)
        try:
            # Envoy waits for its first listeners (``initial_fetch_timeout: 0``): no bound on
            # its start here, a loaded machine's 10,000 routes took minutes and still served.
            await engine.wait_ready(limit_s=None)
            await listening(self, engine, refused_only_in_use=True, limit_s=CLAIM_LIMIT_S)
        except TimeoutError:  # slow, not refused: serving goes on, the status says the rest
            log.warning("the engine did not listen on every listener within %.0f s of being "
                        "ready; not checking its ports for another program any more",
                        CLAIM_LIMIT_S)

    async def _serve_metrics(self, where: HostPort, engine: Engine | None) -> None:
        from podway.readers.metrics import exposition
        from podway.readers.metrics.pipeline import PipelineMetrics

        metrics = PipelineMetrics()
        app = exposition.make_app(
            registries=[metrics.registry],
            engine_admin=(lambda: engine.admin_address) if engine is not None else None,
            healthy=lambda: self.pipeline.state is not None, extra=self._engine_metrics)
        await surfaces.serve_until_cancelled(app, where, "metrics", metrics.follow(self.pipeline))

    async def _engine_metrics(self) -> bytes:
        """HAProxy's counters under the Envoy engine's series names, and the kernel engine's
        per-member counters (each only while that engine runs)."""
        from podway.programs.kernel import metrics_text
        from podway.readers.metrics import haproxy

        return await haproxy.scrape(self.haproxy) + (
            await metrics_text() if self.kernel is not None else b"")

    async def _surfaces(self, admin: Path | None, engine: Engine | None) -> None:
        """The admin endpoint and the dashboard (``podway.readers.surfaces``, as the
        controller's), from the start: the admin socket's folder is checked (private) before
        anything is served, and the dashboard answers "no state yet" until the first state.
        (Waiting for the engine to move their imports off the way to the first configuration
        made a folder opened meanwhile stop the whole process once serving, and left the
        dashboard refusing connections for seconds: reverted.)"""
        await surfaces.serve(self.pipeline, surfaces.SurfaceOptions(
            mode=str(self.opts.translate.mode), admin_socket=admin,
            dashboard=self.opts.dashboard, dashboard_refresh_s=self.opts.dashboard_refresh_s,
            engine_admin=(lambda: engine.admin_address) if engine is not None else None,
            engine_views=self.engine_views,
            explain_args=("--manifests", str(self.opts.manifests)),
            detailed_stats=self.opts.envoy_stats is EnvoyStats.DETAILED,
            kernel_ruleset=lambda: self.kernel.installed if self.kernel is not None else None,
            haproxy_rendered=lambda: self.haproxy.rendered if self.haproxy is not None
            else None, engine_sample=self._haproxy_sample))

    async def _haproxy_sample(self, now: float) -> Sample | None:
        """HAProxy's counters as the dashboard's traffic figures (none without HAProxy)."""
        from podway.readers.metrics import haproxy

        return await haproxy.sample(self.haproxy, now)

    async def engine_views(self) -> Mapping[str, View]:
        """The member health of the engines this process runs besides Envoy (whose admin the
        surfaces ask): HAProxy's (with the kernel's for its listeners), the kernel engine's."""
        from podway.programs.kernel import beside_kernel, kernel_view

        views: dict[str, View] = {}
        if self.haproxy is not None:
            seen = await self.haproxy.health()
            if seen is not None:
                views["haproxy"] = beside_kernel(seen, self.kernel)
        elif (own := kernel_view(self.kernel)) is not None:
            views["kernel"] = own
        return views

    def _haproxy_applied(self, generation: int) -> None:
        self.haproxy_generation = generation

    def _envoy(self, state: StateDir) -> Engine:
        """The co-located Envoy; a listener it accepts and cannot serve is its rejection."""
        engine = colocated_engine(state, LocalEngineOptions(
            node_id=self.opts.node_id, delta=self.opts.delta,
            envoy_path=self.opts.envoy_path, log_level=self.opts.envoy_log_level,
            concurrency=self.opts.concurrency, drain_s=self.opts.drain_s,
            stats=self.opts.envoy_stats))
        engine.listener_failures.subscribe(functools.partial(self._refused, self.opts.node_id))
        return engine

    def _on_event(self, event: Event) -> None:
        for hook in self.event_hooks:
            hook(event)
        self.pipeline.on_event(event)

    def _refused(self, node: str, refusal: Refusal) -> None:
        self.pipeline.engine_refused(node, refusal.listener, refusal.reason)


Bound = Mapping[str, tuple[str, int]]  # listener name → (address, port) the engine listens on


async def log_listeners(pipeline: Pipeline,
                        bound: Callable[[], Awaitable[Bound | None]] | None = None, *,
                        poll_s: float = 0.2) -> None:
    """Say where Podway serves — only once the engine has bound it (``bound``: the engine's
    listening sockets, None when it cannot be asked; no ``bound`` at all: no engine of ours,
    every listener is said when configured) — and why not, when the engine refused one (its
    port taken); then each one added, moved or removed; and when an engine stops refusing a
    resource (the xDS server logs each refusal)."""
    lines = ListenerLog(engine=bound is not None)
    refused: tuple[Rejection, ...] = ()
    state = await pipeline.wait_for(lambda s: True)
    while True:
        rejected = {r.resource: r.message for r in state.rejections
                    if r.type_name == "Listener"}
        live = await bound() if bound is not None and lines.waiting(state.ir, rejected) \
            else None
        for level, line in lines.step(state.ir, rejected, live):
            log.log(level, "%s", line)
        for gone in set(refused) - set(state.rejections):
            log.info("engine %s no longer refuses %s %s", gone.node, gone.type_name,
                     gone.resource or "(unnamed)")
        refused = state.rejections
        seen = state.version
        try:
            async with asyncio.timeout(poll_s if lines.waiting(state.ir, rejected) else None):
                state = await pipeline.wait_for(functools.partial(_newer, seen))
        except TimeoutError:
            continue  # look at the engine's sockets again


async def ir_states(pipeline: Pipeline) -> AsyncIterator[IR]:
    """The IR of each state the pipeline publishes."""
    async for state in pipeline.states():
        yield state.ir


async def listening(standalone: Standalone, engine: Engine, *, limit_s: float = 30.0,
                    refused_only_in_use: bool = False) -> None:
    """Until the engine listens on every listener of the current state. ``EnvironmentProblem``
    (one line, exit status 2) when it refused one — most often its port is taken by another
    Podway instance or program, whose answers must never pass for ours
    (``refused_only_in_use``: only for that; other refusals are left to the status)."""
    async with asyncio.timeout(limit_s):
        while True:
            state = standalone.pipeline.state
            refused = [r for r in (state.rejections if state else ())
                       if r.type_name == "Listener" and (
                           not refused_only_in_use or _IN_USE in r.message.lower())]
            if state is not None and refused:
                where = {ls.name: f"{_host(ls.address)}:{ls.port}" for ls in state.ir.listeners}
                first = refused[0]
                why = "the address is already in use" if _IN_USE in first.message.lower() \
                    else first.message[:200]
                raise EnvironmentProblem(
                    f"port {where.get(first.resource, first.resource)} cannot be served: {why}"
                    " — is another `podway run`/`podway demo` or another program using it? "
                    "One instance owns an address and port: stop the other, or change the "
                    "port (--http-port, --https-port, the manifests)")
            address = engine.admin_address
            if state is not None and address is not None:
                with contextlib.suppress(OSError, TimeoutError):
                    bound = await admin.listeners(address)
                    if all(bound.get(ls.name) == (ls.address, ls.port)
                           for ls in state.ir.listeners):
                        return
            await asyncio.sleep(0.05)


_IN_USE = "already in use"
CLAIM_LIMIT_S = 30.0  # ``podway run``: how long it looks for a port another program holds


def _newer(version: int, state: State) -> bool:
    return state.version > version


class ListenerLog:
    """What to say about listeners, from the IR, the engine's refusals and its bound sockets
    (no I/O: ``log_listeners`` feeds it). "serving X" is said once the engine listens on X —
    never for a listener it could not bind; a refusal is said once per distinct message."""

    def __init__(self, *, engine: bool = True) -> None:
        self._engine = engine
        self._said: dict[str, str] = {}  # listener → "PROTO on address:port", said serving
        self._refused: dict[str, str] = {}  # listener → the refusal said
        self._started = False

    def waiting(self, ir: IR, rejected: Mapping[str, str]) -> bool:
        """Some listener is configured, not yet said to serve and not refused (a refused one
        waits for a new state, not for the engine's sockets: nobody polls for it)."""
        return any(self._said.get(ls.name) != _where(ls) and ls.name not in rejected
                   for ls in ir.listeners)

    def step(self, ir: IR, rejected: Mapping[str, str], bound: Bound | None
             ) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        want = {ls.name: ls for ls in ir.listeners}
        for name, listener in want.items():
            where = _where(listener)
            if self._said.get(name) == where:
                continue
            if name in rejected:
                if self._refused.get(name) != rejected[name]:
                    self._refused[name] = rejected[name]
                    out.append((logging.WARNING, f"not serving {where} ({name}): the engine "
                                f"refused it: {rejected[name]}"))
                continue
            if self._engine and (bound is None
                                 or bound.get(name) != (listener.address, listener.port)):
                continue  # not listening yet
            self._said[name] = where
            self._refused.pop(name, None)
            out.append((logging.INFO, f"serving {where} ({name})"))
        for name in [n for n in self._said if n not in want]:
            out.append((logging.INFO, f"no longer serving {self._said.pop(name)} ({name})"))
        for name in [n for n in self._refused if n not in want]:
            del self._refused[name]
        if not self._started and not want:
            out.append((logging.INFO, "serving nothing yet: no listener in the manifests"))
        self._started = True
        return out


def _where(listener: Listener) -> str:
    return f"{listener.protocol} on {_host(listener.address)}:{listener.port}"


def _bound(engine: Engine) -> Callable[[], Awaitable[Bound | None]]:
    """The engine's listening sockets, or None while its admin does not answer."""
    async def ask() -> Bound | None:
        address = engine.admin_address
        if address is None:
            return None
        try:
            return await admin.listeners(address)
        except (OSError, TimeoutError):
            return None
    return ask


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
