"""L2 mode as MetalLB's ``L2Advertisement`` objects say it: which hosts may answer for a VIP
(``nodeSelectors``) and on which interfaces (``interfaces``).

``placement`` (pure) works out, for this host's Node labels, each VIP's interfaces: a VIP is
this host's to own only when an ``L2Advertisement`` selects both the ``IPAddressPool`` it is in
(``ipAddressPools`` by name, ``ipAddressPoolSelectors`` by label; neither: every pool) and this
Node (``nodeSelectors``; none: every node) — no such advertisement, and MetalLB does not
announce it either. Its interfaces are the union of those advertisements' ``interfaces``; one
without ``interfaces`` means every interface, which here is the speaker's ``--interface``.

The L2 speaker (``podway.programs.vip.l2``) tells its peers which VIPs it may own in every
heartbeat, so each VIP's owner is elected among the hosts that may own it and every host still
computes the same owner. ``MetalLBL2`` keeps the placement current from the API (list and
watch of the pools, the advertisements and this Node).
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from podway.kube.informer import Informer
from podway.model.kinds import BY_NAME
from podway.model.vips import IPAddressPool, L2Advertisement
from podway.programs.ipam.pools import parse_range
from podway.programs.vip.l2 import L2Speaker
from podway.programs.vip.metallb import Objects, advertised, spec_of
from podway.programs.vip.metallb_follow import Follower

log = logging.getLogger(__name__)
Placement = dict[str, tuple[str, ...]]


def placement(objects: Objects, *, node_labels: Mapping[str, str], vips: Sequence[str]
              ) -> tuple[Placement, tuple[str, ...]]:
    """Each VIP this host may own → its interfaces (() the speaker's own), and the problems."""
    problems: list[str] = []
    pools: dict[str, tuple[Mapping[str, str], list[Any]]] = {}
    for name, raw in objects.of(IPAddressPool.KIND):
        try:
            pools[name] = ((raw.get("metadata") or {}).get("labels") or {},
                           [parse_range(str(a), whole_cidrs=True)
                            for a in spec_of(raw).get("addresses") or []])
        except ValueError as err:
            problems.append(f"IPAddressPool {name!r} is not used: {err}")
    adverts: list[tuple[set[str], tuple[str, ...]]] = []
    for name, raw in objects.of(L2Advertisement.KIND):
        spec = spec_of(raw)
        try:
            chosen = advertised(spec, node_labels, pools)
            if chosen is None:
                continue
        except ValueError as err:
            problems.append(f"L2Advertisement {name!r} is not used: {err}")
            continue
        adverts.append((set(chosen), tuple(str(i) for i in spec.get("interfaces") or ())))
    out: Placement = {}
    for vip in vips:
        address = ipaddress.ip_address(vip)
        inside = {p for p, (_, ranges) in pools.items() if any(address in r for r in ranges)}
        if not inside:
            problems.append(f"VIP {vip} is in no IPAddressPool: no host answers for it")
            continue
        found = [interfaces for chosen, interfaces in adverts if chosen & inside]
        if found:
            out[vip] = () if any(not i for i in found) else tuple(
                dict.fromkeys(i for interfaces in found for i in interfaces))
    return out, tuple(problems)


def problem_event(problem: str, objects: Objects, *, namespace: str, node: str,
                  now: datetime | None = None) -> dict[str, Any] | None:
    """A Warning Event on the MetalLB object ``problem`` names (None when it names none: a VIP
    in no pool). Its name comes from the object and the text, so every speaker of the group
    writes the same Event and the API keeps the first: one per problem, not one per node."""
    found = re.match(r"(IPAddressPool|L2Advertisement) '([^']+)'", problem)
    if found is None:
        return None
    kind, name = found.groups()
    raw = objects.by_kind.get(kind, {}).get(name) or {}
    meta = raw.get("metadata") or {}
    digest = hashlib.sha256(f"{meta.get('uid', '')}/{problem}".encode()).hexdigest()[:10]
    stamp = (now or datetime.now(UTC)).isoformat().replace("+00:00", "Z")
    return {"metadata": {"name": f"{name}.l2-{digest}", "namespace": namespace},
            "involvedObject": {"kind": kind, "name": name, "namespace": namespace,
                               "apiVersion": raw.get("apiVersion", "metallb.io/v1beta1"),
                               "uid": meta.get("uid", "")},
            "reason": "NotCarried", "type": "Warning",
            "message": f"{problem} (podway vip l2)",
            "source": {"component": "podway-l2", "host": node},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}


class MetalLBL2(Follower):
    """Keeps an ``L2Speaker``'s placement current from MetalLB's objects in the API."""

    def __init__(self, api: client.ApiClient, speaker: L2Speaker, *, namespace: str,
                 node: str, debounce_s: float = 0.1) -> None:
        super().__init__(namespace=namespace, node=node)
        self._api = api
        self.speaker = speaker
        self._debounce = debounce_s
        self._said: set[str] = set()
        self._posts: set[asyncio.Task[None]] = set()

    def informers(self) -> list[Informer]:
        custom = client.CustomObjectsApi(self._api)
        out = self._kind_informers(custom, (BY_NAME[IPAddressPool.KIND],
                                            BY_NAME[L2Advertisement.KIND]))
        out.append(self._node_informer(client.CoreV1Api(self._api)))
        return out

    def apply(self) -> None:
        found, problems = placement(self.objects, node_labels=self.node_labels,
                                    vips=self.speaker.vips)
        for problem in problems:
            if problem not in self._said:
                log.warning("event=metallb-object-not-carried %s", problem)
                event = problem_event(problem, self.objects, namespace=self.namespace,
                                      node=self.node)
                if event is not None:
                    task = asyncio.get_running_loop().create_task(self._post(event))
                    self._posts.add(task)
                    task.add_done_callback(self._posts.discard)
        self._said = set(problems)
        if found != self.speaker.placement:
            log.info("event=l2-placement node=%s vips=%s", self.node,
                     {v: list(i) for v, i in found.items()})
            self.speaker.placement = found

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

    async def run(self) -> None:
        informers = self.informers()
        async with asyncio.TaskGroup() as group:
            for informer in informers:
                group.create_task(informer.run(), name=f"l2-{informer.name}")
            await asyncio.gather(*(i.settled.wait() for i in informers))
            for informer in informers:  # retried; until then this host owns nothing new
                if informer.refused is not None:
                    log.error("l2: cannot list %s: %s", informer.name, informer.refused)
            while True:
                self._dirty.clear()
                self.apply()
                await self._dirty.wait()
                await asyncio.sleep(self._debounce)
