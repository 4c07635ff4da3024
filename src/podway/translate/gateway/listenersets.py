"""ListenerSets (GEP-1713, standard since Gateway API v1.5): listeners another object adds to a
Gateway that allows it.

A ListenerSet names its Gateway in ``spec.parentRef``. It joins only a Gateway of ours whose
``spec.allowedListeners.namespaces`` admits the set's namespace (``Same``, ``All``, ``Selector``;
the default ``None`` admits none: ``Accepted=False/NotAllowed``), and only while that Gateway is
accepted (``ParentNotAccepted``). Its listeners then become listeners of the Gateway: bound on
the Gateway's addresses, sharing ports with its listeners as the Gateway's own do, validated and
given their certificates the same way — certificateRefs and ``allowedRoutes`` ``Same`` are
relative to the set's namespace, and a ReferenceGrant must name ``ListenerSet`` as ``from``.

Conflicts follow the GEP's listener precedence instead of marking every listener involved: the
Gateway's own listeners first, then ListenerSets by creation time, then ``namespace/name``, then
the order within the set. A listener whose port another listener of higher precedence uses with
another protocol (HTTPS beside TLS excepted: SNI tells them apart), or with the same hostname, is
``Conflicted`` (``ProtocolConflict``, ``HostnameConflict``) and not served; the higher one keeps
serving.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from podway.model.gateway import GROUP, Gateway, ListenerSet
from podway.model.snapshot import Key, Snapshot
from podway.translate.core.options import TranslateOptions
from podway.translate.core.problems import Reason, Verdict, quote
from podway.translate.gateway.listeners import (
    SNI_SHARED,
    GatewayInfo,
    GwListener,
    SetInfo,
    family,
    new_listener,
)
from podway.translate.gateway.refs import ReferenceGrants

NamespaceLabels = Callable[[str], dict[str, str]]
ATTACHED = Verdict(True, Reason.ACCEPTED, "attached to its Gateway")
_ALLOWING = ("All", "Same", "Selector")


def allows_sets(gateway: Gateway) -> bool:
    """Whether ``spec.allowedListeners`` admits ListenerSets from anywhere at all."""
    allowed = gateway.spec.allowed_listeners
    return allowed is not None and allowed.namespaces.from_ in _ALLOWING


def join_listener_sets(snapshot: Snapshot, infos: Mapping[Key, GatewayInfo], *,
                       grants: ReferenceGrants, opts: TranslateOptions,
                       labels: NamespaceLabels, parent_accepted: Callable[[GatewayInfo], bool]
                       ) -> dict[Key, SetInfo]:
    """Every ListenerSet whose parent is one of our Gateways, by key; the listeners of those
    attached are appended to their Gateway's ``listeners`` (see the module)."""
    out: dict[Key, SetInfo] = {}
    for obj in sorted(snapshot.kind(ListenerSet).values(), key=ListenerSet.age_key):
        pref = obj.spec.parent_ref
        if pref.group != GROUP or pref.kind != Gateway.KIND:
            continue
        info = infos.get((pref.namespace or obj.metadata.namespace, pref.name))
        if info is None:
            continue  # not one of our Gateways: not ours to report on
        verdict = _attachable(info, obj, labels, parent_accepted)
        found = out[obj.key] = SetInfo(obj=obj, info=info, attached=verdict)
        info.sets.append(found)
        if not verdict.ok:
            continue
        blocked = _parent_blocked(info)
        for i, spec in enumerate(obj.spec.listeners):
            ls = new_listener(info.gateway, spec, i, obj, snapshot=snapshot, grants=grants,
                              opts=opts)
            ls.blocked = blocked
            if ls.accepted.ok:
                _conflict(ls, info.listeners)
            found.listeners.append(ls)
            info.listeners.append(ls)
    return out


def _attachable(info: GatewayInfo, obj: ListenerSet, labels: NamespaceLabels,
                parent_accepted: Callable[[GatewayInfo], bool]) -> Verdict:
    gw = info.gateway
    allowed = gw.spec.allowed_listeners
    rule = allowed.namespaces if allowed is not None else None
    ns = obj.metadata.namespace
    where = f"Gateway {gw.metadata.namespace}/{gw.metadata.name}"
    if rule is None or rule.from_ not in _ALLOWING:
        return Verdict(False, Reason.NOT_ALLOWED,
                       f"{where} allows no ListenerSets (spec.allowedListeners)")
    if rule.from_ == "Same" and ns != gw.metadata.namespace:
        return Verdict(False, Reason.NOT_ALLOWED,
                       f"{where} allows ListenerSets from its own namespace only")
    if rule.from_ == "Selector" and (rule.selector is None
                                     or not rule.selector.matches(labels(ns))):
        return Verdict(False, Reason.NOT_ALLOWED,
                       f"{where} does not select namespace {quote(ns)} "
                       "(spec.allowedListeners.namespaces.selector)")
    if not parent_accepted(info):
        return Verdict(False, Reason.PARENT_NOT_ACCEPTED, f"{where} is not accepted")
    return ATTACHED


def _parent_blocked(info: GatewayInfo) -> str:
    """Why the parent serves nothing although accepted (its address), or ""."""
    issue = info.address_issue
    return issue.message if issue is not None and not issue.usable else ""


def _conflict(ls: GwListener, before: list[GwListener]) -> None:
    """Mark ``ls`` conflicted when a listener of higher precedence on its port and transport
    uses another protocol or the same hostname: the Gateway's own (accepted, conflicted among
    themselves or not), then the winners of earlier sets."""
    for other in before:
        if not other.accepted.ok or (other.owner is not None and other.conflicted is not None):
            continue
        if other.spec.port != ls.spec.port or family(other.protocol) != family(ls.protocol):
            continue
        who = _described(other)
        if other.protocol is not ls.protocol and not {other.protocol, ls.protocol} <= SNI_SHARED:
            ls.conflicted = Verdict(False, Reason.PROTOCOL_CONFLICT,
                                    f"port {ls.spec.port} is used by {other.protocol} "
                                    f"listener {who}, which takes precedence")
            return
        if (other.hostname or "") == (ls.hostname or ""):
            shown = ls.hostname or "(no hostname)"
            ls.conflicted = Verdict(False, Reason.HOSTNAME_CONFLICT,
                                    f"port {ls.spec.port} and hostname {shown} are used by "
                                    f"listener {who}, which takes precedence")
            return


def _described(ls: GwListener) -> str:
    if ls.owner is None:
        return f"{ls.name} of the Gateway"
    return f"{ls.name} of ListenerSet {ls.owner.metadata.namespace}/{ls.owner.metadata.name}"


__all__ = ["allows_sets", "join_listener_sets"]
