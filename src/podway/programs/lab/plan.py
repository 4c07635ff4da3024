"""The lab's address plan and names: pure, so every address is known before anything is built.

Only 198.18.0.0/15 (RFC 2544 benchmarking space) is used, and nothing is configured in the root
namespace:

    client 198.19.0.2 ── 198.19.0.1 edge 198.18.0.1 ── fabric bridge ── node i 198.18.0.(10+i)
                          VIP 198.19.1.1 (lo)                            pod bridge 198.18.i.1/24
                                                                         pods 198.18.i.2 …

- The edge is the router between the client and the cluster and owns the VIPs; it has static
  routes to every node's pod CIDR (``clusterip`` mode, like AKO's static routes).
- Every node routes the client network through the edge and the other nodes' pod CIDRs through
  those nodes (kube-proxy's second hop).
- ClusterIPs come from 198.19.128.0/17, programmed by the lab's kube-proxy on every node
  (``kubeproxy``); the first is the ``kubernetes`` Service, in front of the API's address in
  the lab (the edge's fabric address, port 6443, HTTPS with the lab's CA: ``pki``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

MAX_NODES = 200
FABRIC_CIDR = "198.18.0.0/24"
EDGE_FABRIC_IP = "198.18.0.1"
CLIENT_NET = "198.19.0.0/24"
EDGE_CLIENT_IP = "198.19.0.1"
CLIENT_IP = "198.19.0.2"
VIP = "198.19.1.1"
CLUSTER_IP_CIDR = "198.19.128.0/17"
# The API inside the lab: it listens on the edge's fabric address too, behind the ``kubernetes``
# Service (default namespace, the range's first address, port 443) as on a cluster.
API_IP = EDGE_FABRIC_IP
API_PORT = 6443
KUBERNETES_IP = "198.19.128.1"
CLUSTER_DOMAIN = "cluster.local"
NODE_PORT_RANGE = (30000, 32767)
NPL_RANGE = "61000-62000"
# Engines beside the lab's Envoy (which serves the default group), each serving one engine
# group: ``lab compare`` measures its l4-kernel and l7-haproxy rows through them.
ENGINE_GROUPS = {"kernel": "lab-kernel", "haproxy": "lab-haproxy"}


@dataclass(frozen=True, slots=True, kw_only=True)
class NodePlan:
    index: int  # 1-based
    name: str  # Node object name: lab-node-1 …
    netns: str  # its network namespace
    ip: str  # InternalIP on the fabric
    pod_cidr: str  # 198.18.i.0/24

    @property
    def gateway(self) -> str:
        """The node's address on its pod bridge (the pods' default route)."""
        return str(ipaddress.ip_network(self.pod_cidr).network_address + 1)

    def pod_ip(self, slot: int) -> str:
        """The pod address of ``slot`` (0-based) in this node's CIDR."""
        net = ipaddress.ip_network(self.pod_cidr)
        if not 0 <= slot < net.num_addresses - 3:
            raise ValueError(f"{self.name}: pod CIDR {self.pod_cidr} is full")
        return str(net.network_address + 2 + slot)


@dataclass(frozen=True, slots=True, kw_only=True)
class LabPlan:
    name: str  # lab name; namespaces are prefixed with it
    nodes: tuple[NodePlan, ...]

    @property
    def prefix(self) -> str:
        return f"pwlab-{self.name}"

    @property
    def fabric(self) -> str:
        return f"{self.prefix}-fabric"

    @property
    def edge(self) -> str:
        return f"{self.prefix}-edge"

    @property
    def client(self) -> str:
        return f"{self.prefix}-client"

    def pod_netns(self, node: NodePlan, slot: int) -> str:
        return f"{self.prefix}-n{node.index}-p{slot}"

    def node(self, name: str) -> NodePlan:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "nodes": len(self.nodes)}


def make_plan(name: str, nodes: int) -> LabPlan:
    """The plan of a lab called ``name`` with ``nodes`` nodes (1…MAX_NODES)."""
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"--nodes must be from 1 to {MAX_NODES}, not {nodes}")
    if not name or not name.replace("-", "").isalnum() or len(name) > 12:
        raise ValueError(f"lab name must be 1-12 letters, digits or '-', not {name!r}")
    return LabPlan(name=name, nodes=tuple(
        NodePlan(index=i, name=f"lab-node-{i}", netns=f"pwlab-{name}-node{i}",
                 ip=f"198.18.0.{10 + i}", pod_cidr=f"198.18.{i}.0/24")
        for i in range(1, nodes + 1)))
