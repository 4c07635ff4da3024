"""Value types shared by every agent module: protocols, pod keys and one kernel DNAT rule.

A ``Rule`` is the whole kernel-side truth for one mapping: ``node_port`` on this node's local
addresses is rewritten to ``pod_ip:pod_port`` for ``protocol``. Rules are keyed by
``(protocol, node_port)``; the port table guarantees at most one rule per key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

from podway.model.npl import L4

PROTOCOLS: tuple[L4, ...] = ("tcp", "udp")

__all__ = ["L4", "PROTOCOLS", "PodKey", "Rule", "pod_key"]

# "namespace/name" of a Pod.
PodKey = NewType("PodKey", str)


def pod_key(namespace: str, name: str) -> PodKey:
    return PodKey(f"{namespace}/{name}")


@dataclass(frozen=True, slots=True, order=True, kw_only=True)
class Rule:
    """DNAT ``<local address>:node_port/protocol`` → ``pod_ip:pod_port``."""

    protocol: L4
    node_port: int
    pod_ip: str
    pod_port: int

    @property
    def key(self) -> tuple[L4, int]:
        return (self.protocol, self.node_port)
