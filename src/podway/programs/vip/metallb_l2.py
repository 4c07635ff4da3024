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
import ipaddress
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes_asyncio import client

from podway.kube.informer import Informer
from podway.model.kinds import BY_NAME
from podway.model.vips import IPAddressPool, L2Advertisement
from podway.programs.ipam.pools import parse_range
from podway.programs.vip.l2 import L2Speaker
from podway.programs.vip.metallb import Objects, advertised, spec_of, unknown_fields
from podway.programs.vip.metallb_follow import Follower

log = logging.getLogger(__name__)
Placement = dict[str, tuple[str, ...]]


def placement(objects: Objects, *, node_labels: Mapping[str, str], vips: Sequence[str]
              ) -> tuple[Placement, tuple[str, ...]]:
    """Each VIP this host may own → its interfaces (() the speaker's own), and the problems."""
    problems = unknown_fields(objects, (L2Advertisement.KIND, IPAddressPool.KIND))
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


class MetalLBL2(Follower):
    """Keeps an ``L2Speaker``'s placement current from MetalLB's objects in the API."""

    COMPONENT = "podway-vip-l2"

    def __init__(self, api: client.ApiClient, speaker: L2Speaker, *, namespace: str,
                 node: str, debounce_s: float = 0.1) -> None:
        super().__init__(namespace=namespace, node=node)
        self._api = api
        self.speaker = speaker
        self._debounce = debounce_s

    def informers(self) -> list[Informer]:
        custom = client.CustomObjectsApi(self._api)
        out = self._kind_informers(custom, (BY_NAME[IPAddressPool.KIND],
                                            BY_NAME[L2Advertisement.KIND]))
        out.append(self._node_informer(client.CoreV1Api(self._api)))
        return out

    def apply(self) -> None:
        found, problems = placement(self.objects, node_labels=self.node_labels,
                                    vips=self.speaker.vips)
        self.report(problems)
        if found != self.speaker.placement:
            log.info("event=l2-placement node=%s vips=%s", self.node,
                     {v: list(i) for v, i in found.items()})
            self.speaker.placement = found

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
