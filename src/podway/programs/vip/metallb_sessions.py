"""What ``podway vip announce-metallb`` reports about its BGP sessions: their state as BIRD
sees it (``birdc show protocols``, ``show bfd sessions``), as metrics and as MetalLB's own
``BGPSessionState`` objects (``metallb.io/v1beta1``, MetalLB ≥ 0.15: one per node and peer,
``status.bgpStatus``, ``bfdStatus``, ``node``, ``peer``), so ``kubectl get bgpsessionstates``
shows whether each peer is Established, as it does under MetalLB.

``SessionStates`` writes only what changed since it last wrote (a state reported again costs
nothing), creates an object the first time, deletes the object of a session that is gone, and
when the API has no such kind (MetalLB's CRD is not installed) says so once and writes nothing
more (the metrics still tell).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.exposition import generate_latest

from podway.kube.errors import ApiError, Conflict, NotFound, api_error
from podway.model.vips import METALLB_GROUP
from podway.programs.vip.metallb import Plan
from podway.programs.vip.metallb_live import MetalLBSpeaker, Session

log = logging.getLogger(__name__)
VERSION, PLURAL = "v1beta1", "bgpsessionstates"


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    peer: str  # the BGPPeer's name
    address: str
    bgp: str  # Established, Active, Connect, …
    bfd: str  # Up, Down, Init, … or N/A (no BFD profile)

    @property
    def established(self) -> bool:
        return self.bgp == "Established"


def parse_bfd(text: str) -> dict[str, str]:
    """``birdc show bfd sessions``: neighbour address → state."""
    out = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            try:
                ipaddress.ip_address(fields[0])
            except ValueError:
                continue
            out[fields[0]] = fields[2]
    return out


def reports(plan: Plan, sessions: Sequence[Session], bfd: dict[str, str]) -> list[Report]:
    """One report per session of ``plan``."""
    by_name = {s.name: s for s in sessions}
    neighbors = {n.name: n for n in plan.settings.neighbors}
    out = []
    for protocol, peer in plan.peers:
        neighbor = neighbors[protocol]
        session = by_name.get(protocol)
        state = "Idle" if session is None else (session.info.split()[0] if session.info
                                                else session.state)
        out.append(Report(peer=peer, address=neighbor.address, bgp=state,
                          bfd=bfd.get(neighbor.address, "Down") if neighbor.bfd else "N/A"))
    return out


class SessionMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.established = Gauge("podway_vip_bgp_session_established",
                                 "1 while the BGP session with this peer is Established",
                                 ["peer", "address"], registry=self.registry)
        self.routes = Gauge("podway_vip_bgp_announced_routes",
                            "Prefixes this host announces (to at least one peer)",
                            registry=self.registry)
        self._peers: set[tuple[str, str]] = set()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def update(self, found: Sequence[Report], routes: int) -> None:
        now = {(r.peer, r.address) for r in found}
        for gone in self._peers - now:
            self.established.remove(*gone)
        for r in found:
            self.established.labels(r.peer, r.address).set(1 if r.established else 0)
        self._peers = now
        self.routes.set(routes)


def object_name(node: str, peer: str) -> str:
    return re.sub(r"[^a-z0-9.-]", "-", f"{node}-{peer}".lower())[:253].strip("-.")


class SessionStates:
    """Writes MetalLB's ``BGPSessionState`` objects of one node (module docstring)."""

    def __init__(self, api: client.ApiClient, *, namespace: str, node: str) -> None:
        self._api = client.CustomObjectsApi(api)
        self.namespace, self.node = namespace, node
        self.written: dict[str, Report] = {}
        self.disabled = False

    async def write(self, found: Sequence[Report]) -> None:
        if self.disabled:
            return
        found = [r for r in found if not r.peer.startswith("podway:")]  # VIPPeer: own status
        try:
            for report in found:
                name = object_name(self.node, report.peer)
                if self.written.get(name) != report:
                    await self._put(name, report)
                    self.written[name] = report
            for name in set(self.written) - {object_name(self.node, r.peer) for r in found}:
                await self._call(self._api.delete_namespaced_custom_object, name, ok=NotFound)
                del self.written[name]
        except NotFound:
            self.disabled = True
            log.warning("event=bgp-session-states-off reason='the API has no %s.%s (MetalLB's "
                        "CRD): session states are only in the metrics'", PLURAL, METALLB_GROUP)
        except ApiError as err:
            log.warning("event=bgp-session-state-not-written error=%s", err)

    async def _put(self, name: str, report: Report) -> None:
        body = {"apiVersion": f"{METALLB_GROUP}/{VERSION}", "kind": "BGPSessionState",
                "metadata": {"name": name, "namespace": self.namespace,
                             "labels": {"metallb.io/node": self.node[:63],
                                        "metallb.io/peer": report.peer[:63]}}}
        if name not in self.written:
            await self._call(self._api.create_namespaced_custom_object, body, ok=Conflict)
        status = {"status": {"bgpStatus": report.bgp, "bfdStatus": report.bfd,
                             "node": self.node, "peer": report.address}}
        await self._call(self._api.patch_namespaced_custom_object_status, name, status,
                         _content_type="application/merge-patch+json")

    async def _call(self, method: object, *args: object, ok: type[ApiError] | None = None,
                    **kwargs: object) -> None:
        assert callable(method)
        try:
            await method(METALLB_GROUP, VERSION, self.namespace, PLURAL, *args, **kwargs)
        except client.exceptions.ApiException as exc:
            err = api_error(exc)
            if ok is None or not isinstance(err, ok):
                raise err from None


class PeerWriter(Protocol):
    async def write(self, found: Sequence[Report]) -> None: ...


async def follow_sessions(speaker: MetalLBSpeaker, metrics: SessionMetrics,
                          states: SessionStates | None, *, interval: float = 2.0,
                          peers: PeerWriter | None = None) -> None:
    """Until cancelled: every ``interval``, read the sessions from BIRD and report them
    (``peers``: the VIPPeers' own status)."""
    before: list[Report] = []
    while True:
        await asyncio.sleep(interval)
        plan = speaker.plan
        if plan is None:
            continue
        found = reports(plan, await speaker.sessions(),
                        parse_bfd(await speaker.speaker.birdc_text("show bfd sessions")))
        for report in found:
            if report not in before:
                log.info("event=bgp-session peer=%s address=%s bgp=%s bfd=%s", report.peer,
                         report.address, report.bgp, report.bfd)
        before = found
        metrics.update(found, len(speaker.speaker.vips))
        if states is not None:
            await states.write(found)
        if peers is not None:
            await peers.write(found)
