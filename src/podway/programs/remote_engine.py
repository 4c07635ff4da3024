"""``podway engine --engine haproxy|kernel``: an engine host programmed by a remote controller.

Envoy takes its configuration over xDS itself; these engines take the engine group's IR from
the controller's configuration stream (``podway.engines.config_feed``: the same address, TLS and
client certificate as xDS) and program their data plane from it:

* ``haproxy``: one supervised HAProxy (``podway.haproxy.process``, files in the state folder's
  ``haproxy/``), and beside it, from the first IR that gives a listener to the kernel
  (``podway.io/engine: kernel``), the kernel engine for those listeners, as ``podway run
  --engine haproxy`` does;
* ``kernel``: the kernel engine alone (nftables DNAT, ``podway.kernel``), serving every TCP/UDP
  listener it can and logging each one it leaves out.

Member health goes back through the shared reporter (``podway.engines.reporter``), as the Envoy
engine's does, so the readiness gate, status, dashboard and explain read every engine alike:
HAProxy's view (``show stat``), where the kernel engine serves a listener its own checks for
that listener's pools.

Invariants: the newest IR wins (an engine busy applying one skips to the newest after it, no
backlog); an IR HAProxy refuses is logged and the last good one keeps serving; the kernel table
outlives the engine (``podway kernel cleanup`` removes it) as under ``podway run``. The file
``ready`` in the state folder exists while a configuration is served (HAProxy took one, or the
kernel engine wrote its table), from the first one until the engine stops: the chart's
readiness probe, so a rolling update removes an old engine only once its successor serves.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Generic, TypeVar

from podway.engines import config_feed
from podway.engines.member_health import MAX_CONFIG_CHARS, Finding, HostKey, HostState, Refused
from podway.engines.reporter import Reporter, ReportOptions
from podway.haproxy.process import HAProxyEngine, HAProxyError, HAProxyOptions
from podway.haproxy.render import Rendered
from podway.haproxy.report import REASON, findings
from podway.ir import IR, EngineKind
from podway.kernel.engine import KernelEngine

log = logging.getLogger(__name__)

T = TypeVar("T")
View = Mapping[HostKey, HostState]


class Latest(Generic[T]):
    """The newest value put, for any number of readers; a slow reader skips to the newest."""

    def __init__(self) -> None:
        self.value: T | None = None
        self.version = 0
        self._wake = asyncio.Event()

    def put(self, value: T) -> None:
        self.value, self.version = value, self.version + 1
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    async def values(self) -> AsyncIterator[T]:
        seen = 0
        while True:
            if self.version > seen and self.value is not None:
                seen = self.version
                yield self.value
                continue
            await self._wake.wait()


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteOptions:
    kind: str  # "haproxy" | "kernel"
    report: ReportOptions  # node, group, controller addresses, TLS; interval_s 0: no reports
    folder: Path  # the engine's private state folder
    haproxy_path: str = "/usr/sbin/haproxy"
    threads: int = 1
    member_traffic_counters: bool = False  # the kernel engine's per-packet member counters
    reuse_port: bool = False  # HAProxy's listeners bind with SO_REUSEPORT (--listener-reuse-port)
    drain_s: float = 0.0  # HAProxy finishes its connections for up to this long on a stop


READY = "ready"  # in the state folder while this engine serves a configuration (the probe)


class RemoteEngine:
    """One engine host of kind ``haproxy`` or ``kernel`` (module docstring)."""

    def __init__(self, opts: RemoteOptions) -> None:
        if opts.kind not in config_feed.FEED_KINDS:
            raise ValueError(f"not an engine kind that takes the IR: {opts.kind}")
        self.opts = opts
        self.irs: Latest[IR] = Latest()
        self.generation = 0  # the newest generation the controller sent
        self.applied = asyncio.Event()  # set after each applied IR (tests)
        self.haproxy: HAProxyEngine | None = None
        self.kernel: KernelEngine | None = None
        self._said: set[object] = set()
        self._files: tuple[Rendered, Mapping[str, str]] | None = None  # for config_files
        self._refusing: tuple[Refused, ...] = ()  # listeners HAProxy cannot serve now ...
        self._refused_start: int | None = None  # ... unless it started since (``starts``)
        self._served: IR | None = None  # the last IR HAProxy took

    async def run(self) -> None:
        try:
            await self._run()
        finally:  # stopping: no longer ready (a successor's probe reads its own folder)
            (self.opts.folder / READY).unlink(missing_ok=True)

    def _served_one(self) -> None:
        """A configuration is served: the chart's readiness probe finds ``READY``."""
        self.applied.set()
        (self.opts.folder / READY).touch(exist_ok=True)

    async def _run(self) -> None:
        (self.opts.folder / READY).unlink(missing_ok=True)  # one left by a crash
        async with asyncio.TaskGroup() as group:
            group.create_task(self._follow(), name="engine-config-feed")
            if self.opts.kind == "haproxy":
                self.haproxy = HAProxyEngine(HAProxyOptions(
                    folder=self.opts.folder / "haproxy", binary=self.opts.haproxy_path,
                    threads=self.opts.threads, reuse_port=self.opts.reuse_port,
                    drain_s=self.opts.drain_s))
                group.create_task(self.haproxy.run(), name="engine-haproxy")
                group.create_task(self._apply_haproxy(self.haproxy), name="engine-haproxy-apply")
                group.create_task(self._kernel_when_asked(), name="engine-kernel")
            else:
                group.create_task(self._kernel(alone=True), name="engine-kernel")
            if self.opts.report.interval_s > 0:
                group.create_task(Reporter(self.opts.report, self.view,
                                           unsupported=self.unsupported,
                                           config=self.config_files,
                                           refusing=self.refusing).run(),
                                  name="engine-health-report")

    async def _follow(self) -> None:
        async for generation, ir in config_feed.follow(self.opts.report, self.opts.kind):
            log.info("configuration generation %d: %d listeners, %d pools", generation,
                     len(ir.listeners), len(ir.pools))
            self.generation = generation
            self.irs.put(ir)

    async def _apply_haproxy(self, engine: HAProxyEngine) -> None:
        async for ir in self.irs.values():
            try:
                how = await engine.apply(ir)
            except HAProxyError as exc:
                log.error("haproxy engine: configuration not applied (the previous one keeps "
                          "serving): %s", exc)
                self._refusing = refusing(ir, self._served, exc)
                self._refused_start = engine.counters.started if exc.start else None
                continue
            self._refusing, self._refused_start, self._served = (), None, ir
            log.debug("haproxy engine: configuration applied by %s", how)
            now = set(engine.counters.unsupported)
            for u in sorted(now - self._said, key=lambda u: (u.subject, u.feature)):
                log.warning("event %s on %s: %s", REASON, u.origin or u.subject, u.message)
            self._said = set(now)
            self._served_one()

    async def _kernel_when_asked(self) -> None:
        async for ir in self.irs.values():
            if any(ls.engine is EngineKind.KERNEL for ls in ir.listeners):
                break
        await self._kernel(alone=False)

    async def _kernel(self, *, alone: bool) -> None:
        from podway.programs.kernel import HostPorts, forgetter, watch_conntrack, writer

        out = writer()
        self.kernel = KernelEngine(out.write, every_l4=alone, forget=forgetter(),
                                   resolve=HostPorts(),
                                   traffic_counters=self.opts.member_traffic_counters)
        log.info("kernel engine: writing nftables through %s", out.kind)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(watch_conntrack(), name="kernel-conntrack-fill")
                group.create_task(self.kernel.run(self.irs.values()), name="kernel-engine")
                if alone:
                    group.create_task(self._kernel_applied(self.kernel), name="kernel-applied")
        finally:
            out.close()

    async def _kernel_applied(self, kernel: KernelEngine) -> None:
        while True:
            await kernel.wait_installed(functools.partial(_wrote_since, kernel.writes))
            self._served_one()

    def unsupported(self) -> tuple[Finding, ...]:
        """What HAProxy serves not exactly as asked, as of the last applied IR: the reporter
        sends it to the controller, which puts it on the objects' status."""
        return findings(self.haproxy.counters.unsupported) if self.haproxy is not None else ()

    def refusing(self) -> tuple[Refused, ...]:
        """The listeners HAProxy cannot serve now, as of the last IR applied: the reporter
        sends the set to the controller. A first start that failed (a port taken) is tried
        again by the engine itself: once it came up, it serves that IR, and the set is empty."""
        started = self.haproxy.counters.started if self.haproxy is not None else 0
        if self._refused_start is not None and started > self._refused_start:
            return ()
        return self._refusing

    def config_files(self) -> Mapping[str, str] | None:
        """The haproxy.cfg and maps HAProxy serves (no certificate: they hold keys), as the
        report sends them to the controller for ``config dump``; None before the first."""
        rendered = self.haproxy.rendered if self.haproxy is not None else None
        if rendered is None:
            return None
        if self._files is None or self._files[0] is not rendered:
            self._files = (rendered, config_files(rendered))
        return self._files[1]

    async def engine_metrics(self) -> bytes:
        """HAProxy's counters under the Envoy engine's series names and the kernel engine's
        per-member counters (each only while that engine runs), as ``podway run`` exports
        them."""
        from podway.programs.kernel import metrics_text
        from podway.readers.metrics import haproxy

        return await haproxy.scrape(self.haproxy) + (
            await metrics_text() if self.kernel is not None else b"")

    async def view(self) -> View | None:
        """Member health as this host serves it: HAProxy's view, with the kernel engine's for
        the pools of the listeners it serves; the kernel engine's alone under ``kernel``. None
        until the data plane has a configuration."""
        from podway.programs.kernel import beside_kernel

        kernel = self.kernel
        if self.haproxy is None:
            return kernel.view() if kernel is not None and kernel.installed is not None \
                else None
        seen = await self.haproxy.health()
        return None if seen is None else beside_kernel(seen, kernel)


def refusing(ir: IR, served: IR | None, exc: HAProxyError) -> tuple[Refused, ...]:
    """The listeners of ``ir`` HAProxy cannot serve after refusing it: those whose port it
    could not bind; else (the reload refused) every listener new or changed since the IR it
    serves (the others keep serving as they were), or all of them when none is."""
    if exc.refused:
        return tuple(sorted(Refused(name, reason) for name, reason in exc.refused))
    before = {ls.name: ls for ls in served.listeners} if served is not None else {}
    names = [ls.name for ls in ir.listeners if before.get(ls.name) != ls] \
        or [ls.name for ls in ir.listeners]
    reason = f"the haproxy engine refused the configuration: {exc}"
    return tuple(sorted(Refused(name, reason) for name in names))


def config_files(rendered: Rendered) -> Mapping[str, str]:
    """haproxy.cfg and every map as files (name → text); over the report's bound, one note
    saying so instead (the files are on the engine host)."""
    files = {"haproxy.cfg": rendered.config,
             **{path: "".join(f"{k} {v}\n" for k, v in rows)
                for path, rows in sorted(rendered.maps.items())}}
    size = sum(len(k) + len(v) for k, v in files.items())
    if size > MAX_CONFIG_CHARS:
        return MappingProxyType({"haproxy.cfg": (
            f"# not reported: {size} characters with its maps, over the bound of "
            f"{MAX_CONFIG_CHARS}; read it on the engine host\n")})
    return MappingProxyType(files)


def _wrote_since(writes: int, kernel: KernelEngine) -> bool:
    return kernel.writes > writes
