"""Gateway API status as data: GatewayClass, Gateway (with listeners), routes and policies.

Every condition carries the ``metadata.generation`` of its object as ``observedGeneration``.
Route status has one ``parents[]`` entry per parentRef naming one of our Gateways; the route's
``ResolvedRefs`` (backend references) is the same on each of them, ``Accepted`` is per parent.
Each condition is decided as a ``Verdict`` first, then written with its type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from podway.model import ObjectRef
from podway.model.gateway import (
    CONTROLLER_NAME,
    GROUP,
    BackendTLSPolicy,
    Gateway,
    GatewayClass,
)
from podway.model.kinds import CRDS
from podway.translate.core.problems import Problem, Reason, Severity, Verdict, listing
from podway.translate.core.status import (
    Condition,
    ListenerStatus,
    ObjectStatus,
    ParentRef,
    ParentStatus,
)
from podway.translate.gateway.attach import ParentOutcome
from podway.translate.gateway.backendtls import PolicyOutcome
from podway.translate.gateway.httproute import Issue
from podway.translate.gateway.listeners import GatewayInfo, GwListener, SetInfo
from podway.translate.gateway.refs import RefIssue

#: The Gateway API version whose feature names (``pkg/features``) and CRDs Podway targets.
GATEWAY_API_VERSION = "v1.6.1"

#: ``GatewayClass.status.supportedFeatures``: every feature of ``GATEWAY_API_VERSION`` Podway
#: serves, each backed by the project's own end-to-end tests against a real engine (the
#: conformance report in docs/gateway-api.md lists them per feature and engine kind). Sorted,
#: as the API requires. A feature is added here only with its test.
# A feature named after a kind is claimed for every Gateway API kind Podway reads (the kinds
# table), but GatewayClass (no feature of that name) and BackendLBPolicy (gone upstream).
_KIND_FEATURES = tuple(k.name for k in CRDS if k.group == GROUP
                       and k.name not in ("GatewayClass", "BackendLBPolicy"))
SUPPORTED_FEATURES: tuple[str, ...] = tuple(sorted((*_KIND_FEATURES,
    "BackendTLSPolicySANValidation",
    "GatewayBackendClientCertificate",
    "GatewayFrontendClientCertificateValidation",
    "GatewayFrontendClientCertificateValidationInsecureFallback",
    "GatewayHTTPListenerIsolation",
    "GatewayPort8080",
    "GatewayStaticAddresses",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteBackendRequestHeaderModification",
    "HTTPRouteBackendTimeout",
    "HTTPRouteCORS",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteParentRefPort",
    "HTTPRoutePathRedirect",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestPercentageMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    "HTTPRouteRetry",
    "HTTPRouteRetryBackendTimeout",
    "HTTPRouteRetryConnectionError",
    "HTTPRouteSchemeRedirect",
    "TLSRouteModeTerminate",
)))


class ConditionType(StrEnum):
    ACCEPTED = "Accepted"
    PROGRAMMED = "Programmed"
    RESOLVED_REFS = "ResolvedRefs"
    CONFLICTED = "Conflicted"
    PARTIALLY_INVALID = "PartiallyInvalid"
    INSECURE_FRONTEND = "InsecureFrontendValidationMode"
    SUPPORTED_VERSION = "SupportedVersion"


def _cond(type_: ConditionType, verdict: Verdict, generation: int) -> Condition:
    return Condition(type=str(type_), status=verdict.ok, reason=str(verdict.reason),
                     message=verdict.message, observed_generation=generation)


def gateway_class_status(cls: GatewayClass, invalid: Verdict | None = None,
                         bundles: Mapping[str, str] | None = None) -> ObjectStatus:
    """Accepted (or ``invalid``: its parametersRef, ``InvalidParameters``), SupportedVersion
    when the cluster's CRDs are known (``bundles``, see ``supported_version``) and the
    features."""
    gen = cls.metadata.generation
    accepted = invalid or Verdict(True, Reason.ACCEPTED, f"handled by {cls.spec.controller_name}")
    conditions = [_cond(ConditionType.ACCEPTED, accepted, gen)]
    if bundles is not None:
        conditions.append(_cond(ConditionType.SUPPORTED_VERSION, supported_version(bundles),
                                gen))
    return ObjectStatus(conditions=tuple(conditions), supported_features=SUPPORTED_FEATURES)


def gateway_class_problems(cls: GatewayClass, invalid: Verdict | None,
                           bundles: Mapping[str, str] | None) -> list[Problem]:
    """Its invalid parametersRef (an error), CRDs of another release (a warning)."""
    out = []
    if invalid is not None:
        out.append(Problem(ref=cls.ref, reason=invalid.reason, message=invalid.message,
                           field="spec.parametersRef"))
    if bundles is not None and not (version := supported_version(bundles)).ok:
        out.append(Problem(ref=cls.ref, reason=version.reason, message=version.message,
                           severity=Severity.WARNING))
    return out


def supported_version(bundles: Mapping[str, str]) -> Verdict:
    """Whether every Gateway API CRD in the cluster (CRD name → its bundle-version annotation)
    is of the minor release Podway targets (``GATEWAY_API_VERSION``'s vX.Y, any patch). An
    unannotated CRD or another release is ``UnsupportedVersion``: the class is still accepted
    and served on a best-effort basis, as the API allows."""
    minor = _minor(GATEWAY_API_VERSION)
    wrong = sorted(f"{name} ({version or 'no bundle-version annotation'})"
                   for name, version in bundles.items() if _minor(version) != minor)
    if wrong:
        return Verdict(False, Reason.UNSUPPORTED_VERSION,
                       f"Gateway API CRDs of another release than {minor}.x: "
                       f"{listing(wrong, limit=3)}; served on a best-effort basis (install "
                       f"the {GATEWAY_API_VERSION} CRDs, deploy/crds/gateway-api)")
    return Verdict(True, Reason.SUPPORTED_VERSION,
                   f"Gateway API CRDs of release {minor}.x ({len(bundles)} CRDs)")


def _minor(version: str) -> str:
    """``v1.6.1`` → ``v1.6``; "" for anything else."""
    parts = version.split(".")
    ok = len(parts) >= 2 and parts[0][:1] == "v" and parts[0][1:].isdigit() \
        and parts[1].isdigit()
    return f"{parts[0]}.{parts[1]}" if ok else ""


def listener_status(ls: GwListener) -> ListenerStatus:
    gen = ls.generation
    accepted = ls.accepted
    if accepted.ok and ls.conflicted is not None:
        accepted = ls.conflicted
    if accepted.ok and ls.unbound:
        accepted = Verdict(False, Reason.PORT_UNAVAILABLE, ls.unbound)
    if ls.programmed:
        programmed = Verdict(True, Reason.PROGRAMMED, "listener is served")
    elif ls.conflicted is not None and ls.owner is not None:
        # A ListenerSet's conflicted listener: its Programmed says which conflict, as the
        # v1.6.1 conformance suite asks (listenerset-hostname-conflict, -protocol-conflict).
        programmed = Verdict(False, ls.conflicted.reason, ls.conflicted.message)
    else:
        why = (ls.unbound or ls.blocked or (ls.conflicted.message if ls.conflicted else "")
               or (accepted.message if not accepted.ok else "no usable certificate"))
        programmed = Verdict(False, Reason.INVALID, why)
    conflicted = (Verdict(True, ls.conflicted.reason, ls.conflicted.message) if ls.conflicted
                  else Verdict(False, Reason.NO_CONFLICTS, "no conflicts"))
    return ListenerStatus(
        name=ls.name, supported_kinds=ls.kinds, attached_routes=ls.attached,
        conditions=(_cond(ConditionType.ACCEPTED, accepted, gen),
                    _cond(ConditionType.PROGRAMMED, programmed, gen),
                    _cond(ConditionType.RESOLVED_REFS, ls.resolved, gen),
                    _cond(ConditionType.CONFLICTED, conflicted, gen)))


def gateway_accepted(info: GatewayInfo) -> Verdict:
    """The Gateway's ``Accepted`` (its own listeners decide ``ListenersNotValid``)."""
    own = info.own
    valid = [ls for ls in own if ls.accepted.ok and ls.conflicted is None]
    issue = info.address_issue
    if info.class_issue:
        return Verdict(False, Reason.INVALID, info.class_issue)
    if issue is not None and not issue.usable and issue.reason is Reason.UNSUPPORTED_ADDRESS:
        return Verdict(False, Reason.UNSUPPORTED_ADDRESS, issue.message)
    if len(valid) < len(own):
        return Verdict(bool(valid), Reason.LISTENERS_NOT_VALID,
                       f"{len(own) - len(valid)} of {len(own)} listeners are not valid")
    return Verdict(True, Reason.ACCEPTED, "gateway accepted")


def gateway_status(info: GatewayInfo) -> ObjectStatus:
    gw: Gateway = info.gateway
    gen = gw.metadata.generation
    listeners = tuple(listener_status(ls) for ls in info.own)
    issue = info.address_issue
    usable_address = issue is None or issue.usable
    accepted = gateway_accepted(info)
    programmed_count = sum(ls.programmed for ls in info.own)
    if info.class_issue:
        programmed = Verdict(False, Reason.INVALID, info.class_issue)
    elif issue is not None and not usable_address:
        reason = (Reason.ADDRESS_NOT_ASSIGNED if issue.reason is Reason.ADDRESS_NOT_ASSIGNED
                  else Reason.ADDRESS_NOT_USABLE)
        programmed = Verdict(False, reason, issue.message)
    elif programmed_count:
        programmed = Verdict(True, Reason.PROGRAMMED,
                             f"listeners served on {', '.join(info.addresses)}: "
                             f"{programmed_count}")
    else:
        programmed = Verdict(False, Reason.INVALID, "no listener can be served")
    addresses = tuple(("IPAddress", a) for a in info.addresses) if programmed.ok else ()
    conditions = [_cond(ConditionType.ACCEPTED, accepted, gen),
                  _cond(ConditionType.PROGRAMMED, programmed, gen)]
    insecure = _insecure_ports(gw)
    if insecure:  # present only while some port lets unverified clients through
        conditions.append(_cond(ConditionType.INSECURE_FRONTEND, Verdict(
            True, Reason.CONFIGURATION_CHANGED, "spec.tls.frontend: AllowInsecureFallback "
            f"lets clients without a valid certificate through ({insecure})"), gen))
    if info.backend_issue is not None or info.backend_certificate is not None:
        conditions.append(_cond(ConditionType.RESOLVED_REFS, info.backend_issue or Verdict(
            True, Reason.RESOLVED_REFS, "spec.tls.backend.clientCertificateRef resolved"), gen))
    attached_sets = _attached_sets(info)
    return ObjectStatus(conditions=tuple(conditions), addresses=addresses, listeners=listeners,
                        attached_listener_sets=attached_sets)


def _attached_sets(info: GatewayInfo) -> int | None:
    """``status.attachedListenerSets``: the ListenerSets attached and accepted; None (not
    written) when the Gateway allows no ListenerSets and none names it. No condition goes with
    it: the ``AttachedListenerSets`` condition of early GEP-1713 drafts left the API before
    v1.5 (gateway-api#4358, "remove redundant condition"), only the count remains."""
    gw = info.gateway
    allowed = gw.spec.allowed_listeners
    open_ = allowed is not None and allowed.namespaces.from_ in ("All", "Same", "Selector")
    if not open_ and not info.sets:
        return None
    return sum(1 for s in info.sets if s.attached.ok and listener_set_verdicts(s)[0].ok)


def listener_set_verdicts(found: SetInfo) -> tuple[Verdict, Verdict]:
    """A ListenerSet's ``Accepted`` and ``Programmed`` (the API's ListenerSet reasons)."""
    if not found.attached.ok:
        return found.attached, found.attached
    listeners = found.listeners
    # Valid: accepted, not conflicted, and served or with its references resolved — a
    # listener whose only certificate is not permitted makes the set ListenersNotValid
    # (conformance listenerset-reference-grant).
    valid = [ls for ls in listeners if ls.accepted.ok and ls.conflicted is None
             and (ls.programmed or ls.resolved.ok)]
    served = [ls for ls in listeners if ls.programmed]
    if len(valid) == len(listeners):
        accepted = Verdict(True, Reason.ACCEPTED, "listener set accepted")
    else:
        accepted = Verdict(bool(valid), Reason.LISTENERS_NOT_VALID,
                           f"{len(listeners) - len(valid)} of {len(listeners)} listeners are "
                           "not valid")
    blocked = next((ls.blocked for ls in listeners if ls.blocked), "")
    if blocked:
        programmed = Verdict(False, Reason.PARENT_NOT_PROGRAMMED, blocked)
    elif len(served) == len(listeners):
        programmed = Verdict(True, Reason.PROGRAMMED, f"{len(served)} listeners served")
    elif served:  # True/Programmed while any is served (the conformance suite's reading)
        programmed = Verdict(True, Reason.PROGRAMMED,
                             f"{len(served)} of {len(listeners)} listeners served")
    else:
        unbound = next((ls.unbound for ls in listeners if ls.unbound), "")
        programmed = (Verdict(False, Reason.PORT_UNAVAILABLE, unbound) if unbound
                      else Verdict(False, Reason.LISTENERS_NOT_VALID, "no listener can be served"))
    return accepted, programmed


def listener_set_status(found: SetInfo) -> ObjectStatus:
    gen = found.obj.metadata.generation
    accepted, programmed = listener_set_verdicts(found)
    return ObjectStatus(conditions=(_cond(ConditionType.ACCEPTED, accepted, gen),
                                    _cond(ConditionType.PROGRAMMED, programmed, gen)),
                        listeners=tuple(listener_status(ls) for ls in found.listeners))


def listener_set_problems(found: SetInfo) -> list[Problem]:
    """A ListenerSet not attached, and each listener's problems."""
    if not found.attached.ok:
        return [Problem(ref=found.obj.ref, reason=found.attached.reason,
                        message=found.attached.message, field="spec.parentRef")]
    return _listener_problems(found.obj.ref, found.listeners)


def _insecure_ports(gw: Gateway) -> str:
    """Where ``spec.tls.frontend`` uses AllowInsecureFallback ("default", "port N"), or ""."""
    frontend = gw.spec.tls.frontend if gw.spec.tls is not None else None
    if frontend is None:
        return ""
    found = []
    validation = frontend.default.validation
    if validation is not None and validation.mode == "AllowInsecureFallback":
        found.append("default")
    found += [f"port {p.port}" for p in frontend.per_port if p.tls.validation is not None
              and p.tls.validation.mode == "AllowInsecureFallback"]
    return ", ".join(found)


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
        resolved = Verdict(False, first.reason, first.message + more)
    else:
        resolved = Verdict(True, Reason.RESOLVED_REFS, "all references resolved")
    partial = [i for i in state.issues if not i.warning]
    parents = []
    for outcome in state.outcomes:
        accepted = outcome.accepted
        if accepted.ok and state.all_rules_dropped:
            accepted = Verdict(False, partial[0].reason, partial[0].message)
        conds = [_cond(ConditionType.ACCEPTED, accepted, gen),
                 _cond(ConditionType.RESOLVED_REFS, resolved, gen)]
        if accepted.ok and partial:
            conds.append(_cond(ConditionType.PARTIALLY_INVALID, Verdict(
                True, partial[0].reason, f"{len(partial)} problems; {partial[0].message}"), gen))
        parents.append(ParentStatus(parent_ref=outcome.ref, controller_name=CONTROLLER_NAME,
                                    conditions=tuple(conds)))
    return ObjectStatus(parents=tuple(parents))


def policy_status(outcome: PolicyOutcome) -> ObjectStatus:
    policy: BackendTLSPolicy = outcome.policy
    gen = policy.metadata.generation
    conds = (_cond(ConditionType.ACCEPTED, outcome.accepted, gen),
             _cond(ConditionType.RESOLVED_REFS, outcome.resolved, gen))
    parents = tuple(ParentStatus(parent_ref=ParentRef(group="gateway.networking.k8s.io",
                                                      kind="Gateway", namespace=ref.namespace,
                                                      name=ref.name),
                                 controller_name=CONTROLLER_NAME, conditions=conds)
                    for ref in sorted(outcome.used_by))
    return ObjectStatus(parents=parents)


def gateway_problems(info: GatewayInfo) -> list[Problem]:
    """The problems a Gateway's status gives rise to: its addresses, each listener's."""
    out: list[Problem] = []
    ref = info.gateway.ref
    if info.class_issue:
        out.append(Problem(ref=ref, reason=Reason.INVALID, message=info.class_issue,
                           field="spec.gatewayClassName"))
    issue = info.address_issue
    if issue is not None:
        out.append(Problem(
            ref=ref, reason=issue.reason, message=issue.message,
            field="spec.addresses",
            severity=Severity.WARNING if issue.usable else Severity.ERROR))
    if info.backend_issue is not None:
        out.append(Problem(ref=ref, reason=info.backend_issue.reason,
                           message=info.backend_issue.message,
                           field="spec.tls.backend.clientCertificateRef"))
    out.extend(_listener_problems(ref, info.own))
    return out


def _listener_problems(ref: ObjectRef, listeners: list[GwListener]) -> list[Problem]:
    out: list[Problem] = []
    for ls in listeners:
        where = f"spec.listeners[{ls.index}]"
        found = [v for v in (ls.accepted, ls.resolved) if not v.ok]
        if ls.conflicted:
            found.append(ls.conflicted)
        if ls.unbound:
            found.append(Verdict(False, Reason.PORT_UNAVAILABLE, ls.unbound))
        for verdict in found:
            out.append(Problem(ref=ref, reason=verdict.reason,
                               message=f"listener {ls.name}: {verdict.message}",
                               field=where))
        out.extend(Problem(ref=ref, reason=w.reason, severity=Severity.WARNING,
                           message=f"listener {ls.name}: {w.message}",
                           field=f"{where}.tls.certificateRefs")
                   for w in ls.warnings)
    return out


def route_problems(ref: ObjectRef, state: RouteState) -> tuple[Problem, ...]:
    """The problems a route's status gives rise to: each parent that did not accept it, each
    bad reference, each issue."""
    out: list[Problem] = []
    for outcome in state.outcomes:
        if not outcome.accepted.ok:
            parent = outcome.ref
            where = f"{parent.kind} {parent.namespace}/{parent.name}" + (
                f" listener {parent.section_name}" if parent.section_name else "")
            out.append(Problem(ref=ref, reason=outcome.accepted.reason,
                               message=f"{where}: {outcome.accepted.message}",
                               field="spec.parentRefs"))
    for issue, where in state.ref_issues:
        out.append(Problem(ref=ref, reason=issue.reason, message=issue.message, field=where))
    for i in state.issues:
        out.append(Problem(ref=ref, reason=i.reason, message=i.message, field=i.field,
                           severity=Severity.WARNING if i.warning else Severity.ERROR))
    return tuple(out)
