"""What the cluster's controllers decide, as pure functions over API objects: the scheduler (a
node per pod) and the EndpointSlice controller; the workload controllers (Deployments,
ReplicaSets, DaemonSets) are in ``workloads``.

No I/O here: the daemon reads the store, calls these, and writes what they return; a write that
changes nothing is a no-op in the store, so calling them again after their own writes settles.
Simplifications (documented in docs/lab.md): one EndpointSlice per Service.
Graceful termination: a controller does not delete a pod, it marks it terminating
(``deletionTimestamp`` = now + ``terminationGracePeriodSeconds``, default 30); its endpoint turns
``terminating`` and not ready (still ``serving``), and the daemon deletes it when the time
comes — so load balancers drain it first.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

Obj = dict[str, Any]
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
LAB_SLICES = "podway-lab"


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def key(obj: Obj) -> tuple[str, str]:
    return str(meta(obj).get("namespace", "")), str(meta(obj)["name"])


def terminated(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def template_hash(deploy: Obj) -> str:
    template = (deploy.get("spec") or {}).get("template") or {}
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def terminating(pod: Obj) -> bool:
    return bool(meta(pod).get("deletionTimestamp"))


def schedule(pod: Obj, nodes: list[Obj], pods: list[Obj]) -> str | None:
    """The node for an unscheduled pod: its nodeSelector must match the node's labels; among
    those, the one running fewest pods (ties: node order). None when no node fits."""
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    fits = [n for n in nodes if matches(selector, meta(n).get("labels") or {})]
    if not fits:
        return None
    load = {meta(n)["name"]: 0 for n in fits}
    for other in pods:
        node = (other.get("spec") or {}).get("nodeName")
        if node in load and not terminated(other):
            load[node] += 1
    return str(min(fits, key=lambda n: (load[meta(n)["name"]], _node_order(n)))["metadata"]["name"])


def _node_order(node: Obj) -> tuple[int, str]:
    name = str(meta(node)["name"])
    tail = name.rsplit("-", 1)[-1]
    return (int(tail) if tail.isdigit() else 0, name)


def pod_ready(pod: Obj) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _container_port(pod: Obj, target: Any, protocol: str) -> int | None:
    if isinstance(target, int) or (isinstance(target, str) and target.isdigit()):
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target and port.get("protocol", "TCP") == protocol:
                return int(port["containerPort"])
    return None


def endpoint_slice(service: Obj, pods: list[Obj]) -> Obj | None:
    """The Service's EndpointSlice (``<name>-lab``), or None for a Service without selector."""
    spec = service.get("spec") or {}
    selector = spec.get("selector") or {}
    if not selector:
        return None
    ns, name = key(service)
    chosen = sorted((p for p in pods
                     if meta(p).get("namespace", "") == ns and not terminated(p)
                     and (p.get("status") or {}).get("podIP")
                     and matches(selector, meta(p).get("labels") or {})), key=key)
    ports = []
    for port in spec.get("ports") or []:
        protocol = port.get("protocol", "TCP")
        target = port.get("targetPort", port.get("port"))
        number = next((n for p in chosen if (n := _container_port(p, target, protocol))),
                      None if isinstance(target, str) and not target.isdigit()
                      else int(target))
        if number is None:
            continue
        entry = {"port": number, "protocol": protocol}
        if port.get("name"):
            entry["name"] = port["name"]
        ports.append(entry)
    endpoints = []
    for pod in chosen:
        ready = pod_ready(pod)
        leaving = terminating(pod)
        endpoints.append({
            "addresses": [pod["status"]["podIP"]],
            "conditions": {"ready": ready and not leaving, "serving": ready,
                           "terminating": leaving},
            "nodeName": (pod.get("spec") or {}).get("nodeName"),
            "targetRef": {"kind": "Pod", "namespace": ns, "name": key(pod)[1],
                          "uid": meta(pod).get("uid")}})
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{name}-lab", "namespace": ns,
                         "labels": {"kubernetes.io/service-name": name, MANAGED_BY: LAB_SLICES},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Service",
                                              "name": name, "uid": meta(service).get("uid")}]},
            "addressType": "IPv4", "ports": ports, "endpoints": endpoints}


def kubernetes_service(api_ip: str, api_port: int, cluster_ip: str) -> tuple[Obj, Obj]:
    """The ``default/kubernetes`` Service and its EndpointSlice, as the API server keeps them:
    port 443 on the range's first ClusterIP, to the API's own address."""
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "kubernetes", "namespace": "default",
                            "labels": {"component": "apiserver", "provider": "kubernetes"}},
               "spec": {"type": "ClusterIP", "clusterIP": cluster_ip,
                        "clusterIPs": [cluster_ip],
                        "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                   "targetPort": api_port}]}}
    endpoints = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                 "metadata": {"name": "kubernetes", "namespace": "default",
                              "labels": {"kubernetes.io/service-name": "kubernetes",
                                         MANAGED_BY: "endpointslice-mirroring.kubernetes.io"}},
                 "addressType": "IPv4",
                 "ports": [{"name": "https", "port": api_port, "protocol": "TCP"}],
                 "endpoints": [{"addresses": [api_ip],
                                "conditions": {"ready": True, "serving": True,
                                               "terminating": False}}]}
    return service, endpoints
