"""``GatewayTranslation``: the state of one Gateway API translation and its logic.

``build`` takes every GatewayClass whose ``controllerName`` is ours, prepares their Gateways
(listeners, conflicts, certificates), then visits every route of every kind oldest first (so "the
oldest wins" falls out of visiting order), attaches it to listeners, compiles it once and hands
the result to the per-port builders. Each built port then asks the translator's ``PortTable`` for
its address:port; a refusal marks its listeners unbound (``PortUnavailable``) before any status is
computed. ``conclude`` then reads the translation: every status and every problem.

This class does no memoisation: ``memoized.MemoTranslation`` extends it and wraps its steps
(attach, compile, route, route status) with what the previous run made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, cast

from podway.ir import Listener, ListenerProtocol
from podway.model import ObjectRef
from podway.model.core import Namespace, Service
from podway.model.gateway import (
    GROUP,
    BackendTLSPolicy,
    Gateway,
    GatewayClass,
    ListenerSet,
    ReferenceGrant,
)
from podway.model.gateway_routes import (
    AnyRoute,
    BackendObjectReference,
    GRPCRoute,
    HTTPRoute,
    TLSRoute,
)
from podway.model.kinds import ROUTE_MODELS
from podway.model.snapshot import Key, Snapshot
from podway.translate.core.hosts import valid_hostname
from podway.translate.core.options import TranslateOptions
from podway.translate.core.ports import PortTable
from podway.translate.core.problems import Problem, Reason, Severity, Verdict, listing, quote
from podway.translate.core.status import ObjectStatus
from podway.translate.gateway import status as st
from podway.translate.gateway.assemble import (
    PortBuilder,
    PortKey,
    listener_id,
    merge_sni_shared,
    share_ports,
)
from podway.translate.gateway.attach import attach, parent_key
from podway.translate.gateway.backendtls import BackendTLS, index_policies, with_client_certificate
from podway.translate.gateway.httproute import CompiledRoute, Issue, Resolve, compile_route
from podway.translate.gateway.l4routes import CompiledL4, compile_l4
from podway.translate.gateway.listeners import GatewayInfo, GwListener, SetInfo, prepare
from podway.translate.gateway.listenersets import join_listener_sets
from podway.translate.gateway.memo import (
    AttachedPart,
    Placement,
    ResolveKey,
    StatusPart,
    copy_outcomes,
    route_state_signature,
)
from podway.translate.gateway.parameters import ClassParameters, class_parameters
from podway.translate.gateway.refs import ReferenceGrants, Referrer, RefIssue, resolve_backend
from podway.translate.pools.backends import PoolSpec, find_port

_FLAVOUR = {"HTTPRoute": "http", "GRPCRoute": "grpc", "TLSRoute": "tls", "TCPRoute": "tcp",
            "UDPRoute": "udp"}
NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(slots=True)
class GatewayTranslation:
    """The state of one Gateway translation; use ``build_gateways``."""

    snapshot: Snapshot
    opts: TranslateOptions
    pools: dict[str, PoolSpec] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    _classes: list[GatewayClass] = field(default_factory=list)
    _class_params: dict[str, ClassParameters | Verdict] = field(default_factory=dict)
    _infos: dict[Key, GatewayInfo] = field(default_factory=dict)
    _sets: dict[Key, SetInfo] = field(default_factory=dict)  # ListenerSets of our Gateways
    _ports: dict[PortKey, PortBuilder] = field(default_factory=dict)
    _routes: dict[ObjectRef, st.RouteState] = field(default_factory=dict)
    _l4_owner: dict[str, str] = field(default_factory=dict)  # listener id → route
    _tls: BackendTLS = field(default_factory=BackendTLS)
    _grants: ReferenceGrants | None = None
    _carried: dict[ResolveKey, tuple[Service | None, PoolSpec | RefIssue]] = field(
        default_factory=dict)  # the previous run's resolutions, when still applicable
    # This run's resolutions, each with the Service it read: the per-run cache, and what the
    # memo keeps for the next run.
    _used: dict[ResolveKey, tuple[Service | None, PoolSpec | RefIssue]] = field(
        default_factory=dict)
    _resolvers: dict[tuple[str, str], Resolve] = field(default_factory=dict)
    # Whether the next run may patch this one (``delta``): every port bound, no SNI-shared
    # port, no further Gateway addresses, no BackendTLSPolicy.
    _patchable: bool = True

    def build(self, ports: PortTable) -> list[Listener]:
        """Every listener of our Gateways; ``ports`` takes each bound port (see the module)."""
        grants = self._prepare()
        self._begin()
        # After ``_begin``: a memoised run may have adopted the previous run's Gateways.
        self._sets = {s.obj.key: s for info in self._infos.values() for s in info.sets}
        if not self._infos:
            self._end()
            return []
        self._ports = share_ports(list(self._infos.values()))
        self._ports_shared()
        routes = [cast("AnyRoute", r) for cls in ROUTE_MODELS
                  for r in self.snapshot.kind(cls).values()]
        routes.sort(key=lambda r: r.age_key())
        for route in routes:
            self._route(route, grants)
        out = self._bind(ports)
        self._end()
        return out

    # Steps a memoised run wraps (``memoized.MemoTranslation``); nothing to do here.
    def _begin(self) -> None:
        """Called once the Gateways are prepared, before their ports are shared."""

    def _ports_shared(self) -> None:
        """Called once the port builders exist, before the first route."""

    def _end(self) -> None:
        """Called when the listeners are built."""

    def _prepare(self) -> ReferenceGrants:
        """Our GatewayClasses, the grants, the BackendTLSPolicies and each Gateway of ours
        prepared (oldest first); the others get ``NotOwned``."""
        snap = self.snapshot
        controller = self.opts.gateway_controller
        ours = {key: cls for key, cls in snap.kind(GatewayClass).items()
                if cls.spec.controller_name == controller}
        self._classes = [ours[k] for k in sorted(ours)]
        self._class_params = {cls.metadata.name: class_parameters(cls, snap)
                              for cls in self._classes}
        grants = self._grants = ReferenceGrants(snap.kind(ReferenceGrant))
        self._tls = index_policies(snap) if snap.kind(BackendTLSPolicy) else BackendTLS()
        for gw in sorted(snap.kind(Gateway).values(), key=Gateway.age_key):
            if ("", gw.spec.gateway_class_name) not in ours:
                self._not_owned(gw)
                continue
            info = prepare(gw, snapshot=snap, grants=grants, opts=self.opts)
            params = self._class_params[gw.spec.gateway_class_name]
            if isinstance(params, Verdict):  # fail closed: the class's settings are unknown
                info.class_issue = (f"GatewayClass {gw.spec.gateway_class_name} has invalid "
                                    f"parameters: {params.message}")
                for ls in info.listeners:
                    ls.blocked = info.class_issue
            self._infos[gw.key] = info
        join_listener_sets(snap, self._infos, grants=grants, opts=self.opts, labels=self._labels,
                           parent_accepted=lambda info: st.gateway_accepted(info).ok)
        return grants

    def _bind(self, ports: PortTable) -> list[Listener]:
        """Each port built and bound, oldest Gateway first; a refused port's listeners are
        marked unbound."""
        out = []
        age = {key: i for i, key in enumerate(self._infos)}  # Gateways were visited oldest first
        shadowed: set[str] = set()
        for builder in sorted(self._ports.values(), key=lambda b: (
                age[b.info.gateway.key], b.port, b.protocol)):
            address = builder.info.address
            partner = None
            if builder.protocol is ListenerProtocol.HTTPS:
                partner = self._ports.get((address, builder.port, ListenerProtocol.TLS))
            elif (builder.protocol is ListenerProtocol.TLS
                  and (address, builder.port, ListenerProtocol.HTTPS) in self._ports):
                continue  # served by the HTTPS listener of the same port (merge_sni_shared)
            refusal = ports.take(name=builder.name, address=address,
                                 port=builder.port, protocol=builder.protocol)
            if refusal is not None:
                for ls in (*builder.members, *(partner.members if partner else ())):
                    ls.unbound = refusal.message
                self._patchable = False
                continue
            built = builder.build()
            if partner:
                built = merge_sni_shared(built, partner.build())
                self._patchable = False
            out.append(built)
            out.extend(self._other_addresses(builder.info, built, ports))
            self._shadow_problems(builder, shadowed)
        return out

    def _shadow_problems(self, builder: PortBuilder, shadowed: set[str]) -> None:
        """A warning for each match another route's same match hides (once per route)."""
        for shadow in builder.shadowed:
            lost, won = shadow.lost, shadow.won
            if lost.route.name in shadowed:
                continue
            shadowed.add(lost.route.name)
            self.problems.append(Problem(
                ref=lost.route.origin, reason=Reason.SHADOWED, severity=Severity.WARNING,
                field=f"spec.rules[{lost.rule}].matches[{lost.match_index}]",
                message=f"on {shadow.host}, {won.route.origin} (rule {won.rule}/match/"
                        f"{won.match_index}) has the same match and takes precedence; this "
                        "match gets no requests there"))

    def _other_addresses(self, info: GatewayInfo, built: Listener,
                         ports: PortTable) -> list[Listener]:
        """``built`` bound on each further address of its Gateway (``<name>@<address>``); an
        address whose port is taken is dropped from the Gateway's addresses, with a warning."""
        out: list[Listener] = []
        for address in list(info.extra_addresses):
            copy = replace(built, name=f"{built.name}@{address}", address=address)
            refusal = ports.take_listener(copy)
            if refusal is None:
                out.append(copy)
                continue
            info.extra_addresses.remove(address)
            self.problems.append(Problem(
                ref=info.gateway.ref, reason=Reason.PORT_UNAVAILABLE, severity=Severity.WARNING,
                field="spec.addresses", message=f"not served on {address}: {refusal.message}"))
        return out

    def _not_owned(self, gw: Gateway) -> None:
        name = gw.spec.gateway_class_name
        cls = self.snapshot.get(GatewayClass, "", name)
        why = (f"GatewayClass {quote(name)} not found" if cls is None else
               f"GatewayClass {quote(name)} belongs to controller "
               f"{quote(cls.spec.controller_name)}, not {self.opts.gateway_controller}")
        self.problems.append(Problem(ref=gw.ref, reason=Reason.NOT_OWNED, severity=Severity.INFO,
                                     field="spec.gatewayClassName",
                                     message=f"not served by Podway: {why}"))

    def _labels(self, namespace: str) -> dict[str, str]:
        ns = self.snapshot.get(Namespace, "", namespace)
        labels = dict(ns.metadata.labels) if ns is not None else {}
        labels.setdefault(NAME_LABEL, namespace)
        return labels

    def _attach(self, route: AnyRoute) -> AttachedPart:
        """The route's valid hostnames, hostname issues and parentRef outcomes (pristine)."""
        issues: list[Issue] = []
        hostnames: tuple[str, ...] = ()
        if isinstance(route, HTTPRoute | GRPCRoute | TLSRoute):
            valid = [valid_hostname(h) for h in route.spec.hostnames]
            hostnames = tuple(h for h, ok in zip(route.spec.hostnames, valid, strict=True) if ok)
            issues.extend(Issue(Reason.UNSUPPORTED_VALUE, f"hostname {quote(h)} is not a DNS name",
                                f"spec.hostnames[{i}]")
                          for i, (h, ok) in enumerate(zip(route.spec.hostnames, valid,
                                                          strict=True)) if not ok)
        outcomes = attach(kind=route.KIND, namespace=route.metadata.namespace,
                          parent_refs=route.spec.parent_refs, hostnames=hostnames,
                          gateways=self._infos, labels=self._labels, sets=self._sets)
        return AttachedPart(route=route, hostnames=hostnames, issues=tuple(issues),
                            outcomes=tuple(outcomes))

    def _compile(self, route: AnyRoute, resolve: Resolve) -> CompiledRoute | CompiledL4:
        """The route compiled."""
        if isinstance(route, HTTPRoute | GRPCRoute):
            return compile_route(route, resolve)
        return compile_l4(route, resolve)

    def _route(self, route: AnyRoute, grants: ReferenceGrants) -> None:
        self._translate_route(route, self._resolver(route.KIND, route.metadata.namespace,
                                                    grants), None)

    def _translate_route(self, route: AnyRoute, resolve: Resolve, record: Placement | None
                         ) -> tuple[AttachedPart, CompiledRoute | CompiledL4] | None:
        """Attach, compile and place one route (``record``: what placing it did, to replay);
        None when it attaches to no Gateway of ours."""
        attached = self._attach(route)
        if not attached.outcomes:
            return None
        outcomes = copy_outcomes(attached.outcomes)
        hostnames, issues = attached.hostnames, list(attached.issues)
        self._missing_parents(route)
        compiled = self._compile(route, resolve)
        if isinstance(compiled, CompiledRoute):
            dropped_all = 0 < compiled.rules_total == compiled.rules_dropped
        else:
            dropped_all = not route.spec.rules
        state = st.RouteState(generation=route.metadata.generation, outcomes=outcomes,
                              ref_issues=compiled.ref_issues, issues=[*issues, *compiled.issues],
                              all_rules_dropped=dropped_all)
        self._routes[route.ref] = state
        had_hostnames = isinstance(route, HTTPRoute | GRPCRoute | TLSRoute) and bool(
            route.spec.hostnames)
        if had_hostnames and not hostnames:
            for outcome in outcomes:
                outcome.accepted = Verdict(False, Reason.UNSUPPORTED_VALUE, "no valid hostname")
                outcome.attachments.clear()
        if not dropped_all:
            self._place(compiled, state, record, partial(
                self._served_by, route=route, resolve=resolve, compiled=compiled))
        return attached, compiled

    def _served_by(self, info: GatewayInfo, *, route: AnyRoute, resolve: Resolve,
                   compiled: CompiledRoute | CompiledL4) -> CompiledRoute | CompiledL4:
        """``compiled`` with ``info``'s backend client certificate (compiled again)."""
        cert = info.backend_certificate
        if cert is None or not self._tls.targets:
            return compiled
        return GatewayTranslation._compile(
            self, route, with_client_certificate(resolve, cert, info.gateway.key))

    def _resolver(self, kind: str, ns: str, grants: ReferenceGrants) -> Resolve:
        """backendRef resolution for one route kind and namespace, memoised per translation
        (the same Service is typically named by many rules and routes)."""
        found = self._resolvers.get((kind, ns))
        if found is None:
            found = self._resolvers[(kind, ns)] = self._new_resolver(kind, ns, grants)
        return found

    def _new_resolver(self, kind: str, ns: str, grants: ReferenceGrants) -> Resolve:
        uncached = partial(resolve_backend, referrer=Referrer(GROUP, kind, ns),
                           flavour=_FLAVOUR[kind], snapshot=self.snapshot, grants=grants,
                           upstream_tls=self._tls.targets)
        carried, used, services = self._carried, self._used, self.snapshot.kind(Service)

        def resolve(ref: BackendObjectReference) -> PoolSpec | RefIssue:
            key = (kind, ns, ref.group, ref.kind, ref.namespace, ref.name, ref.port)
            found = used.get(key)
            if found is None:
                service = services.get((ref.namespace or ns, ref.name))
                kept = carried.get(key)
                # The same Service object (and grants, TLS targets: ``MemoTranslation._begin``)
                # resolves the same way: hand back the very same spec.
                found = used[key] = (service, kept[1] if kept is not None and kept[0] is service
                                     else uncached(ref))
            return found[1]

        return resolve

    def _missing_parents(self, route: AnyRoute) -> None:
        """A warning for each parentRef naming a Gateway or ListenerSet that does not exist."""
        ns = route.metadata.namespace
        known = {Gateway.KIND: self.snapshot.kind(Gateway),
                 ListenerSet.KIND: self.snapshot.kind(ListenerSet)}
        for k, pref in enumerate(route.spec.parent_refs):
            key = parent_key(pref, ns)
            if pref.group == GROUP and pref.kind in known and key not in known[pref.kind]:
                self.problems.append(Problem(
                    ref=route.ref, reason=Reason.NO_MATCHING_PARENT, severity=Severity.WARNING,
                    message=f"{pref.kind} {key[0]}/{key[1]} not found",
                    field=f"spec.parentRefs[{k}]"))

    def _place(self, compiled: CompiledRoute | CompiledL4, state: st.RouteState,
               record: Placement | None = None,
               served_by: Callable[[GatewayInfo], CompiledRoute | CompiledL4] | None = None
               ) -> None:
        """Count the route on each listener it attaches to and hand it to the builders.

        ``attachedRoutes`` counts routes with ``Accepted=True`` on the listener, whatever the
        listener's own state (ListenerStatus.AttachedRoutes since gateway-api#4341, which
        replaced the older "count routes with Accepted=False too"). So a route is counted only
        here, after every reason to reject it on this parent (no rule left, no hostname, a
        TCP/UDP listener already taken) has been decided.
        """
        counted: set[str] = set()
        for outcome in state.outcomes:
            if not outcome.accepted.ok:
                continue
            gw_key = outcome.info.gateway.key
            here = served_by(outcome.info) if served_by is not None else compiled
            for att in outcome.attachments:
                ls = att.listener
                ls_id = listener_id(ls)
                if ls_id not in counted:
                    counted.add(ls_id)
                    ls.attached += 1
                    if record is not None:
                        record.counted.append(ls)
                if ls.protocol in (ListenerProtocol.TCP, ListenerProtocol.UDP):
                    # One TCP/UDP listener forwards to one route: the oldest. A younger one is
                    # still Accepted and counted (the conformance suite's "multiple routes
                    # attachment"), and told with a warning that it gets no connections there.
                    owner = self._l4_owner.setdefault(ls_id, compiled_name(compiled))
                    if owner != compiled_name(compiled):
                        state.issues.append(Issue(
                            Reason.SHADOWED, f"listener {ls.name} of Gateway "
                            f"{gw_key[0]}/{gw_key[1]} forwards to the older route {owner}; this "
                            "route gets no connections there", "spec.parentRefs", warning=True))
                        continue
                if not ls.usable or ls.unbound or ls.protocol is None:
                    continue
                port = (outcome.info.address, ls.spec.port, ls.protocol)
                builder = self._ports.get(port)
                if builder is None:
                    continue
                added = self._contribute(builder, ls, att.hostnames, here, state)
                if record is not None:
                    record.adds.extend((port, host, entries) for host, entries in added)
            for spec in here.pools.values():
                self.pools.setdefault(spec.name, spec)
                if record is not None:
                    record.pools.append(spec)
            if self._tls.claims and isinstance(compiled, CompiledRoute):
                for policy in self._policies_used(compiled.route):
                    self._tls.outcomes[policy].used_by.add(outcome.info.gateway.ref)

    def _policies_used(self, route: HTTPRoute | GRPCRoute) -> set[ObjectRef]:
        """BackendTLSPolicies naming a Service port this route's backendRefs (or mirrors)
        point at — winners and losers, usable or not: their status lists this Gateway even when
        the pool fails closed or the policy lost a conflict."""
        ns = route.metadata.namespace
        refs: list[BackendObjectReference] = [ref for rule in route.spec.rules
                                              for ref in rule.backend_refs]
        refs.extend(f.request_mirror.backend_ref for rule in route.spec.rules
                    for f in rule.filters if f.request_mirror is not None)
        found: set[ObjectRef] = set()
        for ref in refs:
            target_ns = ref.namespace or ns
            if (ref.group != "" or ref.kind != "Service"
                    or (target_ns, ref.name) not in self._tls.claims):
                continue
            if target_ns != ns and self._grants is not None and not self._grants.permits(
                    from_group=GROUP, from_kind=route.KIND, from_namespace=ns, to_group="",
                    to_kind="Service", to_namespace=target_ns, to_name=ref.name):
                continue  # not a reference the route may use (RefNotPermitted)
            service = self.snapshot.get(Service, target_ns, ref.name)
            port = find_port(service, number=ref.port) if service and ref.port else None
            if port is not None:
                found.update(self._tls.policies_for(target_ns, ref.name, port.name))
        return found

    def _contribute(self, builder: PortBuilder, ls: GwListener, hostnames: tuple[str, ...],
                    compiled: CompiledRoute | CompiledL4, state: st.RouteState
                    ) -> list[tuple[str, tuple[Any, ...]]]:
        """Hand the route to the port's builder; the virtual-host entries it added, by host."""
        if isinstance(compiled, CompiledRoute):
            scheme = "https" if ls.protocol is ListenerProtocol.HTTPS else "http"
            return builder.add_http(ls, hostnames,
                                    compiled.routes(port=ls.spec.port, scheme=scheme))
        terminate = ls.terminates and ls.protocol is ListenerProtocol.TLS and ls.certificates
        lost = builder.add_l4(name=compiled.name, age=compiled.route.age_key(),
                              hostnames=hostnames, backends=compiled.backends,
                              origin=compiled.route.ref,
                              certificate=ls.certificates[0] if terminate else None)
        if lost:
            state.issues.append(Issue(Reason.HOSTNAME_CONFLICT,
                                      f"{_sni_names(lost)} on listener {ls.name} already "
                                      "routes to an older route",
                                      "spec.hostnames" if isinstance(compiled.route, TLSRoute)
                                      else "spec",
                                      warning=True))
        return []

    def conclude(self) -> tuple[dict[ObjectRef, ObjectStatus], list[Problem]]:
        """Every status, and every problem: the build's, then those the statuses give rise to
        (each Gateway's listeners, each route's parents and refs, each BackendTLSPolicy)."""
        out: dict[ObjectRef, ObjectStatus] = {}
        problems = list(self.problems)
        for cls in self._classes:
            params = self._class_params[cls.metadata.name]
            invalid = params if isinstance(params, Verdict) else None
            bundles = self.snapshot.gateway_api_bundles
            out[cls.ref] = st.gateway_class_status(cls, invalid, bundles)
            problems.extend(st.gateway_class_problems(cls, invalid, bundles))
        for info in self._infos.values():
            out[info.gateway.ref] = st.gateway_status(info)
            problems.extend(st.gateway_problems(info))
            for found in info.sets:
                out[found.obj.ref] = st.listener_set_status(found)
                problems.extend(st.listener_set_problems(found))
        for ref, part in self._route_statuses().items():
            out[ref] = part.status
            problems.extend(part.problems)
        for ref, outcome in self._tls.outcomes.items():
            status = st.policy_status(outcome)
            if status.parents:
                out[ref] = status
            for verdict in (outcome.accepted, outcome.resolved):
                if not verdict.ok:
                    problems.append(Problem(ref=ref, reason=verdict.reason,
                                            message=verdict.message, field="spec"))
        return out, problems

    def _route_statuses(self) -> dict[ObjectRef, StatusPart]:
        """Each route's status and the problems it gives rise to, in visiting order."""
        return {ref: self._route_status(ref, state) for ref, state in self._routes.items()}

    def _route_status(self, ref: ObjectRef, state: st.RouteState) -> StatusPart:
        signature = route_state_signature(state.generation, state.outcomes, state.ref_issues,
                                          state.issues, state.all_rules_dropped)
        return StatusPart(state, signature, st.route_status(state),
                          st.route_problems(ref, state))


def _sni_names(names: list[str]) -> str:
    return "every SNI" if names == ["*"] else f"SNI {listing(names)}"


def compiled_name(compiled: CompiledRoute | CompiledL4) -> str:
    return str(compiled.route.ref)


__all__ = ["GatewayTranslation", "compiled_name"]
