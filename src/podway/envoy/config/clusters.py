"""Clusters (CDS): one per pool, built from the pool's *settings* only (plus one ``split/``
cluster per UDP listener with weighted pools, built the same way: ``podway.envoy.config.split``).

Members are not part of the cluster: it is an EDS cluster whose load assignment (named after the
pool) arrives separately, so an endpoint change never replaces the cluster.

Health: an active check (``HealthCheck``) and passive outlier detection (``OutlierDetection``)
both only ever take members *out*: a member the translator marks not ready stays out whatever
its checks say, and one that leaves the load assignment leaves at once, even while it passes
(``ignore_health_on_host_removal``). An unexpected HTTP status counts towards the unhealthy
threshold like a timeout (Envoy's default takes the member out at the first one). Health
changes take effect at once (no ``update_merge_window``): a new member gets traffic right after
its first good check, and a failed one loses it right away (docs/design/health-and-changes.md).
Checks are spread out: each wait between two is lengthened by a random 0-20 % (never the first
check), so pools created together do not check their members in the same millisecond forever.
HTTP checks of HTTP/2 and gRPC pools speak HTTP/2; gRPC checks use the standard
``grpc.health.v1`` protocol. Outlier detection counts 5xx answers, connect failures and resets
alike (``split_external_local_origin_errors`` off) and ejects on consecutive errors only: the
success-rate and failure-percentage detectors are disabled (they need volume to be meaningful and
would eject members of a small pool on noise).

Balancing: a pool with persistence always hashes (``MAGLEV`` unless ``RING_HASH`` was chosen);
the hash key is a route hash policy (``routes``), since Envoy hashes per route.

Panic mode is off (``healthy_panic_threshold`` 0): Envoy's default (50 %) spreads traffic over
*all* members, not-ready and failing ones included, once fewer than half are healthy — with one
ready member out of four, three requests in four would go to pods that are not ready. Health
status is always honoured instead; with no healthy member at all the pool answers 503.
"""

from __future__ import annotations

from dataclasses import fields, replace
from operator import attrgetter

from envoy.config.cluster.v3 import cluster_pb2, outlier_detection_pb2
from envoy.config.core.v3 import base_pb2, health_check_pb2
from envoy.config.core.v3 import proxy_protocol_pb2 as proxy_protocol_config_pb2
from envoy.extensions.transport_sockets.proxy_protocol.v3 import (
    upstream_proxy_protocol_pb2 as proxy_protocol_pb2,
)
from envoy.extensions.transport_sockets.raw_buffer.v3 import raw_buffer_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2, tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2 as hpo
from envoy.type.v3 import http_pb2, range_pb2
from google.protobuf import wrappers_pb2

from podway.envoy.config.common import ads_source, duration, pack
from podway.ir import (
    HASHING,
    HealthCheck,
    HealthCheckKind,
    LBPolicy,
    OutlierDetection,
    PoolProtocol,
    PoolSettings,
    UpstreamTLS,
)

_LB = {
    LBPolicy.ROUND_ROBIN: cluster_pb2.Cluster.ROUND_ROBIN,
    LBPolicy.LEAST_REQUEST: cluster_pb2.Cluster.LEAST_REQUEST,
    LBPolicy.RANDOM: cluster_pb2.Cluster.RANDOM,
    LBPolicy.RING_HASH: cluster_pb2.Cluster.RING_HASH,
    LBPolicy.MAGLEV: cluster_pb2.Cluster.MAGLEV,
}
#: Retries in flight per pool and engine (Envoy's circuit breaker ``max_retries``; its default
#: is 3): as many as a 20 % retry budget allowed at 50 requests in flight.
MAX_RETRIES = 10
# Each wait between two checks of a member is lengthened by a random 0 to this share of it
# (Envoy's ``interval_jitter_percent``): without it the checks of pools created together (every
# pool at an engine's start) keep firing in the same millisecond forever, and a member shared by
# many pools gets them all at once (docs/design/health-and-changes.md, "Checks spread out").
CHECK_JITTER_PERCENT = 20
_HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
_H2 = (PoolProtocol.HTTP2, PoolProtocol.GRPC)
_HTTP = (PoolProtocol.HTTP1, *_H2)
# ALPN offered to TLS members: servers that pick the protocol by ALPN (most gRPC servers refuse
# a TLS connection without "h2") must be told which one Envoy will speak.
_ALPN = {PoolProtocol.HTTP1: ("http/1.1",), PoolProtocol.HTTP2: ("h2",),
         PoolProtocol.GRPC: ("h2",)}


#: The fields of a pool's settings and of its check that its cluster's shape depends on:
#: all but the check's host, which names the pool (``cluster``).
_settings_key = attrgetter(*(f.name for f in fields(PoolSettings) if f.name != "health_check"))
_check_key = attrgetter(*(f.name for f in fields(HealthCheck) if f.name != "host"))


def cluster(name: str, settings: PoolSettings) -> cluster_pb2.Cluster:
    """The cluster of pool ``name``: a copy of the cluster every pool of the same settings
    shares (``_shape``) with the pool's own name (and its check's host) filled in. Building
    each one field by field was 38 µs a pool, most of a cold start's cluster build at 10,000
    pools (docs/performance.md, "Cold start: the parse starts with the process")."""
    out = cluster_pb2.Cluster()
    out.CopyFrom(_shape(settings))
    out.name = name
    out.eds_cluster_config.service_name = name
    check = settings.health_check
    if check is not None and check.host and out.health_checks:
        if check.kind is HealthCheckKind.HTTP:
            out.health_checks[0].http_health_check.host = check.host
        elif check.kind is HealthCheckKind.GRPC:
            out.health_checks[0].grpc_health_check.authority = check.host
    return out


_SHAPES: dict[tuple[object, ...], cluster_pb2.Cluster] = {}
_MAX_SHAPES = 1024  # distinct settings seen; past it the table starts again


def _shape(settings: PoolSettings) -> cluster_pb2.Cluster:
    """The cluster of ``settings`` without a name, and its check without a host: built once
    and kept (read only) for every pool of equal settings. Not kept for a pool whose members
    see a client certificate: the table's keys would hold on to rotated-out private keys (the
    cluster names the certificate's SDS secret only; such pools are rare)."""
    tls = settings.upstream_tls
    if tls is not None and tls.client_certificate is not None:
        return _hostless(settings)
    check = settings.health_check
    key = (_settings_key(settings), None if check is None else _check_key(check))
    shape = _SHAPES.get(key)
    if shape is None:
        if len(_SHAPES) >= _MAX_SHAPES:
            _SHAPES.clear()
        shape = _SHAPES[key] = _hostless(settings)
    return shape


def _hostless(settings: PoolSettings) -> cluster_pb2.Cluster:
    """``built`` with the check's host left out (``cluster`` fills it in)."""
    check = settings.health_check
    if check is not None and check.host:
        settings = replace(settings, health_check=replace(check, host=""))
    return built(settings)


def built(settings: PoolSettings) -> cluster_pb2.Cluster:
    """The cluster of ``settings``, field by field, without a name."""
    out = cluster_pb2.Cluster(type=cluster_pb2.Cluster.EDS)
    out.eds_cluster_config.eds_config.CopyFrom(ads_source())
    out.connect_timeout.CopyFrom(duration(settings.connect_timeout_ms))
    out.common_lb_config.healthy_panic_threshold.SetInParent()  # present, value 0: no panic
    # Apply health changes at once (Envoy's default merges them for 1 s after any host change):
    # a member added by EDS only gets traffic once its first check passed, and with the default
    # window that pass reached the workers up to a second late, while the members it replaced
    # were already gone (docs/design/health-and-changes.md).
    out.common_lb_config.update_merge_window.SetInParent()  # present, value 0: no merging
    policy = settings.lb_policy
    if settings.persistence is not None and policy not in HASHING:
        policy = LBPolicy.MAGLEV  # hash policies on routes only take effect with a hashing LB
    out.lb_policy = _LB[policy]
    if policy is LBPolicy.RING_HASH:
        # A bigger ring than Envoy's minimum (1024) spreads keys evenly over a few members.
        out.ring_hash_lb_config.minimum_ring_size.value = 4096
    # Routes retry requests that never reached a member (route_entries.RETRY_ON); a fixed cap
    # on the retries in flight keeps a failing pool from being hit twice as hard. A plain
    # threshold, not a retry budget (a share of the requests in flight): the budget cost every
    # request of the pool 6-9 % of the engine's CPU (docs/performance.md, "What each default
    # costs").
    thresholds = out.circuit_breakers.thresholds.add()
    if settings.retry_budget is None:
        thresholds.max_retries.value = MAX_RETRIES
    else:  # asked for (retryBudget): Envoy then ignores max_retries
        thresholds.retry_budget.budget_percent.value = settings.retry_budget.percent
        thresholds.retry_budget.min_retry_concurrency.value = settings.retry_budget.min_concurrent
    lifetime = settings.connection_lifetime_ms if settings.protocol in _HTTP else None
    if settings.protocol in _H2 or lifetime:
        options = hpo.HttpProtocolOptions()
        if settings.protocol in _H2:
            options.explicit_http_config.http2_protocol_options.SetInParent()
        else:
            options.explicit_http_config.http_protocol_options.SetInParent()
        if lifetime:
            options.common_http_protocol_options.max_connection_duration.CopyFrom(
                duration(lifetime))
        out.typed_extension_protocol_options[_HTTP_OPTIONS].CopyFrom(pack(options))
    if settings.health_check is not None and settings.protocol is not PoolProtocol.UDP:
        out.health_checks.append(_health_check(settings.health_check,
                                               http2=settings.protocol in _H2))
        # Envoy keeps a member that left the load assignment for as long as it passes its
        # checks; the translator's member list is the truth (a withdrawn pod goes at once).
        out.ignore_health_on_host_removal = True
    if settings.outlier_detection is not None and settings.protocol is not PoolProtocol.UDP:
        out.outlier_detection.CopyFrom(_outlier_detection(settings.outlier_detection))
    if settings.upstream_tls is not None:
        out.transport_socket.CopyFrom(_upstream_tls(settings.upstream_tls,
                                                    alpn=_ALPN.get(settings.protocol, ())))
    if settings.proxy_protocol:
        out.transport_socket.CopyFrom(_proxy_protocol(out.transport_socket))
    return out


def _proxy_protocol(inner: base_pb2.TransportSocket) -> base_pb2.TransportSocket:
    """A PROXY protocol v2 header (the client's address and port) before ``inner``'s bytes
    (plain TCP when ``inner`` is unset). Connections of the health checks have no client: they
    carry a ``LOCAL`` header."""
    config = proxy_protocol_pb2.ProxyProtocolUpstreamTransport()
    config.config.version = proxy_protocol_config_pb2.ProxyProtocolConfig.V2
    if inner.name:
        config.transport_socket.CopyFrom(inner)
    else:
        config.transport_socket.name = "envoy.transport_sockets.raw_buffer"
        config.transport_socket.typed_config.CopyFrom(pack(raw_buffer_pb2.RawBuffer()))
    return base_pb2.TransportSocket(name="envoy.transport_sockets.upstream_proxy_protocol",
                                    typed_config=pack(config))


def _health_check(check: HealthCheck, *, http2: bool) -> health_check_pb2.HealthCheck:
    """A TCP connect, an HTTP GET of ``path`` in the pool's own HTTP version (an h2-only
    member would fail an HTTP/1.1 check and never become healthy), or a gRPC health call."""
    out = health_check_pb2.HealthCheck(
        timeout=duration(check.timeout_ms),
        interval=duration(check.interval_ms),
        healthy_threshold=wrappers_pb2.UInt32Value(value=check.healthy_threshold),
        unhealthy_threshold=wrappers_pb2.UInt32Value(value=check.unhealthy_threshold),
    )
    # A member that just failed is checked again sooner, so it is removed within about
    # unhealthy_threshold x the shorter interval instead of a full interval per check.
    out.unhealthy_interval.CopyFrom(duration(check.quick_interval_ms))
    # Envoy uses the "no traffic" intervals instead of the two above for as long as it believes
    # the pool never had a connection, and it believes that whenever the pool's own stats are
    # not kept (``EnvoyStats.BOUNDED``, the default): its traffic test reads a stat that then
    # does not exist. So the same split holds there: a failing or new member (its first check
    # failed because the pod was not listening yet) is checked again after the short interval,
    # not after ``interval`` — in a rollout that was 5 s with no serving member.
    out.no_traffic_interval.CopyFrom(duration(check.quick_interval_ms))
    out.no_traffic_healthy_interval.CopyFrom(duration(check.interval_ms))
    # Never the first check (``initial_jitter`` stays 0): a cluster is warm only once every
    # member had it, so a jittered first check would delay every new pool.
    out.interval_jitter_percent = CHECK_JITTER_PERCENT
    if check.kind is HealthCheckKind.HTTP:
        out.http_health_check.path = check.http_path
        if check.method != "GET":
            out.http_health_check.method = base_pb2.RequestMethod.Value(check.method)
        for name, value in check.headers:
            out.http_health_check.request_headers_to_add.append(base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(key=name, value=value),
                append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD))
        if check.host:
            out.http_health_check.host = check.host
        if http2:
            out.http_health_check.codec_client_type = http_pb2.HTTP2
        for low, high in check.expected:
            out.http_health_check.expected_statuses.append(
                range_pb2.Int64Range(start=low, end=high + 1))  # Envoy's end is exclusive
        # Envoy takes a member out at the first unexpected status unless that status is
        # "retriable": every other status counts towards unhealthy_threshold instead.
        for low, high in _complement(check.expected):
            out.http_health_check.retriable_statuses.append(
                range_pb2.Int64Range(start=low, end=high + 1))
    elif check.kind is HealthCheckKind.GRPC:
        out.grpc_health_check.service_name = check.grpc_service
        if check.host:
            out.grpc_health_check.authority = check.host
    else:
        out.tcp_health_check.SetInParent()
    return out


_SAN = {"dns": common_pb2.SubjectAltNameMatcher.DNS, "uri": common_pb2.SubjectAltNameMatcher.URI}


def _complement(ranges: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    """The statuses 100-599 outside ``ranges`` (inclusive bounds), as inclusive ranges."""
    out, start = [], 100
    for low, high in sorted(ranges):
        if low > start:
            out.append((start, low - 1))
        start = max(start, high + 1)
    if start <= 599:
        out.append((start, 599))
    return out


def _outlier_detection(od: OutlierDetection) -> outlier_detection_pb2.OutlierDetection:
    out = outlier_detection_pb2.OutlierDetection()
    out.consecutive_5xx.value = od.consecutive_errors
    out.enforcing_consecutive_5xx.value = 100
    out.consecutive_gateway_failure.value = od.consecutive_errors
    out.enforcing_consecutive_gateway_failure.value = 0  # counted by consecutive_5xx already
    out.enforcing_success_rate.value = 0
    out.enforcing_failure_percentage.value = 0
    out.interval.CopyFrom(duration(od.interval_ms))
    out.base_ejection_time.CopyFrom(duration(od.base_ejection_ms))
    out.max_ejection_percent.value = od.max_ejection_percent
    return out


def _upstream_tls(tls: UpstreamTLS, *, alpn: tuple[str, ...]) -> base_pb2.TransportSocket:
    """TLS to the members, always verified: the given CA, else the engine host's trust store.

    Never without a validation context: that would accept any certificate (fail open).
    """
    context = tls_pb2.UpstreamTlsContext(sni=tls.sni)
    context.common_tls_context.alpn_protocols.extend(alpn)
    validation = context.common_tls_context.validation_context
    if tls.ca_pem:
        validation.trusted_ca.inline_string = tls.ca_pem
    else:
        validation.system_root_certs.SetInParent()
    for kind, value in tls.subject_alt_names or (("dns", tls.sni),):
        validation.match_typed_subject_alt_names.add(san_type=_SAN[kind]).matcher.exact = value
    if tls.client_certificate is not None:  # the key travels in its SDS secret only
        context.common_tls_context.tls_certificate_sds_secret_configs.append(
            secret_pb2.SdsSecretConfig(name=tls.client_certificate.name,
                                       sds_config=ads_source()))
    return base_pb2.TransportSocket(name="envoy.transport_sockets.tls",
                                    typed_config=pack(context))
