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
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podway.base.netaddr import HostPort
from podway.envoy.engine.bootstrap import EnvoyStats
from podway.envoy.engine.local import LocalEngineOptions, colocated_engine
from podway.envoy.engine.process import Engine
from podway.envoy.engine.state import open_state
from podway.envoy.xds.protocol import Event
from podway.envoy.xds.server import ServerTLS, XdsServer
from podway.haproxy.process import HAProxyEngine, HAProxyOptions
from podway.ir import IR, EngineKind
from podway.kernel.engine import KernelEngine
from podway.pipeline import Pipeline, Rejection
from podway.programs.gc_policy import GcPolicy, keep_settled
from podway.programs.haproxy_follow import follow as follow_haproxy
from podway.readers import surfaces
from podway.readers.admin_api import SOCKET_NAME
from podway.sources.files import FileSource
from podway.status.file import StatusFile
from podway.translate import TranslateOptions

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
    # podway.haproxy (haproxy.cfg + maps + runtime API, in the state folder's ``haproxy/``).
    engine_kind: str = "envoy"
    envoy_path: str | None = None
    envoy_log_level: str = "warning"
    concurrency: int = 1
    drain_s: float = 2.0
    node_id: str = "podway-standalone"
    envoy_stats: EnvoyStats = EnvoyStats.BOUNDED  # DETAILED: per-pool stats too (costly)
    metrics: HostPort | None = None  # /metrics and /healthz; None: not served
    dashboard: HostPort | None = None  # the dashboard; None: not served
    dashboard_refresh_s: float = 2.0  # how often a watched dashboard samples the engine
    # The admin endpoint's unix socket; None: ``podway.sock`` in the state folder (no engine,
    # no state folder: no admin endpoint).
    admin_socket: Path | None = None
    # The garbage collector's policy while serving (``podway.programs.gc_policy``); None: left alone
    # (embedded, tests); ``podway run`` sets ``GcPolicy()``.
    gc: GcPolicy | None = None
    haproxy_path: str = "/usr/sbin/haproxy"


class Standalone:
    """File source + pipeline + xDS server + (optionally) one supervised Envoy."""

    def __init__(self, opts: StandaloneOptions) -> None:
        self.opts = opts
        self.pipeline = Pipeline(FileSource(opts.manifests), translate=opts.translate)
        # The engine here connects over a private unix socket in its state folder (no TLS or
        # client certificate needed), whatever else the server listens on.
        self.server = XdsServer(self.pipeline.cache, opts.xds_address, tls=opts.xds_tls,
                                on_event=self._on_event,
                                unauthenticated=opts.xds_unauthenticated)
        self.event_hooks: list[Callable[[Event], None]] = []  # e.g. benchmarks timing ACKs
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
                    self.haproxy = HAProxyEngine(HAProxyOptions(
                        folder=state.path / "haproxy", binary=self.opts.haproxy_path,
                        threads=self.opts.concurrency))
                elif state is not None and self.opts.engine_kind == "envoy":
                    engine = colocated_engine(state, LocalEngineOptions(
                        node_id=self.opts.node_id, delta=self.opts.delta,
                        envoy_path=self.opts.envoy_path, log_level=self.opts.envoy_log_level,
                        concurrency=self.opts.concurrency, drain_s=self.opts.drain_s,
                        stats=self.opts.envoy_stats))
                if not self._engine_future().done():
                    self._engine_future().set_result(engine)
                async with asyncio.TaskGroup() as group:
                    group.create_task(self.pipeline.run(), name="standalone-pipeline")
                    group.create_task(log_listeners(self.pipeline), name="standalone-listeners")
                    if self.opts.gc is not None:
                        group.create_task(keep_settled(self.pipeline, self.opts.gc),
                                          name="standalone-gc")
                    if self.opts.status_file is not None and self.haproxy is None:
                        group.create_task(
                            StatusFile(self.opts.status_file).follow(self.pipeline),
                            name="standalone-status-file")
                    if engine is not None:
                        group.create_task(engine.run(), name="standalone-engine")
                    if self.haproxy is not None:
                        group.create_task(self.haproxy.run(), name="standalone-haproxy")
                        # It writes the status file too: with what HAProxy cannot serve.
                        status = (StatusFile(self.opts.status_file)
                                  if self.opts.status_file is not None else None)
                        group.create_task(follow_haproxy(self.pipeline, self.haproxy,
                                                         self._haproxy_applied, status),
                                          name="standalone-haproxy-follow")
                    if self.opts.engine and self.opts.engine_kind == "kernel":
                        group.create_task(self._kernel(), name="standalone-kernel")
                    elif self.opts.engine and self.opts.engine_kind == "envoy":
                        # Beside Envoy only: it keeps an idle listener on a kernel-served port.
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

    async def _kernel_when_asked(self) -> None:
        """Beside Envoy: the kernel engine, from the first IR in which a Service asks for it
        (``podway.io/engine: kernel``), serving only those listeners (Envoy keeps its own
        listener on the port, idle: the kernel DNATs the port's packets before they reach it,
        and takes new connections back to it when the Service switches back)."""
        await self.pipeline.wait_for(lambda s: any(
            ls.engine is EngineKind.KERNEL for ls in s.ir.listeners))
        await self._kernel()

    async def _kernel(self) -> None:
        """The kernel engine, following the pipeline's IR; its table stays when it stops."""
        from podway.programs.kernel import forgetter, watch_conntrack, writer

        out = writer()
        self.kernel = KernelEngine(out.write, every_l4=False, forget=forgetter(),
                                   alone=self.opts.engine_kind == "kernel")
        log.info("kernel engine: writing nftables through %s", out.kind)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(watch_conntrack(), name="kernel-conntrack-fill")
                group.create_task(self.kernel.run(ir_states(self.pipeline)), name="kernel-engine")
        finally:
            out.close()

    async def _serve_metrics(self, where: HostPort, engine: Engine | None) -> None:
        from podway.readers.metrics import exposition
        from podway.readers.metrics.pipeline import PipelineMetrics

        metrics = PipelineMetrics()
        app = exposition.make_app(
            registries=[metrics.registry],
            engine_admin=(lambda: engine.admin_address) if engine is not None else None,
            healthy=lambda: self.pipeline.state is not None, extra=self._kernel_metrics)
        await surfaces.serve_until_cancelled(app, where, "metrics", metrics.follow(self.pipeline))

    async def _kernel_metrics(self) -> bytes:
        """The kernel engine's per-member counters (nothing while it does not run)."""
        from podway.programs.kernel import metrics_text

        return await metrics_text() if self.kernel is not None else b""

    def _surfaces(self, admin: Path | None, engine: Engine | None
                  ) -> Coroutine[Any, Any, None]:
        """The admin endpoint and the dashboard (``podway.readers.surfaces``, as the
        controller's)."""
        return surfaces.serve(self.pipeline, surfaces.SurfaceOptions(
            mode=str(self.opts.translate.mode), admin_socket=admin,
            dashboard=self.opts.dashboard, dashboard_refresh_s=self.opts.dashboard_refresh_s,
            engine_admin=(lambda: engine.admin_address) if engine is not None else None,
            explain_args=("--manifests", str(self.opts.manifests)),
            detailed_stats=self.opts.envoy_stats is EnvoyStats.DETAILED,
            kernel_ruleset=lambda: self.kernel.installed if self.kernel is not None else None))

    def _haproxy_applied(self, generation: int) -> None:
        self.haproxy_generation = generation

    def _on_event(self, event: Event) -> None:
        for hook in self.event_hooks:
            hook(event)
        self.pipeline.on_event(event)


async def log_listeners(pipeline: Pipeline) -> None:
    """Say where Podway serves: every listener at start, then each one added, moved or removed;
    and when an engine stops refusing a resource (the xDS server logs each refusal)."""
    before: IR | None = None
    refused: tuple[Rejection, ...] = ()
    async for state in pipeline.states():
        for line in listener_changes(before, state.ir):
            log.info("%s", line)
        for gone in set(refused) - set(state.rejections):
            log.info("engine %s no longer refuses %s %s", gone.node, gone.type_name,
                     gone.resource or "(unnamed)")
        before, refused = state.ir, state.rejections


async def ir_states(pipeline: Pipeline) -> AsyncIterator[IR]:
    """The IR of each state the pipeline publishes."""
    async for state in pipeline.states():
        yield state.ir


def listener_changes(before: IR | None, after: IR) -> list[str]:
    """Lines for listeners that appeared, moved or went away (all of them when ``before`` is
    None)."""
    def where(ir: IR | None) -> dict[str, str]:
        return {ls.name: f"{ls.protocol} on {_host(ls.address)}:{ls.port}"
                for ls in (ir.listeners if ir else ())}

    old, new = where(before), where(after)
    lines = [f"serving {new[n]} ({n})" for n in new if old.get(n) != new[n]]
    lines += [f"no longer serving {old[n]} ({n})" for n in old if n not in new]
    if before is None and not new:
        lines.append("serving nothing yet: no listener in the manifests")
    return lines


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
