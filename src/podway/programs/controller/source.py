"""The shared Kubernetes source (``podway.sources.kube``) plus what the status writer needs.

``ControllerSource`` is ``KubeSource`` with two additions for the kinds the controller writes
status to (Service, Ingress, every Gateway API kind, TrafficPolicy), both through the source's
public surface (the ``on_raw`` hook, ``watched_version``, ``queued``):

* the ``status`` the API holds for each such object is kept aside (``current_status``) and
  taken out of the object before it is parsed. A status write (ours) then parses to an equal
  object and is no change at all — no translation loop — and Service status is never an input
  of the translator (VIP allocations enter as an input, ``TranslateOptions.vips``; see
  docs/pipeline.md), so publishing
  ``--lb-address`` in a Service's status never moves its listener. A status equal to the one
  the writer last wrote is kept as that very object (``same_as``): one copy, not two.
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

from podway.kube.informer import Raw
from podway.model.kinds import STATUS_KINDS
from podway.model.snapshot import Key
from podway.programs.controller.metrics import ControllerMetrics
from podway.sources.kube import KubeSource, KubeSourceSettings
from podway.sources.kube_kinds import spec_of

log = logging.getLogger(__name__)

Status = dict[str, Any]


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
        super().__init__(api, settings, on_raw=self._take_status)
        self._metrics = metrics
        metrics.queue_depth.set_function(lambda: self.queued)  # read at each scrape
        self._statuses: dict[tuple[str, Key], Status] = {}
        self._counted: dict[str, Any] = {}  # kind → its watch event counter (30,000 at a start)
        self.same_as: Callable[[str, Key], Status | None] = lambda kind, key: None
        """What the status writer last wrote for an object: an equal status read back is kept
        as that object (set by the controller once its writer exists)."""
        self.on_status: Callable[[str, Key, Status], None] = lambda kind, key, status: None
        """Told of every status the API now holds (a watch event: ours read back, or someone
        else's write), so the writer can repair a foreign one (set by the controller)."""

    def current_status(self, kind: str, key: Key) -> Status | None:
        """The ``status`` the API holds now for an object the controller writes status to."""
        return self._statuses.get((kind, key))

    def kind_info(self, kind: str) -> KindInfo | None:
        """Group, watched version and plural of ``kind`` (None: not watched now)."""
        spec = spec_of(kind)
        version = self.watched_version(kind)
        if spec is None or version is None:
            return None
        return KindInfo(kind=kind, group=spec.group, version=version, plural=spec.plural,
                        namespaced=spec.namespaced)

    def _take_status(self, kind: str, event: str, raw: Raw) -> None:
        counter = self._counted.get(kind)
        if counter is None:
            counter = self._counted[kind] = self._metrics.watch_events.labels(kind=kind)
        counter.inc()
        if kind not in STATUS_KINDS:
            return
        meta = raw.get("metadata") or {}
        spec = spec_of(kind)
        key = (str(meta.get("namespace", "")) if spec is not None and spec.namespaced else "",
               str(meta.get("name", "")))
        status = raw.pop("status", None)
        if event == "DELETED":
            self._statuses.pop((kind, key), None)
            return
        status = status if isinstance(status, dict) else {}
        written = self.same_as(kind, key)
        held = written if written == status and written is not None else status
        self._statuses[(kind, key)] = held
        self.on_status(kind, key, held)
