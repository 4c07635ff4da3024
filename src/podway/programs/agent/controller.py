"""The agent's asyncio shell: informers → work queue → workers → kernel rules + annotations.

Start-up order (as Antrea's): list Pods (this node only), Services and this Node; rebuild the
port table from the pods' existing annotations, keeping their ports so no traffic moves (only
annotations signed with this node's key, when it signs: a forged one is not adopted); one
bulk rules sync; only then start the workers. A resync loop repairs kernel drift and re-queues
every pod. Handlers only enqueue pod keys; workers reconcile one pod from the caches with
``reconcile.plan`` and retry failures with per-key exponential backoff.

A pod's rules are removed by node port, never by pod IP, so a recycled IP cannot remove another
pod's mapping.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import ValidationError

from podway.base.backoff import Backoff
from podway.kube.informer import Informer, Raw
from podway.model import npl as annotation
from podway.model.core import Node, Pod, Service
from podway.programs.agent import events, reconcile
from podway.programs.agent.metrics import Metrics
from podway.programs.agent.ports import Entry, PortRange, PortTable, SocketOpener
from podway.programs.agent.reconcile import Target
from podway.programs.agent.rules.base import Rules, RulesError
from podway.programs.agent.types import PROTOCOLS, PodKey, Rule, pod_key
from podway.programs.agent.workqueue import RETRY, WorkQueue

log = logging.getLogger("podway.programs.agent")


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSettings:
    node_name: str  # the Node this agent serves (its pods only)
    port_range: PortRange  # node ports handed out, inclusive
    node_ip: str | None = None  # annotation nodeIP; default: Node InternalIP, else ExternalIP
    resync_seconds: float = 30.0  # kernel drift check + full re-queue period
    workers: int = 4  # concurrent pod reconciles
    watch_timeout: int = 300  # server-side watch timeout (s); the watch resumes after it
    backoff: Backoff = RETRY  # per-pod retry delays after a failed reconcile
    # This node's key (``npl.node_key`` of the controller's master): each annotation is signed
    # (``npl.SIGNATURE_ANNOTATION``) so the controller believes only this node's agent's, and
    # a restart adopts only mappings signed with it. None: unsigned.
    npl_key: bytes | None = field(default=None, repr=False)


class Agent:
    def __init__(self, *, api: client.ApiClient, settings: AgentSettings, rules: Rules,
                 opener: SocketOpener, metrics: Metrics | None = None) -> None:
        self.settings = settings
        # Any: the client's stubs do not model ``_preload_content``/``_content_type``, which we
        # use to keep raw JSON (no model round-trip) and to send a JSON merge patch.
        self.core: Any = client.CoreV1Api(api)
        self.rules = rules
        self.metrics = metrics or Metrics()
        self.table = PortTable(port_range=settings.port_range, opener=opener,
                               on_release=self._ports_freed)
        self.queue = WorkQueue(backoff=settings.backoff)
        self.pods: dict[PodKey, Pod] = {}
        self.services: dict[tuple[str, str], Service] = {}
        self.node: Node | None = None
        self.restored = asyncio.Event()
        self._starved: set[PodKey] = set()
        self._noted: set[str] = set()
        # Held while the port table and the kernel disagree on purpose: by a reconcile from its
        # first table change until the backend confirmed the write, and by the drift check. So
        # a resync never sees a change in flight and mistakes it for drift.
        self._table_lock = asyncio.Lock()

    # ---- run -----------------------------------------------------------------------------
    async def run(self) -> None:
        name = self.settings.node_name
        informers = [
            Informer(name="pods", lister=self.core.list_pod_for_all_namespaces,
                     params={"field_selector": f"spec.nodeName={name}"},
                     handler=self._on_pod, watch_timeout=self.settings.watch_timeout),
            Informer(name="services", lister=self.core.list_service_for_all_namespaces,
                     params={}, handler=self._on_service,
                     watch_timeout=self.settings.watch_timeout),
            Informer(name="node", lister=self.core.list_node,
                     params={"field_selector": f"metadata.name={name}"},
                     handler=self._on_node, watch_timeout=self.settings.watch_timeout),
        ]
        try:
            async with asyncio.TaskGroup() as tg:
                for informer in informers:
                    tg.create_task(informer.run(), name=f"npl-informer-{informer.name}")
                await asyncio.gather(*(informer.ready.wait() for informer in informers))
                await self.restore()
                for i in range(self.settings.workers):
                    tg.create_task(self._worker(), name=f"npl-worker-{i}")
                tg.create_task(self._resync_loop(), name="npl-resync")
        finally:
            self.queue.close()
            # Sockets close with the process; kernel rules stay so traffic survives a restart.
            self.table.release_all()

    async def restore(self) -> None:
        """Rebuild the port table from the annotations, then one bulk rules sync.

        Stale annotations may claim one port for two pods. The mapping the kernel carries now
        wins (traffic already flows that way), else the oldest pod's; the loser's reconcile
        gives it a new port.
        """
        try:
            in_kernel = await self.rules.installed() or set()
        except RulesError as exc:
            log.warning("event=restore-read-failed error=%s", exc)
            in_kernel = set()
        claims: list[tuple[bool, float, Entry]] = []
        for key, pod in self.pods.items():
            ip = reconcile.pod_ipv4(pod)
            if ip is None or not reconcile.pod_active(pod, node_name=self.settings.node_name):
                continue
            created = pod.metadata.creation_timestamp
            age = created.timestamp() if created is not None else math.inf
            value = pod.metadata.annotations.get(annotation.ANNOTATION)
            if not self._vouched(pod, value):
                # Not this agent's (a tenant may patch its pod): adopting it would hand the
                # forged port to this pod. Its reconcile allocates and signs a fresh mapping.
                log.warning("pod=%s event=restore-skipped reason=not-signed-by-this-node", key)
                continue
            entries, _ = annotation.decode(value)
            for item in entries:
                entry = Entry(pod=key, pod_ip=ip, pod_port=item.pod_port,
                              protocol=item.protocol, node_port=item.node_port)
                claims.append((entry.rule not in in_kernel, age, entry))
        kept = 0
        for _, _, entry in sorted(claims, key=lambda c: (c[0], c[1], c[2].pod, c[2].rule)):
            kept += self.table.restore(entry)
        await self.rules.sync(entry.rule for entry in self.table)
        log.info("event=restored mappings=%d pods=%d", kept, len(self.pods))
        self._update_gauges()
        for key in self.pods:
            self.queue.add(key)
        self.restored.set()

    def _vouched(self, pod: Pod, value: str | None) -> bool:
        """Whether a restart may adopt the pod's mapping: signed with this node's key (any
        mapping when the agent signs nothing, as Antrea's)."""
        key_ = self.settings.npl_key
        return value is None or key_ is None or annotation.vouched(
            key_, uid=pod.metadata.uid, value=value,
            signed=pod.metadata.annotations.get(annotation.SIGNATURE_ANNOTATION))

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            started = time.perf_counter()
            try:
                await self.reconcile(key)
                self.queue.forget(key)
            except (ApiException, RulesError, OSError) as exc:
                self.metrics.errors.labels(stage="reconcile").inc()
                delay = self.queue.retry_later(key)
                log.warning("pod=%s event=reconcile-failed error=%r retry_in=%.2fs",
                            key, exc, delay)
            except Exception:
                # A bug must not kill the worker (and with it the agent): log it, back off.
                self.metrics.errors.labels(stage="reconcile").inc()
                delay = self.queue.retry_later(key)
                log.exception("pod=%s event=reconcile-crashed retry_in=%.2fs", key, delay)
            finally:
                self.queue.done(key)
                self.metrics.sync_seconds.observe(time.perf_counter() - started)

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.resync_seconds)
            await self.resync()

    async def resync(self) -> None:
        try:
            # The port table is the source of truth, not what the backend last heard.
            async with self._table_lock:
                repaired = await self.rules.repair(lambda: [entry.rule for entry in self.table])
            if repaired:
                self.metrics.drift_repairs.inc()
                log.warning("event=rules-drift action=repaired backend=%s", self.rules.name)
        except (RulesError, OSError) as exc:
            # Logged and retried next period: a resync failure must not stop the agent.
            self.metrics.errors.labels(stage="resync").inc()
            log.error("event=resync-failed error=%s", exc)
        for key in list(self.pods):
            self.queue.add(key)

    # ---- one pod -------------------------------------------------------------------------
    async def reconcile(self, key: PodKey) -> None:
        pod = self.pods.get(key)
        active = pod is not None and reconcile.pod_active(pod, node_name=self.settings.node_name)
        wanted: frozenset[Target] = frozenset()
        ip = None
        if pod is not None and active:
            namespace = pod.metadata.namespace
            services = [s for (ns, _), s in self.services.items() if ns == namespace]
            wanted, notes = reconcile.targets(pod, services)
            for note in notes:
                if note not in self._noted:
                    self._noted.add(note)
                    log.info("pod=%s note=%r", key, note)
            ip = reconcile.pod_ipv4(pod)
        async with self._table_lock:
            exhausted = await self._apply_plan(key, wanted=wanted, ip=ip)
        self._update_gauges()

        if pod is not None:
            await self._write_annotation(key, pod, wanted=wanted if active else frozenset(),
                                         pod_ip=ip)
        if exhausted:
            await self._exhausted(key, pod)
        else:
            self._starved.discard(key)

    async def _apply_plan(self, key: PodKey, *, wanted: frozenset[Target],
                          ip: str | None) -> bool:
        """Change the table and the kernel together for one pod; True if ports ran out."""
        decided = reconcile.plan(current=self.table.entries(key), wanted=wanted, pod_ip=ip)
        add: list[Rule] = []
        allocated: list[Entry] = []
        readdressed: list[Entry] = []
        exhausted = False
        try:
            for entry in decided.readdress:
                readdressed.append(entry)
                add.append(self.table.set_ip(entry, ip or entry.pod_ip).rule)
            for target in decided.allocate:
                new = self.table.allocate(pod=key, pod_ip=ip or "", pod_port=target.pod_port,
                                          protocol=target.protocol)
                if new is None:
                    exhausted = True
                else:
                    allocated.append(new)
                    add.append(new.rule)
            await self.rules.apply(add=add, remove=[entry.rule for entry in decided.release])
        except BaseException:
            # The table feeds the annotation: an entry whose rule never reached the backend
            # would publish a port that leads nowhere. Undo this reconcile; the retry redoes it.
            for entry in allocated:
                self.table.release(entry)
            for entry in readdressed:
                self.table.set_ip(entry, entry.pod_ip)
            raise
        for entry in decided.release:
            self.table.release(entry)
        return exhausted

    async def _write_annotation(self, key: PodKey, pod: Pod, *,
                                wanted: frozenset[Target], pod_ip: str | None) -> None:
        address = reconcile.node_ip(self.node, override=self.settings.node_ip)
        if address is None and (self.table.entries(key) or wanted):
            # Unknown node address (Node not seen yet): say nothing rather than wipe the
            # annotation a load balancer is using; the Node event re-queues every pod.
            log.warning("pod=%s event=annotation-deferred reason=no-node-address", key)
            return
        entries = reconcile.annotation_entries(entries=self.table.entries(key), wanted=wanted,
                                               node_address=address, pod_ip=pod_ip)
        current = pod.metadata.annotations.get(annotation.ANNOTATION)
        key_ = self.settings.npl_key
        signed = pod.metadata.annotations.get(annotation.SIGNATURE_ANNOTATION)
        # Signing: a mapping someone else rewrote (or signed) is not vouched for: write ours.
        unvouched = key_ is not None and (
            (current is not None and not annotation.vouched(
                key_, uid=pod.metadata.uid, value=current, signed=signed))
            or (current is None and signed is not None))
        if not annotation.needs_write(current, entries) and not unvouched:
            return
        _, error = annotation.decode(current)
        if error is not None:
            log.warning("pod=%s event=invalid-annotation error=%r action=replace", key, error)
        elif unvouched and not annotation.needs_write(current, entries):
            log.warning("pod=%s event=unsigned-annotation action=sign", key)
        value = annotation.encode(entries)
        written: dict[str, str | None] = {annotation.ANNOTATION: value}
        if key_ is not None:
            written[annotation.SIGNATURE_ANNOTATION] = None if value is None else (
                annotation.signature(key_, uid=pod.metadata.uid, value=value))
        body = {"metadata": {"annotations": written}}
        resp = await self.core.patch_namespaced_pod(
            pod.metadata.name, pod.metadata.namespace, body,
            _content_type="application/merge-patch+json", _preload_content=False)
        try:
            if resp.status == 404:
                return  # deleted meanwhile; the DELETED event releases its ports
            if resp.status >= 300:
                raise ApiException(status=resp.status, reason=await resp.text())
        finally:
            resp.release()

    async def _exhausted(self, key: PodKey, pod: Pod | None) -> None:
        self.metrics.exhausted.inc()
        first = key not in self._starved
        self._starved.add(key)
        log.error("pod=%s event=ports-exhausted range=%d-%d", key,
                  self.settings.port_range.start, self.settings.port_range.end)
        if pod is None or not first:
            return
        event = events.ports_exhausted(pod, node_name=self.settings.node_name,
                                       port_range=self.settings.port_range)
        try:
            resp = await self.core.create_namespaced_event(pod.metadata.namespace, event,
                                                           _preload_content=False)
            resp.release()
        except ApiException as exc:
            log.warning("pod=%s event=event-write-failed error=%s", key, exc.reason)

    def _ports_freed(self) -> None:
        for key in self._starved:
            self.queue.add(key)

    def _update_gauges(self) -> None:
        for protocol in PROTOCOLS:
            self.metrics.mappings.labels(protocol=protocol).set(self.table.count(protocol))

    # ---- event handlers: only update caches and enqueue ----------------------------------
    def _on_pod(self, kind: str, raw: Raw) -> None:
        meta = raw.get("metadata", {})
        key = pod_key(str(meta.get("namespace", "default")), str(meta.get("name", "")))
        if kind == "DELETED":
            self.pods.pop(key, None)
        else:
            pod = _parse(Pod, raw)
            if pod is None:
                self.pods.pop(key, None)
            else:
                self.pods[key] = pod
        self.queue.add(key)

    def _on_service(self, kind: str, raw: Raw) -> None:
        meta = raw.get("metadata", {})
        skey = (str(meta.get("namespace", "default")), str(meta.get("name", "")))
        service = None if kind == "DELETED" else _parse(Service, raw)
        if service is None:
            self.services.pop(skey, None)
        else:
            self.services[skey] = service
        # Selector, ports, type or opt-in may have changed: every local pod of the namespace.
        for key, pod in self.pods.items():
            if pod.metadata.namespace == skey[0]:
                self.queue.add(key)

    def _on_node(self, kind: str, raw: Raw) -> None:
        before = reconcile.node_ip(self.node)
        self.node = None if kind == "DELETED" else _parse(Node, raw)
        if reconcile.node_ip(self.node) != before:
            for key in self.pods:
                self.queue.add(key)


_M = TypeVar("_M", Pod, Service, Node)


def _parse(model: type[_M], raw: dict[str, Any]) -> _M | None:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        log.warning("event=unparseable kind=%s error=%s", model.__name__, exc.errors()[:1])
        return None
