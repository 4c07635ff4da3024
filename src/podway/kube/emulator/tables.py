"""Table output (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``): what ``kubectl get``
prints, with the columns the API server's printers give the built-in kinds and a CRD's
``additionalPrinterColumns`` (simple JSONPath: fields, ``[n]``, ``[*]`` and
``[?(@.key=="value")]`` filters).

Cells are computed the way the real printers compute them (pod READY as ``ready/total``,
STATUS ``Terminating`` once a deletion is under way, service PORT(S) ``80:30080/TCP``, ages as
``HumanDuration``); columns with ``priority: 1`` show only with ``-o wide``. Pure functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from podway.kube.emulator.resources import ResourceType

Obj = dict[str, Any]
Column = tuple[str, str, int, Callable[[Obj], Any]]  # name, type, priority, cell of an object
NONE = "<none>"


def _m(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def _status(obj: Obj) -> Obj:
    return obj.get("status") or {}


def human_duration(seconds: float) -> str:
    """Kubernetes' ``duration.HumanDuration`` (what the AGE column shows)."""
    if seconds < -1:
        return "<invalid>"
    s = max(0, int(seconds))
    m, h, d = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if h < 24 * 365 * 2:
        return f"{d}d"
    if h < 24 * 365 * 8:
        return f"{d // 365}y{d % 365}d" if d % 365 else f"{d // 365}y"
    return f"{d // 365}y"


def since(stamp: Any, now: float | None = None) -> str:
    if not stamp:
        return "<unknown>"
    try:
        when = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = datetime.now(UTC).timestamp() if now is None else now
    return human_duration(current - when.timestamp())


def _age(obj: Obj) -> str:
    return since(_m(obj).get("creationTimestamp"))


def _join(values: list[str]) -> str:
    return ",".join(values) if values else NONE


def _selector(selector: Obj | None) -> str:
    labels = (selector or {}).get("matchLabels", selector or {}) or {}
    if not isinstance(labels, dict):
        return NONE
    return _join([f"{k}={v}" for k, v in sorted(labels.items()) if isinstance(v, str)])


# ---- pods -----------------------------------------------------------------------------------
def _pod_ready(pod: Obj) -> str:
    statuses = _status(pod).get("containerStatuses") or []
    total = len(_spec(pod).get("containers") or [])
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def _pod_init_status(pod: Obj) -> str | None:
    """kubectl's STATUS while an init container is not done: ``Init:<reason>`` of the one that
    failed or waits with a reason, else ``Init:<done>/<all>``; None once they all are."""
    total = len(_spec(pod).get("initContainers") or [])
    for index, cs in enumerate(_status(pod).get("initContainerStatuses") or []):
        state = cs.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting") or {}
        if (terminated is not None and terminated.get("exitCode") == 0) or (
                "running" in state and cs.get("started") and _sidecar(pod, index)):
            continue
        if terminated is not None:
            code = terminated.get("exitCode")
            return f"Init:{terminated.get('reason') or f'ExitCode:{code}'}"
        if waiting.get("reason") and waiting["reason"] != "PodInitializing":
            return f"Init:{waiting['reason']}"
        return f"Init:{index}/{total}"
    return None


def _sidecar(pod: Obj, index: int) -> bool:
    inits = _spec(pod).get("initContainers") or []
    return index < len(inits) and inits[index].get("restartPolicy") == "Always"


def _pod_status(pod: Obj) -> str:
    status = _status(pod)
    reason = str(status.get("reason") or status.get("phase") or "Pending")
    initializing = _pod_init_status(pod)
    if initializing is not None:
        return "Terminating" if _m(pod).get("deletionTimestamp") else initializing
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = str(state["waiting"]["reason"])
        elif (state.get("terminated") or {}).get("reason"):
            reason = str(state["terminated"]["reason"])
    if _m(pod).get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _pod_gates(pod: Obj) -> str:
    gates = _spec(pod).get("readinessGates") or []
    if not gates:
        return NONE
    conditions = {c.get("type"): c.get("status") for c in _status(pod).get("conditions") or []}
    ok = sum(1 for g in gates if conditions.get(g.get("conditionType")) == "True")
    return f"{ok}/{len(gates)}"


def _containers(template_spec: Obj, field: str) -> str:
    return _join([str(c.get(field, "")) for c in template_spec.get("containers") or []])


def _template(obj: Obj) -> Obj:
    return (_spec(obj).get("template") or {}).get("spec") or {}


# ---- services, nodes, ingresses -------------------------------------------------------------
def _svc_external(svc: Obj) -> str:
    spec = _spec(svc)
    found = [str(i.get("ip") or i.get("hostname")) for i in
             (_status(svc).get("loadBalancer") or {}).get("ingress") or []]
    found += [str(ip) for ip in spec.get("externalIPs") or []]
    if spec.get("type") == "ExternalName":
        return str(spec.get("externalName", NONE))
    if found:
        return ",".join(found)
    return "<pending>" if spec.get("type") == "LoadBalancer" else NONE


def _svc_ports(svc: Obj) -> str:
    out = []
    for p in _spec(svc).get("ports") or []:
        proto = p.get("protocol", "TCP")
        out.append(f"{p.get('port')}:{p['nodePort']}/{proto}" if p.get("nodePort")
                   else f"{p.get('port')}/{proto}")
    return ",".join(out) if out else NONE


def _node_status(node: Obj) -> str:
    conditions = {c.get("type"): c.get("status") for c in _status(node).get("conditions") or []}
    state = "Ready" if conditions.get("Ready") == "True" else "NotReady"
    return state + (",SchedulingDisabled" if _spec(node).get("unschedulable") else "")


def _node_roles(node: Obj) -> str:
    labels = _m(node).get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels
                   if k.startswith("node-role.kubernetes.io/") and "/" in k)
    return _join(roles)


def _node_address(node: Obj, kind: str) -> str:
    return next((str(a.get("address")) for a in _status(node).get("addresses") or []
                 if a.get("type") == kind), NONE)


def _ingress_hosts(ing: Obj) -> str:
    hosts = [str(r.get("host") or "*") for r in _spec(ing).get("rules") or []]
    return ",".join(hosts) if hosts else "*"


def _ingress_address(ing: Obj) -> str:
    return ",".join(str(i.get("ip") or i.get("hostname")) for i in
                    (_status(ing).get("loadBalancer") or {}).get("ingress") or [])


# ---- events -------------------------------------------------------------------------------
def _event_last(ev: Obj) -> str:
    stamp = ev.get("lastTimestamp") or ev.get("eventTime") or \
        ev.get("deprecatedLastTimestamp") or _m(ev).get("creationTimestamp")
    return since(stamp)


def _event_object(ev: Obj) -> str:
    ref = ev.get("involvedObject") or ev.get("regarding") or {}
    return f"{str(ref.get('kind', '')).lower()}/{ref.get('name', '')}"


def _role_ref(binding: Obj) -> str:
    ref = binding.get("roleRef") or {}
    return f"{ref.get('kind', '')}/{ref.get('name', '')}"


def _subjects(binding: Obj, kind: str) -> str:
    found = [(f"{s.get('namespace')}/{s.get('name')}" if kind == "ServiceAccount"
              else str(s.get("name"))) for s in binding.get("subjects") or []
             if s.get("kind") == kind]
    return ", ".join(found)


def _rollout(obj: Obj, key: str) -> int:
    return int(_status(obj).get(key) or 0)


NAME: Column = ("Name", "string", 0, lambda o: _m(o).get("name", ""))
AGE: Column = ("Age", "string", 0, _age)
PRINTERS: dict[tuple[str, str], list[Column]] = {
    ("", "pods"): [
        NAME, ("Ready", "string", 0, _pod_ready), ("Status", "string", 0, _pod_status),
        ("Restarts", "string", 0, lambda p: str(sum(int(c.get("restartCount") or 0) for c in
                                                    _status(p).get("containerStatuses") or []))),
        AGE, ("IP", "string", 1, lambda p: _status(p).get("podIP") or NONE),
        ("Node", "string", 1, lambda p: _spec(p).get("nodeName") or NONE),
        ("Nominated Node", "string", 1, lambda p: _status(p).get("nominatedNodeName") or NONE),
        ("Readiness Gates", "string", 1, _pod_gates)],
    ("apps", "deployments"): [
        NAME, ("Ready", "string", 0, lambda d: f"{_rollout(d, 'readyReplicas')}/"
                                                f"{int(_spec(d).get('replicas', 1))}"),
        ("Up-to-date", "integer", 0, lambda d: _rollout(d, "updatedReplicas")),
        ("Available", "integer", 0, lambda d: _rollout(d, "availableReplicas")), AGE,
        ("Containers", "string", 1, lambda d: _containers(_template(d), "name")),
        ("Images", "string", 1, lambda d: _containers(_template(d), "image")),
        ("Selector", "string", 1, lambda d: _selector(_spec(d).get("selector")))],
    ("apps", "replicasets"): [
        NAME, ("Desired", "integer", 0, lambda r: int(_spec(r).get("replicas", 1))),
        ("Current", "integer", 0, lambda r: _rollout(r, "replicas")),
        ("Ready", "integer", 0, lambda r: _rollout(r, "readyReplicas")), AGE,
        ("Containers", "string", 1, lambda r: _containers(_template(r), "name")),
        ("Images", "string", 1, lambda r: _containers(_template(r), "image")),
        ("Selector", "string", 1, lambda r: _selector(_spec(r).get("selector")))],
    ("apps", "daemonsets"): [
        NAME, ("Desired", "integer", 0, lambda d: _rollout(d, "desiredNumberScheduled")),
        ("Current", "integer", 0, lambda d: _rollout(d, "currentNumberScheduled")),
        ("Ready", "integer", 0, lambda d: _rollout(d, "numberReady")),
        ("Up-to-date", "integer", 0, lambda d: _rollout(d, "updatedNumberScheduled")),
        ("Available", "integer", 0, lambda d: _rollout(d, "numberAvailable")),
        ("Node Selector", "string", 0, lambda d: _selector(_template(d).get("nodeSelector"))),
        AGE],
    ("", "services"): [
        NAME, ("Type", "string", 0, lambda s: _spec(s).get("type", "ClusterIP")),
        ("Cluster-IP", "string", 0, lambda s: _spec(s).get("clusterIP") or NONE),
        ("External-IP", "string", 0, _svc_external), ("Port(s)", "string", 0, _svc_ports),
        AGE, ("Selector", "string", 1, lambda s: _selector(_spec(s).get("selector")))],
    ("", "nodes"): [
        NAME, ("Status", "string", 0, _node_status), ("Roles", "string", 0, _node_roles), AGE,
        ("Version", "string", 0,
         lambda n: (_status(n).get("nodeInfo") or {}).get("kubeletVersion", "")),
        ("Internal-IP", "string", 1, lambda n: _node_address(n, "InternalIP")),
        ("External-IP", "string", 1, lambda n: _node_address(n, "ExternalIP"))],
    ("networking.k8s.io", "ingresses"): [
        NAME, ("Class", "string", 0, lambda i: _spec(i).get("ingressClassName") or NONE),
        ("Hosts", "string", 0, _ingress_hosts), ("Address", "string", 0, _ingress_address),
        ("Ports", "string", 0, lambda i: "80, 443" if _spec(i).get("tls") else "80"), AGE],
    ("", "events"): [
        ("Last Seen", "string", 0, _event_last), ("Type", "string", 0, lambda e: e.get("type")),
        ("Reason", "string", 0, lambda e: e.get("reason")),
        ("Object", "string", 0, _event_object),
        ("Message", "string", 0, lambda e: e.get("message") or e.get("note")),
        ("Count", "integer", 1, lambda e: int(e.get("count") or 1)),
        ("Name", "string", 1, NAME[3])],
    ("", "namespaces"): [
        NAME, ("Status", "string", 0, lambda n: _status(n).get("phase", "Active")), AGE],
    ("", "configmaps"): [
        NAME, ("Data", "integer", 0, lambda c: len(c.get("data") or {})
               + len(c.get("binaryData") or {})), AGE],
    ("", "secrets"): [
        NAME, ("Type", "string", 0, lambda s: s.get("type", "Opaque")),
        ("Data", "integer", 0, lambda s: len(s.get("data") or {})), AGE],
    ("", "serviceaccounts"): [
        NAME, ("Secrets", "integer", 0, lambda s: len(s.get("secrets") or [])), AGE],
    ("rbac.authorization.k8s.io", "rolebindings"): [
        NAME, ("Role", "string", 0, _role_ref), AGE,
        ("Users", "string", 1, lambda b: _subjects(b, "User")),
        ("Groups", "string", 1, lambda b: _subjects(b, "Group")),
        ("ServiceAccounts", "string", 1, lambda b: _subjects(b, "ServiceAccount"))],
    ("policy", "poddisruptionbudgets"): [
        NAME, ("Min Available", "string", 0, lambda p: str(_spec(p).get("minAvailable", "N/A"))),
        ("Max Unavailable", "string", 0,
         lambda p: str(_spec(p).get("maxUnavailable", "N/A"))),
        ("Allowed Disruptions", "integer", 0, lambda p: _rollout(p, "disruptionsAllowed")), AGE],
    ("discovery.k8s.io", "endpointslices"): [
        NAME, ("AddressType", "string", 0, lambda s: s.get("addressType", "")),
        ("Ports", "string", 0, lambda s: _join([str(p.get("port")) for p in
                                                s.get("ports") or []])),
        ("Endpoints", "string", 0, lambda s: _join([str(a) for e in s.get("endpoints") or []
                                                    for a in e.get("addresses") or []])), AGE],
    ("coordination.k8s.io", "leases"): [
        NAME, ("Holder", "string", 0, lambda le: _spec(le).get("holderIdentity", "")), AGE],
    ("networking.k8s.io", "ingressclasses"): [
        NAME, ("Controller", "string", 0, lambda c: _spec(c).get("controller", "")), AGE],
}
PRINTERS[("events.k8s.io", "events")] = PRINTERS[("", "events")]
PRINTERS[("rbac.authorization.k8s.io", "clusterrolebindings")] = \
    PRINTERS[("rbac.authorization.k8s.io", "rolebindings")]


# ---- CRDs' additionalPrinterColumns ---------------------------------------------------------
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\*)\]|\[\?\(@\.([\w.-]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]")


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Values at a simple JSONPath (``.a.b``, ``[0]``, ``[*]``, ``[?(@.type=="Ready")]``)."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.removeprefix("$")
    current = [obj]
    pos = 0
    while pos < len(text):
        step = _STEP.match(text, pos)
        if step is None:
            return []
        pos = step.end()
        field, index, key, want = step.groups()
        nxt: list[Any] = []
        for value in current:
            if field is not None and isinstance(value, dict) and field in value:
                nxt.append(value[field])
            elif index is not None and isinstance(value, list):
                if index == "*":
                    nxt.extend(value)
                elif int(index) < len(value):
                    nxt.append(value[int(index)])
            elif key is not None and isinstance(value, list):
                nxt.extend(v for v in value if isinstance(v, dict)
                           and [str(x) for x in jsonpath(v, f".{key}")][:1] == [want])
        current = nxt
    return current


def _crd_cell(column: Obj) -> Callable[[Obj], Any]:
    path, kind = str(column.get("jsonPath", "")), str(column.get("type", "string"))

    def cell(obj: Obj) -> Any:
        found = jsonpath(obj, path)
        if not found:
            return None
        if kind == "date":
            return since(found[0])
        if kind in ("integer", "number", "boolean") and len(found) == 1:
            return found[0]
        return ",".join(v if isinstance(v, str) else json.dumps(v) for v in found)
    return cell


def columns(rtype: ResourceType) -> list[Column]:
    if rtype.crd is not None:
        extra = rtype.crd.get("additionalPrinterColumns")
        if extra is None:
            return [NAME, AGE]
        return [NAME, *[(str(c.get("name", "")), "string" if c.get("type") == "date"
                         else str(c.get("type", "string")), int(c.get("priority") or 0),
                         _crd_cell(c)) for c in extra]]
    return PRINTERS.get(rtype.group_resource, [NAME, AGE])


def wants_table(accept: str) -> bool:
    return "as=Table" in accept and any(
        "as=Table" in part and "g=meta.k8s.io" in part and "v=v1" in part
        for part in accept.split(","))


def _row_object(obj: Obj, rtype: ResourceType, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return {**obj, "apiVersion": rtype.api_version, "kind": rtype.kind}
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": _m(obj)}


def table(rtype: ResourceType, objects: list[Obj], *, version: str = "",
          include: str = "Metadata") -> Obj:
    cols = columns(rtype)
    rows = []
    for obj in objects:
        row: Obj = {"cells": [fn(obj) for _, _, _, fn in cols]}
        shown = _row_object(obj, rtype, include)
        if shown is not None:
            row["object"] = shown
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": version},
            # "format: name" marks the column kubectl prefixes with the kind (get all)
            "columnDefinitions": [{"name": col[0], "type": col[1],
                                   "format": "name" if col[0] == "Name" else "",
                                   "description": col[0], "priority": col[2]}
                                  for col in cols],
            "rows": rows}
