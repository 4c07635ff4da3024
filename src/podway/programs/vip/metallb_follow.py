"""What the MetalLB followers share (``metallb_live.MetalLBSpeaker`` for BGP,
``metallb_l2.MetalLBL2`` for L2): MetalLB's objects and this host's Node labels kept current from
informer events, each change marking the plan dirty."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from podway.kube.informer import Informer, Raw, lean
from podway.model.kinds import METALLB_SPEAKER_KINDS, PODWAY_SPEAKER_KINDS, Kind
from podway.model.vips import METALLB_GROUP, L2Advertisement
from podway.programs.vip.metallb import Objects

log = logging.getLogger(__name__)
# The kinds a problem may name first ("BGPPeer 'x': …"): the Event goes on that object.
CLUSTER_SCOPED = tuple(k.name for k in PODWAY_SPEAKER_KINDS)  # Podway's: no namespace
MENTIONED = (*(k.name for k in METALLB_SPEAKER_KINDS), L2Advertisement.KIND, *CLUSTER_SCOPED)


def problem_event(problem: str, objects: Objects, *, namespace: str, node: str,
                  component: str, now: datetime | None = None) -> dict[str, Any] | None:
    """A Warning Event on the MetalLB object ``problem`` names (None when it names none: a VIP
    in no pool). Its name comes from the object and the text, so every speaker of the group
    writes the same Event and the API keeps the first: one per problem, not one per node."""
    found = re.match(rf"({'|'.join(MENTIONED)}) '([^']+)'", problem)
    if found is None:
        return None
    kind, name = found.groups()
    raw = objects.by_kind.get(kind, {}).get(name) or {}
    meta = raw.get("metadata") or {}
    digest = hashlib.sha256(f"{meta.get('uid', '')}/{problem}".encode()).hexdigest()[:10]
    stamp = (now or datetime.now(UTC)).isoformat().replace("+00:00", "Z")
    return {"metadata": {"name": f"{name[:230]}.podway-{digest}", "namespace": namespace},
            "involvedObject": {"kind": kind, "name": name,
                               "namespace": "" if kind in CLUSTER_SCOPED else namespace,
                               "apiVersion": raw.get("apiVersion", "metallb.io/v1beta1"),
                               "uid": meta.get("uid", "")},
            "reason": "NotCarried", "type": "Warning",
            "message": f"{problem} ({component})",
            "source": {"component": component, "host": node},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}


class Follower:
    """Keeps ``objects`` and ``node_labels`` current; sets ``_dirty`` on every change;
    ``report`` says what it cannot use: a log line and a Warning Event on the object."""

    COMPONENT = "podway"  # the Events' source
    _api: client.ApiClient | None = None  # set by each follower

    def __init__(self, *, namespace: str, node: str) -> None:
        self.namespace, self.node = namespace, node
        self.objects = Objects()
        self.node_labels: dict[str, str] = {}
        self._dirty = asyncio.Event()
        self._said: set[str] = set()
        self._posts: set[asyncio.Task[None]] = set()

    def report(self, problems: Iterable[str]) -> None:
        """Each problem not said before: a warning in the log and, when it names one of
        MetalLB's objects, a Warning Event on it (``problem_event``)."""
        problems = tuple(problems)
        for problem in problems:
            if problem in self._said:
                continue
            log.warning("event=metallb-object-not-carried %s", problem)
            event = problem_event(problem, self.objects, namespace=self.namespace,
                                  node=self.node, component=self.COMPONENT)
            if event is not None and self._api is not None:
                task = asyncio.get_running_loop().create_task(self._post(event))
                self._posts.add(task)
                task.add_done_callback(self._posts.discard)
        self._said = set(problems)

    async def _post(self, event: dict[str, Any]) -> None:
        """Write ``event``; one another speaker wrote first (409) is the same event."""
        try:
            core: Any = client.CoreV1Api(self._api)  # a plain body, as the API takes it
            resp = await core.create_namespaced_event(self.namespace, event,
                                                      _preload_content=False)
            resp.release()
        except ApiException as err:
            if err.status != 409:
                log.warning("event=event-write-failed error=%s", err.reason)

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

    def _podway_informers(self, custom: client.CustomObjectsApi, kinds: Iterable[Kind]
                          ) -> list[Informer]:
        """A list and watch of each of Podway's cluster-scoped ``kinds``."""
        return [Informer(name=f"podway-{kind.plural}", lister=functools.partial(
            custom.list_cluster_custom_object, kind.group, kind.versions[0], kind.plural),
            params={}, handler=self._handler(kind.name)) for kind in kinds]

    def _node_informer(self, core: client.CoreV1Api) -> Informer:
        """This host's Node, for the node selectors."""
        return Informer(name="node", lister=core.list_node,
                        params={"field_selector": f"metadata.name={self.node}"},
                        handler=self._on_node, transform=lean)
