"""Gateway listeners: validation, conflicts, certificates and the kinds each one accepts.

One ``GwListener`` per ``spec.listeners[]`` entry holds its verdicts (Accepted, ResolvedRefs,
Conflicted), its certificates and, later, its attached-route count. Conflicts are judged per
port and transport (UDP never conflicts with TCP-carried protocols): differing protocols on one
port are a ``ProtocolConflict`` — except HTTPS with TLS, which SNI tells apart — and equal
hostnames (no hostname counts as one, across HTTPS and TLS too) a ``HostnameConflict``; every
listener involved is marked, none is picked as the winner, and a conflicted listener is not
programmed (the specification: its port is not configured).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from podway.ir import ListenerProtocol, TLSCertificate, TLSOptions
from podway.model.gateway import (
    GROUP,
    FrontendTLSValidation,
    Gateway,
    GatewayListener,
    ListenerSet,
)
from podway.model.snapshot import Snapshot
from podway.translate.core.addresses import AddressChoice, choose_address
from podway.translate.core.hosts import valid_hostname
from podway.translate.core.options import TranslateOptions
from podway.translate.core.problems import Reason, Verdict, listing, quote
from podway.translate.core.tls import ca_bundle, certificate_from_secret
from podway.translate.core.tls_options import TLSOptionError, from_listener_options
from podway.translate.core.vips import VipGrant, grant_of
from podway.translate.gateway.refs import ReferenceGrants

L4_PROTOCOLS = (ListenerProtocol.TCP, ListenerProtocol.UDP)
HTTP_KINDS = ((GROUP, "HTTPRoute"), (GROUP, "GRPCRoute"))
KINDS_BY_PROTOCOL: dict[ListenerProtocol, tuple[tuple[str, str], ...]] = {
    ListenerProtocol.HTTP: HTTP_KINDS,
    ListenerProtocol.HTTPS: HTTP_KINDS,
    ListenerProtocol.TLS: ((GROUP, "TLSRoute"),),
    ListenerProtocol.TCP: ((GROUP, "TCPRoute"),),
    ListenerProtocol.UDP: ((GROUP, "UDPRoute"),),
}
TLS_TERMINATE_KINDS = ((GROUP, "TLSRoute"), (GROUP, "TCPRoute"))
#: Protocols that may share one port: the engine tells them apart by SNI (extended feature).
SNI_SHARED = frozenset({ListenerProtocol.HTTPS, ListenerProtocol.TLS})
ACCEPTED = Verdict(True, Reason.ACCEPTED, "listener accepted")
RESOLVED = Verdict(True, Reason.RESOLVED_REFS, "all references resolved")


@dataclass(slots=True)
class GwListener:
    gateway: Gateway
    spec: GatewayListener
    index: int
    protocol: ListenerProtocol | None
    kinds: tuple[tuple[str, str], ...] = ()
    accepted: Verdict = ACCEPTED
    resolved: Verdict = RESOLVED
    conflicted: Verdict | None = None  # ok False: why the listener conflicts
    certificates: list[TLSCertificate] = field(default_factory=list)
    warnings: list[Verdict] = field(default_factory=list)  # served anyway (expiring certificate)
    attached: int = 0
    unbound: str = ""  # why the engine cannot bind it (port taken elsewhere), "" when bound
    blocked: str = ""  # why it is not served although valid (the Gateway's address), or ""
    owner: ListenerSet | None = None  # the ListenerSet that brought it; None: the Gateway's own

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def namespace(self) -> str:
        """The namespace of the object declaring the listener: ``Same`` and certificateRefs
        are relative to it."""
        return (self.owner or self.gateway).metadata.namespace

    @property
    def generation(self) -> int:
        """The generation of the object declaring the listener (its status's)."""
        return (self.owner or self.gateway).metadata.generation

    @property
    def declared_by(self) -> str:
        """The kind declaring the listener (the ``from`` of a ReferenceGrant)."""
        return ListenerSet.KIND if self.owner is not None else Gateway.KIND

    @property
    def hostname(self) -> str | None:
        """The listener hostname where the protocol uses one (TCP and UDP ignore it)."""
        if self.protocol in (ListenerProtocol.TCP, ListenerProtocol.UDP):
            return None
        return self.spec.hostname

    @property
    def terminates(self) -> bool:
        """The engine terminates TLS: HTTPS, or TLS in ``Terminate`` mode (TLSRoutes then get
        the decrypted bytes)."""
        if self.protocol is ListenerProtocol.HTTPS:
            return True
        return (self.protocol is ListenerProtocol.TLS and self.spec.tls is not None
                and self.spec.tls.mode == "Terminate")

    @property
    def usable(self) -> bool:
        """Generates engine config: accepted, not conflicted, certificates where needed."""
        if not self.accepted.ok or self.conflicted is not None or self.protocol is None:
            return False
        return not self.terminates or bool(self.certificates)

    @property
    def programmed(self) -> bool:
        return self.usable and not self.unbound and not self.blocked


@dataclass(frozen=True, slots=True)
class AddressIssue:
    """Why ``spec.addresses`` cannot be honoured as written."""

    message: str
    usable: bool  # True: the Gateway still serves on the address chosen (a Warning)
    reason: Reason = Reason.UNSUPPORTED_ADDRESS


@dataclass(slots=True)
class GatewayInfo:
    gateway: Gateway
    address: str  # the first address: names the engine listeners, decides port sharing
    address_issue: AddressIssue | None = None
    class_issue: str = ""  # its GatewayClass's parameters are invalid: not served, and why
    listeners: list[GwListener] = field(default_factory=list)
    # Every further usable address of spec.addresses: each programmed listener is bound there
    # too (a copy of the engine listener); one the port table refuses is dropped from here.
    extra_addresses: list[str] = field(default_factory=list)
    # ``spec.tls.backend.clientCertificateRef``: the certificate shown to backends reached
    # over TLS (a BackendTLSPolicy), and why the reference cannot be used (ResolvedRefs).
    backend_certificate: TLSCertificate | None = None
    backend_issue: Verdict | None = None
    # The ListenerSets naming this Gateway as parent, in precedence order (attached or not);
    # the listeners of those attached are in ``listeners`` too, after the Gateway's own.
    sets: list[SetInfo] = field(default_factory=list)

    @property
    def addresses(self) -> tuple[str, ...]:
        return (self.address, *self.extra_addresses)

    @property
    def own(self) -> list[GwListener]:
        """The Gateway's own listeners (``spec.listeners``)."""
        return [ls for ls in self.listeners if ls.owner is None]


@dataclass(slots=True)
class SetInfo:
    """A ListenerSet whose parent is one of our Gateways."""

    obj: ListenerSet
    info: GatewayInfo  # the parent
    attached: Verdict  # False: NotAllowed, ParentNotAccepted (its listeners are not served)
    listeners: list[GwListener] = field(default_factory=list)


_PROTOCOLS = {"HTTP": ListenerProtocol.HTTP, "HTTPS": ListenerProtocol.HTTPS,
              "TLS": ListenerProtocol.TLS,
              "TCP": ListenerProtocol.TCP, "UDP": ListenerProtocol.UDP}


def prepare(gateway: Gateway, *, snapshot: Snapshot, grants: ReferenceGrants,
            opts: TranslateOptions) -> GatewayInfo:
    grant = grant_of(gateway.ref, snapshot, opts)
    if grant is not None:  # an address allocator decides: every address it granted
        address, issue, extra = _granted(grant, opts)
        info = GatewayInfo(gateway=gateway, address=address, address_issue=issue,
                           extra_addresses=extra)
    else:
        address, issue, extra = _addresses(gateway, opts)
        info = GatewayInfo(gateway=gateway, address=address, address_issue=issue,
                           extra_addresses=extra)
    for i, spec in enumerate(gateway.spec.listeners):
        ls = new_listener(gateway, spec, i, None, snapshot=snapshot, grants=grants, opts=opts)
        if issue is not None and not issue.usable:
            ls.blocked = issue.message
        info.listeners.append(ls)
    _conflicts(info.listeners)
    _backend_certificate(info, snapshot, grants)
    return info


def _backend_certificate(info: GatewayInfo, snapshot: Snapshot, grants: ReferenceGrants) -> None:
    """``spec.tls.backend.clientCertificateRef`` read: a TLS Secret, across namespaces only
    with a ReferenceGrant; else ``backend_issue`` (``InvalidClientCertificateRef``,
    ``RefNotPermitted``) and no certificate: backends that require one refuse the engine."""
    tls = info.gateway.spec.tls
    ref = tls.backend.client_certificate_ref if tls is not None and tls.backend else None
    if ref is None:
        return
    ns = info.gateway.metadata.namespace
    target_ns = ref.namespace or ns
    if ref.group != "" or ref.kind != "Secret":
        info.backend_issue = Verdict(False, Reason.INVALID_CLIENT_CERTIFICATE_REF,
                                     f"clientCertificateRef kind {quote(ref.kind)} is not "
                                     "supported (core Secret)")
        return
    if not grants.permits(from_group=GROUP, from_kind=Gateway.KIND, from_namespace=ns,
                          to_group="", to_kind="Secret", to_namespace=target_ns,
                          to_name=ref.name):
        info.backend_issue = Verdict(False, Reason.REF_NOT_PERMITTED,
                                     f"Secret {target_ns}/{ref.name} is in another namespace "
                                     f"and no ReferenceGrant in {target_ns} allows Gateways "
                                     f"from {ns}")
        return
    found = certificate_from_secret(snapshot, target_ns, ref.name, ())
    if found.error is not None or found.certificate is None:
        info.backend_issue = Verdict(False, Reason.INVALID_CLIENT_CERTIFICATE_REF,
                                     "clientCertificateRef: " + (
                                         found.error.message if found.error else "no certificate"))
        return
    info.backend_certificate = found.certificate


def new_listener(gateway: Gateway, spec: GatewayListener, index: int, owner: ListenerSet | None,
                 *, snapshot: Snapshot, grants: ReferenceGrants,
                 opts: TranslateOptions) -> GwListener:
    """One listener validated, with its certificates (``owner``: the ListenerSet declaring it)."""
    ls = GwListener(gateway=gateway, spec=spec, index=index,
                    protocol=_PROTOCOLS.get(spec.protocol), owner=owner)
    _validate(ls)
    if ls.accepted.ok and ls.terminates:
        _certificates(ls, snapshot, grants, opts)
    return ls


def _granted(grant: VipGrant, opts: TranslateOptions
             ) -> tuple[str, AddressIssue | None, list[str]]:
    """The allocator's addresses (first, issue, the others); none: not programmed."""
    if grant.pending:
        return opts.address, AddressIssue(grant.message, usable=False,
                                          reason=Reason.ADDRESS_NOT_ASSIGNED), []
    issue = None
    if grant.reason is not None:
        issue = AddressIssue(grant.message, usable=True, reason=grant.reason)
    return grant.addresses[0], issue, list(grant.addresses[1:])


def _addresses(gateway: Gateway, opts: TranslateOptions
               ) -> tuple[str, AddressIssue | None, list[str]]:
    """The addresses ``spec.addresses`` asks for (first, issue, the others), without an
    allocator; none: the default bind address.

    The API's rules (and its GatewayStaticAddresses conformance test): an address of a type
    other than IPAddress makes the Gateway ``Accepted=False/UnsupportedAddress``; an address that
    cannot be bound here (not an IP, or a manifest may not choose it: ``--manifest-addresses``)
    makes it ``Programmed=False/AddressNotUsable``. Either way nothing is bound for the Gateway:
    it is never moved silently onto another address, where it would take another Gateway's port.
    """
    given = [a for a in gateway.spec.addresses if a.value or a.type != "IPAddress"]
    if not given:
        return opts.address, None, []
    unsupported = [f"spec.addresses[{i}]: type {quote(a.type)} is not supported (IPAddress only)"
                   for i, a in enumerate(gateway.spec.addresses) if a.type != "IPAddress"]
    if unsupported:
        return opts.address, AddressIssue(listing(unsupported, limit=3), usable=False), []
    chosen: list[str] = []
    unusable: list[str] = []
    for i, spec in enumerate(gateway.spec.addresses):
        if not spec.value:
            continue
        choice = choose_address(spec.value, opts, f"spec.addresses[{i}]")
        if choice.address is None or choice.refusal is not None:
            unusable.append(_unusable(spec.value, f"spec.addresses[{i}]", choice, opts))
        elif choice.address not in chosen:
            chosen.append(choice.address)
    if unusable:
        return opts.address, AddressIssue(
            listing(unusable, limit=3) + "; the Gateway is not programmed", usable=False,
            reason=Reason.ADDRESS_NOT_USABLE), []
    return chosen[0], None, chosen[1:]


def _unusable(value: str, what: str, choice: AddressChoice, opts: TranslateOptions) -> str:
    """Why ``value`` cannot be bound, with how to resolve it (the API asks for both)."""
    if choice.refusal is not None and choice.refusal.reason is Reason.ADDRESS_NOT_ALLOWED:
        return (f"{what} {value} cannot be bound: manifests may not choose bind addresses "
                f"(allow it with --manifest-addresses, or leave spec.addresses out to bind "
                f"{opts.address})")
    return choice.refusal.message if choice.refusal is not None else f"{what} {value}"


def _validate(ls: GwListener) -> None:
    spec = ls.spec
    if ls.protocol is None:
        ls.accepted = Verdict(False, Reason.UNSUPPORTED_PROTOCOL,
                              f"protocol {quote(spec.protocol)} is not supported "
                              "(HTTP, HTTPS, TLS, TCP, UDP)")
        return
    if spec.hostname is not None and ls.protocol not in L4_PROTOCOLS \
            and not valid_hostname(spec.hostname):
        ls.accepted = Verdict(False, Reason.UNSUPPORTED_VALUE,
                              f"hostname {quote(spec.hostname)} is not a DNS name "
                              "(a leading '*.' is allowed)")
        return
    tls = spec.tls
    if ls.protocol in (ListenerProtocol.HTTP, *L4_PROTOCOLS) and tls is not None:
        ls.accepted = Verdict(False, Reason.UNSUPPORTED_VALUE,
                              f"tls must not be set for {spec.protocol}")
        return
    if ls.protocol is ListenerProtocol.HTTPS and (tls is None or tls.mode != "Terminate"):
        ls.accepted = Verdict(False, Reason.UNSUPPORTED_VALUE, "HTTPS needs tls.mode Terminate")
        return
    if ls.protocol is ListenerProtocol.TLS and (tls is None
                                                or tls.mode not in ("Passthrough", "Terminate")):
        ls.accepted = Verdict(False, Reason.UNSUPPORTED_VALUE,
                              "TLS listeners need tls.mode Passthrough or Terminate")
        return
    supported = KINDS_BY_PROTOCOL[ls.protocol]
    if ls.protocol is ListenerProtocol.TLS and ls.terminates:
        supported = TLS_TERMINATE_KINDS  # decrypted bytes may go to a TCPRoute as well
    wanted = spec.allowed_routes.kinds
    if not wanted:
        ls.kinds = supported
        return
    ls.kinds = tuple(dict.fromkeys((k.group, k.kind) for k in wanted
                                   if (k.group, k.kind) in supported))
    bad = [quote(f"{k.group}/{k.kind}") for k in wanted if (k.group, k.kind) not in supported]
    if bad:
        ls.resolved = Verdict(False, Reason.INVALID_ROUTE_KINDS,
                              f"route kinds {listing(bad)} cannot attach to a "
                              f"{spec.protocol} listener")


def _certificates(ls: GwListener, snapshot: Snapshot, grants: ReferenceGrants,
                  opts: TranslateOptions) -> None:
    assert ls.spec.tls is not None  # checked by _validate for HTTPS and TLS
    try:
        options = from_listener_options(ls.spec.tls.options, opts.tls)
    except TLSOptionError as error:
        # Fail closed: serving the engine's defaults could accept an older TLS version than
        # the one asked for.
        ls.accepted = Verdict(False, Reason.UNSUPPORTED_VALUE, str(error))
        return
    ns = ls.namespace
    if ls.protocol is ListenerProtocol.HTTPS:
        checked = _frontend_validation(ls, options, snapshot, grants)
        if checked is None:
            return  # every caCertificateRef invalid: not accepted, never served unverified
        options = checked
    refs = ls.spec.tls.certificate_refs
    if not refs:
        _unresolved(ls, Reason.INVALID_CERTIFICATE_REF,
                    f"{ls.spec.protocol} listener terminating TLS has no certificateRefs")
        return
    hostnames = (ls.spec.hostname,) if ls.spec.hostname else ()
    for ref in refs:
        target_ns = ref.namespace or ns
        if ref.group != "" or ref.kind != "Secret":
            _unresolved(ls, Reason.INVALID_CERTIFICATE_REF,
                        f"certificateRef kind {quote(ref.kind)} is not supported (core Secret)")
            continue
        if not grants.permits(from_group=GROUP, from_kind=ls.declared_by, from_namespace=ns,
                              to_group="", to_kind="Secret", to_namespace=target_ns,
                              to_name=ref.name):
            _unresolved(ls, Reason.REF_NOT_PERMITTED,
                        f"Secret {target_ns}/{ref.name} is in another namespace and no "
                        f"ReferenceGrant in {target_ns} allows {ls.declared_by}s from {ns}")
            continue
        found = certificate_from_secret(snapshot, target_ns, ref.name, hostnames)
        if found.error is not None or found.certificate is None:
            _unresolved(ls, Reason.INVALID_CERTIFICATE_REF,
                        found.error.message if found.error else "no certificate")
            continue
        if found.warning is not None:
            ls.warnings.append(found.warning)
        ls.certificates.append(replace(found.certificate, options=options))


def frontend_settings(gateway: Gateway, port: int) -> FrontendTLSValidation | None:
    """``spec.tls.frontend`` for HTTPS listeners of ``port``: its ``perPort`` entry, else the
    default; None: no client certificates asked for."""
    tls = gateway.spec.tls
    frontend = tls.frontend if tls is not None else None
    if frontend is None:
        return None
    chosen = next((p.tls for p in frontend.per_port if p.port == port), frontend.default)
    return chosen.validation


def _frontend_validation(ls: GwListener, options: TLSOptions, snapshot: Snapshot,
                         grants: ReferenceGrants) -> TLSOptions | None:
    """``options`` with the client-certificate settings of an HTTPS listener (unchanged
    without ``spec.tls.frontend``), or None when every caCertificateRef is invalid
    (``Accepted=False``, ``NoValidCACertificate``). An invalid reference beside valid ones is
    ``ResolvedRefs=False`` and the listener verifies against the valid ones (never against
    nothing)."""
    validation = frontend_settings(ls.gateway, ls.spec.port)
    if validation is None:
        return options
    ns = ls.gateway.metadata.namespace
    pems: list[str] = []
    for ref in validation.ca_certificate_refs:
        target_ns = ref.namespace or ns
        if ref.group == "" and ref.kind in ("ConfigMap", "Secret") and not grants.permits(
                from_group=GROUP, from_kind="Gateway", from_namespace=ns, to_group="",
                to_kind=ref.kind, to_namespace=target_ns, to_name=ref.name):
            _unresolved(ls, Reason.REF_NOT_PERMITTED,
                        f"caCertificateRef {ref.kind} {target_ns}/{ref.name} is in another "
                        f"namespace and no ReferenceGrant in {target_ns} allows Gateways from "
                        f"{ns}")
            continue
        pem = ca_bundle(snapshot, target_ns, ref.group, ref.kind, ref.name)
        if isinstance(pem, Verdict):
            reason = (Reason.INVALID_CA_CERTIFICATE_KIND if pem.reason is Reason.INVALID_KIND
                      else pem.reason)
            _unresolved(ls, reason, pem.message)
            continue
        pems.append(pem)
    if not pems:
        ls.accepted = Verdict(False, Reason.NO_VALID_CA_CERTIFICATE,
                              "spec.tls.frontend: no caCertificateRef is valid"
                              + (f" ({ls.resolved.message})" if not ls.resolved.ok else ""))
        return None
    insecure = validation.mode == "AllowInsecureFallback"
    return replace(options, client_ca_pem="".join(pems),
                   client_ca=f"gateway/{ns}/{ls.gateway.metadata.name}/tls.frontend",
                   client_required=not insecure, client_accept_untrusted=insecure)


def _unresolved(ls: GwListener, reason: Reason, message: str) -> None:
    """Record a reference failure; the first one is the one status shows."""
    if ls.resolved.ok:
        ls.resolved = Verdict(False, reason, message)


def family(protocol: ListenerProtocol | None) -> str:
    return "udp" if protocol is ListenerProtocol.UDP else "tcp"


def _conflicts(listeners: list[GwListener]) -> None:
    groups: dict[tuple[int, str], list[GwListener]] = {}
    for ls in listeners:
        if ls.accepted.ok:
            groups.setdefault((ls.spec.port, family(ls.protocol)), []).append(ls)
    for (port, _), group in groups.items():
        protocols = {ls.protocol for ls in group}
        # HTTPS and TLS share a port: SNI picks a terminating or a passthrough filter chain.
        if len(protocols) > 1 and not protocols <= SNI_SHARED:
            names = ", ".join(sorted(str(p) for p in protocols if p is not None))
            for ls in group:
                ls.conflicted = Verdict(False, Reason.PROTOCOL_CONFLICT,
                                        f"port {port} is claimed by listeners of different "
                                        f"protocols ({names})")
            continue
        by_host: dict[str, list[GwListener]] = {}
        for ls in group:
            by_host.setdefault(ls.hostname or "", []).append(ls)
        for host, same in by_host.items():
            if len(same) > 1:
                others = listing([s.name for s in same])
                shown = host or "(no hostname)"
                for ls in same:
                    ls.conflicted = Verdict(False, Reason.HOSTNAME_CONFLICT,
                                            f"listeners {others} share port {port} and "
                                            f"hostname {shown}")
