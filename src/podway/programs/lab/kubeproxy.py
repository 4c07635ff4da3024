"""NodePort Services as kube-proxy makes them work, as one nftables table per node.

``ruleset`` is pure: Services and EndpointSlices in, the whole ``ip podway_lab_kube_proxy``
table out (replaced in one ``nft -f`` transaction). For each NodePort/LoadBalancer Service port
on this node:

- ``externalTrafficPolicy: Cluster`` (default): DNAT to a random ready endpoint on *any* node
  and mark the packet; marked packets are masqueraded on the way out, so the pod sees a node
  address (kube-proxy's ``KUBE-MARK-MASQ``), and a reply to another node's pod returns the
  way it came;
- ``Local``: only this node's ready endpoints, no SNAT (the pod sees the client); a node with
  none drops the traffic (kube-proxy does too), which is what a load balancer's health check
  on ``NodeIP:nodePort`` notices;
- no ready endpoint: the serving ones that terminate, as kube-proxy does (its
  ProxyTerminatingEndpoints: a rollout that replaces every pod keeps a path until the new pods
  are ready);
- no endpoint at all (Cluster): reject (a TCP reset, an ICMP port unreachable for UDP), as
  kube-proxy's "has no endpoints" rule does, so a client or a load balancer learns it at once
  instead of waiting for a timeout.

Random choice is ``numgen random``, per new connection (conntrack keeps a flow on its pod).

ClusterIPs (``_cluster_ips``), from the node's pods (prerouting) and from the node itself
(output: host-network pods): DNAT to any ready endpoint, masqueraded, so a pod reaching its own
Service, or a pod on its bridge, gets the replies through the node; a port without endpoints is
refused (a reset) in the filter chains, as kube-proxy does.
"""

from __future__ import annotations

from typing import Any

from podway.programs.lab.plan import CLUSTER_IP_CIDR

Obj = dict[str, Any]
TABLE = "podway_lab_kube_proxy"
MASQ_MARK = "0x4000"


def _ready_endpoints(service: Obj, slices: list[Obj], protocol: str,
                     name: str | None, node: str | None) -> list[tuple[str, int]]:
    ns, svc = service["metadata"].get("namespace", ""), service["metadata"]["name"]
    out: list[tuple[str, str, int]] = []
    for sl in slices:
        labels = sl["metadata"].get("labels") or {}
        if sl["metadata"].get("namespace", "") != ns or \
                labels.get("kubernetes.io/service-name") != svc:
            continue
        port = next((p["port"] for p in sl.get("ports") or []
                     if p.get("protocol", "TCP") == protocol
                     and (p.get("name") == name if name else True)), None)
        if port is None:
            continue
        for ep in sl.get("endpoints") or []:
            if node is not None and ep.get("nodeName") != node:
                continue
            conditions = ep.get("conditions") or {}
            kind = "ready" if conditions.get("ready") else "serving" if (
                conditions.get("serving") and conditions.get("terminating")) else ""
            if kind:
                out.extend((kind, addr, int(port)) for addr in ep.get("addresses") or [])
    ready = sorted({(a, p) for kind, a, p in out if kind == "ready"})
    return ready or sorted({(a, p) for _, a, p in out})


def _cluster_ips(services: list[Obj], slices: list[Obj]) -> tuple[list[str], list[str]]:
    """ClusterIP rules (every Service with a ClusterIP, whatever its type): DNAT to a random
    ready endpoint on any node, marked for masquerade (a pod reaching itself, or a pod on its
    own bridge, through its Service gets the replies back through this node); refusals for
    ports without endpoints."""
    rules: list[str] = []
    refused: list[str] = []
    for svc in services:
        spec = svc.get("spec") or {}
        ip = spec.get("clusterIP")
        if not ip or ip == "None":
            continue
        for port in spec.get("ports") or []:
            proto = str(port.get("protocol", "TCP")).lower()
            if proto not in ("tcp", "udp") or not port.get("port"):
                continue
            match = f"ip daddr {ip} {proto} dport {int(port['port'])}"
            targets = _ready_endpoints(svc, slices, proto.upper(), port.get("name"), None)
            if not targets:
                refused.append(f"    {match} "
                               + ("reject with tcp reset" if proto == "tcp" else "reject"))
                continue
            choice = ", ".join(f"{i} : {a} . {p}" for i, (a, p) in enumerate(targets))
            rules.append(f"    {match} meta mark set {MASQ_MARK} dnat ip to numgen random mod "
                         f"{len(targets)} map {{ {choice} }}")
    return rules, refused


def ruleset(node: str, services: list[Obj], slices: list[Obj]) -> str:
    """The nft script that (re)installs this node's NodePort and ClusterIP rules."""
    rules: list[str] = []
    refused: list[str] = []
    for svc in sorted(services, key=lambda s: (s["metadata"].get("namespace", ""),
                                               s["metadata"]["name"])):
        spec = svc.get("spec") or {}
        if spec.get("type") not in ("NodePort", "LoadBalancer"):
            continue
        local = spec.get("externalTrafficPolicy") == "Local"
        for port in spec.get("ports") or []:
            if not port.get("nodePort"):
                continue
            proto = str(port.get("protocol", "TCP")).lower()
            if proto not in ("tcp", "udp"):
                continue
            targets = _ready_endpoints(svc, slices, proto.upper(), port.get("name"),
                                       node if local else None)
            match = f"{proto} dport {int(port['nodePort'])}"
            if not targets and local:
                rules.append(f"    {match} drop")
                continue
            if not targets:
                how = "reject with tcp reset" if proto == "tcp" else "reject"
                refused.append(f"    {match} {how}")
                continue
            choice = ", ".join(f"{i} : {ip} . {p}" for i, (ip, p) in enumerate(targets))
            mark = "" if local else f"meta mark set {MASQ_MARK} "
            rules.append(f"    {match} {mark}dnat ip to numgen random mod {len(targets)} "
                         f"map {{ {choice} }}")
    body = "\n".join(rules)
    ordered = sorted(services, key=lambda s: (s["metadata"].get("namespace", ""),
                                              s["metadata"]["name"]))
    cluster, cluster_refused = _cluster_ips(ordered, slices)
    no_endpoints = "".join(line + "\n" for line in cluster_refused)
    return (f"table ip {TABLE}\ndelete table ip {TABLE}\n"
            f"table ip {TABLE} {{\n"
            "  chain nodeports {\n" + body + "\n  }\n"
            "  chain services {\n" + "\n".join(cluster) + "\n  }\n"
            "  chain prerouting {\n    type nat hook prerouting priority -100; policy accept;\n"
            f"    ip daddr {CLUSTER_IP_CIDR} jump services\n"
            "    fib daddr type local jump nodeports\n  }\n"
            "  chain output {\n    type nat hook output priority -100; policy accept;\n"
            f"    ip daddr {CLUSTER_IP_CIDR} jump services\n"
            "    ip daddr != 127.0.0.0/8 fib daddr type local jump nodeports\n  }\n"
            "  chain forward {\n    type filter hook forward priority 0; policy accept;\n"
            + no_endpoints + "  }\n"
            "  chain outgoing {\n    type filter hook output priority 0; policy accept;\n"
            + no_endpoints + "  }\n"
            "  chain postrouting {\n    type nat hook postrouting priority 100; "
            "policy accept;\n"
            f"    meta mark & {MASQ_MARK} == {MASQ_MARK} masquerade\n  }}\n"
            "  chain input {\n    type filter hook input priority 0; policy accept;\n"
            + "".join(line + "\n" for line in refused) + "  }\n}\n")
