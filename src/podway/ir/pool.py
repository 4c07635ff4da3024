"""Pools and members: where traffic goes once a route has chosen.

A pool's *settings* (protocol, policy, checks, TLS) and its *members* change at different rates:
members follow endpoints and pods, settings follow manifests. The xDS layer turns settings into a
cluster and members into a load assignment, so a member change never touches the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from podway.model.base import ObjectRef


class MemberState(StrEnum):
    READY = "ready"  # receives new connections
    NOT_READY = "not_ready"  # kept for visibility, receives nothing
    DRAINING = "draining"  # terminating: finishes in-flight work, receives nothing new


class PoolProtocol(StrEnum):
    TCP = "tcp"
    UDP = "udp"
    HTTP1 = "http1"
    HTTP2 = "http2"
    GRPC = "grpc"


class LBPolicy(StrEnum):
    ROUND_ROBIN = "round_robin"
    LEAST_REQUEST = "least_request"
    RANDOM = "random"
    RING_HASH = "ring_hash"
    MAGLEV = "maglev"


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    address: str
    port: int
    weight: int = 1
    state: MemberState = MemberState.READY
    origin: ObjectRef | None = None  # the pod (or node, in nodeport mode) behind the address
    node: str | None = None
    zone: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthCheck:
    """Active health check of every member; ``path`` set means HTTP, else a TCP connect."""

    interval_ms: int = 5000
    timeout_ms: int = 1000
    healthy_threshold: int = 1
    unhealthy_threshold: int = 3
    path: str | None = None
    expected_statuses: tuple[int, ...] = (200,)


@dataclass(frozen=True, slots=True, kw_only=True)
class Persistence:
    """Session persistence: hash on a cookie, a header or the client's source address."""

    kind: str  # "cookie" | "header" | "source_ip"
    name: str = ""
    ttl_s: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamTLS:
    """TLS from the engine to the members (re-encrypt), always verified.

    ``subject_alt_names``: (``"dns"`` | ``"uri"``, value) of which the member's certificate must
    carry one; empty: the ``sni`` name as a DNS SAN."""

    sni: str
    ca_pem: str = ""
    origin: ObjectRef | None = None
    subject_alt_names: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSettings:
    """Everything about a pool except its members."""

    protocol: PoolProtocol = PoolProtocol.HTTP1
    lb_policy: LBPolicy = LBPolicy.ROUND_ROBIN
    health_check: HealthCheck | None = None
    persistence: Persistence | None = None
    upstream_tls: UpstreamTLS | None = None
    connect_timeout_ms: int = 5000


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    name: str  # e.g. pool/<ns>/<service>/<port>
    settings: PoolSettings = PoolSettings()
    members: tuple[Member, ...] = ()
    origin: ObjectRef | None = None  # the Service behind the pool
