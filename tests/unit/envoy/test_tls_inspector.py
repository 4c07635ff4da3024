"""The TLS inspector (reading the client's hello before a chain is chosen) is on a listener
only where a chain is chosen by SNI: a listener with its default chain alone does without
(it was 3.1 % of the instructions of a new TLS handshake, docs/performance.md)."""

from __future__ import annotations

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
    # a single named certificate: its SNI chain beside the default
    assert _filters(_https(_cert("shop", "shop.example.com"))) == [INSPECTOR]
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
