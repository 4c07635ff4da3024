"""The lab's controllers as pure decisions: scheduling, EndpointSlices, draining pods."""

from __future__ import annotations

from typing import Any

from podway.programs.lab import cluster, workloads
from tests import builders

Obj = dict[str, Any]


def node(name: str, **labels: str) -> Obj:
    return {"metadata": {"name": name, "labels": labels}}


def pod(name: str, node_name: str = "", *, ip: str = "", ready: bool = False,
        labels: dict[str, str] | None = None, selector: dict[str, str] | None = None) -> Obj:
    raw = builders.pod(
        name, ip or None, node=node_name, labels=labels or None, uid=f"{len(name):08x}-x",
        container_ports=[{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        conditions=[{"type": "Ready", "status": "True" if ready else "False"}],
        kind_fields=False)
    raw["spec"]["nodeSelector"] = selector or {}
    return raw


def test_scheduler_spreads_by_load_and_honours_node_selector() -> None:
    """The least loaded fitting node wins (ties by node number); nodeSelector filters."""
    nodes = [node("lab-node-1", zone="a"), node("lab-node-2", zone="b"),
             node("lab-node-10", zone="a")]
    running = [pod("a", "lab-node-1"), pod("bb", "lab-node-2")]
    assert cluster.schedule(pod("new"), nodes, running) == "lab-node-10"
    assert cluster.schedule(pod("new", selector={"zone": "b"}), nodes, running) == "lab-node-2"
    assert cluster.schedule(pod("new", selector={"zone": "c"}), nodes, running) is None


def test_four_replicas_on_three_nodes_put_two_on_one_node() -> None:
    """The seed layout: scheduling 4 pods one by one over 3 nodes gives 2, 1, 1."""
    nodes = [node(f"lab-node-{i}") for i in (1, 2, 3)]
    placed: list[Obj] = []
    for i in range(4):
        placed.append(pod("p" * (i + 1), cluster.schedule(pod("x"), nodes, placed) or ""))
    counts = sorted(sum(1 for p in placed if p["spec"]["nodeName"] == n["metadata"]["name"])
                    for n in nodes)
    assert counts == [1, 1, 2]


def test_terminating_pods_are_replaced_and_drained_not_counted() -> None:
    """A terminating pod counts for no replica (a new one is made), is not terminated twice,
    and its endpoint is terminating, not ready, still serving."""
    leaving = pod("a", "n1", ip="198.18.1.2", ready=True)
    leaving["metadata"]["ownerReferences"] = [{"uid": "rs-1"}]
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    rs = {"metadata": {"name": "web-1", "namespace": "default", "uid": "rs-1"},
          "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": "web"}}}}}
    create, delete = workloads.replicaset_pods(rs, [leaving])
    assert len(create) == 1
    assert delete == []
    svc = {"metadata": {"name": "web", "namespace": "default"},
           "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}
    sl = cluster.endpoint_slice(svc, [leaving])
    assert sl is not None
    assert sl["endpoints"][0]["conditions"] == {"ready": False, "serving": True,
                                                "terminating": True}


def test_endpoint_slice_resolves_named_ports_and_readiness() -> None:
    """targetPort by name becomes the container port; only ready pods are ready endpoints."""
    svc = {"metadata": {"name": "web", "namespace": "default", "uid": "s"},
           "spec": {"selector": {"app": "web"},
                    "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}
    pods = [pod("a", "n1", ip="198.18.1.2", ready=True), pod("bb", "n2", ip="198.18.2.2"),
            pod("ccc", "n2")]  # no IP yet: not an endpoint
    sl = cluster.endpoint_slice(svc, pods)
    assert sl is not None
    assert sl["ports"] == [{"port": 8080, "protocol": "TCP", "name": "http"}]
    assert [(e["addresses"], e["conditions"]["ready"], e["nodeName"]) for e in sl["endpoints"]] \
        == [(["198.18.1.2"], True, "n1"), (["198.18.2.2"], False, "n2")]
    assert cluster.endpoint_slice({**svc, "spec": {"ports": []}}, pods) is None
