"""L4 listeners: unusable TCP shares refuse their part of connections; upstream TLS verifies."""

from __future__ import annotations

from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2

from podway.envoy.config.clusters import cluster
from podway.envoy.config.listeners import NO_POOL, listener
from podway.ir import L4Route, Listener, ObjectRef, PoolSettings, UpstreamTLS
from podway.ir import ListenerProtocol as Protocol
from podway.ir import WeightedPool as Share

ORIGIN = ObjectRef("TCPRoute", "default", "db")


def tcp_proxy_of(*shares: Share) -> tcp_proxy_pb2.TcpProxy:
    ir = Listener(name="tcp", address="127.0.0.1", port=9000, protocol=Protocol.TCP,
                  l4_routes=(L4Route(name="r", backends=shares, origin=ORIGIN),))
    proxy = tcp_proxy_pb2.TcpProxy()
    listener(ir).filter_chains[0].filters[0].typed_config.Unpack(proxy)
    return proxy


def test_unusable_share_keeps_its_weight_on_a_cluster_that_never_exists() -> None:
    """A share without a pool is weighted onto NO_POOL, so its connections are closed."""
    proxy = tcp_proxy_of(Share(pool="pool/a", weight=3), Share(pool=None, weight=1))
    assert [(c.name, c.weight) for c in proxy.weighted_clusters.clusters] == [
        ("pool/a", 3), (NO_POOL, 1)]


def test_only_unusable_shares_close_every_connection() -> None:
    """With no usable share at all the proxy targets NO_POOL."""
    assert tcp_proxy_of(Share(pool=None)).cluster == NO_POOL


def test_zero_weight_shares_are_left_out() -> None:
    """Weight 0 means no traffic: a single remaining share is the plain cluster."""
    assert tcp_proxy_of(Share(pool="pool/a"), Share(pool="pool/b", weight=0)).cluster == "pool/a"


def test_upstream_tls_without_ca_verifies_against_the_system_store() -> None:
    """No CA given never means "accept anything": the system trust store and the SNI name."""
    built = cluster("pool/x", PoolSettings(upstream_tls=UpstreamTLS(sni="x.internal")))
    context = tls_pb2.UpstreamTlsContext()
    built.transport_socket.typed_config.Unpack(context)
    validation = context.common_tls_context.validation_context
    assert validation.HasField("system_root_certs")
    assert [m.matcher.exact for m in validation.match_typed_subject_alt_names] == ["x.internal"]
