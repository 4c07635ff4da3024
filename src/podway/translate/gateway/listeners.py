"""Gateway listeners: validation, conflicts, certificates and the kinds each one accepts.

One ``GwListener`` per ``spec.listeners[]`` entry holds its verdicts (Accepted, ResolvedRefs,
Conflicted), its certificates and, later, its attached-route count. Conflicts are judged per
port and transport (UDP never conflicts with TCP-carried protocols): differing protocols on one
port are a ``ProtocolConflict`` and equal hostnames (no hostname counts as one) a
``HostnameConflict``; every listener involved is marked, none is picked as the winner, and a
conflicted listener is not programmed (the specification: its port is not configured).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from podway.ir import Protocol, TLSCertificate
from podway.model.gateway import GROUP, Gateway, GatewayListener
from podway.model.snapshot import Snapshot
from podway.translate.gateway.refs import ReferenceGrants
from podway.translate.hosts import valid_hostname
from podway.translate.options import TranslateOptions
from podway.translate.tls import certificate_from_secret

Verdict = tuple[bool, str, str]  # (ok, reason, message)

HTTP_KINDS = ((GROUP, "HTTPRoute"), (GROUP, "GRPCRoute"))
KINDS_BY_PROTOCOL: dict[Protocol, tuple[tuple[str, str], ...]] = {
    Protocol.HTTP: HTTP_KINDS,
    Protocol.HTTPS: HTTP_KINDS,
    Protocol.TLS: ((GROUP, "TLSRoute"),),
    Protocol.TCP: ((GROUP, "TCPRoute"),),
    Protocol.UDP: ((GROUP, "UDPRoute"),),
}
ACCEPTED: Verdict = (True, "Accepted", "listener accepted")
PARTIAL_ADDRESS = "only the first address"  # an address issue that still serves
RESOLVED: Verdict = (True, "ResolvedRefs", "all references resolved")


@dataclass(slots=True)
class GwListener:
    gateway: Gateway
    spec: GatewayListener
    index: int
    protocol: Protocol | None
    kinds: tuple[tuple[str, str], ...] = ()
    accepted: Verdict = ACCEPTED
    resolved: Verdict = RESOLVED
    conflicted: tuple[str, str] | None = None  # (reason, message)
    certificates: list[TLSCertificate] = field(default_factory=list)
    attached: int = 0
    unbound: str = ""  # why the engine cannot bind it (port taken elsewhere), "" when bound
    blocked: str = ""  # why it is not served although valid (the Gateway's address), or ""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def hostname(self) -> str | None:
        """The listener hostname where the protocol uses one (TCP and UDP ignore it)."""
        if self.protocol in (Protocol.TCP, Protocol.UDP):
            return None
        return self.spec.hostname

    @property
    def usable(self) -> bool:
        """Generates engine config: accepted, not conflicted, certificates where needed."""
        if not self.accepted[0] or self.conflicted is not None or self.protocol is None:
            return False
        return self.protocol is not Protocol.HTTPS or bool(self.certificates)

    @property
    def programmed(self) -> bool:
        return self.usable and not self.unbound and not self.blocked


@dataclass(slots=True)
class GatewayInfo:
    gateway: Gateway
    address: str
    address_issue: str = ""  # why spec.addresses cannot be honoured, "" when fine
    listeners: list[GwListener] = field(default_factory=list)

    def by_name(self, name: str) -> GwListener | None:
        return next((ls for ls in self.listeners if ls.name == name), None)


_PROTOCOLS = {"HTTP": Protocol.HTTP, "HTTPS": Protocol.HTTPS, "TLS": Protocol.TLS,
              "TCP": Protocol.TCP, "UDP": Protocol.UDP}


def prepare(gateway: Gateway, *, snapshot: Snapshot, grants: ReferenceGrants,
            opts: TranslateOptions) -> GatewayInfo:
    address, issue = _address(gateway, opts)
    info = GatewayInfo(gateway=gateway, address=address, address_issue=issue)
    for i, spec in enumerate(gateway.spec.listeners):
        ls = GwListener(gateway=gateway, spec=spec, index=i, protocol=_PROTOCOLS.get(spec.protocol))
        _validate(ls)
        if ls.accepted[0] and ls.protocol is Protocol.HTTPS:
            _certificates(ls, snapshot, grants)
        if issue and not issue.startswith(PARTIAL_ADDRESS):
            ls.blocked = issue
        info.listeners.append(ls)
    _conflicts(info.listeners)
    return info


def _address(gateway: Gateway, opts: TranslateOptions) -> tuple[str, str]:
    """spec.addresses[0] when it is an IPAddress, else the default bind address."""
    if not gateway.spec.addresses or not gateway.spec.addresses[0].value:
        return opts.address, ""
    first = gateway.spec.addresses[0]
    if first.type != "IPAddress":
        return opts.address, f"address type {first.type} is not supported (IPAddress only)"
    try:
        ipaddress.ip_address(first.value)
    except ValueError:
        return opts.address, f"address {first.value!r} is not an IP address"
    if len(gateway.spec.addresses) > 1:
        return first.value, f"{PARTIAL_ADDRESS} ({first.value}) is bound"
    return first.value, ""


def _validate(ls: GwListener) -> None:
    spec = ls.spec
    if ls.protocol is None:
        ls.accepted = (False, "UnsupportedProtocol",
                       f"protocol {spec.protocol!r} is not supported (HTTP, HTTPS, TLS, TCP, UDP)")
        return
    if spec.hostname is not None and ls.protocol not in (Protocol.TCP, Protocol.UDP) \
            and not valid_hostname(spec.hostname):
        ls.accepted = (False, "UnsupportedValue",
                       f"hostname {spec.hostname!r} is not a DNS name (a leading '*.' is allowed)")
        return
    tls = spec.tls
    if ls.protocol in (Protocol.HTTP, Protocol.TCP, Protocol.UDP) and tls is not None:
        ls.accepted = (False, "UnsupportedValue", f"tls must not be set for {spec.protocol}")
        return
    if ls.protocol is Protocol.HTTPS and (tls is None or tls.mode != "Terminate"):
        ls.accepted = (False, "UnsupportedValue", "HTTPS needs tls.mode Terminate")
        return
    if ls.protocol is Protocol.TLS and (tls is None or tls.mode != "Passthrough"):
        ls.accepted = (False, "UnsupportedValue",
                       "TLS listeners support tls.mode Passthrough only")
        return
    supported = KINDS_BY_PROTOCOL[ls.protocol]
    wanted = spec.allowed_routes.kinds
    if not wanted:
        ls.kinds = supported
        return
    ls.kinds = tuple(dict.fromkeys((k.group, k.kind) for k in wanted
                                   if (k.group, k.kind) in supported))
    bad = [f"{k.group}/{k.kind}" for k in wanted if (k.group, k.kind) not in supported]
    if bad:
        ls.resolved = (False, "InvalidRouteKinds",
                       f"route kinds {', '.join(bad)} cannot attach to a {spec.protocol} listener")


def _certificates(ls: GwListener, snapshot: Snapshot, grants: ReferenceGrants) -> None:
    assert ls.spec.tls is not None  # checked by _validate for HTTPS
    ns = ls.gateway.metadata.namespace
    refs = ls.spec.tls.certificate_refs
    if not refs:
        _unresolved(ls, "InvalidCertificateRef", "HTTPS listener has no certificateRefs")
        return
    hostnames = (ls.spec.hostname,) if ls.spec.hostname else ()
    for ref in refs:
        target_ns = ref.namespace or ns
        if ref.group != "" or ref.kind != "Secret":
            _unresolved(ls, "InvalidCertificateRef",
                        f"certificateRef kind {ref.kind} is not supported (core Secret)")
            continue
        if not grants.permits(from_group=GROUP, from_kind="Gateway", from_namespace=ns,
                              to_group="", to_kind="Secret", to_namespace=target_ns,
                              to_name=ref.name):
            _unresolved(ls, "RefNotPermitted",
                        f"Secret {target_ns}/{ref.name} is in another namespace and no "
                        f"ReferenceGrant in {target_ns} allows Gateways from {ns}")
            continue
        cert = certificate_from_secret(snapshot, target_ns, ref.name, hostnames)
        if isinstance(cert, str):
            _unresolved(ls, "InvalidCertificateRef", cert)
            continue
        ls.certificates.append(cert)


def _unresolved(ls: GwListener, reason: str, message: str) -> None:
    """Record a reference failure; the first one is the one status shows."""
    if ls.resolved[0]:
        ls.resolved = (False, reason, message)


def _family(protocol: Protocol | None) -> str:
    return "udp" if protocol is Protocol.UDP else "tcp"


def _conflicts(listeners: list[GwListener]) -> None:
    groups: dict[tuple[int, str], list[GwListener]] = {}
    for ls in listeners:
        if ls.accepted[0]:
            groups.setdefault((ls.spec.port, _family(ls.protocol)), []).append(ls)
    for (port, _), group in groups.items():
        protocols = {ls.protocol for ls in group}
        if len(protocols) > 1:
            names = ", ".join(sorted(str(p) for p in protocols if p is not None))
            for ls in group:
                ls.conflicted = ("ProtocolConflict",
                                 f"port {port} is claimed by listeners of different protocols "
                                 f"({names})")
            continue
        by_host: dict[str, list[GwListener]] = {}
        for ls in group:
            by_host.setdefault(ls.hostname or "", []).append(ls)
        for host, same in by_host.items():
            if len(same) > 1:
                others = ", ".join(s.name for s in same)
                shown = host or "(no hostname)"
                for ls in same:
                    ls.conflicted = ("HostnameConflict",
                                     f"listeners {others} share port {port} and hostname {shown}")
