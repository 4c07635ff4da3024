"""``podway controller``: the Kubernetes API → the same pipeline as standalone → xDS for engines.

Wiring only: ``KubeSource`` (informers) → ``ModeGate`` (effective backend mode per Service) →
``Pipeline`` (translate, build, cache) → ``XdsServer`` (any number of engines, TLS with client
certificates off loopback). A follower task reads each published state and writes back: the
NodePortLocal opt-in annotation of the Services it serves in that mode, statuses
(``StatusWriter``) and events (``EventRecorder``); the readiness gate (``ReadinessGate``) sets
``podway.io/lb-ready`` on gated Pods from the engines' member health reports, which arrive on
the xDS server (``podway.engines.member_health``): engines report to every replica, so the leader
counts each engine reporting to it and each engine on its own xDS, wherever the others' xDS
streams go (``podway.programs.controller.readiness_judge.counted_engines``). Health (``/healthz``),
readiness (``/readyz``: the first snapshot is applied and xDS is serving) and Prometheus metrics
(``/metrics``) share one HTTP port. Opt-in, as in ``podway run`` and through the same code
(``podway.readers.surfaces``): the admin endpoint on a private unix socket (``podway
explain|status|config --admin-socket``) and the web dashboard; the engines are remote, so both
show each engine's member health as it reported it (``podway.readers.engine_health``: Envoy,
HAProxy and kernel engines alike), and ``engine_admin`` may add a co-located Envoy's admin.

Any number of replicas may run: each translates and serves xDS; the one holding the Lease
(``podway.programs.controller.leader``, ``election``) writes — statuses (VIP allocations included),
events and the NodePortLocal annotation, each write checked against the leader's fence. A new
leader writes what is pending at once (the current state again, compared with what the API
holds). Without ``election`` this replica always writes (``--leader-elect=false``).

With ``gc`` set (``podway controller`` sets it) the collector follows ``podway.programs.gc_policy``:
the heap is frozen once the first state is in, so no full collection pauses the loop mid-push.

Invariants: engines keep their last config while the controller is away (Envoy holds it; a
restarted controller serves the same resources with the same versions, so nothing is re-applied
needlessly); the controller writes only what changed; one slow writer never delays xDS (writing
runs beside the pipeline, coalesced).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from kubernetes_asyncio import client

from podway.base.backoff import Backoff
from podway.base.netaddr import HostPort
from podway.engines.config_feed import ConfigFeed
from podway.engines.member_health import MemberHealthReports
from podway.envoy.xds.protocol import Event
from podway.envoy.xds.server import ServerTLS, XdsServer
from podway.kube.client import check_reachable, connect
from podway.kube.errors import api_error
from podway.kube.informer import RELIST
from podway.model import Service, npl
from podway.model.base import ObjectRef
from podway.model.loader import LoadError
from podway.model.snapshot import Key
from podway.pipeline import Pipeline, State
from podway.programs.controller import kind_mismatch
from podway.programs.controller.config import LiveConfig, follow_config, load_config
from podway.programs.controller.events import (
    Due,
    EventRecorder,
    changes,
    drop_told,
    load_error_events,
)
from podway.programs.controller.first_pass import until_served
from podway.programs.controller.groups import EngineGroups, envoy_cache, feed
from podway.programs.controller.leader import (
    ALWAYS,
    ElectionSettings,
    Leadership,
    LeaseElector,
    leader_states,
)
from podway.programs.controller.metrics import ControllerMetrics
from podway.programs.controller.modes import NplPlanner
from podway.programs.controller.oidc_key import keyed
from podway.programs.controller.pending import PendingWarnings
from podway.programs.controller.readiness import ReadinessGate
from podway.programs.controller.refusals import RefusedKinds
from podway.programs.controller.source import ControllerSource
from podway.programs.controller.status import StatusWriter
from podway.programs.gc_policy import GcPolicy, Settled, keep_settled
from podway.programs.ipam import Pool, PoolKinds, controller_ipam
from podway.programs.ipam.objects import METALLB_NAMESPACE
from podway.readers import surfaces
from podway.readers.engine_health import reported
from podway.readers.metrics import exposition
from podway.readers.metrics.pipeline import PipelineMetrics
from podway.sources.kube import KubeSourceSettings
from podway.sources.mode_gate import ModeGate
from podway.status import StatusDocument
from podway.status.diff import pool_hint
from podway.translate import TranslateOptions
from podway.translate import annotations as ann

if TYPE_CHECKING:
    from podway.programs.controller.engine_certs import EngineCertSettings, EngineCertSigner
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerOptions:
    kubeconfig: str | None = None  # None: in-cluster
    context: str | None = None
    translate: TranslateOptions = field(default_factory=TranslateOptions)
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    namespace_selector: str = ""  # and only Namespaces with these labels; empty: all
    xds_address: str = "127.0.0.1:18000"
    xds_tls: ServerTLS | None = None
    xds_unauthenticated: bool = False
    """Allow clear-text xDS on a loopback host:port (those engines get no Secrets)."""
    metrics_address: str = "0.0.0.0"
    metrics_port: int = 0  # 0: no health/metrics endpoint
    lb_address: str | None = None
    """Published in ``status.loadBalancer`` when a listener binds the wildcard (the engines')."""
    vip_pools: tuple[Pool, ...] = ()
    """VIP pools: with any, LoadBalancer Services and Gateways get their addresses from the IPAM
    (``podway.programs.ipam``), which reads what each object holds from the API's status."""
    vip_pool_kinds: tuple[PoolKinds, ...] = ()
    """Pool objects the IPAM reads besides ``vip_pools`` (VIPPool, MetalLB's IPAddressPool);
    with any, the IPAM is on even without ``vip_pools``."""
    metallb_namespace: str = METALLB_NAMESPACE
    debounce_s: float = 0.02
    max_wait_s: float = 0.2
    backoff: Backoff = RELIST  # re-list/re-watch delays (tests: faster)
    status_concurrency: int = 32
    status_resync_s: float = 60.0
    """How often every status Podway wrote is compared with what the API holds (a foreign write
    the watch missed is repaired then; one seen on the watch is repaired at once)."""
    write_events: bool = True
    warnings: tuple[str, ...] = ()
    """Said once the API is reached (a flag choice that weakens something, e.g. unsigned
    NodePortLocal annotations): before that, a bad flag or no cluster is the one line."""
    npl_agent_user: str | None = None  # agents asking as this user get their node's NPL key
    engine_certs: EngineCertSettings | None = None  # sign engines' CSRs (--engine-account)
    oidc_key_secret: tuple[str, str] | None = None  # (namespace, name): ``oidc_key.keyed``
    pending_warning_s: float = 5.0
    """How long a Service's pods may wait for their NodePortLocal annotation (the agent's next
    step) before a ``PendingMembers`` Warning (``podway.programs.controller.pending``)."""
    admin_socket: Path | None = None
    """The admin endpoint (state, config, live explain: ``podway.readers.admin_api``); None: off."""
    dashboard: HostPort | None = None  # the web dashboard; None: off
    listener_reuse_port: bool = False  # SO_REUSEPORT: a new engine binds beside the old one
    detailed_stats: bool = False  # the engines keep every stat (``--envoy-stats detailed``)
    dashboard_refresh_s: float = 2.0
    engine_admin: str | None = None
    """A co-located engine's admin (``unix:/path``): its live health and stats feed explain and
    the dashboard. None: they show Kubernetes readiness only, and say so."""
    election: ElectionSettings | None = None
    """Leader election over a Lease: only the leader writes. None: this replica always writes
    (``--leader-elect=false``; run one replica only)."""
    config: Path | None = None
    """Live settings (``podway.programs.controller.config``): its ``backendMode`` replaces
    ``translate.mode`` at start and whenever the file changes. None: no file."""
    config_poll_s: float = 1.0
    gc: GcPolicy | None = None
    """The garbage collector's policy for this process while it serves
    (``podway.programs.gc_policy``: the full collections that paused the event loop mid-push,
    frozen away after the first state). None: the collector is left as it is (a controller embedded
    in another program or in tests); ``podway controller`` sets ``GcPolicy()``."""


class Controller:
    """One controller process (see the module docstring)."""

    def __init__(self, opts: ControllerOptions, *, api: client.ApiClient | None = None,
                 writes_allowed: Callable[[], bool] = lambda: True) -> None:
        self.opts = opts
        self._api = api
        self._writes_allowed = writes_allowed  # leadership: only a leader writes Pods
        self.health_reports = MemberHealthReports()  # the engines' member health
        self.live = LiveConfig()  # the --config file's settings now
        self.feed = ConfigFeed(kinds=lambda: self.live.engine_kinds)  # IR: HAProxy, kernel
        self.readiness: ReadinessGate | None = None
        self.source: ControllerSource | None = None
        self.gate: ModeGate | None = None
        self.pipeline: Pipeline | None = None
        self.server: XdsServer | None = None
        self.groups: EngineGroups | None = None
        self.status: StatusWriter | None = None
        self.elector: LeaseElector | None = None
        self.leadership: Leadership = ALWAYS
        self.started = asyncio.Event()  # pipeline and xDS server exist (not yet populated)
        self.event_hooks: list[Callable[[Event], None]] = []  # engines' ACKs/NACKs (benchmarks)
        self.metrics = ControllerMetrics()
        self.pipeline_metrics = PipelineMetrics()
        self._npl_requested: dict[Key, str] = {}
        self._npl_planner = NplPlanner()
        self._npl_seen: tuple[object, ...] = ()
        self.refused = RefusedKinds(self.metrics,
                                    controller_name=opts.translate.gateway_controller)
        self.gc_settled: Settled | None = None  # with ``opts.gc``: the newest settle
        self.gc_first_settle = asyncio.Event()  # set at the first (benchmarks, tests)
        self.engine_signer: EngineCertSigner | None = None  # with ``opts.engine_certs``

    async def run(self) -> None:
        """Serve until cancelled; a cluster that cannot be reached is one ``PodwayError``."""
        if self._api is not None:
            await self._serve(self._api)
            return
        api = await connect(kubeconfig=self.opts.kubeconfig, context=self.opts.context)
        if self.opts.election is not None:  # the API's audit log tells the replicas apart
            api.user_agent = f"podway-controller ({self.opts.election.identity})"
        async with api:
            await check_reachable(api)
            await self._serve(api)

    async def _serve(self, api: client.ApiClient) -> None:
        for warning in self.opts.warnings:  # connected: the flags were good, say what they cost
            log.warning("%s", warning)
        opts = self.opts
        self.live = live = load_config(opts.config) if opts.config is not None else LiveConfig()
        if live.backend_mode is not None:
            opts = replace(opts, translate=replace(opts.translate, mode=live.backend_mode))
        self.source = ControllerSource(api, KubeSourceSettings(
            namespaces=opts.namespaces, namespace_selector=opts.namespace_selector,
            debounce_s=opts.debounce_s, max_wait_s=opts.max_wait_s, backoff=opts.backoff),
            metrics=self.metrics)
        vips = controller_ipam(opts.vip_pools, opts.vip_pool_kinds, opts.metallb_namespace,
                               self.source.current_status)
        if vips is not None:  # an address an object's status holds stays that object's
            opts = replace(opts, translate=replace(opts.translate, vips=vips))
        if opts.election is not None:
            self.elector = LeaseElector(api, opts.election, metrics=self.metrics)
            self.leadership = self.elector
        else:
            self.metrics.leader.set(1)
        opts = await keyed(api, opts)  # the OIDC session key, from its Secret
        # This controller writes the NodePortLocal opt-in itself (``_enable_npl``).
        opts = replace(opts, translate=replace(opts.translate, npl_enabled_by_controller=True))
        self.gate = ModeGate(self.source, opts.translate)
        self.pipeline = Pipeline(self.gate, translate=opts.translate,
                                 reuse_port=opts.listener_reuse_port,
                                 detailed_stats=opts.detailed_stats, clusters_first=True)
        if opts.engine_certs is not None:  # its CA is trusted before the first engine comes
            from podway.programs.controller.engine_certs import EngineCertSigner

            self.engine_signer = EngineCertSigner.of(api, opts.engine_certs)
            opts = replace(opts, xds_tls=await self.engine_signer.trusted_by(opts.xds_tls))
        server, readiness, groups = self._engines(api, self.pipeline, opts)
        self.status = self._status_writer(api, opts)
        self.status.hold_first = functools.partial(until_served, server.servicer)  # first_pass
        events = EventRecorder(api, metrics=self.metrics, leadership=self.leadership)
        await server.start()
        log.info("xDS for engines on %s", server.target)
        runner = None
        try:
            if opts.metrics_port:
                runner = await self._serve_http()
            self.started.set()
            async with asyncio.TaskGroup() as group:
                group.create_task(self.pipeline.run(), name="controller-pipeline")
                group.create_task(self._follow(api, events), name="controller-writeback")
                group.create_task(self._pending_warnings(events),
                                  name="controller-pending-warnings")
                group.create_task(kind_mismatch.follow(self, server, events), name="kinds")
                group.create_task(self.status.retry_failed(), name="controller-status-retry")
                group.create_task(self.status.repair(every_s=opts.status_resync_s),
                                  name="controller-status-repair")
                group.create_task(readiness.run(), name="controller-readiness")
                group.create_task(groups.follow(), name="controller-engine-groups")
                group.create_task(feed(self.pipeline, self.feed), name="controller-config-feed")
                self._optional_tasks(group, opts, live, api)
        finally:
            if runner is not None:
                await runner.cleanup()
            await server.stop(grace=0.5)

    def _engines(self, api: client.ApiClient, pipeline: Pipeline, opts: ControllerOptions
                 ) -> tuple[XdsServer, ReadinessGate, EngineGroups]:
        """The xDS server (ADS, member health, the IR: ``groups.feed``) and the readiness gate,
        counting engines on ADS or the IR stream here and every engine reporting here."""
        self.groups = groups = EngineGroups(pipeline)
        self.server = server = XdsServer(
            pipeline.cache, opts.xds_address, tls=opts.xds_tls, on_event=self._on_event,
            unauthenticated=opts.xds_unauthenticated,
            groups=functools.partial(envoy_cache, groups, lambda: self.live.engine_kinds))
        server.handlers += [self.health_reports.handler(server), self.feed.handler(server)]
        pipeline.hear_refusals(self.health_reports)  # a listener an engine cannot serve
        fed, servicer = self.feed, server.servicer
        self.readiness = readiness = ReadinessGate(
            api, pipeline, self.health_reports,
            lambda: {**fed.engine_groups, **servicer.engine_groups},
            writes_allowed=self._may_write_pods, metrics=self.metrics)
        servicer.on_engines.append(readiness.wake)
        fed.on_engines.append(readiness.wake)
        return server, readiness, groups

    def _status_writer(self, api: client.ApiClient, opts: ControllerOptions) -> StatusWriter:
        """The status writer, told by the source what the API holds (ours read back as that
        very object; anyone else's write to be repaired)."""
        assert self.source is not None
        assert self.pipeline is not None
        writer = StatusWriter(api, self.pipeline, current=self.source.current_status,
                              kind_info=self.source.kind_info, opts=opts.translate,
                              lb_address=opts.lb_address, metrics=self.metrics,
                              concurrency=opts.status_concurrency, leadership=self.leadership)
        self.source.same_as = writer.last_written
        self.source.on_status = writer.observed
        writer.on_written = self.source.expect_echo
        return writer

    def _optional_tasks(self, group: asyncio.TaskGroup, opts: ControllerOptions,
                        live: LiveConfig, api: client.ApiClient) -> None:
        """The tasks only some settings ask for: election, live config, surfaces, GC, NPL keys."""
        assert self.pipeline is not None
        if self.elector is not None:
            group.create_task(self.elector.run(), name="controller-leader-election")
        if opts.config is not None:
            group.create_task(self._follow_config(opts.config, live), name="controller-config")
        if opts.admin_socket is not None or opts.dashboard is not None:
            group.create_task(surfaces.serve(self.pipeline, self._surfaces()),
                              name="controller-surfaces")
        if opts.npl_agent_user and opts.translate.npl_key is not None:
            from podway.programs.controller.npl_keys import NplKeyIssuer

            group.create_task(NplKeyIssuer(api, master=opts.translate.npl_key, agent_user=(
                opts.npl_agent_user)).run(), name="controller-npl-keys")
        if self.engine_signer is not None:
            group.create_task(self.engine_signer.run(), name="controller-engine-certs")
        if opts.gc is not None:
            group.create_task(keep_settled(self.pipeline, opts.gc, on_settled=self._settled),
                              name="controller-gc")

    def _settled(self, settled: Settled) -> None:
        self.gc_settled = settled
        self.gc_first_settle.set()

    def _may_write_pods(self) -> bool:
        """The readiness gate writes Pods only while this replica leads (and its caller allows)."""
        return self.leadership.is_leader() and self._writes_allowed()

    async def _follow_config(self, path: Path, first: LiveConfig) -> None:
        """Apply each new default backend mode of the ``--config`` file (unset: the flag's)."""
        assert self.gate is not None
        async for live in follow_config(path, first, poll_s=self.opts.config_poll_s):
            self.live = live  # engineGroups: for new streams (open ones stay)
            mode = live.backend_mode or self.opts.translate.mode
            if mode is not self.gate.default:
                log.info("default backend mode %s → %s (--config %s)", self.gate.default,
                         mode, path)
                self.gate.set_default(mode)

    def _surfaces(self) -> surfaces.SurfaceOptions:
        """The admin endpoint and the dashboard, mounted as ``podway run`` mounts them."""
        opts = self.opts
        engine = opts.engine_admin
        return surfaces.SurfaceOptions(
            mode=str(opts.translate.mode), admin_socket=opts.admin_socket,
            dashboard=opts.dashboard, dashboard_refresh_s=opts.dashboard_refresh_s,
            engine_admin=(lambda: engine) if engine is not None else None,
            engine_views=reported(self.health_reports),
            engine_configs=self.health_reports.configs,
            explain_args=("--admin-socket", str(opts.admin_socket)) if opts.admin_socket
            else ())

    def _on_event(self, event: Event) -> None:
        for hook in self.event_hooks:
            hook(event)
        if self.pipeline is not None:
            self.pipeline.on_event(event)

    # ---- write-back --------------------------------------------------------------------
    async def _follow(self, api: client.ApiClient, events: EventRecorder) -> None:
        assert self.pipeline is not None
        assert self.status is not None
        doc: StatusDocument | None = None
        errors: tuple[LoadError, ...] = ()
        generation = 0
        async for state, leads in leader_states(self.pipeline, self.leadership):
            if leads:  # a new term: compare with what the API holds, write what differs
                await self.status.resync()
                events.resync()
                if self.readiness is not None:
                    self.readiness.wake()  # gated pods are judged now, not at the next resync
                self._npl_seen, self._npl_requested = (), {}
                self.refused.reset()  # say it again in this term
            self._observe(state, generation)
            generation = state.generation
            due: list[Due] = await self._enable_npl(api, state)
            await self.status.write(state)
            if self.status.last_document is not None and self.status.last_document is not doc:
                news = changes(doc, self.status.last_document)
                due += news if doc is not None else drop_told(news, self.status.take_found())
                doc = self.status.last_document
            if state.update.errors != errors:
                due += load_error_events(errors, state.update.errors)
                errors = state.update.errors
            if self.gate is not None:
                self.metrics.pending_members.set(
                    sum(len(p) for p in self.gate.report.pending.values()))
            due += self.refused.due(self.source.unavailable if self.source else {},
                                    state.update.snapshot)
            if due and self.opts.write_events:
                await events.record(due)

    def _observe(self, state: State, previous_generation: int) -> None:
        self.pipeline_metrics.observe(state, now=time.time())
        if state.generation == previous_generation:
            return  # an engine decision, not a new update
        self.metrics.observe_snapshot(state.update.snapshot)
        if self.source is not None:
            self.metrics.relists.set(self.source.relists)

    async def _pending_warnings(self, events: EventRecorder) -> None:
        """Every second: a Warning for pods that have waited ``pending_warning_s`` for their
        NodePortLocal annotation, a Normal when they no longer wait (``pending``)."""
        tracker = PendingWarnings(grace_s=self.opts.pending_warning_s)
        while True:
            await asyncio.sleep(min(1.0, self.opts.pending_warning_s / 2))
            if self.gate is None:
                continue
            due = tracker.due(self.gate.report.pending, now=time.monotonic())
            if due and self.opts.write_events:
                await events.record(due)

    async def _enable_npl(self, api: client.ApiClient, state: State) -> list[Due]:
        """Add/remove ``nodeportlocal.antrea.io/enabled`` where the plan says (once each); a
        Warning ``NodePortLocalNotEnabled`` on each Service whose annotation could not be
        written (the translator does not warn about a missing one: adding it is this step)."""
        assert self.gate is not None
        fence = self.leadership.fence()
        if not fence.valid():
            return []  # a follower: the leader annotates (planned afresh when this one leads)
        services = state.update.snapshot.kind(Service)
        held = dict(self.gate.report.held)
        last = self._npl_seen
        if last and last[0] is services and last[1] is state.ir.listeners and last[2] == held:
            return []  # members moved; no Service and no structure did
        self._npl_seen = (services, state.ir.listeners, held)
        plan = self._npl_planner.plan(services, state.ir.pools, requested=self.gate.requested,
                                      default=self.gate.default, held=held,
                                      known=pool_hint(state.result))
        core: Any = client.CoreV1Api(api)  # the stubs do not model ``_content_type``
        failed: list[Due] = []
        for keys, value in ((plan.enable, "true"), (plan.disable, None)):
            for key in keys:
                marker = f"{value}:{services[key].metadata.annotations.get(ann.NPL_MANAGED.name)}"
                if self._npl_requested.get(key) == marker:
                    continue  # asked already; the watch will show it
                if not fence.valid():  # the Lease was lost meanwhile: leave the rest
                    self.metrics.fenced_writes.labels(writer="npl").inc()
                    self._npl_seen = ()
                    return failed
                self._npl_requested[key] = marker
                body = {"metadata": {"annotations": {npl.ENABLED_ANNOTATION: value,
                                                     ann.NPL_MANAGED.name: value}}}
                try:
                    resp = await core.patch_namespaced_service(
                        key[1], key[0], body, _content_type="application/merge-patch+json",
                        _preload_content=False)  # raw: no client model built from the answer
                    status = resp.status
                    resp.release()
                    if status >= 400:
                        raise client.exceptions.ApiException(status=status, reason="refused")
                    log.info("%s NodePortLocal on Service %s/%s",
                             "enabled" if value else "disabled", *key)
                except Exception as exc:  # the API is away or refuses: next state retries
                    self._npl_requested.pop(key, None)
                    self._npl_seen = ()
                    reason = (api_error(exc) if isinstance(exc, client.exceptions.ApiException)
                              else exc)
                    log.warning("Service %s/%s: NodePortLocal annotation not written: %s",
                                *key, reason)
                    if value:
                        failed.append(Due(
                            ref=ObjectRef("Service", *key), type="Warning",
                            reason="NodePortLocalNotEnabled",
                            message=f"could not add {npl.ENABLED_ANNOTATION}: \"true\" "
                                    f"({reason}); no NodePortLocal agent maps its pods until "
                                    "it is there (retried with the next change)"))
        return failed

    # ---- health, readiness, metrics -----------------------------------------------------
    async def _serve_http(self) -> web.AppRunner:
        app = exposition.make_app(
            registries=[self.pipeline_metrics.registry, self.metrics.registry])
        app.router.add_get("/readyz", self._ready)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.opts.metrics_address, self.opts.metrics_port).start()
        log.info("health, readiness and metrics on %s:%d", self.opts.metrics_address,
                 self.opts.metrics_port)
        return runner

    async def _ready(self, _: web.Request) -> web.Response:
        ready = self.pipeline is not None and self.pipeline.state is not None
        return web.Response(text="ready\n" if ready else "waiting for the first snapshot\n",
                            status=200 if ready else 503)


def parse_namespaces(value: str) -> tuple[str, ...]:
    """``a,b`` → ("a", "b"); empty → every namespace."""
    return tuple(sorted({n.strip() for n in value.split(",") if n.strip()}))
