"""kube-proxy's NodePort rules as exact nft payloads: Cluster SNATs to any node's pods, Local
keeps the client address and only serves local pods, no endpoint drops."""

from __future__ import annotations

from typing import Any

from podway.programs.lab.kubeproxy import ruleset

Obj = dict[str, Any]


def service(policy: str, node_port: int) -> Obj:
    return {"metadata": {"name": f"web-{policy}", "namespace": "default"},
            "spec": {"type": "NodePort", "externalTrafficPolicy": policy,
                     "ports": [{"name": "http", "port": 80, "nodePort": node_port}]}}


def slice_of(name: str, *endpoints: tuple[str, str, bool]) -> Obj:
    return {"metadata": {"name": f"{name}-lab", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": name}},
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "nodeName": n, "conditions": {"ready": ok}}
                          for ip, n, ok in endpoints]}


EPS = (("198.18.1.2", "n1", True), ("198.18.2.2", "n2", True), ("198.18.2.3", "n2", False))


def rules(node: str) -> list[str]:
    text = ruleset(node, [service("Cluster", 30001), service("Local", 30002)],
                   [slice_of("web-Cluster", *EPS), slice_of("web-Local", *EPS)])
    return [line.strip() for line in text.splitlines() if "dport" in line]


def test_cluster_policy_marks_for_snat_and_picks_any_nodes_ready_pod() -> None:
    """Cluster: every ready endpoint of every node, with the masquerade mark."""
    assert rules("n1")[0] == ("tcp dport 30001 meta mark set 0x4000 dnat ip to numgen random "
                              "mod 2 map { 0 : 198.18.1.2 . 8080, 1 : 198.18.2.2 . 8080 }")


def test_local_policy_keeps_client_address_and_local_pods_only() -> None:
    """Local: this node's ready endpoints, no mark; a node without any drops."""
    assert rules("n1")[1] == ("tcp dport 30002 dnat ip to numgen random mod 1 map "
                              "{ 0 : 198.18.1.2 . 8080 }")
    assert rules("n3")[1] == "tcp dport 30002 drop"


def test_masquerade_applies_to_marked_packets_only_and_table_is_replaced_whole() -> None:
    """One transaction replaces the table; only marked packets are masqueraded."""
    text = ruleset("n1", [], [])
    assert text.startswith("table ip podway_lab_kube_proxy\n"
                           "delete table ip podway_lab_kube_proxy\n")
    assert "meta mark & 0x4000 == 0x4000 masquerade" in text
