"""Kubernetes objects for tests, built in one place: Services, EndpointSlices, Pods, Nodes,
Ingresses and the Gateway API kinds, as raw API objects (what the emulator, the loader and
kubectl take); ``typed`` turns one into Podway's model and ``manifest`` into YAML text.

Every builder names its defaults in its signature, so a test shows what it relies on by the
arguments it passes. A test with defaults of its own keeps a one-line wrapper that calls these
(``functools.partial`` or a ``def`` with its defaults), never a copy of the object's shape. For
objects of any shape, plausible or not, the hypothesis strategies
(``tests/unit/translate/strategies.py``, ``gateway_strategies.py``) build them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from podway.model.base import K8sObject
from podway.model.kinds import KINDS

Obj = dict[str, Any]
GW = "gateway.networking.k8s.io"
NPL = "nodeportlocal.antrea.io"


def meta(name: str, namespace: str | None = "default", *,
         annotations: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
         **extra: Any) -> Obj:
    """``metadata``; ``namespace=None`` for cluster-scoped kinds; ``extra`` adds fields as
    given (``uid``, ``creationTimestamp``, ``generation`` …)."""
    out: Obj = {"name": name}
    if namespace is not None:
        out["namespace"] = namespace
    if annotations is not None:
        out["annotations"] = dict(annotations)
    if labels is not None:
        out["labels"] = dict(labels)
    return out | extra


def service_port(port: int = 80, target: int | str | None = 8080, *,
                 name: str | None = "http", protocol: str | None = "TCP",
                 node_port: int | None = None, app_protocol: str | None = None) -> Obj:
    """One entry of a Service's ``spec.ports``; ``None`` leaves a field out."""
    out: Obj = {"port": port}
    for key, value in (("name", name), ("targetPort", target), ("protocol", protocol),
                       ("nodePort", node_port), ("appProtocol", app_protocol)):
        if value is not None:
            out[key] = value
    return out


def service(name: str = "web", port: int = 80, target: int | str | None = 8080, *,
            type_: str = "ClusterIP", namespace: str = "default",
            annotations: Mapping[str, str] | None = None,
            selector: Mapping[str, str] | None = None, ports: Iterable[Obj] | None = None,
            port_name: str | None = "http", protocol: str | None = "TCP",
            node_port: int | None = None, app_protocol: str | None = None,
            labels: Mapping[str, str] | None = None, extra_meta: Mapping[str, Any] | None = None,
            kind_fields: bool = True, **spec: Any) -> Obj:
    """A Service selecting ``app: <name>`` (or ``selector``) with one port, or ``ports``;
    ``spec`` adds fields as given (``sessionAffinity`` …), ``extra_meta`` metadata fields
    (``uid``, ``managedFields`` …); ``kind_fields=False`` leaves out apiVersion and kind (as a
    watch's typed client sees objects of one kind)."""
    body: Obj = {"type": type_, "selector": dict({"app": name} if selector is None else selector),
                 "ports": list(ports) if ports is not None else [service_port(
                     port, target, name=port_name, protocol=protocol, node_port=node_port,
                     app_protocol=app_protocol)]}
    out: Obj = {"metadata": meta(name, namespace, annotations=annotations or {}, labels=labels,
                                 **(extra_meta or {})),
                "spec": body | spec}
    return _kind("v1", "Service", out) if kind_fields else out


def lb_service(name: str, port: int, target: int = 8080, *, annotations: dict[str, str] | None
               = None, namespace: str = "default", node_port: int | None = None) -> Obj:
    """A LoadBalancer Service of one named TCP port."""
    return service(name, port, target, type_="LoadBalancer", namespace=namespace,
                   annotations=annotations, node_port=node_port)


def endpoint(address: str, *, ready: bool = True, serving: bool | None = None,
             terminating: bool | None = None, node: str | None = "n1", pod: str | None = None,
             namespace: str = "default") -> Obj:
    """One entry of an EndpointSlice's ``endpoints``; ``None`` leaves a field out."""
    conditions: Obj = {"ready": ready}
    if serving is not None:
        conditions["serving"] = serving
    if terminating is not None:
        conditions["terminating"] = terminating
    out: Obj = {"addresses": [address], "conditions": conditions}
    if node is not None:
        out["nodeName"] = node
    if pod is not None:
        out["targetRef"] = {"kind": "Pod", "name": pod, "namespace": namespace}
    return out


def endpoint_slice(service: str, pods: Mapping[str, str] | None = None, port: int = 8080, *,
                   namespace: str = "default", node: str = "n1", port_name: str | None = "http",
                   name: str | None = None, endpoints: Iterable[Obj] | None = None,
                   protocol: str = "TCP", kind_fields: bool = True) -> Obj:
    """One slice for ``service``: pod name → pod IP, all ready on ``node`` (or ``endpoints``
    as built by :func:`endpoint`); its port is named ``port_name`` (as the Service port it
    serves must be). The slice is ``<service>-1`` unless ``name`` says otherwise."""
    entries = list(endpoints) if endpoints is not None else [
        endpoint(ip, node=node, pod=pod_name, namespace=namespace)
        for pod_name, ip in (pods or {}).items()]
    slice_port: Obj = {"port": port, "protocol": protocol}
    if port_name is not None:
        slice_port = {"name": port_name} | slice_port
    out: Obj = {"metadata": meta(name or f"{service}-1", namespace,
                                 labels={"kubernetes.io/service-name": service}),
                "addressType": "IPv4", "ports": [slice_port], "endpoints": entries}
    return _kind("discovery.k8s.io/v1", "EndpointSlice", out) if kind_fields else out


def npl_annotation(entries: Iterable[tuple[int, str, int]]) -> str:
    """Antrea's NodePortLocal annotation for (podPort, nodeIP, nodePort) entries."""
    return json.dumps([{"podPort": p, "nodeIP": a, "nodePort": n, "protocol": "tcp",
                        "ipFamily": "IPv4"} for p, a, n in entries])


def pod(name: str, ip: str | None, *, npl: list[tuple[int, str, int]] | None = None,
        namespace: str = "default", node: str = "n1", app: str | None = "web",
        labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
        phase: str = "Running", host_ip: str | None = None,
        container_ports: Iterable[Obj] | None = None, readiness_gates: Iterable[str] = (),
        conditions: Iterable[Obj] | None = None, kind_fields: bool = True,
        **extra_meta: Any) -> Obj:
    """A running pod (``ip=None``: not given an address yet); ``npl`` entries are
    (podPort, nodeIP, nodePort); ``labels`` replace ``app: <app>``; ``readiness_gates`` are
    condition types, ``conditions`` the status's as given."""
    notes = dict(annotations or {})
    if npl is not None:
        notes[NPL] = npl_annotation(npl)
    status: Obj = {"phase": phase}
    if ip is not None:
        status |= {"podIP": ip, "podIPs": [{"ip": ip}]}
    if host_ip is not None:
        status["hostIP"] = host_ip
    if conditions is not None:
        status["conditions"] = list(conditions)
    ports = list(container_ports) if container_ports is not None else [{"containerPort": 8080}]
    out: Obj = {"metadata": meta(name, namespace, annotations=notes, labels=dict(
                    labels if labels is not None else ({"app": app} if app else {})),
                    **extra_meta),
                "spec": {"nodeName": node, "containers": [{"name": "c", "ports": ports}]},
                "status": status}
    gates = [{"conditionType": gate} for gate in readiness_gates]
    if gates:
        out["spec"]["readinessGates"] = gates
    return _kind("v1", "Pod", out) if kind_fields else out


def node(name: str, ip: str, *, external: str | None = None, kind_fields: bool = True) -> Obj:
    """A Ready node with InternalIP ``ip`` (and ExternalIP ``external``)."""
    addresses = [{"type": "InternalIP", "address": ip}]
    if external is not None:
        addresses.append({"type": "ExternalIP", "address": external})
    out: Obj = {"metadata": {"name": name}, "status": {
        "addresses": addresses, "conditions": [{"type": "Ready", "status": "True"}]}}
    return _kind("v1", "Node", out) if kind_fields else out


def ingress(name: str = "web", *, host: str | None = "shop.example", path: str = "/",
            path_type: str = "Prefix", backend: str = "web", port: int | str = 80,
            namespace: str = "default", class_name: str | None = None,
            annotations: Mapping[str, str] | None = None, tls: Iterable[Obj] | None = None,
            rules: Iterable[Obj] | None = None, **extra_meta: Any) -> Obj:
    """An Ingress with one rule (``host``, one path to ``backend:port``) or ``rules``; a
    string ``port`` is a port name."""
    rule: Obj = {"http": {"paths": [ingress_path(path, backend, port, path_type)]}}
    if host is not None:
        rule = {"host": host} | rule
    spec: Obj = {"rules": list(rules) if rules is not None else [rule]}
    if class_name is not None:
        spec = {"ingressClassName": class_name} | spec
    if tls is not None:
        spec["tls"] = list(tls)
    return _kind("networking.k8s.io/v1", "Ingress", {
        "metadata": meta(name, namespace, annotations=annotations or {}, **extra_meta),
        "spec": spec})


def ingress_path(path: str = "/", backend: str = "web", port: int | str = 80,
                 path_type: str = "Prefix") -> Obj:
    """One entry of an Ingress rule's ``http.paths``; a string ``port`` is a port name."""
    ref = {"name": port} if isinstance(port, str) else {"number": port}
    return {"path": path, "pathType": path_type,
            "backend": {"service": {"name": backend, "port": ref}}}


def gateway_class(name: str = "podway",
                  controller: str = "podway.io/gateway-controller") -> Obj:
    return _kind(f"{GW}/v1", "GatewayClass", {"metadata": meta(name, None),
                                             "spec": {"controllerName": controller}})


def gateway(name: str = "edge", port: int = 8080, namespace: str = "default", *,
            class_name: str = "podway", protocol: str = "HTTP",
            listeners: Iterable[Obj] | None = None) -> Obj:
    """A Gateway with one listener ``http`` open to routes of every namespace, or
    ``listeners``."""
    return _kind(f"{GW}/v1", "Gateway", {"metadata": meta(name, namespace), "spec": {
        "gatewayClassName": class_name,
        "listeners": list(listeners) if listeners is not None else [
            {"name": "http", "protocol": protocol, "port": port,
             "allowedRoutes": {"namespaces": {"from": "All"}}}]}})


def http_route(name: str, host: str | list[str] | None, backend: str = "web", port: int = 80,
               *, namespace: str = "default", parent: str = "edge",
               parent_namespace: str | None = "default",
               rules: Iterable[Obj] | None = None) -> Obj:
    """An HTTPRoute on ``parent`` for ``host`` (one or a list) sending everything to
    ``backend:port``, or ``rules``; ``parent_namespace=None``: the route's own."""
    parent_ref = {"name": parent}
    if parent_namespace is not None:
        parent_ref["namespace"] = parent_namespace
    spec: Obj = {"parentRefs": [parent_ref]}
    if host is not None:
        spec["hostnames"] = [host] if isinstance(host, str) else list(host)
    spec["rules"] = list(rules) if rules is not None else [
        {"backendRefs": [{"name": backend, "port": port}]}]
    return _kind(f"{GW}/v1", "HTTPRoute", {"metadata": meta(name, namespace), "spec": spec})


def typed(raw: Obj) -> K8sObject:
    """``raw`` as the model of its kind (the kinds table's)."""
    return KINDS[raw["kind"]].model_validate(raw)


def manifest(*objects: Obj) -> str:
    """``objects`` as one YAML stream, as a user's manifest file holds them."""
    return yaml.safe_dump_all(objects, sort_keys=False)


def _kind(api_version: str, kind: str, body: Obj) -> Obj:
    return {"apiVersion": api_version, "kind": kind} | body
