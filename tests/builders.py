"""Kubernetes objects for tests, built once: a LoadBalancer Service, its EndpointSlice, a running
Pod (with NodePortLocal entries), a Node — as raw API objects (what the emulator and the loader
take); ``typed`` turns one into Podway's model. For objects of any shape, the hypothesis
strategies (``tests/unit/translate/strategies.py``, ``gateway_strategies.py``) build them."""

from __future__ import annotations

import json
from typing import Any

from podway.model.base import K8sObject
from podway.model.kinds import KINDS

Obj = dict[str, Any]


def lb_service(name: str, port: int, target: int = 8080, *, annotations: dict[str, str] | None
               = None, namespace: str = "default", node_port: int | None = None) -> Obj:
    spec_port: Obj = {"name": "http", "port": port, "targetPort": target, "protocol": "TCP"}
    if node_port is not None:
        spec_port["nodePort"] = node_port
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": annotations or {}},
            "spec": {"type": "LoadBalancer", "selector": {"app": name}, "ports": [spec_port]}}


def endpoint_slice(service: str, pods: dict[str, str], port: int = 8080, *,
                   namespace: str = "default", node: str = "n1", port_name: str = "http") -> Obj:
    """One slice for ``service``: pod name → pod IP, all ready on ``node``; its port is named
    ``port_name`` (as the Service port it serves must be)."""
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{service}-1", "namespace": namespace,
                         "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4", "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}, "nodeName": node,
                           "targetRef": {"kind": "Pod", "name": pod, "namespace": namespace}}
                          for pod, ip in pods.items()]}


def pod(name: str, ip: str, *, npl: list[tuple[int, str, int]] | None = None,
        namespace: str = "default", node: str = "n1", app: str = "web") -> Obj:
    """A running pod; ``npl`` entries are (podPort, nodeIP, nodePort)."""
    annotations = {}
    if npl is not None:
        annotations["nodeportlocal.antrea.io"] = json.dumps([
            {"podPort": p, "nodeIP": a, "nodePort": n, "protocol": "tcp", "ipFamily": "IPv4"}
            for p, a, n in npl])
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": app},
                         "annotations": annotations},
            "spec": {"nodeName": node, "containers": [{"name": "c", "ports": [
                {"containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}}


def node(name: str, ip: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}],
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def typed(raw: Obj) -> K8sObject:
    """``raw`` as the model of its kind (the kinds table's)."""
    return KINDS[raw["kind"]].model_validate(raw)
