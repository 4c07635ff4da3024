"""Health, balancing, persistence, timeouts and retries: every source, one precedence, one IR.

Runs after the structure phase has built listeners and pool specs (``translate_structure``): it
knows which routes use which pools, so a setting attached to a route or a Gateway reaches the pools
they forward to. Pool-level sections (``healthCheck``, ``outlierDetection``, ``loadBalancer``,
``persistence``, ``timeouts.connect``) land in ``PoolSettings``; route-level ones
(``timeouts.request``/``idle``, ``retry``) in each ``Forward``.

Precedence, per section — the first source that sets it wins (docs/reference.md):

1. the Service: ``sessionAffinity: ClientIP``, its ``podway.io/`` annotations, a BackendLBPolicy,
   a TrafficPolicy naming the Service port, a TrafficPolicy naming the Service;
2. the routes forwarding to the pool, oldest first: their own fields (HTTPRoute rule
   ``sessionPersistence``, ``timeouts``, ``retry``; Ingress annotations), then a TrafficPolicy
   naming the route;
3. the Gateways those routes are served on: a TrafficPolicy naming the Gateway;
4. the class defaults of those Gateways: ``spec.defaults`` of their GatewayClass's
   GatewayClassConfig (``podway.translate.gateway.parameters``);
5. the defaults: a health check that proves the pool's protocol, and outlier detection.

Route-level sections are looked up route first (own fields, route policy), then Gateway, then the
Service of the route's first pool, then the Gateway's class defaults. An object's own fields
beat a policy attached to it, standard fields beat ``podway.io/`` annotations. A policy with a
bad value is not applied at all (``Accepted=False``, reason ``Invalid``); a bad annotation drops
only its section. Two TrafficPolicies naming the same target: the older wins, the other is
``Conflicted``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from podway.ir import (
    DirectResponse,
    Forward,
    L4Route,
    LBPolicy,
    Listener,
    Oidc,
    Persistence,
    PersistenceKind,
    PoolProtocol,
    PoolSettings,
    Route,
)
from podway.model import Ingress, ObjectRef, Service
from podway.model.gateway_routes import GRPCRoute, HTTPRoute
from podway.model.policy import (
    BackendLBPolicy,
    TrafficPolicy,
)
from podway.model.snapshot import Snapshot
from podway.translate import annotations as ann
from podway.translate.core.problems import Problem, Reason, Severity
from podway.translate.core.status import ObjectStatus
from podway.translate.ingress.nginx.annotations import PREFIX as NGINX_PREFIX
from podway.translate.ingress.nginx.serve import traffic_spec as nginx_traffic
from podway.translate.oidc import unserved_paths
from podway.translate.pools import traffic_annotations as ta
from podway.translate.pools import traffic_values as tv
from podway.translate.pools.backends import PoolSpec
from podway.translate.pools.traffic_validate import validate, without_bad_sections
from podway.translate.security import REFUSED_STATUS
from podway.translate.traffic_policies import PolicyIndex, SectionSource
from podway.translate.traffic_sections import Chosen

_RULE = re.compile(r"/rule/(\d+)/")


@dataclass(frozen=True, slots=True)
class TrafficResult:
    listeners: tuple[Listener, ...]
    pools: Mapping[str, PoolSpec]
    problems: tuple[Problem, ...]
    statuses: Mapping[ObjectRef, ObjectStatus]
    # No policy object, no route with rule-level persistence, no annotation source used: a
    # pool's settings then come from its Service alone (``lone_pool``), routes are left as is.
    patchable: bool = False


@dataclass(frozen=True, slots=True)
class _Kept:
    """One pool's result and what it was made from: no TrafficPolicy or BackendLBPolicy in
    the snapshot, no route with rule-level persistence among its users, no ``podway.io/``
    annotation source (so it reported no problem)."""

    spec: PoolSpec
    service: Service | None
    users: tuple[ObjectRef, ...]
    ingresses: tuple[Ingress | None, ...]  # the Ingress users' objects (their annotations)
    out: PoolSpec


Memo = dict[int, _Kept]  # by id(spec in)


def apply_traffic(snapshot: Snapshot, listeners: Iterable[Listener],
                  pools: Mapping[str, PoolSpec], memo: Memo | None = None, *,
                  oidc_key: bytes | None = None) -> TrafficResult:
    """Settings for every pool and forwarding route. ``memo`` (kept between runs by the
    incremental translator) keeps each pool's result with what it was made from (its spec,
    Service and users, while no policy object exists), so a re-run after an unrelated change
    costs a few comparisons per pool. ``oidc_key``: ``TranslateOptions.oidc_key``."""
    run = _Run(snapshot, memo=memo if memo is not None else {}, oidc_key=oidc_key)
    run.index_policies()
    listener_list = list(listeners)
    run.index_usage(listener_list)
    new_pools = {name: run.pool(spec) for name, spec in pools.items()}
    extra = {p.name: p for g in run.guards.values() for p in g.pools if p.name not in new_pools}
    if extra:  # auth services of security policies (podway.translate.security)
        new_pools = dict(sorted({**new_pools, **{n: run.pool(p) for n, p in extra.items()}
                                 }.items()))
    if memo is not None:
        memo.clear()
        memo.update(run.memo_next)
    new_listeners = tuple(run.listener(item, new_pools) for item in listener_list)
    if any(isinstance(f, Oidc) for g in run.guards.values() for f in g.filters):
        for ref, message, where in unserved_paths(new_listeners):
            run._problem(ref, Reason.INVALID, message, where, Severity.WARNING)
    patchable = not (bool(snapshot.kind(TrafficPolicy)) or bool(snapshot.kind(BackendLBPolicy))
                     or run.persistent_routes or run.route_sources or run.class_defaults)
    return TrafficResult(new_listeners, new_pools, tuple(run.problems), run.statuses(),
                         patchable)


def sets_traffic(obj: Service | Ingress) -> bool:
    """Whether ``obj``'s annotations are a source of traffic settings (or of problems)."""
    return _Run(Snapshot())._annotation_source(obj) is not None


def lone_pool(snapshot: Snapshot, spec: PoolSpec, memo: Memo) -> PoolSpec | None:
    """The settings of a pool whose users set nothing (Gateway API routes without rule-level
    persistence, while no policy object exists: ``TrafficResult.patchable``), as
    ``apply_traffic`` would give them: its Service's own fields and the defaults. None when
    its Service carries ``podway.io/`` or ingress-nginx annotations (they can report problems
    and reach routes) or the pool would report a problem."""
    run = _Run(snapshot, memo=memo)
    service = run._service(spec)
    if service is not None and run._annotation_source(service) is not None:
        return None
    out = run.pool(spec)
    if run.problems:
        return None
    memo.update(run.memo_next)
    return out


@dataclass(slots=True)
class _Run(PolicyIndex):
    memo: Memo = field(default_factory=dict)
    memo_next: Memo = field(default_factory=dict)
    routes_of_pool: dict[str, list[ObjectRef]] = field(default_factory=dict)
    gateways_of_route: dict[ObjectRef, list[ObjectRef]] = field(default_factory=dict)
    rule_pools: dict[tuple[ObjectRef, int], set[str]] = field(default_factory=dict)
    _annotations: dict[int, SectionSource | None] = field(default_factory=dict)  # by id(object)
    persistent_routes: set[ObjectRef] = field(default_factory=set)  # rule sessionPersistence
    _services: dict[tuple[str, str], Service | None] = field(default_factory=dict)
    _by_route: dict[ObjectRef, tuple[SectionSource, ...]] = field(default_factory=dict)
    _ingresses: Mapping[tuple[str, str], Ingress] = field(default_factory=dict)
    route_sources: bool = False  # any source of route settings at all (else routes stay)

    def __post_init__(self) -> None:
        self._ingresses = self.snapshot.kind(Ingress)

    def index_usage(self, listeners: list[Listener]) -> None:
        """Which routes use each pool (oldest route object first), and on which Gateways."""
        self.persistent_routes = {
            route.ref for route in self.snapshot.kind(HTTPRoute).values()
            if any(rule.session_persistence is not None for rule in route.spec.rules)}
        ages: dict[ObjectRef, tuple[float, str]] = {}
        for item in listeners:
            gateways = [o for o in item.origins if o.kind == "Gateway"]
            for route, pools in _route_pools(item):
                for gw in gateways:
                    self.gateways_of_route.setdefault(route.origin, [])
                    if gw not in self.gateways_of_route[route.origin]:
                        self.gateways_of_route[route.origin].append(gw)
                for pool in pools:
                    users = self.routes_of_pool.setdefault(pool, [])
                    if route.origin not in users:
                        users.append(route.origin)
                if route.origin in self.persistent_routes and isinstance(route, Route):
                    match = _RULE.search(route.name)
                    if match is not None:
                        self.rule_pools.setdefault((route.origin, int(match.group(1))),
                                                   set()).update(pools)
        for users in self.routes_of_pool.values():
            if len(users) > 1:  # most pools serve one route object: no lookup, no sort
                for ref in users:
                    if ref not in ages:
                        ages[ref] = self._age(ref)
                users.sort(key=ages.__getitem__)

    def _age(self, ref: ObjectRef) -> tuple[float, str]:
        cls = {"HTTPRoute": HTTPRoute, "GRPCRoute": GRPCRoute, "Ingress": Ingress}.get(ref.kind)
        found = self.snapshot.get(cls, ref.namespace, ref.name) if cls is not None else None
        return found.age_key() if found is not None else (float("inf"), str(ref))

    # --- sources ------------------------------------------------------------------------------
    def _annotation_source(self, obj: Service | Ingress) -> SectionSource | None:
        # By identity: the snapshot holds every object for the whole run. Most objects carry
        # no podway.io/ annotation; they cost one scan of their annotation keys.
        key = id(obj)
        if key in self._annotations:
            return self._annotations[key]
        if not any(k.startswith((ann.PREFIX, NGINX_PREFIX))
                   for k in obj.metadata.annotations):
            self._annotations[key] = None
            return None
        issues = tv.Issues()
        spec = ta.annotation_spec(obj.metadata.annotations, issues)
        if isinstance(obj, Ingress):  # ingress-nginx timeouts and affinity; podway.io/ wins
            spec = nginx_traffic(obj, spec)
        source = None
        if spec is not None:
            bad = validate(spec)
            spec = without_bad_sections(spec, [*bad, *(
                tv.Issue(i.reason, i.message, ta.section_of_annotation(i.field))
                for i in issues.found)])
            for issue in [*issues.found, *bad]:
                self._problem(obj.ref, Reason.INVALID_ANNOTATION, issue.message,
                              ta.annotation_field(issue.field))
            source = SectionSource(spec, obj.ref, annotations=True)
        self._annotations[key] = source
        if source is not None:
            self.route_sources = True
        return source

    def _pool_sources(self, spec: PoolSpec) -> list[SectionSource | Persistence]:
        """Every source of pool settings, most specific first (see the module docstring)."""
        ns, name = spec.service
        out: list[SectionSource | Persistence] = []
        service = self._service(spec)
        if service is not None and service.spec.session_affinity == "ClientIP":
            config = service.spec.session_affinity_config
            timeout = config.client_ip.timeout_seconds if config and config.client_ip else None
            out.append(tv.client_ip_affinity(timeout))
        annotations = self._annotation_source(service) if service is not None else None
        if annotations is not None:
            out.append(annotations)
        lbp = self.lb_policies.get((ns, name)) if self.lb_policies else None
        if lbp is not None:
            out.append(lbp[1])
        policies = bool(self.by_target)
        if policies:
            for section in dict.fromkeys((spec.port.name, "")):
                held = self.by_target.get(("Service", ns, name, section))
                if held is not None and held not in out:
                    out.append(held)
        routes = self.routes_of_pool.get(spec.name, ())
        for route in routes:
            if self.persistent_routes:
                rule_value = self._rule_persistence(route, spec.name)
                if rule_value is not None:
                    out.append(rule_value)
            out.extend(self._route_sources(route))
        if policies or self.class_defaults:  # Gateway policies, then their class defaults
            gateways = [gw for route in routes for gw in self.gateways_of_route.get(route, ())]
            for held in [*(self.by_target.get(("Gateway", gw.namespace, gw.name, ""))
                           for gw in gateways),
                         *(self.class_defaults.get((gw.namespace, gw.name)) for gw in gateways)]:
                if held is not None and held not in out:
                    out.append(held)
        return out

    def _route_sources(self, route: ObjectRef) -> tuple[SectionSource, ...]:
        found = self._by_route.get(route)
        if found is None:
            found = self._by_route[route] = self._route_sources_of(route)
        return found

    def _route_sources_of(self, route: ObjectRef) -> tuple[SectionSource, ...]:
        out: list[SectionSource] = []
        if route.kind == "Ingress":
            ingress = self._ingresses.get((route.namespace, route.name))
            own = self._annotation_source(ingress) if ingress is not None else None
            if own is not None:
                out.append(own)
        held = self.by_target.get((route.kind, route.namespace, route.name, ""))
        if held is not None:
            out.append(held)
        return tuple(out)

    # --- pools ----------------------------------------------------------------------------------
    def pool(self, spec: PoolSpec) -> PoolSpec:
        if self.by_target or self.lb_policies or self.class_defaults:
            return self._pool(spec)
        service = self._service(spec)
        users = tuple(self.routes_of_pool.get(spec.name, ()))
        if any(u in self.persistent_routes for u in users):
            return self._pool(spec)
        ingresses = tuple(self._ingresses.get((u.namespace, u.name)) for u in users
                          if u.kind == "Ingress")
        hit = self.memo.get(id(spec))
        if (hit is not None and hit.spec is spec and hit.service is service
                and hit.users == users and len(hit.ingresses) == len(ingresses)
                and all(a is b for a, b in zip(hit.ingresses, ingresses, strict=True))):
            self.memo_next[id(spec)] = hit
            return hit.out
        before = len(self.problems)
        ordered = self._pool_sources(spec)
        out = self._pool(spec, ordered)
        # Kept only when nothing but the Service's own fields and the defaults applied: then
        # the pool reported no problem and set nothing a later pool or route depends on.
        plain = len(self.problems) == before and not any(
            isinstance(source, SectionSource) for source in ordered)
        if plain:
            self.memo_next[id(spec)] = _Kept(spec, service, users, ingresses, out)
        return out

    def _service(self, spec: PoolSpec) -> Service | None:
        if spec.service not in self._services:
            self._services[spec.service] = self.snapshot.kind(Service).get(spec.service)
        return self._services[spec.service]

    def _pool(self, spec: PoolSpec,
              ordered: list[SectionSource | Persistence] | None = None) -> PoolSpec:
        if ordered is None:
            ordered = self._pool_sources(spec)
        ns, name = spec.service
        protocol = spec.settings.protocol
        chosen = Chosen(protocol=protocol, host=f"{name}.{ns}.svc")
        for rank, source in enumerate(ordered, start=1):
            chosen.rank = rank
            if isinstance(source, Persistence):
                chosen.take_persistence(source)
                continue
            issues = tv.Issues()
            chosen.apply(source.spec, issues)
            for issue in issues.found:
                self._problem(source.origin, issue.reason,
                              f"not applied to pool {spec.name}: {issue.message}",
                              f"spec.{issue.field}", Severity.WARNING)
        if chosen.algorithm_overrules_persistence():
            assert chosen.algorithm is not None
            self._problem(spec.origin, Reason.CONFLICTED, f"pool {spec.name}: persistence "
                          f"asked for by a route or Gateway is not applied: the Service chose "
                          f"{chosen.algorithm.value}, which does not hash", "metadata",
                          Severity.WARNING)
            chosen.persistence = None
        persistence = chosen.persistence or chosen.hash_key
        if protocol in (PoolProtocol.TCP, PoolProtocol.UDP) and persistence is not None and \
                persistence.kind is not PersistenceKind.SOURCE_IP:
            self._problem(spec.origin, Reason.UNSUPPORTED_VALUE, f"pool {spec.name} carries "
                          f"{protocol.value.upper()}: only client-IP persistence applies, not "
                          f"{persistence.kind.value}", "spec", Severity.WARNING)
            persistence = None
        settings = spec.settings
        # ``replace``: every setting this pass does not decide is kept as the pool had it.
        new = replace(settings, lb_policy=chosen.algorithm or settings.lb_policy,
                      health_check=chosen.health, outlier_detection=chosen.outlier,
                      persistence=persistence,
                      connect_timeout_ms=chosen.connect or settings.connect_timeout_ms,
                      retry_budget=chosen.budget)
        # ``replace`` keeps every other field of the spec (its backend mode among them).
        return spec if new == settings else replace(spec, settings=_checked(new))

    def _rule_persistence(self, route: ObjectRef, pool: str) -> Persistence | None:
        if route not in self.persistent_routes:
            return None
        obj = self.snapshot.get(HTTPRoute, route.namespace, route.name)
        if obj is None:
            return None
        for i, rule in enumerate(obj.spec.rules):
            if rule.session_persistence is None or pool not in self.rule_pools.get(
                    (route, i), ()):
                continue
            issues = tv.Issues()
            where = f"spec.rules[{i}].sessionPersistence"
            value = tv.session_persistence(rule.session_persistence, where=where, issues=issues)
            for issue in issues.found:
                self._problem(route, issue.reason, issue.message, issue.field, Severity.WARNING)
            if value is not None:
                return value
        return None

    # --- routes ---------------------------------------------------------------------------------
    def listener(self, item: Listener, pools: Mapping[str, PoolSpec]) -> Listener:
        changed = False
        vhosts = []
        # No source of route settings at all: every route stays as it is (``_route``).
        for vhost in item.virtual_hosts if (self.route_sources or self.by_target
                                            or self.guards or self.class_defaults) else ():
            routes = tuple(self._route(r, item, pools) for r in vhost.routes)
            if any(a is not b for a, b in zip(routes, vhost.routes, strict=True)):
                vhost = replace(vhost, routes=routes)  # noqa: PLW2901
                changed = True
            vhosts.append(vhost)
        l4 = []
        for route in item.l4_routes:
            affinity = _client_ip(route, pools)
            if affinity != route.client_ip_affinity:
                route = replace(route, client_ip_affinity=affinity)  # noqa: PLW2901
                changed = True
            l4.append(route)
        if not changed:
            return item
        return replace(item, virtual_hosts=tuple(vhosts) if vhosts else item.virtual_hosts,
                       l4_routes=tuple(l4))

    def _route(self, route: Route, item: Listener, pools: Mapping[str, PoolSpec]) -> Route:
        out = self._settings(route, item, pools)
        return self._secured(out, item, pools) if self.guards else out

    def _secured(self, route: Route, item: Listener, pools: Mapping[str, PoolSpec]) -> Route:
        """``route`` under the security of the most specific policy that secures it (its own
        object, then its Gateways, then the Services it forwards to): its filters added, or
        refused (``podway.translate.security``)."""
        if not isinstance(route.action, Forward):
            return route
        origin = route.origin
        keys = [(origin.kind, origin.namespace, origin.name, "")]
        keys += [("Gateway", o.namespace, o.name, "") for o in item.origins if o.kind == "Gateway"]
        keys += [("Service", *pools[b.pool].service, "") for b in route.action.backends
                 if b.pool and b.pool in pools]
        guard = next((g for g in map(self.guards.get, keys) if g is not None), None)
        if guard is None:
            return route
        if guard.refused:
            return replace(route, action=DirectResponse(status=REFUSED_STATUS))
        return replace(route, filters=(*route.filters, *guard.filters))

    def _settings(self, route: Route, item: Listener, pools: Mapping[str, PoolSpec]) -> Route:
        action = route.action
        if not isinstance(action, Forward) or not (self.route_sources or self.by_target
                                                   or self.class_defaults):
            return route
        sources = list(self._route_sources(route.origin))
        for gw in (o for o in item.origins if o.kind == "Gateway"):
            held = self.by_target.get(("Gateway", gw.namespace, gw.name, ""))
            if held is not None:
                sources.append(held)
        first = next((pools[b.pool] for b in action.backends if b.pool and b.pool in pools),
                     None)
        if first is not None:
            ns, name = first.service
            for section in dict.fromkeys((first.port.name, "")):
                held = self.by_target.get(("Service", ns, name, section))
                if held is not None:
                    sources.append(held)
            service = self._service(first)
            own = self._annotation_source(service) if service is not None else None
            if own is not None:
                sources.append(own)
        sources.extend(self.class_defaults[(gw.namespace, gw.name)] for gw in item.origins
                       if gw.kind == "Gateway" and (gw.namespace, gw.name) in self.class_defaults)
        timeout, idle, retry = action.timeout_ms, action.idle_timeout_ms, action.retry
        for source in sources:
            s = source.spec
            issues = tv.Issues()
            if s.timeouts is not None:
                _, values = tv.timeouts(s.timeouts, where="spec", issues=issues)
                if timeout is None and values.request_ms is not None:
                    timeout = values.request_ms
                if idle is None and values.idle_ms is not None:
                    idle = values.idle_ms
            if s.retry is not None and retry is None:
                retry = tv.retry(s.retry, where="spec", issues=issues)
        if (timeout, idle, retry) == (action.timeout_ms, action.idle_timeout_ms, action.retry):
            return route
        return replace(route, action=replace(action, timeout_ms=timeout, idle_timeout_ms=idle,
                                             retry=retry))


def _route_pools(item: Listener) -> Iterable[tuple[Route | L4Route, list[str]]]:
    for vhost in item.virtual_hosts:
        for route in vhost.routes:
            if isinstance(route.action, Forward):
                yield route, [b.pool for b in route.action.backends if b.pool]
    for l4 in item.l4_routes:
        yield l4, [b.pool for b in l4.backends if b.pool]


def _client_ip(route: L4Route, pools: Mapping[str, PoolSpec]) -> bool:
    specs = [pools[b.pool] for b in route.backends if b.pool and b.pool in pools]
    return bool(specs) and all(
        s.settings.persistence is not None
        and s.settings.persistence.kind is PersistenceKind.SOURCE_IP for s in specs)


def _checked(settings: PoolSettings) -> PoolSettings:
    """Keep the invariant of ``podway.ir.pool``: persistence hashes; hashing has a key."""
    if settings.persistence is not None and settings.lb_policy not in (LBPolicy.RING_HASH,
                                                                       LBPolicy.MAGLEV):
        return replace(settings, lb_policy=LBPolicy.MAGLEV)  # see podway.ir.pool
    if settings.persistence is None and settings.lb_policy in (LBPolicy.RING_HASH,
                                                               LBPolicy.MAGLEV):
        return replace(settings, persistence=Persistence(kind=PersistenceKind.SOURCE_IP))
    return settings


__all__ = ["Memo", "TrafficResult", "apply_traffic", "lone_pool", "sets_traffic"]
