"""The structure phase: snapshot → listeners, hosts, routes and pool specs with their problems
and statuses (``podway.translate.translator`` runs it, then resolves each pool's members).

In two steps (``structure_pools``, then ``finish_structure``): the first ends once every pool's
settings are final (the listeners' client-address and engine choices included: they set PROXY
protocol on pools), so a first start can send the pools' clusters to the engines while the
second (the Gateway API statuses and the problems they raise, the backend modes' warnings, the
problems' order) runs beside their work (``IncrementalTranslator.first_pools``,
``podway.pipeline``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from podway.ir import Listener
from podway.model import Ingress, ObjectRef, Service
from podway.model.snapshot import Key, Snapshot
from podway.translate import service as service_rules
from podway.translate.backend_modes import set_modes, used_mode_warnings
from podway.translate.core.options import TranslateOptions
from podway.translate.core.ports import PortTable
from podway.translate.core.problems import Problem, Reason
from podway.translate.core.status import ObjectStatus
from podway.translate.core.vips import INGRESS_LISTENERS, VipGrant, grant_of
from podway.translate.delta import Live, pool_refs, problem_order
from podway.translate.gateway import GatewayBuild, GatewayMemo, build_gateways
from podway.translate.ingress import listeners as ingress_rules
from podway.translate.ingress.listeners import IngressTranslation
from podway.translate.ingress.part import IngressPart
from podway.translate.pools.backends import PoolSpec, ServiceKey
from podway.translate.pools.client_ip import apply_client_ip
from podway.translate.pools.engine_choice import apply_engine
from podway.translate.service import ServiceTranslation
from podway.translate.traffic import Memo as TrafficMemo
from podway.translate.traffic import TrafficResult, apply_traffic


def no_statuses() -> Mapping[ObjectRef, ObjectStatus]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Structure:
    listeners: tuple[Listener, ...]
    pools: Mapping[str, PoolSpec]
    problems: tuple[Problem, ...]
    statuses: Mapping[ObjectRef, ObjectStatus] = field(default_factory=no_statuses)


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
    return finish_structure(structure_pools(snapshot, opts, memo))


@dataclass(slots=True)
class PoolsFirst:
    """``translate_structure`` up to the pools' final settings (``structure_pools``); what is
    left of it (``finish_structure``) changes no pool or listener: the statuses and problems
    of the Gateway API kinds, the backend modes' warnings, the problems' order. A first start
    sends the clusters in between."""

    snapshot: Snapshot
    opts: TranslateOptions
    memo: StructureMemo | None
    listeners: list[Listener]
    pools: dict[str, PoolSpec]
    services: dict[ServiceKey, Service | None]
    problems: list[Problem]  # before the Gateways' own
    gateways: GatewayBuild
    later: list[Problem]  # after the Gateways' own: the pools' settings, the listeners' choices
    traffic: TrafficResult
    others: dict[str, PoolSpec]  # the Ingress and Service pools before settings (``Live``)


def structure_pools(snapshot: Snapshot, opts: TranslateOptions,
                    memo: StructureMemo | None = None) -> PoolsFirst:
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
    gw = build_gateways(snapshot, opts, ports, memo.gateway if memo is not None else None)
    listeners.extend(gw.listeners)
    listeners.extend(_bind(svc.listeners, ports, problems))
    problems.extend(ing.problems)
    problems.extend(svc.problems)
    used = pool_refs(listeners).keys()  # every pool a route or filter names
    pools = {name: spec for name, spec in sorted({**ing.pools, **svc.pools, **gw.pools}.items())
             if name in used}
    services = {key: snapshot.get(Service, *key) for key in {s.service for s in pools.values()}}
    set_modes(pools, services, opts, memo, snapshot.backend_modes)
    traffic = apply_traffic(snapshot, listeners, pools,
                            memo.traffic if memo is not None else None, oidc_key=opts.oidc_key)
    listeners, pools = list(traffic.listeners), dict(traffic.pools)
    later = list(traffic.problems)
    listeners = _client_ip_and_engine(snapshot, listeners, pools, opts, later)  # pools too
    return PoolsFirst(snapshot=snapshot, opts=opts, memo=memo, listeners=listeners, pools=pools,
                      services=services, problems=problems, gateways=gw, later=later,
                      traffic=traffic, others={**ing.pools, **svc.pools})


def finish_structure(first: PoolsFirst) -> Structure:
    """The rest of ``translate_structure`` after ``structure_pools`` (see ``PoolsFirst``)."""
    snapshot, opts, memo, pools = first.snapshot, first.opts, first.memo, first.pools
    listeners, traffic = first.listeners, first.traffic
    gw_statuses, gw_problems = first.gateways.conclude()
    problems = [*first.problems, *gw_problems, *first.later]
    problems.extend(used_mode_warnings(first.services, opts, memo, snapshot.backend_modes))
    if opts.vips is not None:
        problems.extend(opts.vips.problems(snapshot, opts))
    problems.sort(key=problem_order)
    statuses = {**gw_statuses, **traffic.statuses} if traffic.statuses else gw_statuses
    if memo is not None:
        memo.live = None
        if traffic.patchable and memo.gateway.live is not None:
            memo.live = Live(
                listeners=list(listeners), at={ls.name: i for i, ls in enumerate(listeners)},
                others=first.others, pools=dict(pools), refs=pool_refs(listeners),
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
