"""Pure decisions of the agent: which (pod port, protocol) a pod needs, and what to change.

No I/O here: the controller feeds the current Pod, the Services of its namespace and the port
table's entries, and carries out the returned ``Plan``. That keeps every lifecycle rule (pod
without IP, IP change, terminal phase, Service changes, hostPort) testable as plain data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from podway.model.core import Node, Pod, Service
from podway.model.npl import ENABLED_ANNOTATION, NplEntry, family_of
from podway.programs.agent.ports import Entry
from podway.programs.agent.types import L4

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True, order=True, kw_only=True)
class Target:
    """One port of a pod to expose; ``host_port`` set means: report it, install nothing."""

    pod_port: int
    protocol: L4
    host_port: int | None = None


def service_enabled(service: Service) -> bool:
    return (service.metadata.annotations.get(ENABLED_ANNOTATION) == "true"
            and service.spec.type in ("ClusterIP", "LoadBalancer")
            and bool(service.spec.selector))


def selects(service: Service, pod: Pod) -> bool:
    labels = pod.metadata.labels
    return (service.metadata.namespace == pod.metadata.namespace
            and all(labels.get(k) == v for k, v in service.spec.selector.items()))


def pod_active(pod: Pod, *, node_name: str) -> bool:
    return pod.spec.node_name == node_name and pod.status.phase not in TERMINAL_PHASES


def pod_ipv4(pod: Pod) -> str | None:
    candidates = [pod.status.pod_ip, *(ip.ip for ip in pod.status.pod_ips)]
    for ip in candidates:
        if ip and family_of(ip) == "IPv4":
            return ip
    return None


def node_ip(node: Node | None, *, override: str | None = None) -> str | None:
    """``override`` if given, else the Node's InternalIP, else its ExternalIP.

    InternalIP first because Antrea writes the node's InternalIP (``pod.status.hostIP``):
    identical annotations mean that taking a node over from Antrea rewrites nothing.
    """
    if override:
        return override
    return node.address("InternalIP", "ExternalIP") if node is not None else None


def targets(pod: Pod, services: Iterable[Service]) -> tuple[frozenset[Target], list[str]]:
    """The ports ``pod`` needs for the enabled Services selecting it, and notes to log."""
    notes: list[str] = []
    found: set[Target] = set()
    container_ports = [p for c in pod.spec.containers for p in c.ports]
    for service in services:
        if not service_enabled(service) or not selects(service, pod):
            continue
        for port in service.spec.ports:
            if port.protocol == "SCTP":
                notes.append(f"service {service.ref}: port {port.port}/SCTP skipped "
                             "(NodePortLocal maps TCP and UDP only)")
                continue
            protocol: L4 = "tcp" if port.protocol == "TCP" else "udp"
            target = port.target_port if port.target_port is not None else port.port
            matching = None
            if isinstance(target, str) and not target.isdigit():
                matching = next((cp for cp in container_ports
                                 if cp.name == target and cp.protocol == port.protocol), None)
                if matching is None:
                    notes.append(f"service {service.ref}: targetPort {target!r}/{port.protocol} "
                                 f"names no container port of pod {pod.ref}")
                    continue
                number = matching.container_port
            else:
                number = int(target)
                matching = next((cp for cp in container_ports if cp.container_port == number
                                 and cp.protocol == port.protocol), None)
            host_port = matching.host_port if matching is not None and matching.host_port else None
            found.add(Target(pod_port=number, protocol=protocol, host_port=host_port))
    return frozenset(found), notes


@dataclass(slots=True)
class Plan:
    """What to do for one pod; the controller executes it in this order."""

    release: list[Entry] = field(default_factory=list)   # entries no longer wanted
    readdress: list[Entry] = field(default_factory=list)  # keep port, pod IP changed
    allocate: list[Target] = field(default_factory=list)  # need a new node port
    keep: list[Entry] = field(default_factory=list)


def plan(*, current: Sequence[Entry], wanted: Iterable[Target], pod_ip: str | None) -> Plan:
    """Diff a pod's table entries against the targets it needs (no IP: needs nothing yet)."""
    result = Plan()
    needed = {(t.pod_port, t.protocol): t for t in wanted if t.host_port is None}
    if pod_ip is None:
        needed = {}
    have = {(e.pod_port, e.protocol): e for e in current}
    for key, entry in sorted(have.items()):
        if key not in needed:
            result.release.append(entry)
        elif entry.pod_ip != pod_ip:
            result.readdress.append(entry)
        else:
            result.keep.append(entry)
    result.allocate = [t for key, t in sorted(needed.items()) if key not in have]
    return result


def annotation_entries(*, entries: Iterable[Entry], wanted: Iterable[Target],
                       node_address: str | None, pod_ip: str | None) -> set[NplEntry]:
    """The annotation a pod should carry given its table entries and hostPort targets."""
    if node_address is None or pod_ip is None:
        return set()
    family = family_of(node_address)
    result = {NplEntry(pod_port=e.pod_port, node_ip=node_address, node_port=e.node_port,
                       protocol=e.protocol, ip_family=family) for e in entries}
    result |= {NplEntry(pod_port=t.pod_port, node_ip=node_address, node_port=t.host_port,
                        protocol=t.protocol, ip_family=family)
               for t in wanted if t.host_port is not None}
    return result
