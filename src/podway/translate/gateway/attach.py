"""Route attachment: which listeners a route's ``parentRefs`` select, and for which hostnames.

A parentRef selects the listeners of one Gateway, narrowed by ``sectionName`` (listener name)
and ``port``. Each selected listener must allow the route's kind and namespace
(``allowedRoutes``); for HTTP, HTTPS and TLS listeners the route's hostnames are intersected
with the listener's hostname. Gateway API wildcards cover any number of labels, never the bare
suffix: ``*.example.com`` covers ``a.b.example.com`` but not ``example.com``. The outcome per
parentRef carries the reason the specification defines when nothing attaches
(NoMatchingParent, NotAllowedByListeners, NoMatchingListenerHostname).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from podway.ir import ListenerProtocol, WildcardMode
from podway.ir.hosts import covers
from podway.model.gateway import GROUP, Gateway, ListenerSet
from podway.model.gateway_routes import ParentReference
from podway.model.snapshot import Key
from podway.translate.core.problems import Reason, Verdict, quote
from podway.translate.core.status import ParentRef
from podway.translate.gateway.listeners import GatewayInfo, GwListener, SetInfo

NamespaceLabels = Callable[[str], dict[str, str]]


@dataclass(frozen=True, slots=True)
class Attachment:
    listener: GwListener
    hostnames: tuple[str, ...]  # effective hostnames; "*" is any; () for TCP and UDP


@dataclass(slots=True)
class ParentOutcome:
    ref: ParentRef
    info: GatewayInfo
    accepted: Verdict
    attachments: list[Attachment] = field(default_factory=list)


def intersect(listener_host: str | None, route_hosts: tuple[str, ...]) -> tuple[str, ...]:
    """Hostnames a route serves on a listener: the more specific side of each overlap."""
    if not route_hosts:
        return (listener_host or "*",)
    if listener_host is None:
        return route_hosts
    out: dict[str, None] = {}
    for host in route_hosts:
        if covers(listener_host, host, WildcardMode.SUFFIX):
            out[host] = None
        elif covers(host, listener_host, WildcardMode.SUFFIX):
            out[listener_host] = None
    return tuple(out)


def namespace_allowed(ls: GwListener, namespace: str, labels: NamespaceLabels) -> bool:
    rule = ls.spec.allowed_routes.namespaces
    if rule.from_ == "All":
        return True
    if rule.from_ == "Same":
        return namespace == ls.namespace
    if rule.from_ == "Selector" and rule.selector is not None:
        return rule.selector.matches(labels(namespace))
    return False  # "None", or a value this version does not know


def parent_key(pref: ParentReference, route_namespace: str) -> Key:
    return (pref.namespace or route_namespace, pref.name)


def attach(*, kind: str, namespace: str, parent_refs: tuple[ParentReference, ...],
           hostnames: tuple[str, ...], gateways: Mapping[Key, GatewayInfo],
           labels: NamespaceLabels,
           sets: Mapping[Key, SetInfo] | None = None) -> list[ParentOutcome]:
    """One outcome per parentRef that names one of our Gateways, or a ListenerSet of one of
    them (others are not ours). A Gateway parent selects its own listeners only, a ListenerSet
    parent the listeners of that set (GEP-1713)."""
    outcomes: list[ParentOutcome] = []
    seen: set[ParentRef] = set()
    for pref in parent_refs:
        if pref.group != GROUP or pref.kind not in (Gateway.KIND, ListenerSet.KIND):
            continue
        found: GatewayInfo | SetInfo | None
        if pref.kind == Gateway.KIND:
            found = gateways.get(parent_key(pref, namespace))
        else:
            found = (sets or {}).get(parent_key(pref, namespace))
        if found is None:
            continue
        ns = (found.gateway if isinstance(found, GatewayInfo) else found.obj).metadata.namespace
        ref = ParentRef(group=pref.group, kind=pref.kind, namespace=ns,
                        name=pref.name, section_name=pref.section_name, port=pref.port)
        if ref in seen:
            continue
        seen.add(ref)
        outcomes.append(_one(ref, pref, found, kind=kind, namespace=namespace,
                             hostnames=hostnames, labels=labels))
    return outcomes


def _one(ref: ParentRef, pref: ParentReference, found: GatewayInfo | SetInfo, *, kind: str,
         namespace: str, hostnames: tuple[str, ...], labels: NamespaceLabels) -> ParentOutcome:
    if isinstance(found, SetInfo):
        info, listeners, what_parent = found.info, found.listeners, "ListenerSet"
        if not found.attached.ok:
            return ParentOutcome(ref, info, Verdict(
                False, Reason.NOT_ALLOWED_BY_LISTENERS,
                f"ListenerSet is not attached to its Gateway: {found.attached.message}"))
    else:
        info, listeners, what_parent = found, found.own, "Gateway"
    candidates = [ls for ls in listeners
                  if (pref.section_name is None or ls.name == pref.section_name)
                  and (pref.port is None or ls.spec.port == pref.port)]
    if not candidates:
        what = " and ".join(part for part in (
            f"sectionName {quote(pref.section_name)}" if pref.section_name is not None else "",
            f"port {pref.port}" if pref.port is not None else "") if part)
        return ParentOutcome(ref, info, Verdict(False, Reason.NO_MATCHING_PARENT,
                                                f"{what_parent} has no listener with "
                                                f"{what or 'any name'}"))
    allowed = [ls for ls in candidates
               if (GROUP, kind) in ls.kinds and namespace_allowed(ls, namespace, labels)]
    if not allowed:
        return ParentOutcome(ref, info, Verdict(False, Reason.NOT_ALLOWED_BY_LISTENERS,
                                                f"no selected listener allows {kind}s from "
                                                f"namespace {namespace}"))
    outcome = ParentOutcome(ref, info, Verdict(True, Reason.ACCEPTED, "route accepted"))
    for ls in allowed:
        if ls.protocol in (ListenerProtocol.TCP, ListenerProtocol.UDP):
            outcome.attachments.append(Attachment(ls, ()))
            continue
        hosts = intersect(ls.hostname, hostnames)
        if hosts:
            outcome.attachments.append(Attachment(ls, hosts))
    if not outcome.attachments:
        outcome.accepted = Verdict(False, Reason.NO_MATCHING_LISTENER_HOSTNAME,
                                   "no route hostname matches the hostname of any selected "
                                   "listener")
    return outcome
