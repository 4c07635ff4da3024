"""``podway migrate from-metallb``: MetalLB's pools become VIPPools that give the very same
addresses (a CIDR spelled out as its whole range), and every other MetalLB setting is a note —
BGPPeer as the equivalent ``podway vip announce`` command, L2 and unsupported fields named."""

from __future__ import annotations

from pathlib import Path

import yaml

from podway.model import Snapshot
from podway.programs.ipam import Ipam, PoolKinds
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
       password: secret, bfdProfile: fast}
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


def test_everything_else_is_a_note_naming_it() -> None:
    notes = convert(yaml.safe_load_all(DOCS + "---" + EXTRA)).notes
    text = "\n".join(notes)
    assert ("podway vip announce --local-as 64500 --neighbor 198.18.51.1:64501 --hold-time 90"
            " --password-file" in text)
    assert "bfdProfile 'fast'" in text
    assert ("podway vip announce --community 65535:65282 --community 64500:7 --local-pref 100 "
            "--aggregation-length 24 --vip" in text)  # the Community's name resolved
    assert "not carried: peers=['tor']" in text
    assert "L2Advertisement 'l2'" in text
    assert "Community 'communities'" in text
    assert "podway vip announce-metallb --node NODE" in text
    assert "podway vip l2 --from-metallb" in text
    assert "reachability.mode l2 with reachability.l2.fromMetalLB.enabled" in text


def test_cli_prints_vippools_and_notes(tmp_path: Path) -> None:
    source = tmp_path / "metallb.yaml"
    source.write_text(DOCS + "---" + EXTRA)
    result = podway("migrate", "from-metallb", str(source))
    assert result.returncode == 0, result.stderr
    assert [d["kind"] for d in yaml.safe_load_all(result.stdout)] == ["VIPPool"] * 3
    assert any(line.startswith("note: BGPPeer 'tor'") for line in result.stderr.splitlines())
    empty = tmp_path / "none.yaml"
    empty.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: x}\n")
    refused = podway("migrate", "from-metallb", str(empty))
    assert refused.returncode == 2
    assert "no MetalLB IPAddressPool" in one_error_line(refused)
