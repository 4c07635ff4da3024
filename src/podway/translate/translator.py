"""The translator: snapshot → IR + problems, in full or incrementally.

Two phases. *Structure* (listeners, hosts, routes, pool specs) depends on every kind except
the endpoint kinds of the backend mode (``MemberResolver.kinds``). *Members* depend on one pool
spec and those kinds. ``translate`` runs both; ``IncrementalTranslator`` re-runs structure only
when a structural kind changed and otherwise re-resolves just the pools the change touches,
reusing every listener and route object as is, so the xDS layer sees identity-equal nodes and
pushes only endpoints.

A structural re-run keeps per-object parts in ``StructureMemo`` (Ingress parts, Gateway API
route parts and virtual hosts: ``gateway.memo``, pool traffic settings, modes, Service
warnings), each reused while the objects it was made from are the same; so one changed route
re-translates that route, and every unchanged virtual host comes out as the same object. When
only HTTPRoutes/GRPCRoutes changed, the last structure is patched instead (``delta``): O(change),
no visit of the other routes. Each incremental result carries an ``IRChange`` (how its IR
differs from the previous one) for the builder.
Invariant (tested by property): the result equals a translation from scratch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from podway.base import collector
from podway.ir import (
    IR,
    AuthRequest,
    ErrorPages,
    ExtAuth,
    Forward,
    IRChange,
    Jwt,
    Listener,
    Mirror,
    Oidc,
    Pool,
    PoolSettings,
    WeightedPool,
)
from podway.model import EndpointSlice, Ingress, ObjectRef, Service
from podway.model.snapshot import Key, Snapshot
from podway.translate import service as service_rules
from podway.translate.backend_modes import set_modes, used_mode_warnings
from podway.translate.core.options import TranslateOptions
from podway.translate.core.ports import PortTable
from podway.translate.core.problems import Problem, Reason, Severity
from podway.translate.core.status import ObjectStatus
from podway.translate.core.vips import INGRESS_LISTENERS, VipGrant, grant_of
from podway.translate.delta import PATCHABLE, Live, patch_structure, pool_refs, problem_order
from podway.translate.gateway import GatewayMemo, translate_gateways
from podway.translate.ingress import listeners as ingress_rules
from podway.translate.ingress.listeners import IngressTranslation
from podway.translate.ingress.part import IngressPart
from podway.translate.pools.backends import PoolSpec, ServiceKey
from podway.translate.pools.client_ip import apply_client_ip
from podway.translate.pools.engine_choice import apply_engine
from podway.translate.pools.members import (
    EndpointIndex,
    MemberContext,
    MemberResolver,
    resolver_for,
)
from podway.translate.service import ServiceTranslation
from podway.translate.traffic import Memo as TrafficMemo
from podway.translate.traffic import apply_traffic


def _no_statuses() -> Mapping[ObjectRef, ObjectStatus]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Result:
    ir: IR
    problems: tuple[Problem, ...] = ()
    statuses: Mapping[ObjectRef, ObjectStatus] = field(default_factory=_no_statuses)
    """Status of each object the translator owns (Gateway API kinds), by object."""
    change: IRChange | None = field(default=None, compare=False, repr=False)
    """How ``ir`` differs from the previous result's (incremental translation), if known."""

    def problems_by_object(self) -> dict[ObjectRef, list[Problem]]:
        out: dict[ObjectRef, list[Problem]] = {}
        for p in self.problems:
            out.setdefault(p.ref, []).append(p)
        return out

    @property
    def has_errors(self) -> bool:
        return any(p.severity is Severity.ERROR for p in self.problems)


@dataclass(frozen=True, slots=True)
class Structure:
    listeners: tuple[Listener, ...]
    pools: Mapping[str, PoolSpec]
    problems: tuple[Problem, ...]
    statuses: Mapping[ObjectRef, ObjectStatus] = field(default_factory=_no_statuses)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while translating.

    Translation allocates many small acyclic objects; with a large snapshot on the heap every
    generation-2 collection rescans it, which made 10,000 paths take ~3x longer (measured with
    bench/translate.py: 830 ms with the collector, 265 ms without).
    """
    with collector.paused():
        yield


def translate(snapshot: Snapshot, opts: TranslateOptions | None = None) -> Result:
    """Translate a whole snapshot. Pure; never raises on well-typed input."""
    with gc_paused():
        return _translate(snapshot, opts or TranslateOptions())


def _translate(snapshot: Snapshot, opts: TranslateOptions) -> Result:
    structure = translate_structure(snapshot, opts)
    ctx = MemberContext(snapshot, EndpointIndex(snapshot.kind(EndpointSlice).values()))
    resolver = resolver_for(opts)
    pools: dict[str, Pool] = {}
    member_problems: dict[str, tuple[Problem, ...]] = {}
    for name, spec in structure.pools.items():
        pools[name], member_problems[name] = resolve_pool(spec, ctx, resolver)
    return Result(IR(listeners=structure.listeners, pools=MappingProxyType(pools)),
                  _merge(structure.problems, member_problems), structure.statuses)


def resolve_pool(spec: PoolSpec, ctx: MemberContext,
                 resolver: MemberResolver) -> tuple[Pool, tuple[Problem, ...]]:
    """The pool with its members, and the problems of the endpoint objects it left out."""
    found = resolver.members(spec, ctx)
    return Pool(name=spec.name, settings=spec.settings, members=found.members,
                origin=spec.origin), found.problems


def _merge(structure: tuple[Problem, ...],
           by_pool: Mapping[str, tuple[Problem, ...]]) -> tuple[Problem, ...]:
    """Structure problems plus member problems (one slice may feed several pools: once)."""
    if not any(by_pool.values()):
        return structure
    seen = set(structure)
    extra = [p for p in dict.fromkeys(p for problems in by_pool.values() for p in problems)
             if p not in seen]
    return tuple(sorted([*structure, *extra], key=_problem_order))


_problem_order = problem_order


@dataclass(slots=True)
class StructureMemo:
    """Per-object parts of the last structure run, reused while their inputs are unchanged."""

    ingress: Mapping[Key, IngressPart] = field(default_factory=dict)
    traffic: TrafficMemo = field(default_factory=dict)
    gateway: GatewayMemo = field(default_factory=GatewayMemo)
    # pool name → (spec in, its Service, spec out): the same spec keeps its identity
    modes: dict[str, tuple[PoolSpec, Service, PoolSpec]] = field(default_factory=dict)
    services_by_age: tuple[object, list[Service]] = (None, [])
    warnings: dict[Key, tuple[Service, tuple[Problem, ...]]] = field(default_factory=dict)
    live: Live | None = None  # the last run, to be patched by ``delta.patch_structure``


def _client_ip_and_engine(snapshot: Snapshot, listeners: list[Listener],
                          pools: dict[str, PoolSpec], opts: TranslateOptions,
                          problems: list[Problem]) -> list[Listener]:
    """The client-address settings, then the engine each L4 listener's Services chose (it
    depends on PROXY protocol, set by the first); their problems are added to ``problems``."""
    listeners, found = apply_client_ip(
        snapshot, listeners, pools, opts.xff_trusted_hops, real_ip=opts.real_ip_header,
        nginx_ingress=bool(opts.takeover_classes))
    problems.extend(found)
    listeners, found = apply_engine(snapshot, listeners, pools, opts.l4_engine)
    problems.extend(found)
    return listeners


def translate_structure(snapshot: Snapshot, opts: TranslateOptions,
                        memo: StructureMemo | None = None) -> Structure:
    problems: list[Problem] = []
    ing_opts, ingress_pending = _ingress_address(snapshot, opts)
    ing = IngressTranslation(snapshot=snapshot, opts=ing_opts,
                             memo=memo.ingress if memo is not None else {})
    for ingress in sorted(snapshot.kind(Ingress).values(), key=Ingress.age_key):
        ours = ingress_rules.is_ours(ingress, snapshot, opts)
        if isinstance(ours, Problem):
            problems.append(ours)
        elif ours:
            ing.add(ingress)
    if memo is not None:
        memo.ingress = ing.parts
    svc = ServiceTranslation(opts=opts, snapshot=snapshot)
    for service in _by_age(snapshot, memo):
        ours = service_rules.is_ours(service, opts)
        if isinstance(ours, Problem):
            problems.append(ours)
        elif ours:
            svc.add(service)
    # Ports go first come, first served: Ingress, then Gateways (which report a refusal in
    # their listeners' status), then Services.
    ports = PortTable()
    listeners = _ingress_listeners(ing, ingress_pending, ports, problems)
    gw = translate_gateways(snapshot, opts, ports, memo.gateway if memo is not None else None)
    listeners.extend(gw.listeners)
    listeners.extend(_bind(svc.listeners, ports, problems))
    problems.extend(ing.problems)
    problems.extend(svc.problems)
    problems.extend(gw.problems)
    used = {wp.pool for lst in listeners for wp in _pools_of(lst)}
    pools = {name: spec for name, spec in sorted({**ing.pools, **svc.pools, **gw.pools}.items())
             if name in used}
    services = {key: snapshot.get(Service, *key) for key in {s.service for s in pools.values()}}
    set_modes(pools, services, opts, memo, snapshot.backend_modes)
    traffic = apply_traffic(snapshot, listeners, pools,
                            memo.traffic if memo is not None else None, oidc_key=opts.oidc_key)
    listeners, pools = list(traffic.listeners), dict(traffic.pools)
    problems.extend(traffic.problems)
    listeners = _client_ip_and_engine(snapshot, listeners, pools, opts, problems)
    problems.extend(used_mode_warnings(services, opts, memo, snapshot.backend_modes))
    if opts.vips is not None:
        problems.extend(opts.vips.problems(snapshot, opts))
    problems.sort(key=_problem_order)
    statuses = {**gw.statuses, **traffic.statuses} if traffic.statuses else gw.statuses
    if memo is not None:
        memo.live = None
        if traffic.patchable and memo.gateway.live is not None:
            memo.live = Live(
                listeners=list(listeners), at={ls.name: i for i, ls in enumerate(listeners)},
                others={**ing.pools, **svc.pools}, pools=dict(pools), refs=pool_refs(listeners),
                services=Counter(spec.service for spec in pools.values()),
                problems=list(problems), statuses=dict(statuses))
    return Structure(tuple(listeners), MappingProxyType(pools), tuple(problems),
                     MappingProxyType(statuses))


def _ingress_listeners(ing: IngressTranslation, pending: VipGrant | None, ports: PortTable,
                       problems: list[Problem]) -> list[Listener]:
    """The Ingress listeners, bound; none while they wait for a VIP (never the wildcard), with
    a problem on every Ingress saying so."""
    if pending is None:
        return _bind(ing.listeners(), ports, problems)
    problems.extend(Problem(ref=ObjectRef("Ingress", *key), field="status.loadBalancer",
                            reason=pending.reason or Reason.ADDRESS_NOT_ASSIGNED,
                            message=f"the Ingress listeners have no VIP: {pending.message}")
                    for key in sorted(ing.parts))
    return []


def _ingress_address(snapshot: Snapshot, opts: TranslateOptions
                     ) -> tuple[TranslateOptions, VipGrant | None]:
    """The options the Ingress listeners are built with, and the pending grant when they wait
    for a VIP. With an allocator (``--vip-pools``) they bind the VIP it grants to
    ``INGRESS_LISTENERS`` (published in every Ingress' ``status.loadBalancer``); without one,
    ``opts.address``."""
    grant = grant_of(INGRESS_LISTENERS, snapshot, opts) if snapshot.kind(Ingress) else None
    if grant is None:
        return opts, None
    if grant.pending:
        return opts, grant
    return replace(opts, address=grant.addresses[0]), None


def _by_age(snapshot: Snapshot, memo: StructureMemo | None) -> list[Service]:
    """Every Service, oldest first (the previous order while no Service changed)."""
    services = snapshot.kind(Service)
    if memo is not None and memo.services_by_age[0] is services:
        return memo.services_by_age[1]
    ordered = sorted(services.values(), key=Service.age_key)
    if memo is not None:
        memo.services_by_age = (services, ordered)
    return ordered


def _pools_of(listener: Listener) -> Iterable[WeightedPool]:
    for vhost in listener.virtual_hosts:
        for route in vhost.routes:
            if isinstance(route.action, Forward):
                yield from route.action.backends
            for f in route.filters:
                if isinstance(f, Mirror | ExtAuth | AuthRequest | ErrorPages | Oidc):  # it asks
                    yield WeightedPool(pool=f.pool)
                elif isinstance(f, Jwt):  # remote key sets are fetched through pools
                    yield from (WeightedPool(pool=p.jwks_pool) for p in f.providers
                                if p.jwks_pool)
    for l4 in listener.l4_routes:
        yield from l4.backends


def _bind(listeners: Iterable[Listener], ports: PortTable,
          problems: list[Problem]) -> list[Listener]:
    """The listeners that get their address:port; each refused one is a ``PortConflict`` on
    every object it came from."""
    out: list[Listener] = []
    for listener in listeners:
        refusal = ports.take_listener(listener)
        if refusal is None:
            out.append(listener)
            continue
        problems.extend(Problem(ref=ref, reason=Reason.PORT_CONFLICT, message=refusal.message,
                                field="spec.ports") for ref in listener.origins)
    return out


@dataclass(slots=True)
class IncrementalTranslator:
    """Keeps the last result and re-translates only what a new snapshot changed.

    Endpoint-kind changes re-resolve the pools they touch. A structural change re-runs the
    structure phase, then reuses every pool whose spec is unchanged and whose endpoints did not
    move, so members are resolved again only where something could have changed.
    """

    opts: TranslateOptions = field(default_factory=TranslateOptions)
    _structure: Structure | None = None
    _snapshot: Snapshot | None = None
    _index: EndpointIndex = field(default_factory=EndpointIndex)
    _pools: dict[str, Pool] = field(default_factory=dict)
    _pool_problems: dict[str, tuple[Problem, ...]] = field(default_factory=dict)
    _pools_by_service: dict[ServiceKey, list[str]] = field(default_factory=dict)
    _result: Result | None = None
    _memo: StructureMemo = field(default_factory=StructureMemo)
    _first: tuple[Snapshot, Structure] | None = None  # ``first_pools``' run, for ``update``

    def first_pools(self, snapshot: Snapshot) -> Mapping[str, PoolSettings]:
        """Before the first ``update``: the settings of ``snapshot``'s pools by name, from the
        structure phase alone (members are resolved by the ``update`` of this very snapshot
        that follows, which takes that structure as it is). A first start sends these pools'
        clusters while the members are resolved (``podway.pipeline``)."""
        if self._structure is not None:
            raise RuntimeError("first_pools is for the first translation only")
        with gc_paused():
            structure = translate_structure(snapshot, self.opts, self._memo)
        self._first = (snapshot, structure)
        return {name: spec.settings for name, spec in structure.pools.items()}

    def update(self, snapshot: Snapshot,
               changed: Iterable[tuple[str, Key]] | None = None) -> Result:
        """Translate ``snapshot``; ``changed`` (kind, key) pairs, if given, spare the diff."""
        old, self._snapshot = self._snapshot, snapshot
        old_result = self._result
        if old is None or self._structure is None or old_result is None:
            with gc_paused():
                self._index = EndpointIndex(snapshot.kind(EndpointSlice).values())
                return self._restructure(snapshot, moved=None)
        resolver = resolver_for(self.opts)
        changes = list(changed) if changed is not None else list(_diff(old, snapshot))
        moved = self._apply_endpoint_changes(snapshot, changes, resolver)
        if any(kind not in resolver.kinds for kind, _ in changes):
            with gc_paused():
                if moved is not None and all(kind in PATCHABLE or kind in resolver.kinds
                                             for kind, _ in changes):
                    patched = self._patch(snapshot, old, [
                        (kind, key) for kind, key in changes if kind not in resolver.kinds],
                        moved)
                    if patched is not None:
                        return patched
                return self._restructure(snapshot, moved=moved)
        touched = (list(self._pools) if moved is None else
                   [name for svc in moved for name in self._pools_by_service.get(svc, ())])
        ctx = MemberContext(snapshot, self._index)
        replaced: list[str] = []
        dirty = False
        for name in touched:
            pool, problems = resolve_pool(self._structure.pools[name], ctx, resolver)
            if pool != self._pools[name] or problems != self._pool_problems.get(name, ()):
                if pool != self._pools[name]:
                    replaced.append(name)
                    self._pools[name] = pool  # else the very same object stays (IRChange)
                self._pool_problems[name] = problems
                dirty = True
        if not dirty:
            return old_result
        self._result = self._current(IRChange(base=old_result.ir, pools=frozenset(replaced)))
        return self._result

    def _current(self, change: IRChange | None = None) -> Result:
        assert self._structure is not None
        return Result(IR(listeners=self._structure.listeners,
                         pools=MappingProxyType(dict(self._pools))),
                      _merge(self._structure.problems, self._pool_problems),
                      self._structure.statuses, change)

    def _apply_endpoint_changes(self, snapshot: Snapshot, changes: list[tuple[str, Key]],
                                resolver: MemberResolver) -> set[ServiceKey] | None:
        """Update the endpoint index; the Services whose members may have moved (None: all)."""
        ctx = MemberContext(snapshot, self._index)
        services: set[ServiceKey] | None = set()
        slices = snapshot.kind(EndpointSlice)
        for kind, key in changes:
            if kind == EndpointSlice.KIND:
                after = slices.get(key)
                before = self._index.put(key, after)
                if services is not None and before is not None:
                    services.add(before)
                if services is not None and after is not None and after.service_name:
                    services.add((after.metadata.namespace, after.service_name))
            if kind not in resolver.kinds:
                continue
            hit = resolver.affected(kind, key, ctx)
            if hit is None:
                services = None  # every pool
            elif services is not None:
                services.update(hit)
        return services

    def _patch(self, snapshot: Snapshot, before: Snapshot, changes: list[tuple[str, Key]],
               moved: set[ServiceKey]) -> Result | None:
        """Only routes and Services changed (besides endpoint kinds, whose Services ``moved``):
        the last structure patched (``delta``); the pools that came or were made again
        resolved, and those of ``moved`` Services again. None when it cannot be patched."""
        patched = patch_structure(snapshot, before, self.opts, self._memo, changes)
        if patched is None:
            return None
        assert self._structure is not None
        old, self._structure = self._structure.pools, patched.structure
        structure = patched.structure
        resolver = resolver_for(self.opts)
        ctx = MemberContext(snapshot, self._index)
        for name in patched.pools_removed:
            del self._pools[name]
            self._pool_problems.pop(name, None)
            names = self._pools_by_service.get(old[name].service, [])
            if name in names:
                names.remove(name)
                if not names:  # else one empty list per Service ever used
                    del self._pools_by_service[old[name].service]
        for name in patched.pools_added:
            spec = structure.pools[name]
            self._pools[name], self._pool_problems[name] = resolve_pool(spec, ctx, resolver)
            names = self._pools_by_service.setdefault(spec.service, [])
            if name not in names:
                names.append(name)
        if patched.pools_added:  # the structure's (name) order, as a whole run keeps it
            self._pools = {name: self._pools[name] for name in structure.pools}
        replaced = {*patched.pools_added, *patched.pools_removed}
        for name in (n for svc in moved for n in self._pools_by_service.get(svc, ())):
            if name in patched.pools_added:
                continue  # resolved just now
            pool, self._pool_problems[name] = resolve_pool(structure.pools[name], ctx, resolver)
            if pool != self._pools[name]:
                self._pools[name] = pool
                replaced.add(name)
        assert self._result is not None
        self._result = self._current(IRChange(
            base=self._result.ir, pools=frozenset(replaced),
            vhosts=MappingProxyType(dict(patched.vhosts))))
        return self._result

    def _restructure(self, snapshot: Snapshot, *, moved: set[ServiceKey] | None) -> Result:
        """Re-run structure; reuse pools whose spec is equal and whose Service did not move.

        ``moved`` None means members may have moved anywhere (first run, or a change that
        touches every pool): everything is resolved.
        """
        resolver = resolver_for(self.opts)
        old_specs = self._structure.pools if self._structure is not None else {}
        first, self._first = self._first, None
        self._structure = (first[1] if first is not None and first[0] is snapshot
                           else translate_structure(snapshot, self.opts, self._memo))
        ctx = MemberContext(snapshot, self._index)
        previous, previous_problems = self._pools, self._pool_problems
        self._pools, self._pool_problems = {}, {}
        self._pools_by_service = {}
        for name, spec in self._structure.pools.items():
            old = previous.get(name)
            was = old_specs.get(name)
            if (old is not None and moved is not None and spec.service not in moved
                    and (was is spec or was == spec)):
                pool, problems = old, previous_problems.get(name, ())
            else:
                pool, problems = resolve_pool(spec, ctx, resolver)
                if old == pool:
                    pool = old  # keep identity when unchanged
            self._pools[name] = pool
            self._pool_problems[name] = problems
            self._pools_by_service.setdefault(spec.service, []).append(name)
        self._result = self._current()
        return self._result


def _diff(old: Snapshot, new: Snapshot) -> Iterable[tuple[str, Key]]:
    for kind in old.objects.keys() | new.objects.keys():
        before, after = old.objects.get(kind, {}), new.objects.get(kind, {})
        if before is after:
            continue
        for key in before.keys() | after.keys():
            if before.get(key) is not after.get(key):
                yield kind, key
