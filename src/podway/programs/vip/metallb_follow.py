"""What the MetalLB followers share (``metallb_live.MetalLBSpeaker`` for BGP,
``metallb_l2.MetalLBL2`` for L2): MetalLB's objects and this host's Node labels kept current from
informer events, each change marking the plan dirty."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable

from kubernetes_asyncio import client

from podway.kube.informer import Informer, Raw, lean
from podway.model.kinds import Kind
from podway.model.vips import METALLB_GROUP
from podway.programs.vip.metallb import Objects


class Follower:
    """Keeps ``objects`` and ``node_labels`` current; sets ``_dirty`` on every change."""

    def __init__(self, *, namespace: str, node: str) -> None:
        self.namespace, self.node = namespace, node
        self.objects = Objects()
        self.node_labels: dict[str, str] = {}
        self._dirty = asyncio.Event()

    def mark(self) -> None:
        """Something the plan depends on changed outside the informers (the L2 speaker's
        VIPs): work it out again."""
        self._dirty.set()

    def _handler(self, kind: str) -> Callable[[str, Raw], None]:
        def handle(event: str, raw: Raw) -> None:
            name = str((raw.get("metadata") or {}).get("name", ""))
            if event == "DELETED":
                self.objects.by_kind[kind].pop(name, None)
            else:
                self.objects.by_kind[kind][name] = raw
            self._dirty.set()
        return handle

    def _on_node(self, event: str, raw: Raw) -> None:
        labels = (raw.get("metadata") or {}).get("labels") or {}
        self.node_labels = {} if event == "DELETED" else {str(k): str(v)
                                                          for k, v in labels.items()}
        self._dirty.set()

    def _kind_informers(self, custom: client.CustomObjectsApi, kinds: Iterable[Kind]
                        ) -> list[Informer]:
        """A list and watch of each of MetalLB's ``kinds`` in its namespace."""
        return [Informer(name=f"metallb-{kind.plural}", lister=functools.partial(
            custom.list_namespaced_custom_object, METALLB_GROUP, kind.versions[0],
            self.namespace, kind.plural), params={}, handler=self._handler(kind.name))
            for kind in kinds]

    def _node_informer(self, core: client.CoreV1Api) -> Informer:
        """This host's Node, for the node selectors."""
        return Informer(name="node", lister=core.list_node,
                        params={"field_selector": f"metadata.name={self.node}"},
                        handler=self._on_node, transform=lean)
