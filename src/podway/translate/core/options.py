"""Settings of one translation: where listeners bind, which objects are ours, backend mode."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from podway.translate.core.vips import VipAllocator

from podway.ir import EngineKind, TLSOptions
from podway.translate.core.nginx_config import NginxConfig


class NplTrust(StrEnum):
    """Which ``nodeportlocal.antrea.io`` pod annotations become pool members (issue 23.9:
    whoever may patch a pod may rewrite its annotation and steer its Service's traffic)."""

    FILES = "files"  # every parsable one: the manifests are the operator's own (standalone)
    NODE = "node"  # nodeIP is the pod's node (status.hostIP) and the port in the agents'
    # range: for Antrea's own agent, which vouches for nothing (a tenant can still point its
    # Service at another port of its own node)
    SIGNED = "signed"  # as NODE, and signed by Podway's agent (``npl.SIGNATURE_ANNOTATION``)


class BackendMode(StrEnum):
    """How a Service's pods become pool members (../shared/ARCHITECTURE.md, "The three backend
    modes"; docs/translation.md, "Backend modes").

    All three resolve members (``podway.translate.pools.members``); a mode changes a pool's
    members only, never route translation.
    """

    CLUSTERIP = "clusterip"  # PodIP:targetPort from EndpointSlices
    NODEPORT = "nodeport"  # every NodeIP:nodePort (the extra-hop baseline)
    NODEPORTLOCAL = "nodeportlocal"  # NodeIP:nplPort from the pods' NPL annotation


@dataclass(frozen=True, slots=True, kw_only=True)
class TranslateOptions:
    address: str = "0.0.0.0"
    """Bind address for Ingress listeners and for Services that have no VIP."""
    http_port: int = 80
    """Port of the shared HTTP listener that serves every Ingress."""
    https_port: int = 443
    """Port of the shared HTTPS listener (SNI picks the certificate)."""
    mode: BackendMode = BackendMode.CLUSTERIP
    """Backend mode for pool members."""
    ingress_controller: str = "podway.io/ingress-controller"
    """IngressClass ``spec.controller`` that makes a class ours."""
    ingress_class: str = "podway"
    """Class name that is ours when the snapshot holds no IngressClass objects."""
    takeover_classes: tuple[str, ...] = ()
    """Ingress class names Podway serves whatever controller their IngressClass names
    (``--ingress-class nginx``: take over ingress-nginx's Ingresses, serving their
    ``nginx.ingress.kubernetes.io/*`` annotations). An Ingress without a class is taken when
    the default IngressClass has one of these names."""
    nginx: NginxConfig = field(default_factory=NginxConfig)
    """ingress-nginx's controller-wide settings (its ConfigMap keys: ``--nginx-config``) for
    the Ingresses of ``takeover_classes``: HSTS on their TLS hosts by default
    (``podway.translate.core.nginx_config``)."""
    gateway_controller: str = "podway.io/gateway-controller"
    """GatewayClass ``spec.controllerName`` that makes a class (and its Gateways) ours."""
    load_balancer_class: str = "podway.io/lb"
    """``spec.loadBalancerClass`` of Services that are ours (unset is ours too)."""
    manifest_addresses: bool = False
    """Let manifests choose bind addresses (Service ``status.loadBalancer``/``loadBalancerIP``,
    Gateway ``spec.addresses``). Off: every listener binds ``address`` and an object asking for
    another gets an ``AddressNotAllowed`` warning. On where an address allocator (IPAM) or a
    trusted author writes them."""
    tls: TLSOptions = field(default_factory=TLSOptions)
    """Handshake settings (minimum/maximum TLS version, TLS 1.2 ciphers) of every HTTPS
    listener; a Gateway listener's ``tls.options`` overrides them key by key
    (``podway.translate.core.tls_options``). Default: the engine's (TLS 1.2-1.3)."""
    strict_host_ownership: bool = False
    """The oldest Ingress naming a host owns it. Off: Ingresses of other namespaces may still
    add paths or a certificate to it, and both sides are warned (``HostShared``). On: their
    rules and TLS entries for that host are refused (``HostConflict``)."""
    xff_trusted_hops: int = 0
    """Proxies in front of the engine trusted to append to X-Forwarded-For
    (``--xff-trusted-hops``). 0: the engine is the edge; the client address is the connection's
    peer. A Gateway's ``podway.io/xff-trusted-hops`` overrides it for its listeners
    (``podway.translate.pools.client_ip``)."""
    real_ip_header: bool = False
    """Set X-Real-IP to the client address on every HTTP/HTTPS listener (``--x-real-ip``).
    Off: only on the Ingress listeners when an Ingress class is taken over from ingress-nginx
    (``takeover_classes``; ingress-nginx always sets it), since it costs every request a
    per-request formatter (docs/performance.md)."""
    l4_engine: EngineKind = EngineKind.ENVOY
    """The engine of a TCP/UDP listener whose Services name none (``podway.io/engine``):
    ``podway run --engine kernel`` makes it ``KERNEL`` (the kernel engine serves every L4
    listener it can; ``podway.translate.pools.engine_choice``)."""
    npl_trust: NplTrust = NplTrust.FILES
    """Which NodePortLocal annotations are believed (``NplTrust``); the controller uses
    ``signed`` with ``npl_key``, or ``node`` for Antrea's agent (``--npl-unsigned``)."""
    npl_key: bytes | None = field(default=None, repr=False)
    """The master key (``NplTrust.SIGNED``): each node's agent signs with the key derived from
    it for that node (``npl.node_key``); never shown."""
    oidc_key: bytes | None = field(default=None, repr=False)
    """The key OIDC policies' session secrets derive from (``podway.translate.oidc``): made by
    ``podway run`` at start, kept by the controller in a Secret; never shown. None: every
    ``security.oidc`` is refused."""
    npl_port_range: tuple[int, int] = (61000, 62000)
    """The agents' node port range (inclusive): a mapping outside it is not believed."""
    npl_enabled_by_controller: bool = False
    """The controller adds ``nodeportlocal.antrea.io/enabled: "true"`` itself to every Service it
    uses in ``nodeportlocal`` mode (``podway controller``): a Service still without it is that
    controller's next step, not the user's problem, so it gets no ``NodePortLocalNotEnabled``
    warning (the controller reports a write that fails). Off (standalone): nobody adds it."""
    vips: VipAllocator | None = None
    """The VIP allocator (``podway.programs.ipam.Ipam``). Set: LoadBalancer Services and Gateways
    bind exactly the addresses it grants (pending ones bind nothing) and ``manifest_addresses`` no
    longer applies to them. None: the addresses come from the manifests as described above."""
