"""Clusters built from pool settings: the health and protocol knobs Envoy must be given."""

from __future__ import annotations

from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from envoy.type.v3 import http_pb2

from podway.envoy_config.clusters import cluster
from podway.ir import HealthCheck, PoolProtocol, PoolSettings, UpstreamTLS


def test_every_cluster_disables_panic_mode() -> None:
    """Each cluster sets a 0 % panic threshold, so unhealthy members never get traffic."""
    for protocol in PoolProtocol:
        built = cluster("p", PoolSettings(protocol=protocol))
        assert built.common_lb_config.HasField("healthy_panic_threshold")
        assert built.common_lb_config.healthy_panic_threshold.value == 0


def _tls_context(protocol: PoolProtocol) -> tls_pb2.UpstreamTlsContext:
    built = cluster("p", PoolSettings(protocol=protocol, upstream_tls=UpstreamTLS(sni="m.test")))
    context = tls_pb2.UpstreamTlsContext()
    assert built.transport_socket.typed_config.Unpack(context)
    return context


def test_upstream_tls_offers_the_pool_protocol_by_alpn() -> None:
    """TLS to members offers h2 for HTTP/2 and gRPC pools, http/1.1 for HTTP/1, none for TCP."""
    alpn = {p: list(_tls_context(p).common_tls_context.alpn_protocols)
            for p in (PoolProtocol.HTTP2, PoolProtocol.GRPC, PoolProtocol.HTTP1,
                      PoolProtocol.TCP)}
    assert alpn == {PoolProtocol.HTTP2: ["h2"], PoolProtocol.GRPC: ["h2"],
                    PoolProtocol.HTTP1: ["http/1.1"], PoolProtocol.TCP: []}


def test_http_health_checks_speak_the_pool_http_version() -> None:
    """HTTP checks of HTTP/2 and gRPC pools use the HTTP/2 codec; HTTP/1 pools keep HTTP/1.1."""
    check = HealthCheck(path="/healthz")
    codec = {p: cluster("p", PoolSettings(protocol=p, health_check=check)).health_checks[0]
             .http_health_check.codec_client_type
             for p in (PoolProtocol.HTTP2, PoolProtocol.GRPC, PoolProtocol.HTTP1)}
    assert codec == {PoolProtocol.HTTP2: http_pb2.HTTP2, PoolProtocol.GRPC: http_pb2.HTTP2,
                     PoolProtocol.HTTP1: http_pb2.HTTP1}
