"""PROXY protocol v2 towards the members: the cluster's transport socket wraps the usual one."""

from __future__ import annotations

from envoy.extensions.transport_sockets.proxy_protocol.v3 import upstream_proxy_protocol_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2

from podway.envoy.config.clusters import cluster
from podway.ir import PoolProtocol, PoolSettings, UpstreamTLS


def _proxy(settings: PoolSettings) -> upstream_proxy_protocol_pb2.ProxyProtocolUpstreamTransport:
    built = cluster("p", settings)
    assert built.transport_socket.name == "envoy.transport_sockets.upstream_proxy_protocol"
    out = upstream_proxy_protocol_pb2.ProxyProtocolUpstreamTransport()
    assert built.transport_socket.typed_config.Unpack(out)
    assert out.config.version == out.config.V2
    return out


def test_plain_tcp_gets_the_header_then_raw_bytes() -> None:
    proxy = _proxy(PoolSettings(protocol=PoolProtocol.TCP, proxy_protocol=True))
    assert proxy.transport_socket.name == "envoy.transport_sockets.raw_buffer"


def test_tls_to_the_members_comes_after_the_header() -> None:
    proxy = _proxy(PoolSettings(protocol=PoolProtocol.TCP, proxy_protocol=True,
                                upstream_tls=UpstreamTLS(sni="m.test")))
    assert proxy.transport_socket.name == "envoy.transport_sockets.tls"
    context = tls_pb2.UpstreamTlsContext()
    assert proxy.transport_socket.typed_config.Unpack(context)
    assert context.sni == "m.test"


def test_no_header_unless_asked() -> None:
    assert not cluster("p", PoolSettings(protocol=PoolProtocol.TCP)).HasField("transport_socket")
