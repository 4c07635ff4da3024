"""Gateway API status as data: GatewayClass, Gateway (with listeners), routes and policies.

Every condition carries the ``metadata.generation`` of its object as ``observedGeneration``.
Route status has one ``parents[]`` entry per parentRef naming one of our Gateways; the route's
``ResolvedRefs`` (backend references) is the same on each of them, ``Accepted`` is per parent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podway.model.gateway import CONTROLLER_NAME, BackendTLSPolicy, Gateway, GatewayClass
from podway.translate.gateway.attach import ParentOutcome
from podway.translate.gateway.backendtls import PolicyOutcome
from podway.translate.gateway.httproute import Issue
from podway.translate.gateway.listeners import PARTIAL_ADDRESS, GatewayInfo, GwListener
from podway.translate.gateway.refs import RefIssue
from podway.translate.status import Condition, ListenerStatus, ObjectStatus, ParentRef, ParentStatus


def _cond(type_: str, ok: bool, reason: str, message: str, generation: int) -> Condition:
    return Condition(type=type_, status=ok, reason=reason, message=message,
                     observed_generation=generation)


def gateway_class_status(cls: GatewayClass) -> ObjectStatus:
    return ObjectStatus(conditions=(_cond("Accepted", True, "Accepted",
                                          f"handled by {cls.spec.controller_name}",
                                          cls.metadata.generation),))


def listener_status(ls: GwListener) -> ListenerStatus:
    gen = ls.gateway.metadata.generation
    accepted = ls.accepted
    if accepted[0] and ls.conflicted is not None:
        accepted = (False, ls.conflicted[0], ls.conflicted[1])
    if accepted[0] and ls.unbound:
        accepted = (False, "PortUnavailable", ls.unbound)
    if ls.programmed:
        programmed = (True, "Programmed", "listener is served")
    else:
        why = (ls.unbound or ls.blocked or (ls.conflicted[1] if ls.conflicted else "")
               or (accepted[2] if not accepted[0] else "no usable certificate"))
        programmed = (False, "Invalid", why)
    conflicted = ((True, ls.conflicted[0], ls.conflicted[1]) if ls.conflicted
                  else (False, "NoConflicts", "no conflicts"))
    return ListenerStatus(
        name=ls.name, supported_kinds=ls.kinds, attached_routes=ls.attached,
        conditions=(_cond("Accepted", *accepted, gen), _cond("Programmed", *programmed, gen),
                    _cond("ResolvedRefs", *ls.resolved, gen),
                    _cond("Conflicted", *conflicted, gen)))


def gateway_status(info: GatewayInfo) -> ObjectStatus:
    gw: Gateway = info.gateway
    gen = gw.metadata.generation
    listeners = tuple(listener_status(ls) for ls in info.listeners)
    valid = [ls for ls in info.listeners if ls.accepted[0] and ls.conflicted is None]
    usable_address = not info.address_issue or info.address_issue.startswith(PARTIAL_ADDRESS)
    if not usable_address:
        accepted = (False, "UnsupportedAddress", info.address_issue)
    elif len(valid) < len(info.listeners):
        accepted = (bool(valid), "ListenersNotValid",
                    f"{len(info.listeners) - len(valid)} of {len(info.listeners)} listeners "
                    "are not valid")
    else:
        accepted = (True, "Accepted", "gateway accepted")
    programmed_count = sum(ls.programmed for ls in info.listeners)
    if not usable_address:
        programmed = (False, "AddressNotUsable", info.address_issue)
    elif programmed_count:
        programmed = (True, "Programmed", f"listeners served on "
                      f"{info.address}: {programmed_count}")
    else:
        programmed = (False, "Invalid", "no listener can be served")
    addresses = (("IPAddress", info.address),) if programmed[0] else ()
    return ObjectStatus(conditions=(_cond("Accepted", *accepted, gen),
                                    _cond("Programmed", *programmed, gen)),
                        addresses=addresses, listeners=listeners)


@dataclass(slots=True)
class RouteState:
    """What status needs to know about one route after attachment and compilation."""

    generation: int
    outcomes: list[ParentOutcome] = field(default_factory=list)
    ref_issues: list[tuple[RefIssue, str]] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    all_rules_dropped: bool = False


def route_status(state: RouteState) -> ObjectStatus:
    gen = state.generation
    if state.ref_issues:
        first = state.ref_issues[0][0]
        more = f" (and {len(state.ref_issues) - 1} more)" if len(state.ref_issues) > 1 else ""
        resolved = _cond("ResolvedRefs", False, first.reason, first.message + more, gen)
    else:
        resolved = _cond("ResolvedRefs", True, "ResolvedRefs", "all references resolved", gen)
    partial = [i for i in state.issues if not i.warning]
    parents = []
    for outcome in state.outcomes:
        ok, reason, message = outcome.accepted
        if ok and state.all_rules_dropped:
            ok, reason, message = False, partial[0].reason, partial[0].message
        conds = [_cond("Accepted", ok, reason, message, gen), resolved]
        if ok and partial:
            conds.append(_cond("PartiallyInvalid", True, partial[0].reason,
                               f"{len(partial)} problems; {partial[0].message}", gen))
        parents.append(ParentStatus(parent_ref=outcome.ref, controller_name=CONTROLLER_NAME,
                                    conditions=tuple(conds)))
    return ObjectStatus(parents=tuple(parents))


def policy_status(outcome: PolicyOutcome) -> ObjectStatus:
    policy: BackendTLSPolicy = outcome.policy
    gen = policy.metadata.generation
    conds = (_cond("Accepted", *outcome.accepted, gen), _cond("ResolvedRefs", *outcome.resolved,
                                                             gen))
    parents = tuple(ParentStatus(parent_ref=ParentRef(group="gateway.networking.k8s.io",
                                                      kind="Gateway", namespace=ref.namespace,
                                                      name=ref.name),
                                 controller_name=CONTROLLER_NAME, conditions=conds)
                    for ref in sorted(outcome.used_by))
    return ObjectStatus(parents=parents)
