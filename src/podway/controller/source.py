"""The Kubernetes API as a ``Source``: informers per kind → coalesced snapshot updates.

One shared ``Informer`` (``podway.kube.informer``: list, watch with bookmarks, 410 → re-list,
jittered backoff honouring Retry-After) per kind the translator reads. Built-in kinds start at
once; each Gateway API kind starts when its CustomResourceDefinition appears (a CRD informer
watches them), so a cluster without the Gateway API is logged once and picked up when it is
installed later — no restart.

Invariants:

* The first update is the complete initial state: it is yielded only once every informer
  (and every Gateway API informer whose CRD existed at start) finished its first list.
* Changes are coalesced: after the first change the source waits ``debounce`` seconds of
  quiet, but never more than ``max_wait`` after that first change, so a busy cluster cannot
  starve the pipeline. Each update names exactly the (kind, key) pairs that changed.
* Objects are trimmed before they are parsed (``trim``): Pods keep only labels, the NPL
  annotation, node, ports and IPs; ``resourceVersion`` and ``managedFields`` go, and so does
  every ``status`` the controller writes itself. So a status write (ours) or a heartbeat that
  changes nothing Podway reads parses to an equal object and is no change at all.
* The last ``status`` the API holds for the kinds the controller writes is kept on the side
  (``current_status``): the status writer compares with it, which keeps writes idempotent
  across controller restarts.
* A bad object (it does not parse) is left out and reported as a ``LoadError`` naming it, until
  it is fixed or deleted; everything else keeps flowing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from podway.controller import metrics
from podway.kube.informer import Informer, Raw, lean
from podway.model import npl
from podway.model.base import K8sObject
from podway.model.loader import LoadError, parse_object
from podway.model.registry import KINDS
from podway.model.snapshot import Key, Snapshot
from podway.sources.base import SourceUpdate

log = logging.getLogger(__name__)

GATEWAY_GROUP = "gateway.networking.k8s.io"
GATEWAY_KINDS = ("GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute",
                 "UDPRoute", "ReferenceGrant", "BackendTLSPolicy")
# Kinds whose ``status`` the controller writes: kept aside, never part of the parsed object.
STATUS_KINDS = frozenset({"Service", "Ingress", *GATEWAY_KINDS})


@dataclass(frozen=True, slots=True, kw_only=True)
class KindInfo:
    """Where one kind lives in the API."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


BUILTIN: tuple[KindInfo, ...] = (
    KindInfo(kind="Service", group="", version="v1", plural="services", namespaced=True),
    KindInfo(kind="EndpointSlice", group="discovery.k8s.io", version="v1",
             plural="endpointslices", namespaced=True),
    KindInfo(kind="Pod", group="", version="v1", plural="pods", namespaced=True),
    KindInfo(kind="Node", group="", version="v1", plural="nodes", namespaced=False),
    KindInfo(kind="Namespace", group="", version="v1", plural="namespaces", namespaced=False),
    KindInfo(kind="Secret", group="", version="v1", plural="secrets", namespaced=True),
    KindInfo(kind="Ingress", group="networking.k8s.io", version="v1", plural="ingresses",
             namespaced=True),
    KindInfo(kind="IngressClass", group="networking.k8s.io", version="v1",
             plural="ingressclasses", namespaced=False),
)


def trim(kind: str, raw: Raw) -> Raw:
    """Only what Podway reads of one object (the informer already dropped managedFields)."""
    raw = lean(raw)
    meta = raw.get("metadata")
    if isinstance(meta, dict):
        meta.pop("resourceVersion", None)
        meta.pop("managedFields", None)
    if kind in STATUS_KINDS:
        raw.pop("status", None)
    if kind == "Pod":
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        annotations = (meta or {}).get("annotations") or {}
        kept = {k: v for k, v in annotations.items() if k == npl.ANNOTATION}
        return {"apiVersion": raw.get("apiVersion", "v1"), "kind": "Pod",
                "metadata": {k: v for k, v in (meta or {}).items()
                             if k in ("name", "namespace", "uid", "labels",
                                      "creationTimestamp")} | {"annotations": kept},
                "spec": {"nodeName": spec.get("nodeName"),
                         "containers": [{"name": c.get("name", ""), "ports": c.get("ports", [])}
                                        for c in spec.get("containers") or []]},
                "status": {k: status[k] for k in ("phase", "podIP", "podIPs") if k in status}}
    if kind == "Node":
        status = raw.get("status") or {}
        raw["status"] = {"addresses": status.get("addresses", []),
                         "conditions": [c for c in status.get("conditions") or []
                                        if c.get("type") == "Ready"]}
        raw.pop("spec", None)
    return raw


class KubeSource:
    """Snapshot updates from the Kubernetes API (see the module docstring)."""

    def __init__(self, api: client.ApiClient, *, namespaces: Iterable[str] = (),
                 debounce: float = 0.02, max_wait: float = 0.2,
                 informer_options: dict[str, Any] | None = None) -> None:
        self._api = api
        self._namespaces = frozenset(namespaces)
        self._debounce = debounce
        self._max_wait = max_wait
        self._informer_options = informer_options or {}
        self._snapshot = Snapshot()
        self._pending: dict[str, dict[Key, K8sObject | None]] = {}
        self._errors: dict[tuple[str, Key], LoadError] = {}
        self._statuses: dict[tuple[str, Key], dict[str, Any]] = {}
        self._dirty = asyncio.Event()
        self._first_change: float | None = None
        self._informers: dict[str, Informer] = {}
        self._crd_kinds: dict[str, KindInfo] = {}  # Gateway API kinds whose CRD is installed
        self._spawn: Callable[[Informer], None] | None = None

    # ---- what readers may ask ----------------------------------------------------------
    def current_status(self, kind: str, key: Key) -> dict[str, Any] | None:
        """The ``status`` the API holds now for an object the controller writes status to."""
        return self._statuses.get((kind, key))

    def kind_info(self, kind: str) -> KindInfo | None:
        return next((k for k in BUILTIN if k.kind == kind), None) or self._crd_kinds.get(kind)

    @property
    def relists(self) -> int:
        return sum(i.relists for i in self._informers.values())

    # ---- the stream ----------------------------------------------------------------------
    async def watch(self) -> AsyncIterator[SourceUpdate]:
        tasks: list[asyncio.Task[None]] = []

        def spawn(informer: Informer) -> None:
            self._informers[informer.name] = informer
            task = asyncio.create_task(informer.run(), name=f"informer-{informer.name}")
            task.add_done_callback(_report_failure)
            tasks.append(task)

        self._spawn = spawn
        try:
            for info in BUILTIN:
                spawn(self._informer(info))
            crds = self._crd_informer()
            spawn(crds)
            await crds.ready.wait()
            if not self._crd_kinds:
                log.info("Gateway API CRDs are not installed; their kinds are picked up when "
                         "they are")
            for informer in list(self._informers.values()):
                await informer.ready.wait()
            self._take_pending()
            yield SourceUpdate(snapshot=self._snapshot, errors=self._current_errors())
            while True:
                changed = await self._coalesced()
                if changed:
                    yield SourceUpdate(snapshot=self._snapshot, errors=self._current_errors(),
                                       changed=changed)
        finally:
            self._spawn = None
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _coalesced(self) -> tuple[tuple[str, Key], ...]:
        """Wait for changes, then for quiet (``debounce``) or ``max_wait``; take them."""
        await self._dirty.wait()
        loop = asyncio.get_running_loop()
        first = self._first_change if self._first_change is not None else loop.time()
        while True:
            self._dirty.clear()
            left = first + self._max_wait - loop.time()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(self._dirty.wait(), min(self._debounce, left))
            except TimeoutError:
                break  # quiet
        return self._take_pending()

    def _take_pending(self) -> tuple[tuple[str, Key], ...]:
        self._dirty.clear()
        self._first_change = None
        pending, self._pending = self._pending, {}
        changed: list[tuple[str, Key]] = []
        snapshot = self._snapshot
        for kind, changes in pending.items():
            current = snapshot.objects.get(kind, {})
            real = {k: v for k, v in changes.items() if current.get(k) != v}
            if real:
                snapshot = snapshot.replace(kind, real)
                changed.extend((kind, key) for key in real)
        self._snapshot = snapshot
        metrics.QUEUE_DEPTH.set(0)
        return tuple(changed)

    # ---- informers ---------------------------------------------------------------------
    def _informer(self, info: KindInfo) -> Informer:
        lister, params = self._lister(info)
        return Informer(name=info.kind, lister=lister, params=params,
                        handler=lambda event, raw: self._on_event(info, event, raw),
                        **self._informer_options)

    def _lister(self, info: KindInfo) -> tuple[Callable[..., Any], dict[str, Any]]:
        core, net = client.CoreV1Api(self._api), client.NetworkingV1Api(self._api)
        builtin: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
            "Service": (core.list_service_for_all_namespaces, {}),
            "EndpointSlice": (client.DiscoveryV1Api(self._api)
                              .list_endpoint_slice_for_all_namespaces, {}),
            "Pod": (core.list_pod_for_all_namespaces, {}),
            "Node": (core.list_node, {}),
            "Namespace": (core.list_namespace, {}),
            # Only TLS Secrets: Podway serves certificates, nothing else it reads is a Secret.
            "Secret": (core.list_secret_for_all_namespaces,
                       {"field_selector": "type=kubernetes.io/tls"}),
            "Ingress": (net.list_ingress_for_all_namespaces, {}),
            "IngressClass": (net.list_ingress_class, {}),
        }
        if info.kind in builtin:
            return builtin[info.kind]
        custom = client.CustomObjectsApi(self._api)
        return (custom.list_cluster_custom_object,
                {"group": info.group, "version": info.version, "plural": info.plural})

    def _crd_informer(self) -> Informer:
        ext = client.ApiextensionsV1Api(self._api)
        return Informer(name="CustomResourceDefinition",
                        lister=ext.list_custom_resource_definition, params={},
                        handler=self._on_crd, **self._informer_options)

    def _on_crd(self, event: str, raw: Raw) -> None:
        info = crd_kind(raw)
        if info is None or event == "DELETED" or info.kind in self._crd_kinds:
            if info is not None and event == "DELETED":
                log.info("CRD of %s removed; its objects stay as last seen", info.kind)
            return
        self._crd_kinds[info.kind] = info
        log.info("Gateway API kind %s (%s) is served: watching it", info.kind, info.api_version)
        if self._spawn is not None:
            self._spawn(self._informer(info))

    def _on_event(self, info: KindInfo, event: str, raw: Raw) -> None:
        try:
            self._take_event(info, event, raw)
        except Exception:  # a shape no parser expected: one object, never the informer
            log.exception("kind=%s event=%s: cannot take the object", info.kind, event)

    def _take_event(self, info: KindInfo, event: str, raw: Raw) -> None:
        meta = raw.get("metadata") or {}
        namespace = str(meta.get("namespace", "")) if info.namespaced else ""
        key = (namespace, str(meta.get("name", "")))
        if self._namespaces and info.namespaced and namespace not in self._namespaces:
            return
        metrics.WATCH_EVENTS.labels(kind=info.kind).inc()
        if event == "DELETED":
            self._change(info.kind, key, None)
            self._errors.pop((info.kind, key), None)
            self._statuses.pop((info.kind, key), None)
            return
        if info.kind in STATUS_KINDS:
            self._statuses[(info.kind, key)] = raw.get("status") or {}
        raw = {**trim(info.kind, raw), "apiVersion": info.api_version, "kind": info.kind}
        obj, error = parse_object(raw, source="api")
        ident = "/".join(p for p in (info.kind, *key) if p)
        if error is not None:
            self._errors[(info.kind, key)] = LoadError(
                ident, -1, error.message, object=ident, field=error.field)
            self._change(info.kind, key, None)
            return
        self._errors.pop((info.kind, key), None)
        self._change(info.kind, key, obj)

    def _change(self, kind: str, key: Key, obj: K8sObject | None) -> None:
        self._pending.setdefault(kind, {})[key] = obj
        if self._first_change is None:
            self._first_change = asyncio.get_running_loop().time()
        metrics.QUEUE_DEPTH.set(sum(len(v) for v in self._pending.values()))
        self._dirty.set()

    def _current_errors(self) -> tuple[LoadError, ...]:
        return tuple(self._errors[k] for k in sorted(self._errors))


def _report_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s failed: %r", task.get_name(), task.exception())


def crd_kind(raw: Raw) -> KindInfo | None:
    """The Gateway API kind a CRD serves (a version the model reads), or None."""
    spec = raw.get("spec") or {}
    names = spec.get("names") or {}
    kind = str(names.get("kind", ""))
    if spec.get("group") != GATEWAY_GROUP or kind not in GATEWAY_KINDS or kind not in KINDS:
        return None
    served = [v for v in spec.get("versions") or [] if v.get("served", True)]
    if not served:
        return None
    storage = next((v for v in served if v.get("storage")), served[0])
    return KindInfo(kind=kind, group=GATEWAY_GROUP, version=str(storage["name"]),
                    plural=str(names.get("plural", "")),
                    namespaced=spec.get("scope", "Namespaced") == "Namespaced")
