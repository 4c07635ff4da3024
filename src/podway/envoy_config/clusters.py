"""Clusters (CDS): one per pool, built from the pool's *settings* only.

Members are not part of the cluster: it is an EDS cluster whose load assignment (named after the
pool) arrives separately, so an endpoint change never replaces the cluster.

Panic mode is off (``healthy_panic_threshold`` 0): Envoy's default (50 %) spreads traffic over
*all* members, not-ready and failing ones included, once fewer than half are healthy — with one
ready member out of four, three requests in four would go to pods that are not ready. Health
status is always honoured instead; with no healthy member at all the pool answers 503.
"""

from __future__ import annotations

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2, health_check_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2 as hpo
from envoy.type.v3 import http_pb2, range_pb2
from google.protobuf import wrappers_pb2

from podway.envoy_config.common import ads_source, duration, pack
from podway.ir import HealthCheck, LBPolicy, PoolProtocol, PoolSettings, UpstreamTLS

_LB = {
    LBPolicy.ROUND_ROBIN: cluster_pb2.Cluster.ROUND_ROBIN,
    LBPolicy.LEAST_REQUEST: cluster_pb2.Cluster.LEAST_REQUEST,
    LBPolicy.RANDOM: cluster_pb2.Cluster.RANDOM,
    LBPolicy.RING_HASH: cluster_pb2.Cluster.RING_HASH,
    LBPolicy.MAGLEV: cluster_pb2.Cluster.MAGLEV,
}
RETRY_BUDGET_PERCENT = 20.0
_HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
_H2 = (PoolProtocol.HTTP2, PoolProtocol.GRPC)
# ALPN offered to TLS members: servers that pick the protocol by ALPN (most gRPC servers refuse
# a TLS connection without "h2") must be told which one Envoy will speak.
_ALPN = {PoolProtocol.HTTP1: ("http/1.1",), PoolProtocol.HTTP2: ("h2",),
         PoolProtocol.GRPC: ("h2",)}


def cluster(name: str, settings: PoolSettings) -> cluster_pb2.Cluster:
    out = cluster_pb2.Cluster(name=name, type=cluster_pb2.Cluster.EDS)
    out.eds_cluster_config.service_name = name
    out.eds_cluster_config.eds_config.CopyFrom(ads_source())
    out.connect_timeout.CopyFrom(duration(settings.connect_timeout_ms))
    out.common_lb_config.healthy_panic_threshold.SetInParent()  # present, value 0: no panic
    policy = settings.lb_policy
    if settings.persistence is not None and policy not in (LBPolicy.RING_HASH, LBPolicy.MAGLEV):
        policy = LBPolicy.RING_HASH  # hash policies on routes only take effect with a hashing LB
    out.lb_policy = _LB[policy]
    # Routes retry requests that never reached a member (routes.RETRY_ON); the budget caps
    # retries at a share of the requests in flight, so a failing pool is not hit twice as hard.
    budget = out.circuit_breakers.thresholds.add().retry_budget
    budget.budget_percent.value = RETRY_BUDGET_PERCENT
    budget.min_retry_concurrency.value = 3
    if settings.protocol in _H2:
        options = hpo.HttpProtocolOptions()
        options.explicit_http_config.http2_protocol_options.SetInParent()
        out.typed_extension_protocol_options[_HTTP_OPTIONS].CopyFrom(pack(options))
    if settings.health_check is not None and settings.protocol is not PoolProtocol.UDP:
        out.health_checks.append(_health_check(settings.health_check,
                                               http2=settings.protocol in _H2))
    if settings.upstream_tls is not None:
        out.transport_socket.CopyFrom(_upstream_tls(settings.upstream_tls,
                                                    alpn=_ALPN.get(settings.protocol, ())))
    return out


def _health_check(check: HealthCheck, *, http2: bool) -> health_check_pb2.HealthCheck:
    """A TCP connect, or an HTTP GET of ``path`` in the pool's own HTTP version (an h2-only
    member would fail an HTTP/1.1 check and never become healthy)."""
    out = health_check_pb2.HealthCheck(
        timeout=duration(check.timeout_ms),
        interval=duration(check.interval_ms),
        healthy_threshold=wrappers_pb2.UInt32Value(value=check.healthy_threshold),
        unhealthy_threshold=wrappers_pb2.UInt32Value(value=check.unhealthy_threshold),
    )
    if check.path is not None:
        out.http_health_check.path = check.path
        if http2:
            out.http_health_check.codec_client_type = http_pb2.HTTP2
        for status in check.expected_statuses:
            out.http_health_check.expected_statuses.append(
                range_pb2.Int64Range(start=status, end=status + 1))
    else:
        out.tcp_health_check.SetInParent()
    return out


_SAN = {"dns": common_pb2.SubjectAltNameMatcher.DNS, "uri": common_pb2.SubjectAltNameMatcher.URI}


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
    return base_pb2.TransportSocket(name="envoy.transport_sockets.tls",
                                    typed_config=pack(context))
