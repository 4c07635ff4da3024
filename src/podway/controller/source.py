"""The shared Kubernetes source (``podway.sources.kube``) plus what the status writer needs.

``ControllerSource`` is ``KubeSource`` with two additions for the kinds the controller writes
status to (Service, Ingress, every Gateway API kind):

* the ``status`` the API holds for each such object is kept aside (``current_status``) and
  taken out of the object before it is parsed. A status write (ours) then parses to an equal
  object and is no change at all — no translation loop — and Service status is never an input
  of the translator (VIP allocations will enter as inputs, ARCHITECTURE.md), so publishing
  ``--lb-address`` in a Service's status never moves its listener.
* ``kind_info`` says where a kind lives in the API right now (group, served version, plural),
  so the writer PATCHes the version the source watches.

Also counted here: watch events per kind, and the changes waiting to be coalesced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from podway.controller.metrics import ControllerMetrics
from podway.kube import gateway_api
from podway.kube.informer import Raw
from podway.model.snapshot import Key
from podway.sources.kube import KubeSource, KubeSourceSettings
from podway.sources.kube_kinds import BUILTIN, GATEWAY, KindSpec

log = logging.getLogger(__name__)

GATEWAY_KINDS = frozenset(gateway_api.KINDS)
STATUS_KINDS = frozenset({"Service", "Ingress", *GATEWAY_KINDS})


@dataclass(frozen=True, slots=True, kw_only=True)
class KindInfo:
    """Where one kind lives in the API."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool


class ControllerSource(KubeSource):
    """``KubeSource`` that keeps the API's status of the objects the controller writes."""

    def __init__(self, api: client.ApiClient, settings: KubeSourceSettings, *,
                 metrics: ControllerMetrics) -> None:
        self._metrics = metrics
        super().__init__(api, settings)
        self._statuses: dict[tuple[str, Key], dict[str, Any]] = {}

    def current_status(self, kind: str, key: Key) -> dict[str, Any] | None:
        """The ``status`` the API holds now for an object the controller writes status to."""
        return self._statuses.get((kind, key))

    def kind_info(self, kind: str) -> KindInfo | None:
        """Group, watched version and plural of ``kind`` (None: not watched now)."""
        spec = next((s for s in (*BUILTIN, *GATEWAY) if s.kind == kind), None)
        if spec is None:
            return None
        version = self._gateway_versions.get(kind) if spec.crd else spec.version
        if version is None:
            return None
        return KindInfo(kind=kind, group=spec.group, version=version, plural=spec.plural,
                        namespaced=spec.namespaced)

    @property
    def queued(self) -> int:
        """Object changes waiting for the next coalesced update."""
        return len(self._pending)

    def _handler(self, spec: KindSpec, version: str) -> Callable[[str, Raw], None]:
        inner = super()._handler(spec, version)
        statuses = self._statuses
        kind = spec.kind

        def handle(event: str, raw: Raw) -> None:
            self._metrics.watch_events.labels(kind=kind).inc()
            if kind in STATUS_KINDS:
                meta = raw.get("metadata") or {}
                key = (str(meta.get("namespace", "")) if spec.namespaced else "",
                       str(meta.get("name", "")))
                status = raw.pop("status", None)
                if event == "DELETED":
                    statuses.pop((kind, key), None)
                else:
                    statuses[(kind, key)] = status if isinstance(status, dict) else {}
            inner(event, raw)
            self._metrics.queue_depth.set(len(self._pending))
        return handle
