"""L2 mode in a cluster: the group from Nodes, the VIPs from Services, the engine's health from
its pod (pure parts), and the ARP isolation of the interfaces VIPs go on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from podway.programs.vip.l2_arp import ArpIsolation
from podway.programs.vip.l2_cluster import check_pools, engine_ready, peers_of, service_vips


def node(name: str, *addresses: tuple[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "status": {"addresses": [{"type": t, "address": a} for t, a in addresses]}}


def test_peers_are_the_other_nodes_at_their_internal_ip_of_the_family() -> None:
    nodes = [node("a", ("InternalIP", "198.18.0.1")),
             node("b", ("ExternalIP", "198.19.0.2"), ("InternalIP", "2001:db8::2"),
                  ("InternalIP", "198.18.0.2")),
             node("c", ("Hostname", "c")),  # no address: cannot be reached, left out
             node("d", ("InternalIP", "not-an-address"))]
    assert peers_of(nodes, me="a", port=7946, ipv6=False) == {"b": ("198.18.0.2", 7946)}
    assert peers_of(nodes, me="a", port=7946, ipv6=True) == {"b": ("2001:db8::2", 7946)}


def service(kind: str, *ips: str, hostname: str = "") -> dict[str, Any]:
    ingress: list[dict[str, str]] = [{"ip": ip} for ip in ips]
    if hostname:
        ingress.append({"hostname": hostname})
    return {"spec": {"type": kind}, "status": {"loadBalancer": {"ingress": ingress}}}


def test_vips_are_the_load_balancer_addresses_inside_the_pools() -> None:
    services = [service("LoadBalancer", "198.18.100.3", "2001:db8:100::1"),
                service("LoadBalancer", "198.18.100.1", hostname="lb.example"),
                service("LoadBalancer", "198.18.200.1"),  # another pool's
                service("ClusterIP", "198.18.100.9"),  # not a load balancer
                {"spec": {"type": "LoadBalancer"}}]  # nothing given out yet
    pools = check_pools(["198.18.100.0/28", "2001:db8:100::1-2001:db8:100::5"])
    assert service_vips(services, pools) == ("198.18.100.1", "198.18.100.3", "2001:db8:100::1")
    assert service_vips(services, []) == ("198.18.100.1", "198.18.100.3", "198.18.200.1",
                                          "2001:db8:100::1")


def test_a_bad_pool_is_named() -> None:
    with pytest.raises(ValueError, match="--pool 'nope'"):
        check_pools(["nope"])


def pod(on: str, ready: bool, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "engine"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": on},
            "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_the_engine_is_healthy_only_while_its_pod_on_this_node_is_ready_and_staying() -> None:
    assert engine_ready([pod("n1", True)], node="n1")
    assert not engine_ready([pod("n1", False)], node="n1")
    assert not engine_ready([pod("n2", True)], node="n1")  # another node's engine
    assert not engine_ready([pod("n1", True, deleting=True)], node="n1")  # draining
    assert not engine_ready([], node="n1")


def conf(tmp_path: Path, interface: str, ignore: int, announce: int) -> Path:
    folder = tmp_path / interface
    folder.mkdir()
    (folder / "arp_ignore").write_text(f"{ignore}\n")
    (folder / "arp_announce").write_text(f"{announce}\n")
    return folder


def test_arp_isolation_sets_and_puts_back_only_what_it_changed(tmp_path: Path) -> None:
    eth0 = conf(tmp_path, "eth0", 0, 0)
    eth1 = conf(tmp_path, "eth1", 2, 1)  # arp_ignore already stricter: left as it is
    arp = ArpIsolation(root=tmp_path)
    assert arp.ensure("eth0")
    assert arp.ensure("eth1")
    assert (eth0 / "arp_ignore").read_text() == "1\n"
    assert (eth0 / "arp_announce").read_text() == "2\n"
    assert (eth1 / "arp_ignore").read_text() == "2\n"
    assert (eth1 / "arp_announce").read_text() == "2\n"
    arp.restore()
    assert [(eth0 / n).read_text() for n in ("arp_ignore", "arp_announce")] == ["0\n", "0\n"]
    assert [(eth1 / n).read_text() for n in ("arp_ignore", "arp_announce")] == ["2\n", "1\n"]


def test_arp_isolation_that_cannot_be_set_says_so_once(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    arp = ArpIsolation(root=tmp_path)
    assert not arp.ensure("missing")
    assert not arp.ensure("missing")
    assert [r.message for r in caplog.records].count(
        next(r.message for r in caplog.records)) == 1
    assert "missing" in caplog.records[0].message


@pytest.mark.parametrize(("extra", "says"), [
    (["--peer", "b=198.18.0.2:7946", "--peers-from-nodes", "edge=true", "--vip", "198.18.0.9"],
     "give --peer or --peers-from-nodes, not both"),
    (["--vip", "198.18.0.9", "--vips-from-services"], "give --vip or --vips-from-services"),
    ([], "give at least one --vip (or --vips-from-services)"),
    (["--vip", "198.18.0.9", "--pool", "198.18.0.0/28"], "--pool needs --vips-from-services"),
    (["--vips-from-services", "--pool", "nope"], "--pool 'nope'"),
])
def test_the_cli_refuses_a_group_or_vips_given_twice_or_not_at_all(extra: list[str],
                                                                   says: str) -> None:
    from podway.base.errors import ConfigError
    from podway.cli.app import app
    from tests.unit.programs.vip.test_configs import runner

    bad = runner.invoke(app, ["vip", "l2", "--node", "a", "--interface", "e0", "--listen",
                              "198.18.0.1:7946", "--key-file", "/nonexistent", *extra])
    assert isinstance(bad.exception, ConfigError), bad.output
    assert says in str(bad.exception)


def test_a_problem_event_is_the_same_from_every_node_and_names_its_object() -> None:
    """Every speaker writes the same Event name for one problem (the API keeps the first), on
    the object the problem names (an L2Advertisement for L2, a BGPPeer for BGP); a problem
    naming no MetalLB object (a VIP) has none."""
    from podway.programs.vip.metallb import Objects
    from podway.programs.vip.metallb_follow import problem_event

    objects = Objects()
    objects.by_kind["L2Advertisement"]["lan"] = {
        "apiVersion": "metallb.io/v1beta1", "metadata": {"name": "lan", "uid": "u1"}}
    text = "L2Advertisement 'lan' is not used: selectors must be a list of label selectors"
    one = problem_event(text, objects, namespace="lb", node="n1", component="podway-vip-l2")
    two = problem_event(text, objects, namespace="lb", node="n2", component="podway-vip-l2")
    assert one is not None
    assert two is not None
    assert one["metadata"] == two["metadata"]
    assert one["metadata"]["name"].startswith("lan.podway-")
    assert one["involvedObject"] == {"kind": "L2Advertisement", "name": "lan", "namespace": "lb",
                                     "apiVersion": "metallb.io/v1beta1", "uid": "u1"}
    assert (one["type"], one["reason"]) == ("Warning", "NotCarried")
    assert one["source"] == {"component": "podway-vip-l2", "host": "n1"}
    other = problem_event(text.replace("a list", "a list!"), objects, namespace="lb", node="n1",
                          component="podway-vip-l2")
    assert other is not None
    assert other["metadata"]["name"] != one["metadata"]["name"]
    peer = problem_event("BGPPeer 'tor': vrf is not supported by Podway's speaker", objects,
                         namespace="lb", node="n1", component="podway-vip-announce-metallb")
    assert peer is not None
    assert (peer["involvedObject"]["kind"], peer["involvedObject"]["name"]) == ("BGPPeer", "tor")
    assert problem_event("VIP 198.18.0.9 is in no IPAddressPool: no host answers for it",
                         objects, namespace="lb", node="n1", component="podway-vip-l2") is None


def test_a_field_podway_does_not_know_is_said_by_each_speaker() -> None:
    """A newer MetalLB's field (here one each on a BGPPeer, an L2Advertisement and a pool) is a
    problem naming the object and the field — an Event through the followers — while the
    object is still used with the fields Podway knows."""
    from podway.programs.vip.metallb import Objects, plan
    from podway.programs.vip.metallb_l2 import placement

    objects = Objects()
    objects.by_kind["IPAddressPool"]["lan"] = {"metadata": {"name": "lan"}, "spec": {
        "addresses": ["198.18.100.0/28"], "newPoolThing": True}}
    objects.by_kind["L2Advertisement"]["l2"] = {"metadata": {"name": "l2"}, "spec": {
        "interfaces": ["e1"], "newL2Thing": 1}}
    objects.by_kind["BGPPeer"]["tor"] = {"metadata": {"name": "tor"}, "spec": {
        "myASN": 64500, "peerASN": 64501, "peerAddress": "198.18.51.1",
        "dualStackAddressFamily": True}}
    found, problems = placement(objects, node_labels={}, vips=["198.18.100.3"])
    assert found == {"198.18.100.3": ("e1",)}
    assert problems == ("L2Advertisement 'l2': newL2Thing is not carried (a field Podway does "
                        "not know)", "IPAddressPool 'lan': newPoolThing is not carried (a field "
                        "Podway does not know)")
    bgp = plan(objects, node_labels={}, router_id="198.18.51.2", namespace="metallb-system")
    assert [n.address for n in bgp.settings.neighbors] == ["198.18.51.1"]
    assert "BGPPeer 'tor': dualStackAddressFamily is not carried (a field Podway does not " \
           "know)" in bgp.problems
    assert not [p for p in bgp.problems if "L2Advertisement" in p]
