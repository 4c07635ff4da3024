"""Podway's own BGP kinds (VIPPeer, VIPAdvertisement, VIPPool) give the same BIRD sessions and
exports as MetalLB's objects meaning the same, beside MetalLB's without colliding; a bad spec is a
problem naming the Podway object (never dropped in silence); the status writer writes a node's
entry only on change and removes it when the session goes."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from podway.model.kinds import METALLB_SPEAKER_KINDS
from podway.programs.vip.bird import BfdProfile, Export, engine_config
from podway.programs.vip.metallb import Objects
from podway.programs.vip.metallb_follow import problem_event
from podway.programs.vip.metallb_sessions import Report
from podway.programs.vip.podway_bgp import plan_both
from podway.programs.vip.podway_bgp_status import PeerStatus
from tests.unit.programs.vip.test_configs import parses

NS = "podway-system"
NODE = {"kubernetes.io/hostname": "eng1", "rack": "a"}


def add(objects: Objects, kind: str, name: str, spec: dict[str, Any],
        labels: dict[str, str] | None = None) -> None:
    group = "metallb.io/v1beta1" if kind in ("BGPPeer", "BGPAdvertisement", "IPAddressPool") \
        else "podway.io/v1alpha1"
    objects.by_kind[kind][name] = {"apiVersion": group, "kind": kind, "spec": spec,
                                   "metadata": {"name": name, "labels": labels or {},
                                                "uid": f"uid-{name}"}}


def podway_objects() -> Objects:
    objects = Objects()
    add(objects, "VIPPool", "public", {"addresses": ["198.18.60.0/28"]}, {"zone": "edge"})
    add(objects, "VIPPool", "private", {"addresses": ["198.18.61.1-198.18.61.2"]})
    add(objects, "VIPPeer", "rtr-a", {
        "address": "198.18.51.1", "asn": 65000, "localASN": 65001, "holdTime": "9s",
        "passwordSecretRef": {"name": "bgp-auth"}, "port": 1179,
        "bfd": {"receiveInterval": 100, "transmitInterval": 150, "detectMultiplier": 4},
        "nodeSelectors": [{"matchLabels": {"rack": "a"}}]})
    add(objects, "VIPPeer", "rtr-c", {
        "address": "198.18.53.1", "asn": 65003, "localASN": 65001,
        "nodeSelectors": [{"matchLabels": {"rack": "b"}}]})
    add(objects, "VIPAdvertisement", "edge", {
        "poolSelectors": [{"matchLabels": {"zone": "edge"}}], "communities": ["65000:100"],
        "localPref": 150, "aggregationLength": 28})
    objects.by_kind["Secret"]["bgp-auth"] = {
        "type": "kubernetes.io/basic-auth", "metadata": {"name": "bgp-auth"},
        "data": {"password": base64.b64encode(b"s3cret").decode()}}
    return objects


def test_podway_peer_and_advertisement_become_bird_sessions(tmp_path: Path) -> None:
    found = plan_both(podway_objects(), node_labels=NODE, router_id="198.18.51.2",
                      namespace=NS)
    assert found.problems == ()
    (peer,) = found.settings.neighbors  # rtr-c's selector leaves this node out
    assert (peer.address, peer.asn, peer.local_as, peer.port) == ("198.18.51.1", 65000, 65001,
                                                                  1179)
    assert (peer.hold_time, peer.keepalive, peer.password) == (9, 3, "s3cret")
    assert peer.bfd == BfdProfile(receive_ms=100, transmit_ms=150, multiplier=4, passive=False)
    assert peer.exports == (Export(prefixes=("198.18.60.0/28",), communities=("65000:100",),
                                   local_pref=150),)
    assert found.peers == ((peer.name, "podway:rtr-a"),)
    assert found.vips == ("198.18.60.0/28",)
    parses("bird", engine_config(found.settings, found.vips), tmp_path)


def test_both_sources_at_once_and_names_do_not_collide() -> None:
    objects = podway_objects()
    # A MetalLB peer and pool with the same names as Podway's: two sessions, each source's
    # advertisement sends only its own pools to its own peers.
    add(objects, "BGPPeer", "rtr-a", {"myASN": 65001, "peerASN": 65010,
                                      "peerAddress": "198.18.55.1"})
    add(objects, "IPAddressPool", "public", {"addresses": ["198.18.62.0/30"]},
        {"zone": "edge"})
    add(objects, "BGPAdvertisement", "all", {})
    found = plan_both(objects, node_labels=NODE, router_id="198.18.51.2", namespace=NS)
    assert found.problems == ()
    sessions = {name: n for n, name in ((n, dict(found.peers)[n.name])
                                        for n in found.settings.neighbors)}
    assert set(sessions) == {"rtr-a", "podway:rtr-a"}
    assert len({n.name for n in found.settings.neighbors}) == 2
    assert [e.prefixes for e in sessions["rtr-a"].exports] == [
        ("198.18.62.0/30",)]  # MetalLB's "every pool" is MetalLB's pools only
    assert [e.prefixes for e in sessions["podway:rtr-a"].exports] == [("198.18.60.0/28",)]


def test_bad_specs_are_problems_naming_the_podway_object() -> None:
    objects = podway_objects()
    add(objects, "VIPPeer", "no-asn", {"address": "198.18.51.9", "localASN": 65001})
    add(objects, "VIPPeer", "typo", {"address": "198.18.51.9", "asn": 1, "localASN": 2,
                                     "holdtime": "9s"})
    add(objects, "VIPPeer", "bad-hold", {"address": "198.18.51.8", "asn": 1, "localASN": 2,
                                         "holdTime": "soon"})
    add(objects, "VIPPeer", "no-secret", {"address": "198.18.51.7", "asn": 1, "localASN": 2,
                                          "passwordSecretRef": {"name": "absent"}})
    add(objects, "VIPAdvertisement", "lost", {"pools": ["nope"], "peers": ["rtr-a", "ghost"]})
    add(objects, "VIPAdvertisement", "far", {"localPref": -1})
    found = plan_both(objects, node_labels=NODE, router_id="198.18.51.2", namespace=NS)
    text = "\n".join(found.problems)
    assert "VIPPeer 'no-asn' is not used: spec.asn: Field required" in text
    assert "VIPPeer 'typo' is not used: spec.holdtime: Extra inputs are not permitted" in text
    assert "VIPPeer 'bad-hold' is not used: 'soon' is not a duration" in text
    assert "VIPPeer 'no-secret' is not used: Secret 'absent' is not there (yet)" in text
    assert "VIPAdvertisement 'lost' names VIPPool 'nope', which is not there" in text
    assert "VIPAdvertisement 'lost' names VIPPeer 'ghost', which is not there" in text
    assert "VIPAdvertisement 'far' is not used: spec.localPref" in text
    assert "podway:" not in text
    assert {n.address for n in found.settings.neighbors} == {"198.18.51.1"}
    # each problem becomes a Warning Event on the (cluster-scoped) Podway object
    event = problem_event(found.problems[0], objects, namespace=NS, node="eng1",
                          component="test")
    assert event is not None
    assert event["involvedObject"]["kind"] in ("VIPPeer", "VIPAdvertisement")
    assert event["involvedObject"]["namespace"] == ""
    assert event["involvedObject"]["apiVersion"] == "podway.io/v1alpha1"


class FakeApi:
    """A VIPPeer that only this node writes, at resourceVersion 7."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def get_cluster_custom_object(self, group: str, version: str, plural: str,
                                        name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "resourceVersion": "7"}, "status": {}}

    async def patch_cluster_custom_object_status(self, group: str, version: str, plural: str,
                                                 name: str, body: dict[str, Any],
                                                 **_: Any) -> None:
        assert (group, version, plural) == ("podway.io", "v1alpha1", "vippeers")
        self.calls.append((name, body))


def test_peer_status_written_per_node_only_on_change_and_removed() -> None:
    status = PeerStatus.__new__(PeerStatus)
    status.node, status.written, status.patches = "eng1", {}, 0
    api = status._api = FakeApi()
    up = Report(peer="podway:rtr-a", address="198.18.51.1", bgp="Established", bfd="Up")
    metallb = Report(peer="rtr-b", address="198.18.52.1", bgp="Established", bfd="N/A")

    async def run() -> None:
        await status.write([up, metallb])
        await status.write([up, metallb])  # nothing changed: nothing written
        await status.write([Report(peer="podway:rtr-a", address="198.18.51.1", bgp="Active",
                                   bfd="Down")])
        await status.write([])

    asyncio.run(run())
    version = {"metadata": {"resourceVersion": "7"}}
    assert api.calls == [
        ("rtr-a", version | {"status": {"nodes": {"eng1": {
            "session": "Established", "established": True, "bfd": "Up",
            "address": "198.18.51.1"}}, "established": "1/1"}}),
        ("rtr-a", version | {"status": {"nodes": {"eng1": {
            "session": "Active", "established": False, "bfd": "Down",
            "address": "198.18.51.1"}}, "established": "0/1"}}),
        ("rtr-a", version | {"status": {"nodes": {"eng1": None}, "established": "0/0"}}),
    ]


async def test_without_metallb_only_podway_s_kinds_are_listed() -> None:
    """``--no-metallb`` (the chart's fromVIPPeers): no informer of MetalLB's kinds, so a
    cluster without MetalLB (and a Role without metallb.io) is not a refusal per kind."""
    from podway.programs.vip.metallb_live import MetalLBSpeaker

    def names(metallb: bool) -> set[str]:
        live = MetalLBSpeaker(api, namespace="podway-system", node="eng1", router_id="198.18.0.1",
                              workdir=Path("/nonexistent"), metallb=metallb)
        return {i.name for i in live.informers()}

    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    try:
        both, alone = names(True), names(False)
    finally:
        await api.close()
    assert alone < both
    assert both - alone == {f"metallb-{k.plural}" for k in METALLB_SPEAKER_KINDS}
    assert "metallb-secrets" in alone
