"""Listeners and what hangs off them: virtual hosts for HTTP(S), L4 routes for TCP/UDP/TLS."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum

from podway.ir.route import Route, WeightedPool
from podway.model.base import ObjectRef


class ListenerProtocol(StrEnum):
    TCP = "TCP"
    UDP = "UDP"
    HTTP = "HTTP"
    HTTPS = "HTTPS"  # TLS terminated by the engine, then HTTP
    TLS = "TLS"  # TLS passthrough: routed by SNI, bytes forwarded untouched


class EngineKind(StrEnum):
    """Which engine serves a listener (``Listener.engine``)."""

    ENVOY = "envoy"  # the proxy: everything
    KERNEL = "kernel"  # nftables DNAT on the engine host: plain TCP/UDP only (podway.kernel)


class WildcardMode(StrEnum):
    """How a ``*.`` hostname matches: Ingress covers one label, Gateway API any number."""

    ONE_LABEL = "one_label"
    SUFFIX = "suffix"


@dataclass(frozen=True, slots=True, kw_only=True)
class TLSOptions:
    """Handshake settings of the filter chain serving a certificate; None/(): the engine's
    defaults (TLS 1.2 to 1.3, BoringSSL's cipher list). Versions are "1.0" … "1.3"; ``ciphers``
    are TLS 1.2 suites in OpenSSL names (TLS 1.3 suites are not configurable in the engine)."""

    min_version: str | None = None
    max_version: str | None = None
    ciphers: tuple[str, ...] = ()
    # Client certificates (ingress-nginx auth-tls-*): with ``client_ca_pem`` the engine asks
    # for one and verifies it against these CAs (chains of at most ``client_verify_depth``
    # intermediates); a client without one is refused when ``client_required``, and one with
    # an unverifiable certificate always. ``client_ca`` names their source in dumps.
    client_ca_pem: str = field(default="", repr=False)
    client_ca: str = ""
    client_required: bool = True
    client_verify_depth: int | None = None
    # Gateway API AllowInsecureFallback: a certificate that fails verification is let through
    # too (with ``client_required`` False: any client); the backend decides.
    client_accept_untrusted: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TLSCertificate:
    """A certificate served for ``hostnames`` (SNI); no hostnames: the listener's default."""

    name: str  # secret/<ns>/<name>
    hostnames: tuple[str, ...]
    cert_pem: str
    key_pem: str = field(repr=False)  # never logged, never dumped
    origin: ObjectRef | None = None
    options: TLSOptions = TLSOptions()

    @property
    def fingerprint(self) -> str:
        """A stable, key-free digest that stands in for the pair in dumps and diffs."""
        return hashlib.sha256((self.cert_pem + self.key_pem).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True, kw_only=True)
class VirtualHost:
    name: str
    hostname: str  # exact name, "*.suffix" wildcard, or "*" for any host
    wildcard: WildcardMode = WildcardMode.ONE_LABEL
    routes: tuple[Route, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class L4Route:
    """TCP/UDP forwarding, or TLS selected by SNI ``hostnames``: passed through untouched, or,
    with ``certificate``, terminated by the engine and forwarded as plain bytes (TLSRoute on
    a ``Terminate`` listener)."""

    name: str
    backends: tuple[WeightedPool, ...]
    hostnames: tuple[str, ...] = ()
    origin: ObjectRef
    certificate: TLSCertificate | None = None
    # Connections from one client address go to the same member (its pools hash on source IP).
    client_ip_affinity: bool = False


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class ListenerSection:
    """One Gateway API listener an IR listener serves: ``name`` in ``spec.listeners`` of
    ``origin``, a Gateway or the ListenerSet that declared it. An engine's refusal of the IR
    listener is reported on exactly these (``podway.status.document``)."""

    origin: ObjectRef
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Listener:
    name: str
    address: str
    port: int
    protocol: ListenerProtocol
    virtual_hosts: tuple[VirtualHost, ...] = ()  # HTTP, HTTPS
    certificates: tuple[TLSCertificate, ...] = ()  # HTTPS
    # TCP, UDP, TLS; on HTTPS: passthrough by SNI beside the terminating certificates
    l4_routes: tuple[L4Route, ...] = ()
    origins: tuple[ObjectRef, ...] = ()
    # Gateway API: the listeners of Gateways and ListenerSets served here (several when they
    # share the port), in precedence order; ``origins`` stays the Gateways (whose addresses
    # and engine groups these are).
    sections: tuple[ListenerSection, ...] = ()
    # HTTPS: the Host must belong to the certificate the connection's SNI chose. A virtual host
    # whose most specific covering SNI name (certificate hostname) is another certificate's is
    # answered 421 Misdirected Request on that connection (Gateway API listeners). False:
    # every SNI shares one route table (Ingress).
    sni_host_check: bool = False
    # HTTP, HTTPS: how many proxies in front of the engine are trusted to have appended to
    # X-Forwarded-For. 0: the engine is the edge, the client address is the connection's peer
    # and a client-sent X-Forwarded-For decides nothing (it is only appended to).
    xff_trusted_hops: int = 0
    # HTTP, HTTPS: the engine sets X-Real-IP to the client address on every request (a
    # per-request formatter: a few per cent of the engine's CPU, docs/performance.md). Only
    # where asked (``--x-real-ip``) or where an Ingress class taken over from ingress-nginx
    # (``--ingress-class``) expects it (``podway.translate.pools.client_ip``).
    real_ip: bool = False
    # TCP, TLS, UDP: the engine connects to the members *from the client's own address* (Envoy's
    # original source), so a pod sees the client with no header. Only when every pool the
    # listener forwards to opted in (Service ``podway.io/client-ip: transparent``); the pods'
    # replies must be routed back through the engine (docs/reference.md, "Transparent L4").
    transparent: bool = False
    # The engine that serves it: KERNEL only when every Service behind it asked for it
    # (``podway.io/engine: kernel``) and it needs nothing a proxy does
    # (``podway.ir.engines.kernel_unsupported``).
    engine: EngineKind = EngineKind.ENVOY
