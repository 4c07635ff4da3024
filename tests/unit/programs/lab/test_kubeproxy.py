"""kube-proxy's NodePort rules as exact nft payloads: Cluster SNATs to any node's pods, Local
keeps the client address and only serves local pods (a node without one drops), terminating
pods serve while none is ready, and a port with no endpoint at all is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest

from podway.programs.lab.kubeproxy import ruleset
from tests import builders

Obj = dict[str, Any]


def service(policy: str, node_port: int) -> Obj:
    return builders.service(f"web-{policy}", 80, None, type_="NodePort", protocol=None,
                            node_port=node_port, externalTrafficPolicy=policy,
                            kind_fields=False)


def slice_of(name: str, *endpoints: tuple[str, str, bool]) -> Obj:
    return builders.endpoint_slice(name, name=f"{name}-lab", kind_fields=False, endpoints=[
        builders.endpoint(ip, node=n, ready=ok) for ip, n, ok in endpoints])


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


def test_without_ready_pods_the_terminating_serving_ones_keep_the_port() -> None:
    """Every pod replaced at once: until a new one is ready, the old ones that still serve
    (terminating) take the connections, as kube-proxy's ProxyTerminatingEndpoints does (the
    lab dropped them: a load balancer's connect hung for its whole timeout)."""
    terminating = slice_of("web-Cluster", ("198.18.1.2", "n1", False), ("198.18.2.9", "n2", False))
    for endpoint in terminating["endpoints"]:
        endpoint["conditions"] = {"ready": False, "serving": True, "terminating": True}
    terminating["endpoints"][1]["conditions"]["serving"] = False  # already stopped
    text = ruleset("n1", [service("Cluster", 30001)], [terminating])
    assert ("tcp dport 30001 meta mark set 0x4000 dnat ip to numgen random mod 1 map "
            "{ 0 : 198.18.1.2 . 8080 }") in text


def test_a_port_with_no_endpoint_at_all_is_refused_at_once() -> None:
    """No endpoint (Cluster): a TCP reset, as kube-proxy's "has no endpoints" reject rule
    answers, not a silent drop the client waits out."""
    text = ruleset("n1", [service("Cluster", 30001)], [slice_of("web-Cluster")])
    assert "tcp dport 30001 reject with tcp reset" in text
    assert "tcp dport 30001 drop" not in text


def test_cluster_ips_go_to_any_ready_endpoint_masqueraded_from_pods_and_the_node() -> None:
    """Every Service with a ClusterIP (the ``kubernetes`` one too) is DNATed to its ready
    endpoints from the node's pods (prerouting) and from the node (output: host-network pods),
    marked for masquerade; a headless Service is not; no endpoint is a reset, not a hang."""
    web = builders.service("web", 80, None, kind_fields=False, clusterIP="198.19.128.7")
    api = {"metadata": {"name": "kubernetes", "namespace": "default"},
           "spec": {"clusterIP": "198.19.128.1",
                    "ports": [{"name": "https", "port": 443, "targetPort": 6443}]}}
    api_slice = {"metadata": {"name": "kubernetes", "namespace": "default",
                              "labels": {"kubernetes.io/service-name": "kubernetes"}},
                 "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
                 "endpoints": [{"addresses": ["198.18.0.1"], "conditions": {"ready": True}}]}
    empty = builders.service("empty", 81, None, kind_fields=False, clusterIP="198.19.128.8")
    headless = builders.service("headless", 82, None, kind_fields=False, clusterIP="None")
    text = ruleset("n1", [web, api, empty, headless], [slice_of("web", *EPS), api_slice])
    lines = [line.strip() for line in text.splitlines()]
    assert ("ip daddr 198.19.128.7 tcp dport 80 meta mark set 0x4000 dnat ip to numgen random "
            "mod 2 map { 0 : 198.18.1.2 . 8080, 1 : 198.18.2.2 . 8080 }") in lines
    assert ("ip daddr 198.19.128.1 tcp dport 443 meta mark set 0x4000 dnat ip to numgen random "
            "mod 1 map { 0 : 198.18.0.1 . 6443 }") in lines
    assert lines.count("ip daddr 198.19.128.8 tcp dport 81 reject with tcp reset") == 2
    assert lines.count("ip daddr 198.19.128.0/17 jump services") == 2
    assert "dport 82" not in text


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("nft") is None,
                    reason="nft -c needs root and nftables")
def test_the_ruleset_is_accepted_by_nft() -> None:
    """The whole script passes ``nft --check`` (in a throwaway network namespace)."""
    web = builders.service("web", 80, None, type_="NodePort", node_port=30001,
                           kind_fields=False, clusterIP="198.19.128.7")
    empty = builders.service("empty", 81, None, kind_fields=False, clusterIP="198.19.128.8")
    text = ruleset("n1", [web, empty], [slice_of("web", *EPS)])
    done = subprocess.run(["unshare", "--net", "nft", "--check", "-f", "-"], input=text,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


async def test_every_node_gets_its_rules_at_once_not_one_after_another() -> None:
    """Real kube-proxies each program their own node in parallel. Written one node after another,
    the last node learnt of a leaving pod the sum of the writes late; under load that outlasted
    the 1 s an Envoy connection to a node lives, and a request on a connection pinned to the pod
    failed when it exited (503, L7 only: CI lost two). Each write here waits until all four
    have started, so writing in turn never gets past the first one."""
    import asyncio

    from podway.programs.lab.daemon import program_nodes
    from podway.programs.lab.plan import make_plan

    plan = make_plan("tk", 4)
    started: list[str] = []
    all_started = asyncio.Event()

    async def write(netns: str, script: str) -> None:
        started.append(netns)
        if len(started) == len(plan.nodes):
            all_started.set()
        await all_started.wait()

    installed: dict[str, str] = {}
    services = [service("Cluster", 30080)]
    slices = [slice_of("web-Cluster", ("10.0.1.5", "lab-node-1", True))]
    async with asyncio.timeout(5):
        await program_nodes(plan.nodes, services, slices, installed, write)
    assert sorted(started) == sorted(n.netns for n in plan.nodes)
    assert set(installed) == {n.name for n in plan.nodes}
    started.clear()
    await program_nodes(plan.nodes, services, slices, installed, write)
    assert started == []  # nothing changed: nothing written


async def test_a_failed_node_write_is_raised_after_the_others_are_written() -> None:
    from podway.programs.lab.daemon import program_nodes
    from podway.programs.lab.plan import make_plan

    plan = make_plan("tk", 3)

    async def write(netns: str, script: str) -> None:
        if netns.endswith("node2"):
            raise RuntimeError("nft: no such file")

    installed: dict[str, str] = {}
    with pytest.raises(RuntimeError, match="nft: no such file"):
        await program_nodes(plan.nodes, [service("Cluster", 30080)],
                            [slice_of("web-Cluster", ("10.0.1.5", "lab-node-1", True))],
                            installed, write)
    assert set(installed) == {"lab-node-1", "lab-node-3"}  # node 2 is written again next time
