"""Transparent L4 in the engine: the original-source listener filter, and the engine host's
rules that bring the replies of those connections back to the engine."""

from __future__ import annotations

from envoy.config.listener.v3 import listener_pb2
from envoy.extensions.filters.listener.original_src.v3 import original_src_pb2
from envoy.extensions.filters.udp.udp_proxy.v3 import udp_proxy_pb2

from podway.envoy.config.listeners import ORIGINAL_SOURCE_MARK, REPLY_MARK, REPLY_TABLE, listener
from podway.envoy.engine.transparent import rules
from podway.ir import L4Route, Listener, ListenerProtocol, WeightedPool
from podway.model.base import ObjectRef

REF = ObjectRef(kind="Service", namespace="shop", name="db")


def tcp(protocol: ListenerProtocol = ListenerProtocol.TCP, *, transparent: bool) -> Listener:
    route = L4Route(name="r", backends=(WeightedPool(pool="pool/shop/db/5432/tcp"),),
                    hostnames=("db.example.com",) if protocol is ListenerProtocol.TLS else (),
                    origin=REF)
    return Listener(name="l", address="198.18.0.1", port=5432, protocol=protocol,
                    l4_routes=(route,), transparent=transparent)


def test_a_transparent_tcp_listener_connects_from_the_client_address() -> None:
    """original_src is the first listener filter and marks the upstream sockets."""
    built = listener(tcp(transparent=True))
    first = built.listener_filters[0]
    assert first.name == "envoy.filters.listener.original_src"
    config = original_src_pb2.OriginalSrc()
    assert first.typed_config.Unpack(config)
    assert config.mark == ORIGINAL_SOURCE_MARK


def test_tls_passthrough_can_be_transparent_and_keeps_its_sni_inspector() -> None:
    names = [f.name for f in listener(tcp(ListenerProtocol.TLS, transparent=True))
             .listener_filters]
    assert names == ["envoy.filters.listener.original_src", "envoy.filters.listener.tls_inspector"]


def test_a_transparent_udp_listener_sends_from_the_client_address() -> None:
    """UDP: no original-source filter (it is TCP's) but the proxy's own option."""
    def proxy_of(built: listener_pb2.Listener) -> udp_proxy_pb2.UdpProxyConfig:
        assert [f.name for f in built.listener_filters] == [
            "envoy.filters.udp_listener.udp_proxy"]
        out = udp_proxy_pb2.UdpProxyConfig()
        assert built.listener_filters[0].typed_config.Unpack(out)
        return out

    assert proxy_of(listener(tcp(ListenerProtocol.UDP, transparent=True))).use_original_src_ip
    assert not proxy_of(listener(tcp(ListenerProtocol.UDP, transparent=False))
                        ).use_original_src_ip


def test_no_original_source_unless_asked() -> None:
    assert not listener(tcp(transparent=False)).listener_filters


def test_host_rules_route_only_replies_of_marked_connections_locally() -> None:
    """The exact payload: the socket mark (or, for UDP, a foreign source address) is saved on
    the connection; its replies get the reply mark, which a rule routes through a table that
    delivers everything locally."""
    nft, commands = rules()
    assert f"meta mark {ORIGINAL_SOURCE_MARK:#x} ct mark set {ORIGINAL_SOURCE_MARK:#x}" in nft
    # UDP sockets carry no mark: a packet sent from a foreign address is the engine's.
    assert (f"meta l4proto udp fib saddr type != local ct mark set {ORIGINAL_SOURCE_MARK:#x}"
            in nft)
    assert (f"ct direction reply ct mark {ORIGINAL_SOURCE_MARK:#x} meta mark set "
            f"{REPLY_MARK:#x}") in nft
    assert "type route hook output priority mangle" in nft
    assert "type filter hook prerouting priority mangle" in nft
    assert commands == [
        ["rule", "add", "fwmark", f"{REPLY_MARK:#x}", "lookup", str(REPLY_TABLE)],
        ["route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", str(REPLY_TABLE)]]
    assert REPLY_MARK != ORIGINAL_SOURCE_MARK  # else the engine's own packets would loop
