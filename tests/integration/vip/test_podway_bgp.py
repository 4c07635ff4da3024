"""Podway's own BGP kinds read live from the API drive a real BIRD in a network namespace,
peering with a real BIRD router (the bed of ``test_metallb_bgp``: router1 198.18.151.1, AS 65000,
MD5 password ``s3cret``, BFD):

a ``VIPPeer`` (password from a basic-auth Secret, inline BFD) and a ``VIPAdvertisement`` (a
``VIPPool`` by name, a community) make router1 learn the pool with the community; the peer's
status says Established for this node (``status.nodes.eng1``); when the peer's node selectors
leave the node out, the route goes and this node's entry is removed. Podway's CRDs are the
chart's own (deploy/helm/podway/crds/); MetalLB's are not installed at all. Only
198.18.0.0/15; everything made is removed, also on failure."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from podway.kube.emulator import KubeEmulator
from podway.programs.lab.controlplane import install_podway_crds
from podway.programs.vip.metallb_live import MetalLBSpeaker
from podway.programs.vip.metallb_sessions import SessionMetrics, follow_sessions
from podway.programs.vip.podway_bgp_status import PeerStatus
from tests.integration.vip.test_metallb_bgp import Net, pytestmark, until, world

__all__ = ["pytestmark", "world"]
NS = "podway-system"
POOL = "198.18.161.0/28"
GROUP = "podway.io"


def pw(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": kind, "metadata": {"name": name},
            "spec": spec}


def peer(rack: str) -> dict[str, Any]:
    return pw("VIPPeer", "rtr-a", {
        "address": "198.18.151.1", "asn": 65000, "localASN": 65001,
        "passwordSecretRef": {"name": "bgp-auth"},
        "bfd": {"receiveInterval": 100, "transmitInterval": 100},
        "nodeSelectors": [{"matchLabels": {"rack": rack}}]})


async def test_podway_peer_and_advertisement_configure_bird_and_report_established(
        world: tuple[Net, KubeEmulator, client.ApiClient], tmp_path: Path) -> None:
    net, emu, api = world
    assert "vippeers.podway.io" in install_podway_crds(emu)
    emu.put("nodes", {"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": "eng1", "labels": {"rack": "a"}}})
    emu.put("secrets", {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/basic-auth",
                        "metadata": {"name": "bgp-auth", "namespace": NS},
                        "data": {"password": base64.b64encode(b"s3cret").decode()}})
    emu.put("vippools", pw("VIPPool", "public", {"addresses": [POOL]}), group=GROUP)
    emu.put("vippeers", peer("a"), group=GROUP)
    emu.put("vipadvertisements", pw("VIPAdvertisement", "to-a", {
        "pools": ["public"], "peers": ["rtr-a"], "communities": ["65001:43"]}), group=GROUP)
    speaker = MetalLBSpeaker(api, namespace=NS, node="eng1", router_id="198.18.151.2",
                             workdir=tmp_path / "eng", prefix=("ip", "netns", "exec", net.eng),
                             debounce_s=0.1)
    task = asyncio.create_task(speaker.run())
    status = PeerStatus(api, node="eng1")
    reporter = asyncio.create_task(follow_sessions(speaker, SessionMetrics(), None,
                                                   interval=0.3, peers=status))

    def nodes() -> dict[str, Any]:
        found = emu.get("vippeers", "", "rtr-a", group=GROUP) or {}
        return dict((found.get("status") or {}).get("nodes") or {})

    try:
        await until(lambda: "(65001,43)" in net.birdc(1, "show", "route", "for", POOL, "all"),
                    30, "router1 learns the VIPPool with the advertisement's community")
        assert "Established" in net.session(1)  # so the Secret's password matched
        assert " Up " in net.birdc(1, "show", "bfd", "sessions")  # the peer's inline BFD
        await until(lambda: nodes().get("eng1", {}).get("established") is True, 10,
                    "the VIPPeer's status says Established for eng1")
        assert nodes() == {"eng1": {"session": "Established", "established": True,
                                    "bfd": "Up", "address": "198.18.151.1"}}
        patches = status.patches
        await asyncio.sleep(1.0)  # three more reports of the same state: no more writes
        assert status.patches == patches

        # The peer's selector leaves this node out: the route goes, the entry is removed.
        emu.put("vippeers", peer("b") | {"status": emu.get("vippeers", "", "rtr-a",
                                                           group=GROUP)["status"]},
                group=GROUP)
        await until(lambda: POOL not in net.birdc(1, "show", "route", "for", POOL), 30,
                    "router1 loses the pool")
        await until(lambda: "eng1" not in nodes(), 10, "eng1's entry removed")
    finally:
        for running in (reporter, task):
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
        await speaker.stop()
