"""L2 mode in a cluster (the Helm chart's DaemonSet): the group, its VIPs and this node's engine
health are read live from the API instead of flags.

- **The group** (``--peers-from-nodes SELECTOR``): every Node the label selector picks is a host
  of the group; its heartbeat address is the Node's ``InternalIP`` of the family of this host's
  ``--listen``, at the same port. A node that leaves the selector (or is deleted) leaves the
  group; with ``--quorum`` the majority is counted over the Nodes selected.
- **The VIPs** (``--vips-from-services``): the addresses in ``status.loadBalancer.ingress`` of
  the LoadBalancer Services, as MetalLB answers only for addresses given out; with ``--pool``
  only those inside these ranges (this engine group's pools), with ``--from-metallb`` only those
  an ``L2Advertisement`` places on this host (``podway.programs.vip.metallb_l2``).
- **Health** (``--engine-pods SELECTOR``): this host may own VIPs only while an engine pod of
  the selector runs on its Node, is Ready and is not being deleted (a draining engine hands its
  VIPs to a peer first: its pod is marked for deletion before its preStop ends).

The functions that read objects are pure; ``ClusterL2`` keeps an ``L2Speaker`` current with
list-and-watch informers. The speaker starts claiming only once the group was listed (alone,
it would take every VIP for a moment).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from podway.base.errors import EnvironmentProblem
from podway.kube.informer import Informer, Raw, lean, raw_key
from podway.programs.ipam.pools import parse_range
from podway.programs.vip.l2 import L2Speaker

log = logging.getLogger(__name__)
Range = Any  # an ipaddress network, or a (first, last) range of parse_range


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterOptions:
    node: str
    port: int  # every host's heartbeat port (this host's --listen port)
    ipv6: bool  # heartbeats go over IPv6 (this host's --listen address is one)
    peer_selector: str | None = None  # label selector of the group's Nodes
    vips_from_services: bool = False
    pools: tuple[str, ...] = ()  # address ranges the VIPs must lie in (none: any)
    engine_namespace: str = ""
    engine_selector: str | None = None  # label selector of this group's engine pods


def check_pools(pools: Sequence[str]) -> list[Range]:
    """``--pool`` values as ranges; ValueError names the bad one."""
    out = []
    for text in pools:
        try:
            out.append(parse_range(text, whole_cidrs=True))
        except ValueError as err:
            raise ValueError(f"--pool {text!r}: {err}") from None
    return out


def peers_of(nodes: Iterable[Raw], *, me: str, port: int, ipv6: bool
             ) -> dict[str, tuple[str, int]]:
    """The group's other hosts → their heartbeat address (a Node without an InternalIP of the
    family is left out: it could not be reached)."""
    out = {}
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name", ""))
        if not name or name == me:
            continue
        for entry in (node.get("status") or {}).get("addresses") or ():
            if entry.get("type") != "InternalIP":
                continue
            try:
                address = ipaddress.ip_address(str(entry.get("address", "")))
            except ValueError:
                continue
            if (address.version == 6) == ipv6:
                out[name] = (str(address), port)
                break
    return out


def service_vips(services: Iterable[Raw], ranges: Sequence[Range]) -> tuple[str, ...]:
    """The addresses LoadBalancer Services hold (inside ``ranges`` when given), sorted."""
    out = set()
    for service in services:
        if (service.get("spec") or {}).get("type") != "LoadBalancer":
            continue
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress")
        for entry in ingress or ():
            try:
                address = ipaddress.ip_address(str((entry or {}).get("ip", "")))
            except ValueError:
                continue
            if not ranges or any(address in r for r in ranges):
                out.add(str(address))
    return tuple(sorted(out, key=lambda a: (ipaddress.ip_address(a).version,
                                            ipaddress.ip_address(a))))


def engine_ready(pods: Iterable[Raw], *, node: str) -> bool:
    """An engine pod on ``node`` is Ready and not being deleted."""
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") != node:
            continue
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        conditions = (pod.get("status") or {}).get("conditions") or ()
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            return True
    return False


class ClusterL2:
    """Keeps an ``L2Speaker``'s peers, VIPs and engine health current from the API."""

    def __init__(self, api: client.ApiClient, speaker: L2Speaker, opts: ClusterOptions, *,
                 on_vips: Callable[[], None] = lambda: None) -> None:
        self._api = api
        self.speaker = speaker
        self.opts = opts
        self._ranges = check_pools(opts.pools)
        self._on_vips = on_vips
        self._nodes: dict[tuple[str, str], Raw] = {}
        self._services: dict[tuple[str, str], Raw] = {}
        self._pods: dict[tuple[str, str], Raw] = {}
        self.engine_ok = opts.engine_selector is None

    async def healthy(self) -> bool:
        """For the speaker: the engine pod of this node is ready (as last seen)."""
        return self.engine_ok

    def informers(self) -> list[Informer]:
        core = client.CoreV1Api(self._api)
        out = []
        if self.opts.peer_selector is not None:
            out.append(Informer(name="l2-nodes", lister=core.list_node,
                                params={"label_selector": self.opts.peer_selector},
                                handler=self._keep(self._nodes, self._apply_peers)))
        if self.opts.vips_from_services:
            out.append(Informer(name="l2-services",
                                lister=core.list_service_for_all_namespaces, params={},
                                handler=self._keep(self._services, self._apply_vips)))
        if self.opts.engine_selector is not None:
            out.append(Informer(
                name="l2-engine-pods", lister=core.list_namespaced_pod,
                params={"namespace": self.opts.engine_namespace,
                        "label_selector": self.opts.engine_selector,
                        "field_selector": f"spec.nodeName={self.opts.node}"},
                handler=self._keep(self._pods, self._apply_health)))
        return out

    @staticmethod
    def _keep(store: dict[tuple[str, str], Raw], then: Callable[[], None]
              ) -> Callable[[str, Raw], None]:
        def handle(event: str, raw: Raw) -> None:
            if event == "DELETED":
                store.pop(raw_key(raw), None)
            else:
                store[raw_key(raw)] = lean(raw)
            then()
        return handle

    def _apply_peers(self) -> None:
        peers = peers_of(self._nodes.values(), me=self.opts.node, port=self.opts.port,
                         ipv6=self.opts.ipv6)
        if peers != dict(self.speaker.peers):
            log.info("event=l2-peers node=%s peers=%s", self.opts.node, sorted(peers))
            self.speaker.peers = peers

    def _apply_vips(self) -> None:
        vips = service_vips(self._services.values(), self._ranges)
        if vips != self.speaker.vips:
            log.info("event=l2-vips node=%s vips=%s", self.opts.node, list(vips))
            self.speaker.vips = vips
            self._on_vips()

    def _apply_health(self) -> None:
        ok = engine_ready(self._pods.values(), node=self.opts.node)
        if ok != self.engine_ok:
            log.warning("l2: %s's engine is %s", self.opts.node, "ready" if ok else "not ready")
            self.engine_ok = ok

    async def run(self, then: Callable[[], Awaitable[None]]) -> None:
        """The informers; ``then()`` once every one has listed. A list refused (RBAC, no such
        resource) stops here: without the group this host would think itself alone and take
        every VIP."""
        informers = self.informers()
        async with asyncio.TaskGroup() as group:
            for informer in informers:
                group.create_task(informer.run(), name=informer.name)
            await asyncio.gather(*(i.settled.wait() for i in informers))
            refused = [f"{i.name}: {i.refused}" for i in informers if i.refused is not None]
            if refused:
                raise EnvironmentProblem(f"l2: the API refused {'; '.join(refused)}")
            await then()


async def run_in_cluster(speaker: L2Speaker, opts: ClusterOptions, *,
                         metallb_namespace: str | None, kubeconfig: str | None) -> None:
    """The speaker with what ``opts`` reads from the API (and, given ``metallb_namespace``,
    its placement from MetalLB's L2Advertisements) until cancelled; it then hands its VIPs over
    as always."""
    from podway.kube.client import connect
    from podway.programs.vip.metallb_l2 import MetalLBL2

    api = await connect(kubeconfig=kubeconfig, context=None)
    try:
        async with asyncio.TaskGroup() as group:
            on_vips: Callable[[], None] = lambda: None  # noqa: E731
            if metallb_namespace is not None:
                metallb = MetalLBL2(api, speaker, namespace=metallb_namespace, node=opts.node)
                on_vips = metallb.mark
                group.create_task(metallb.run(), name="l2-metallb")
            cluster = ClusterL2(api, speaker, opts, on_vips=on_vips)
            if opts.engine_selector is not None:
                speaker.healthy, speaker.engine_ok = cluster.healthy, False
            group.create_task(cluster.run(speaker.run), name="l2-cluster")
    finally:
        await api.close()
