"""The TLS inspector (reading the client's hello before a chain is chosen) is on a listener
only where a chain is chosen by SNI: a listener with its default chain alone does without
(it was 3.1 % of the instructions of a new TLS handshake, docs/performance.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from envoy.config.listener.v3 import listener_components_pb2 as lc
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2

from podway.envoy.config.listeners import listener
from podway.ir import L4Route, Listener, ListenerProtocol, TLSCertificate, WeightedPool
from podway.model.base import ObjectRef

REF = ObjectRef(kind="Service", namespace="default", name="web")
INSPECTOR = "envoy.filters.listener.tls_inspector"


def _cert(name: str, *hosts: str) -> TLSCertificate:
    return TLSCertificate(name=f"secret/default/{name}", hostnames=hosts, cert_pem="C",
                          key_pem="K")


def _https(*certs: TLSCertificate, routes: tuple[L4Route, ...] = ()) -> Listener:
    return Listener(name="https", address="198.18.0.1", port=443,
                    protocol=ListenerProtocol.HTTPS, certificates=certs, l4_routes=routes)


def _passthrough(*hosts: str) -> L4Route:
    return L4Route(name=f"tls-{len(hosts)}", origin=REF, hostnames=hosts,
                   backends=(WeightedPool(pool="p", weight=1),))


def _filters(ir: Listener) -> list[str]:
    return [f.name for f in listener(ir).listener_filters]


def test_one_chain_https_listener_has_no_inspector() -> None:
    out = listener(_https(_cert("any")))
    assert not out.filter_chains
    assert out.HasField("default_filter_chain")
    assert INSPECTOR not in [f.name for f in out.listener_filters]


def test_a_chain_chosen_by_sni_brings_the_inspector() -> None:
    assert _filters(_https(_cert("any"), _cert("shop", "shop.example.com"))) == [INSPECTOR]
    assert _filters(_https(_cert("a", "a.example.com"), _cert("b", "b.example.com"))) \
        == [INSPECTOR]
    # passthrough by SNI beside termination on one port
    assert _filters(_https(_cert("any"), routes=(_passthrough("db.example.com"),))) \
        == [INSPECTOR]


def test_tls_passthrough_needs_it_only_to_choose_by_name() -> None:
    def tls(*routes: L4Route) -> Listener:
        return Listener(name="tls", address="198.18.0.1", port=443,
                        protocol=ListenerProtocol.TLS, l4_routes=routes)

    assert _filters(tls(_passthrough())) == []
    assert _filters(tls(_passthrough("db.example.com"))) == [INSPECTOR]
    assert _filters(tls(_passthrough("a.example.com"), _passthrough())) == [INSPECTOR]


def _sds_name(chain: lc.FilterChain) -> str:
    context = tls_pb2.DownstreamTlsContext()
    chain.transport_socket.typed_config.Unpack(context)
    (sds,) = context.common_tls_context.tls_certificate_sds_secret_configs
    return str(sds.name)


def _table(chain: lc.FilterChain) -> str:
    manager = hcm.HttpConnectionManager()
    chain.filters[0].typed_config.Unpack(manager)
    return str(manager.rds.route_config_name)


@pytest.mark.parametrize("check", [False, True])
def test_one_named_certificate_is_the_default_chain_alone(check: bool) -> None:
    """Its named chain would equal the default chain (the same certificate, TLS settings and
    table: with ``sni_host_check`` the certificate's own): left out, so that chain serves every
    SNI as the pair did, without the inspector."""
    ir = replace(_https(_cert("shop", "shop.example.com")), sni_host_check=check)
    out = listener(ir)
    assert not out.filter_chains
    assert not out.listener_filters
    assert _sds_name(out.default_filter_chain) == "secret/default/shop"
    assert _table(out.default_filter_chain) == (
        "https/sni/secret/default/shop" if check else "https")
    # two certificates naming the same host: the second has no chain; the first is the default
    twice = listener(_https(_cert("a", "shop.example.com"), _cert("b", "SHOP.example.com")))
    assert not twice.filter_chains
    assert _sds_name(twice.default_filter_chain) == "secret/default/a"


def test_a_named_chain_beside_others_stays() -> None:
    """A second certificate, or a passthrough route by SNI (whose wildcard would take the
    certificate's name without its chain): the named chain stays, and so does the inspector."""
    two = listener(_https(_cert("a", "a.example.com"), _cert("b", "b.example.com")))
    assert [c.name for c in two.filter_chains] == ["secret/default/a", "secret/default/b"]
    shared = listener(_https(_cert("shop", "shop.example.com"),
                             routes=(_passthrough("*.example.com"),)))
    assert [list(c.filter_chain_match.server_names) for c in shared.filter_chains] == [
        ["shop.example.com"], ["*.example.com"]]
    assert [f.name for f in shared.listener_filters] == [INSPECTOR]
    # a certificate for any name beside a named one: two different chains
    mixed = listener(_https(_cert("any"), _cert("shop", "shop.example.com")))
    assert len(mixed.filter_chains) == 1
    assert mixed.HasField("default_filter_chain")
