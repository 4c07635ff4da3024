"""``podway migrate from-metallb``: MetalLB's pools become VIPPools that give the very same
addresses (a CIDR spelled out as its whole range), BGPPeer and BGPAdvertisement become Podway's
VIPPeer and VIPAdvertisement (which the speaker plans exactly as it plans MetalLB's), and every
other MetalLB setting is a note — L2 as its command, unsupported fields named."""

from __future__ import annotations

import base64
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from podway.model import Snapshot
from podway.programs.ipam import Ipam, PoolKinds
from podway.programs.vip.metallb import Objects
from podway.programs.vip.podway_bgp import plan_both
from podway.tools.migrate.from_metallb import convert
from podway.translate import TranslateOptions
from tests import builders
from tests.unit.cli.test_errors import one_error_line, podway
from tests.unit.programs.ipam.test_metallb import DOCS, service

EXTRA = """
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64501, peerAddress: 198.18.51.1, holdTime: 90s,
       passwordSecret: {name: tor-auth, namespace: metallb-system}, bfdProfile: fast,
       peerPort: 1179, vrf: red}
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: fast, namespace: metallb-system}
spec: {receiveInterval: 100, transmitInterval: 150, echoMode: true}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: ads, namespace: metallb-system}
spec: {ipAddressPools: [first-pool], localPref: 100, communities: [no-advertise, "64500:7"],
       aggregationLength: 24, peers: [tor]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: l2, namespace: metallb-system}
---
apiVersion: metallb.io/v1beta1
kind: Community
metadata: {name: communities, namespace: metallb-system}
spec: {communities: [{name: no-advertise, value: "65535:65282"}]}
"""


def test_converted_pools_give_the_same_addresses_as_metallb_s() -> None:
    """The same Services get the same grants from the VIPPools as from MetalLB's pools."""
    metallb = list(yaml.safe_load_all(DOCS))
    converted = convert(metallb).objects
    assert [o["kind"] for o in converted] == ["VIPPool"] * 3
    assert converted[0]["spec"]["addresses"][0] == "192.168.10.0-192.168.10.255"
    services = [service("one", n=1), service("two", n=2),
                service("tenant", "namespace-a", n=3, labels={"app": "bar"}),
                service("named", n=4, annotations={"metallb.io/address-pool": "cheap"})]

    def grants(pools: list[dict[str, object]], kind: PoolKinds) -> dict[object, object]:
        snap = Snapshot.of_objects([builders.typed(o) for o in (*pools, *services)])
        return {ref: g.addresses for ref, g in
                Ipam((), kinds=(kind,)).allocate(snap, TranslateOptions()).items()}

    theirs = grants(metallb, PoolKinds.METALLB)
    assert all(theirs.values())
    assert grants(converted, PoolKinds.VIPPOOLS) == theirs


def test_bgp_objects_become_vippeers_and_vipadvertisements() -> None:
    converted = convert(yaml.safe_load_all(DOCS + "---" + EXTRA))
    by_kind = {o["kind"]: o for o in converted.objects}
    assert by_kind["VIPPeer"] == {
        "apiVersion": "podway.io/v1alpha1", "kind": "VIPPeer", "metadata": {"name": "tor"},
        "spec": {"localASN": 64500, "asn": 64501, "address": "198.18.51.1", "holdTime": "90s",
                 "port": 1179, "passwordSecretRef": {"name": "tor-auth"},
                 "bfd": {"receiveInterval": 100, "transmitInterval": 150}}}
    assert by_kind["VIPAdvertisement"]["spec"] == {
        "pools": ["first-pool"], "localPref": 100, "aggregationLength": 24, "peers": ["tor"],
        "communities": ["65535:65282", "64500:7"]}  # the Community's name resolved
    text = "\n".join(converted.notes)
    assert "BGPPeer 'tor': not carried: vrf" in text
    assert "BFDProfile 'fast': not carried: echoMode" in text
    assert "L2Advertisement 'l2'" in text
    assert "Community 'communities'" in text
    assert "podway vip announce-metallb --node NODE" in text
    assert "podway vip l2 --from-metallb" in text
    assert "reachability.mode l2 with reachability.l2.fromMetalLB.enabled" in text


def test_converted_bgp_objects_plan_as_metallb_s_do() -> None:
    """The speaker's plan from the converted Podway objects (and the same Secret) is the plan
    from MetalLB's own: same session, same exports."""
    metallb = list(yaml.safe_load_all(DOCS + "---" + EXTRA))
    for o in metallb:
        if o["kind"] == "BGPPeer":
            del o["spec"]["vrf"]  # unusable in both forms
    secret = {"kind": "Secret", "type": "kubernetes.io/basic-auth",
              "metadata": {"name": "tor-auth"},
              "data": {"password": base64.b64encode(b"s3cret").decode()}}

    def planned(objects: list[dict[str, Any]]) -> tuple[Any, ...]:
        held = Objects()
        for o in [*objects, secret]:
            if o["kind"] in held.by_kind:
                held.by_kind[o["kind"]][o["metadata"]["name"]] = o
        found = plan_both(held, node_labels={}, router_id="198.18.51.2",
                          namespace="metallb-system")
        (neighbor,) = found.settings.neighbors
        return replace(neighbor, name=""), found.vips

    theirs = planned([o for o in metallb if o["kind"] != "L2Advertisement"])
    ours = planned(convert(metallb).objects)
    assert theirs == ours
    assert theirs[0].password == "s3cret"
    assert theirs[0].exports


def test_cli_prints_vippools_and_notes(tmp_path: Path) -> None:
    source = tmp_path / "metallb.yaml"
    source.write_text(DOCS + "---" + EXTRA)
    result = podway("migrate", "from-metallb", str(source))
    assert result.returncode == 0, result.stderr
    assert [d["kind"] for d in yaml.safe_load_all(result.stdout)] == [
        "VIPPool", "VIPPool", "VIPPool", "VIPPeer", "VIPAdvertisement"]
    assert any(line.startswith("note: BGPPeer 'tor'") for line in result.stderr.splitlines())
    empty = tmp_path / "none.yaml"
    empty.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: x}\n")
    refused = podway("migrate", "from-metallb", str(empty))
    assert refused.returncode == 2
    assert "no MetalLB IPAddressPool" in one_error_line(refused)
