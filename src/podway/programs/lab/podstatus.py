"""What the lab's kubelet reads from a pod spec and writes into its status, as pure functions:
the declared ports, the readiness probe and one check of it, the ``preStop`` hook, and the pod's
conditions (the kubelet's own, readiness gates honoured, other writers' kept)."""

from __future__ import annotations

import http.client
import socket
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
PROBE_TIMEOUT_S = 1.0


def container_ports(pod: Obj) -> list[tuple[int, str]]:
    found = {(int(p["containerPort"]), str(p.get("protocol", "TCP")).upper())
             for c in (pod.get("spec") or {}).get("containers") or []
             for p in c.get("ports") or [] if p.get("containerPort")}
    return sorted(found)


def readiness_probe(pod: Obj) -> Obj | None:
    """The first container's readiness probe, a named port resolved to its number."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("readinessProbe"):
            probe = {**container["readinessProbe"], "container": container.get("name")}
            named = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
            for kind in ("httpGet", "tcpSocket"):
                if kind in probe and probe[kind].get("port") in named:
                    probe[kind] = {**probe[kind], "port": named[probe[kind]["port"]]}
            return probe
    return None


def probe_once(ip: str, probe: Obj, ports: list[tuple[int, str]]) -> bool:
    """One readiness check from the node (blocking; runs in the node's thread)."""
    def port_of(value: Any) -> int:
        if isinstance(value, int) or str(value).isdigit():
            return int(value)
        raise ValueError(f"named probe port {value!r} is not supported")
    try:
        if "httpGet" in probe:
            get = probe["httpGet"]
            conn = http.client.HTTPConnection(ip, port_of(get.get("port")),
                                              timeout=PROBE_TIMEOUT_S)
            try:
                conn.request("GET", str(get.get("path", "/")))
                return 200 <= conn.getresponse().status < 400
            finally:
                conn.close()
        if "tcpSocket" in probe:
            with socket.create_connection((ip, port_of(probe["tcpSocket"].get("port"))),
                                          timeout=PROBE_TIMEOUT_S):
                return True
    except (OSError, ValueError, http.client.HTTPException):
        return False
    return True  # exec probes run in the container (Kubelet._exec); a process pod has none


def pre_stop(pod: Obj) -> Obj | None:
    """The first container's ``lifecycle.preStop`` handler, if any (lab pods are one
    process: one hook)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        hook = (container.get("lifecycle") or {}).get("preStop")
        if hook:
            return dict(hook)
    return None


KUBELET_CONDITIONS = ("PodScheduled", "Initialized", "ContainersReady", "Ready")


def pod_conditions(pod: Obj, *, containers_ready: bool,
                   uninitialized: tuple[str, ...] = ()) -> list[Obj]:
    """The pod's conditions as the kubelet writes them: its own four, and every condition
    other writers set (a readiness gate's, e.g. ``podway.io/lb-ready``) kept as they are.
    ``Ready`` is True only when the containers are ready and every ``readinessGates``
    condition is True; ``Initialized`` is False while an init container (``uninitialized``:
    those not done yet) has not completed; a transition time moves only when the status
    does."""
    old = (pod.get("status") or {}).get("conditions") or []
    others = [c for c in old if c.get("type") not in KUBELET_CONDITIONS]
    gates = [str(g.get("conditionType")) for g in
             (pod.get("spec") or {}).get("readinessGates") or []]
    passed = {str(c.get("type")) for c in others if c.get("status") == "True"}
    missing = [g for g in gates if g not in passed]

    def cond(kind: str, ok: bool, reason: str = "", message: str = "") -> Obj:
        status = "True" if ok else "False"
        before: Obj = next((c for c in old if c.get("type") == kind), {})
        since = before.get("lastTransitionTime") if before.get("status") == status \
            else now()
        out: Obj = {"type": kind, "status": status, "lastTransitionTime": since}
        if reason:
            out.update(reason=reason, message=message)
        return out

    if not containers_ready:
        ready = cond("Ready", False, "ContainersNotReady", "containers with unready status")
    elif missing:
        ready = cond("Ready", False, "ReadinessGatesNotReady",
                     f"the status of pod readiness gate{'s' * (len(missing) > 1)} "
                     f"\"{', '.join(missing)}\" is not \"True\", but False")
    else:
        ready = cond("Ready", True)
    initialized = cond("Initialized", True) if not uninitialized else cond(
        "Initialized", False, "ContainersNotInitialized",
        f"containers with incomplete status: [{' '.join(uninitialized)}]")
    return [cond("PodScheduled", True), initialized,
            cond("ContainersReady", containers_ready), ready, *others]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
