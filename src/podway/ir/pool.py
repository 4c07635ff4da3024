"""Pools and members: where traffic goes once a route has chosen.

A pool's *settings* (protocol, balancing, checks, persistence, TLS) and its *members* change at
different rates: members follow endpoints and pods, settings follow manifests. The xDS layer turns
settings into a cluster and members into a load assignment, so a member change never touches the
cluster.

Invariants: a pool with ``persistence`` balances with a hashing algorithm (``RING_HASH`` or
``MAGLEV``) — the translator picks ``MAGLEV`` when the user named none or a non-hashing one: its
fixed-size table moves the fewest sessions between the members that stay when one comes or goes
(a ring's points per member change with the member count) — and a hashing pool always has a
``persistence`` (the hash key; source IP when nothing else was named). Health
checks of an HTTP/2 or gRPC pool speak HTTP/2 (a bare TCP connect proves nothing about h2).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from podway.ir.listener import TLSCertificate
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
    # DRAINING only: the endpoint still serves (Kubernetes ``serving`` while ``terminating``).
    # Such a member is the pool's fallback: an engine sends it new requests only while no READY
    # member is healthy in its own view, e.g. in a rollout before the new pods passed their first
    # check (a READY member is not yet a *proven* one: docs/translation.md, "Rollouts").
    serving: bool = False
    origin: ObjectRef | None = None  # the pod (or node, in nodeport mode) behind the address
    node: str | None = None
    zone: str | None = None

    @property
    def fallback(self) -> bool:
        """Draining and still serving (a rollout's terminating pod): the pool's fallback in
        every engine (Envoy's priority 1, HAProxy's backup servers, the hold's members)."""
        return self.state is MemberState.DRAINING and self.serving


HASHING = (LBPolicy.RING_HASH, LBPolicy.MAGLEV)


class HealthCheckKind(StrEnum):
    TCP = "tcp"  # a connect (and nothing else) succeeds
    HTTP = "http"  # GET ``path``: an expected status; HTTP/2 on an HTTP/2 or gRPC pool
    GRPC = "grpc"  # grpc.health.v1.Health/Check answers SERVING


#: The longest wait before a failing or down member is checked again (``HealthCheck``).
QUICK_RECHECK_MS = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthCheck:
    """Active check of every member, from every engine.

    A member is taken out after ``unhealthy_threshold`` failed checks in a row and back in after
    ``healthy_threshold`` good ones (a new member: after its first good check). ``expected``:
    healthy HTTP statuses as inclusive ranges.
    """

    kind: HealthCheckKind
    interval_ms: int = 5000
    timeout_ms: int = 1000
    healthy_threshold: int = 1
    unhealthy_threshold: int = 3
    http_path: str = "/"  # HTTP
    host: str = ""  # HTTP Host / gRPC authority; "" = the pool's name
    expected: tuple[tuple[int, int], ...] = ((200, 399),)  # HTTP
    grpc_service: str = ""  # GRPC: the service name asked about ("" = the whole server)
    method: str = "GET"  # HTTP: the request's method (no body is ever sent)
    headers: tuple[tuple[str, str], ...] = ()  # HTTP: request headers added

    @property
    def quick_interval_ms(self) -> int:
        """The wait before checking again a member whose last check failed, or that is down:
        at most ``QUICK_RECHECK_MS``, so a failing member is out after ``unhealthy_threshold``
        quick checks rather than as many whole intervals, and one that recovers (a pod not
        listening yet when it was added) is back within about a second. Every engine uses it
        (Envoy's ``unhealthy_interval``, HAProxy's ``fastinter``/``downinter``, the kernel
        engine's checker)."""
        return min(self.interval_ms, QUICK_RECHECK_MS)


@dataclass(frozen=True, slots=True, kw_only=True)
class OutlierDetection:
    """Passive health: a member that fails ``consecutive_errors`` requests in a row (5xx
    answers, connect failures, resets) is ejected for ``base_ejection_ms`` times the number of
    its ejections so far; at most ``max_ejection_percent`` of a pool is ejected at once (and at
    least one member)."""

    consecutive_errors: int
    interval_ms: int = 10_000
    base_ejection_ms: int = 30_000
    max_ejection_percent: int = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryBudget:
    """A pool's retries in flight bounded by a share of its requests in flight (asked for by a
    user; the default is a fixed number, ``MAX_RETRIES`` of the engine): at most ``percent`` %
    of the active requests may be retries, and ``min_concurrent`` retries are always allowed
    (so a quiet pool can still retry)."""

    percent: int = 20
    min_concurrent: int = 3


class PersistenceKind(StrEnum):
    COOKIE = "cookie"  # a cookie the engine sets (``name``, ``ttl_s``; 0 = a session cookie)
    HEADER = "header"  # the value of request header ``name``
    SOURCE_IP = "source_ip"  # the client's address


@dataclass(frozen=True, slots=True, kw_only=True)
class Persistence:
    """Session persistence (and the key of a hashing pool): requests with the same key go to the
    same member while it stays; when members change, a consistent hash moves only the keys of
    the members that came or went."""

    kind: PersistenceKind
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
    # The certificate the engine shows the members (Gateway ``spec.tls.backend``); None: none.
    client_certificate: TLSCertificate | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSettings:
    """Everything about a pool except its members."""

    protocol: PoolProtocol = PoolProtocol.HTTP1
    lb_policy: LBPolicy = LBPolicy.ROUND_ROBIN
    health_check: HealthCheck | None = None
    outlier_detection: OutlierDetection | None = None
    persistence: Persistence | None = None
    upstream_tls: UpstreamTLS | None = None
    connect_timeout_ms: int = 5000
    # TCP pools only: each connection to a member starts with a PROXY protocol v2 header
    # carrying the client's address and port (Service ``podway.io/proxy-protocol: v2``).
    proxy_protocol: bool = False
    # HTTP pools: a connection to a member is drained (no new requests; closed once its
    # requests finished) after this long. Set in ``nodeport`` mode: kube-proxy pins a connection
    # to one pod, so a kept-alive connection would follow a terminating pod until it dies and
    # lose the requests in flight then; a bounded life moves requests to new connections, which
    # kube-proxy sends to ready pods (docs/translation.md, "Rollouts").
    connection_lifetime_ms: int | None = None
    # A retry budget instead of the fixed cap on retries in flight: only where a user asks
    # (``retryBudget``, ``podway.io/retry-budget``); the budget costs the engine CPU on every
    # request of the pool (docs/performance.md, "What each default costs").
    retry_budget: RetryBudget | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    name: str  # e.g. pool/<ns>/<service>/<port>
    settings: PoolSettings = PoolSettings()
    members: tuple[Member, ...] = ()
    origin: ObjectRef | None = None  # the Service behind the pool
