"""Policy attachment for the traffic phase: which object each TrafficPolicy and BackendLBPolicy
targets, with one winner per target (the older policy; as old: first by name), and the
``Accepted`` status of every policy and target; and the class defaults of each Gateway (its
GatewayClass's ``GatewayClassConfig.spec.defaults``), the last source before Podway's own.

``traffic._Run`` extends ``PolicyIndex`` with the resolution of pool and route settings; the
precedence rules are in ``podway.translate.traffic``.
"""


from __future__ import annotations

from dataclasses import dataclass, field

from podway.ir import Persistence
from podway.model import Ingress, ObjectRef, Service
from podway.model.gateway import CONTROLLER_NAME, GROUP, Gateway, GatewayClass
from podway.model.gateway_routes import GRPCRoute, HTTPRoute
from podway.model.policy import (
    BackendLBPolicy,
    PolicyTargetReference,
    TrafficPolicy,
    TrafficPolicySpec,
)
from podway.model.snapshot import Snapshot
from podway.translate.core.problems import Problem, Reason, Severity, Verdict, quote
from podway.translate.core.status import Condition, ObjectStatus, ParentRef, ParentStatus
from podway.translate.gateway.parameters import ClassParameters, class_parameters
from podway.translate.pools import traffic_values as tv
from podway.translate.pools.traffic_validate import validate
from podway.translate.security import Found, Guard, judge

_ROUTE_KINDS = {("gateway.networking.k8s.io", "HTTPRoute"): HTTPRoute,
                ("gateway.networking.k8s.io", "GRPCRoute"): GRPCRoute,
                ("networking.k8s.io", "Ingress"): Ingress}
TargetKey = tuple[str, str, str, str]  # (kind, namespace, name, section)


@dataclass(slots=True)
class SectionSource:
    """One policy (or one object's annotations) as a source of sections."""

    spec: TrafficPolicySpec
    origin: ObjectRef
    annotations: bool = False  # issues are about annotations (InvalidAnnotation)


@dataclass(slots=True)
class PolicyTarget:
    ref: PolicyTargetReference
    verdict: Verdict


@dataclass(slots=True)
class PolicyState:
    ref: ObjectRef
    generation: int
    targets: list[PolicyTarget] = field(default_factory=list)
    invalid: Verdict | None = None
    security: Found | None = None


@dataclass(slots=True)
class PolicyIndex:
    """The policies of one snapshot, indexed by target, and the problems they report."""

    snapshot: Snapshot
    problems: list[Problem] = field(default_factory=list)
    by_target: dict[TargetKey, SectionSource] = field(default_factory=dict)
    states: dict[ObjectRef, PolicyState] = field(default_factory=dict)
    lb_policies: dict[tuple[str, str], tuple[BackendLBPolicy, Persistence]] = field(
        default_factory=dict)
    # Security claims its targets on its own: the oldest policy with a security section wins
    # each (even one whose other sections lost the target), so no target is left open.
    guards: dict[TargetKey, Guard] = field(default_factory=dict)
    # (namespace, name) of each Gateway whose class's parameters carry valid defaults.
    class_defaults: dict[tuple[str, str], SectionSource] = field(default_factory=dict)
    oidc_key: bytes | None = field(default=None, repr=False)  # TranslateOptions.oidc_key
    _reported: set[Problem] = field(default_factory=set)

    # --- indexing ---------------------------------------------------------------------------
    def index_policies(self) -> None:
        for policy in sorted(self.snapshot.kind(TrafficPolicy).values(),
                             key=TrafficPolicy.age_key):
            state = PolicyState(policy.ref, policy.metadata.generation)
            self.states[policy.ref] = state
            issues = validate(policy.spec)
            if issues:
                first = issues[0]
                state.invalid = Verdict(False, Reason.INVALID, f"{first.message} ({first.field})")
                for issue in issues:
                    self._problem(policy.ref, issue.reason, issue.message, f"spec.{issue.field}")
            if not policy.spec.target_refs:
                self._problem(policy.ref, Reason.INVALID, "no targetRefs: the policy applies to "
                              "nothing", "spec.targetRefs", Severity.WARNING)
            found = state.security = judge(policy, self.snapshot,
                                           invalid=state.invalid is not None,
                                           oidc_key=self.oidc_key)
            for reason, message, where, severity in found.problems if found else ():
                self._problem(policy.ref, reason, message, where, severity)
            if found and found.guard.refused and found.resolved is None and not state.invalid:
                # A section that cannot be read as written (not a reference that is missing):
                # the policy is invalid as a whole, as for a bad value of another section.
                state.invalid = Verdict(False, Reason.INVALID, found.problems[0][1])
            for i, target in enumerate(policy.spec.target_refs):
                verdict = state.invalid or self._claim(target, policy.metadata.namespace,
                                                       SectionSource(policy.spec, policy.ref))
                state.targets.append(PolicyTarget(target, verdict))
                if not verdict.ok and verdict is not state.invalid:
                    self._problem(policy.ref, verdict.reason, verdict.message,
                                  f"spec.targetRefs[{i}]")
                if state.security is not None:
                    self._guard(target, policy.metadata.namespace, state.security.guard, i,
                                verdict)
        for lbp in sorted(self.snapshot.kind(BackendLBPolicy).values(),
                          key=BackendLBPolicy.age_key):
            self._lb_policy(lbp)
        self._index_class_defaults()

    def _index_class_defaults(self) -> None:
        """Each Gateway's class defaults (invalid parameters give none: the Gateway translation
        reports them, and serves none of the class's Gateways)."""
        by_class: dict[str, SectionSource] = {}
        for cls in self.snapshot.kind(GatewayClass).values():
            if cls.spec.parameters_ref is None:
                continue
            params = class_parameters(cls, self.snapshot)
            if isinstance(params, ClassParameters) and params.defaults is not None:
                ref = cls.spec.parameters_ref
                by_class[cls.metadata.name] = SectionSource(
                    params.defaults, ObjectRef(ref.kind, "", ref.name))
        if by_class:
            self.class_defaults = {
                key: by_class[gw.spec.gateway_class_name]
                for key, gw in self.snapshot.kind(Gateway).items()
                if gw.spec.gateway_class_name in by_class}

    def _claim(self, target: PolicyTargetReference, ns: str, source: SectionSource) -> Verdict:
        kind = (target.group, target.kind)
        if kind == ("", "Service"):
            found = self.snapshot.get(Service, ns, target.name) is not None
        elif kind in _ROUTE_KINDS:
            found = self.snapshot.get(_ROUTE_KINDS[kind], ns, target.name) is not None
        elif kind == (GROUP, "Gateway"):
            found = self.snapshot.get(Gateway, ns, target.name) is not None
        else:
            return Verdict(False, Reason.INVALID, f"targetRef kind {quote(target.kind)} "
                           "(group " + quote(target.group) + ") is not a Service, HTTPRoute, "
                           "GRPCRoute, Ingress or Gateway")
        if target.section_name is not None and kind != ("", "Service"):
            return Verdict(False, Reason.INVALID, "sectionName is only supported for Service "
                           "targets (a port name)")
        if not found:
            return Verdict(False, Reason.TARGET_NOT_FOUND,
                           f"{target.kind} {ns}/{target.name} not found")
        key = (target.kind, ns, target.name, target.section_name or "")
        held = self.by_target.get(key)
        if held is not None:
            return Verdict(False, Reason.CONFLICTED, f"{target.kind} {ns}/{target.name} is "
                           f"already targeted by {held.origin}, which takes precedence (older, "
                           "or as old and first by name)")
        self.by_target[key] = source
        return Verdict(True, Reason.ACCEPTED, "policy accepted")

    def _guard(self, target: PolicyTargetReference, ns: str, guard: Guard, i: int,
               verdict: Verdict) -> None:
        kind = (target.group, target.kind)
        cls = _ROUTE_KINDS.get(kind) or {(GROUP, "Gateway"): Gateway, ("", "Service"): Service
                                         }.get(kind)
        if cls is None or self.snapshot.get(cls, ns, target.name) is None:
            return
        key = (target.kind, ns, target.name, "")
        held = self.guards.setdefault(key, guard)
        if held is guard and verdict.reason is Reason.CONFLICTED:
            self._problem(guard.origin, Reason.CONFLICTED, f"its security section applies to "
                          f"{target.kind} {ns}/{target.name} (no older policy secures it); "
                          "its other sections do not", f"spec.targetRefs[{i}]", Severity.WARNING)

    def _lb_policy(self, lbp: BackendLBPolicy) -> None:
        ns = lbp.metadata.namespace
        state = PolicyState(lbp.ref, lbp.metadata.generation)
        self.states[lbp.ref] = state
        value: Persistence | None = None
        if lbp.spec.session_persistence is not None:
            issues = tv.Issues()
            value = tv.session_persistence(lbp.spec.session_persistence,
                                           where="spec.sessionPersistence", issues=issues)
            for issue in issues.found:
                self._problem(lbp.ref, issue.reason, issue.message, issue.field)
            if issues.found:
                first = issues.found[0]
                state.invalid = Verdict(False, Reason.INVALID, first.message)
        for i, target in enumerate(lbp.spec.target_refs):
            if state.invalid is not None:
                verdict = state.invalid
            elif (target.group, target.kind) != ("", "Service"):
                verdict = Verdict(False, Reason.INVALID, f"targetRef kind {quote(target.kind)} "
                                  "is not supported (Service)")
            elif self.snapshot.get(Service, ns, target.name) is None:
                verdict = Verdict(False, Reason.TARGET_NOT_FOUND,
                                  f"Service {ns}/{target.name} not found")
            elif (ns, target.name) in self.lb_policies:
                held = self.lb_policies[(ns, target.name)][0].ref
                verdict = Verdict(False, Reason.CONFLICTED, f"Service {ns}/{target.name} is "
                                  f"already targeted by {held}, which takes precedence")
            else:
                verdict = Verdict(True, Reason.ACCEPTED, "policy accepted")
                if value is not None:
                    self.lb_policies[(ns, target.name)] = (lbp, value)
            state.targets.append(PolicyTarget(target, verdict))
            if not verdict.ok and verdict is not state.invalid:
                self._problem(lbp.ref, verdict.reason, verdict.message, f"spec.targetRefs[{i}]")

    # --- status ---------------------------------------------------------------------------------
    def statuses(self) -> dict[ObjectRef, ObjectStatus]:
        out: dict[ObjectRef, ObjectStatus] = {}
        for ref, state in self.states.items():
            ancestors = []
            refs = state.security.resolved if state.security is not None else None
            for target in state.targets:
                v = target.verdict
                conds = [Condition(type="Accepted", status=v.ok, reason=str(v.reason),
                                   message=v.message, observed_generation=state.generation)]
                if refs is not None:
                    conds.append(Condition(type="ResolvedRefs", status=refs[0],
                                           reason=str(refs[1]), message=refs[2],
                                           observed_generation=state.generation))
                ancestors.append(ParentStatus(
                    parent_ref=ParentRef(group=target.ref.group, kind=target.ref.kind,
                                         namespace=ref.namespace, name=target.ref.name,
                                         section_name=target.ref.section_name),
                    controller_name=CONTROLLER_NAME, conditions=tuple(conds)))
            out[ref] = ObjectStatus(parents=tuple(ancestors))
        return out

    def _problem(self, ref: ObjectRef, reason: Reason, message: str, where: str,
                 severity: Severity = Severity.ERROR) -> None:
        problem = Problem(ref=ref, reason=reason, message=message, field=where,
                          severity=severity)
        if problem not in self._reported:
            self._reported.add(problem)
            self.problems.append(problem)

