"""The structure phase after a change of only HTTPRoutes/GRPCRoutes, as a patch: O(change).

``translate_structure`` with a memo keeps every part it made, but still visits every route,
virtual host, pool and Service (each a lookup or a comparison): at 10,000 routes that is most
of a route change's cost. When the last structure run could be patched (``Live``: its
listeners, pools, pool references, problems and statuses, and ``gateway.memo.Live``) and only
routes of ``gateway.delta.PATCHED_KINDS`` changed, ``patch_structure``

* patches the Gateway API run (``gateway.delta.patch_routes``): the changed routes'
  contributions out and in, the changed virtual hosts rebuilt, their listeners re-made;
* counts pool references per changed virtual host (old out, new in): a pool whose count leaves
  zero is added (the routes' spec, else the Ingress' or Service's, as ``translate_structure``
  merges them) through the same backend-mode and traffic steps (``traffic.lone_pool``); one
  whose count reaches zero is dropped; a Service's mode warnings follow its first and last pool;
* takes the changed routes' problems out of the sorted problem list and puts the new ones in.

It declines (None; the caller runs whole) whenever an input could reach beyond the changed
routes: a policy object, a route with rule-level persistence, a Service with ``podway.io/`` or
ingress-nginx annotations, PROXY protocol or ClientIP affinity on a pool that comes or goes,
two problems that sort alike but differ (a whole run keeps them in visiting order). Invariant
(``tests/unit/translate/test_incremental_routes.py``): the result equals a whole run's, pools
in the same (name) order included.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING

from podway.ir import (
    AuthRequest,
    ErrorPages,
    ExtAuth,
    Forward,
    Jwt,
    Listener,
    Mirror,
    Oidc,
    VirtualHost,
)
from podway.model import Ingress, ObjectRef, Service
from podway.model.gateway_routes import HTTPRoute
from podway.model.kinds import ROUTE_MODELS
from podway.model.snapshot import Key, Snapshot
from podway.translate import annotations as ann
from podway.translate.backend_modes import mode_warnings
from podway.translate.core.options import TranslateOptions
from podway.translate.core.problems import Problem
from podway.translate.core.status import ObjectStatus
from podway.translate.gateway.delta import PATCHED_KINDS, Patch, patch_routes
from podway.translate.pools.backends import PoolSpec, ServiceKey, in_mode
from podway.translate.service import is_ours as service_is_ours
from podway.translate.traffic import lone_pool, sets_traffic

if TYPE_CHECKING:
    from podway.translate.structure import Structure, StructureMemo


@dataclass(slots=True)
class Live:
    """The last structure run, kept to be patched (private to the translator)."""

    listeners: list[Listener]
    at: dict[str, int]  # listener name → its index
    others: dict[str, PoolSpec]  # the Ingress and Service pools (a route's spec wins)
    pools: dict[str, PoolSpec]  # the structure's pools
    refs: Counter[str]  # pool name → references from the listeners' routes
    services: Counter[ServiceKey]  # Service → how many of the pools it backs
    problems: list[Problem]  # sorted by ``problem_order``
    statuses: dict[ObjectRef, ObjectStatus]


def problem_order(p: Problem) -> tuple[object, ...]:
    return (p.ref, p.field, p.reason, p.message)


def pool_refs(listeners: Iterable[Listener]) -> Counter[str]:
    """How often each pool name is referenced by the listeners' routes (as ``used`` is)."""
    return Counter(name for listener in listeners for name in _refs(listener.virtual_hosts,
                                                                    listener))


def _refs(vhosts: Iterable[VirtualHost], listener: Listener | None = None) -> Iterator[str]:
    for vhost in vhosts:
        for route in vhost.routes:
            if isinstance(route.action, Forward):
                for wp in route.action.backends:
                    if wp.pool is not None:
                        yield wp.pool
            for f in route.filters:
                if isinstance(f, Mirror | ExtAuth | AuthRequest | ErrorPages | Oidc):
                    yield f.pool
                elif isinstance(f, Jwt):  # remote key sets are fetched through pools
                    yield from (p.jwks_pool for p in f.providers if p.jwks_pool)
    if listener is not None:
        for l4 in listener.l4_routes:
            for wp in l4.backends:
                if wp.pool is not None:
                    yield wp.pool


@dataclass(frozen=True, slots=True)
class Patched:
    structure: Structure
    pools_added: tuple[str, ...]
    pools_removed: tuple[str, ...]
    vhosts: Mapping[str, tuple[tuple[VirtualHost | None, VirtualHost | None], ...]]


def patch_structure(snapshot: Snapshot, before: Snapshot, opts: TranslateOptions,
                    memo: StructureMemo, changes: list[tuple[str, Key]]) -> Patched | None:
    """The structure after ``changes`` (routes of ``PATCHED_KINDS`` and Services only: see
    ``PATCHABLE``) from ``before``, patched; None when it cannot be (``memo.live`` is then
    dropped: the caller runs whole)."""
    live = memo.live
    memo.live = None  # restored below only when the patch is complete
    if live is None or memo.gateway.live is None:
        return None
    for kind, key in changes:
        route = snapshot.get(HTTPRoute, *key) if kind == HTTPRoute.KIND else None
        if route is not None and any(rule.session_persistence is not None
                                     for rule in route.spec.rules):
            return None
    services = {key for kind, key in changes if kind == Service.KIND}
    if services and not _services_patchable(snapshot, before, opts, services):
        return None
    patch = patch_routes(memo.gateway, snapshot, opts,
                         dict.fromkeys((kind, *key) for kind, key in changes
                                       if kind != Service.KIND), services)
    if patch is None:
        memo.gateway.live = None
        return None
    refs = Counter[str]()
    for old, new in (pair for pairs in patch.vhosts.values() for pair in pairs):
        refs.subtract(_refs((old,) if old is not None else ()))
        refs.update(_refs((new,) if new is not None else ()))
    problems_out = list(patch.problems_removed)
    problems_in = list(patch.problems_added)
    moved = _move_pools(snapshot, opts, memo, live, refs=refs, services=services,
                        problems_in=problems_in, problems_out=problems_out)
    if moved is None:
        return None
    added, removed = moved
    if added:  # by name, as a whole run orders them (Timsort: one pass for a few new names)
        live.pools = dict(sorted(live.pools.items()))
    if not _apply(live, patch, problems_in=problems_in, problems_out=problems_out):
        return None
    from podway.translate.structure import Structure  # an import cycle

    structure = Structure(tuple(live.listeners), MappingProxyType(dict(live.pools)),
                          tuple(live.problems), MappingProxyType(dict(live.statuses)))
    memo.live = live
    return Patched(structure, tuple(added), tuple(removed),
                   {name: tuple(pairs) for name, pairs in patch.vhosts.items()})


def _apply(live: Live, patch: Patch, *, problems_in: list[Problem],
           problems_out: list[Problem]) -> bool:
    """The patch's listeners, problems and statuses into ``live``; False when a listener or a
    problem is not where the last run left it (the caller then runs whole)."""
    if any(name not in live.at for name in patch.listeners):
        return False  # a Gateway listener the last run did not serve
    for item in patch.listeners.values():
        at = live.at[item.name]
        was = live.listeners[at]  # the Gateways did not change: nor did these settings
        live.listeners[at] = item if (item.xff_trusted_hops, item.real_ip) == (
            was.xff_trusted_hops, was.real_ip) else replace(
            item, xff_trusted_hops=was.xff_trusted_hops, real_ip=was.real_ip)
    for problem in problems_out:
        if not _remove(live.problems, problem):
            return False
    for problem in problems_in:
        if not _insert(live.problems, problem):
            return False
    for ref, status in patch.statuses.items():
        if status is None:
            live.statuses.pop(ref, None)
        else:
            live.statuses[ref] = status
    return True


def _move_pools(snapshot: Snapshot, opts: TranslateOptions, memo: StructureMemo, live: Live,
                *, refs: Counter[str], services: set[Key], problems_in: list[Problem],
                problems_out: list[Problem]) -> tuple[list[str], list[str]] | None:
    """Apply the pool reference deltas ``refs``: pools that came (made as a whole run makes
    them) and went; the pools of changed ``services`` are made again. (added, removed) names,
    or None when a pool cannot be patched."""
    added: list[str] = []
    removed: list[str] = []
    assert memo.gateway.live is not None
    # Pools of a changed Service are made again (their spec, mode, settings and the Service's
    # warnings follow the new object): every one out first, then back in.
    coming: list[str] = []
    going: list[str] = []
    redo = [name for name, spec in live.pools.items() if spec.service in services] \
        if services else []
    for name, delta in refs.items():
        if delta == 0:
            continue
        was = live.refs[name]
        now = live.refs[name] = was + delta
        if now <= 0:
            del live.refs[name]
        if was <= 0 < now:
            coming.append(name)
        elif now <= 0 < was and name in live.pools:
            going.append(name)
    gone, came = set(going), set(coming)
    again = [name for name in redo if name not in gone and name not in came]
    for name in [*going, *again]:
        if not _drop_pool(snapshot, memo, live, live.pools.pop(name), problems_out):
            return None
    for name in [*coming, *again]:
        spec = memo.gateway.live.pools.get(name) or live.others.get(name)
        if spec is None:
            continue  # a name no spec was made for: not a pool (as in a whole run)
        made = _add_pool(snapshot, opts, memo, live, spec, problems=problems_in)
        if made is None:
            return None
        live.pools[name] = made
        added.append(name)
    removed.extend(name for name in [*going, *again] if name not in live.pools)
    return added, removed


def _services_patchable(snapshot: Snapshot, before: Snapshot, opts: TranslateOptions,
                        keys: set[Key]) -> bool:
    """Whether changed Services reach only the Gateway API routes naming them: no Ingress
    (its parts read Services) and no L4 route (not replayed) exists, and neither the old nor
    the new object is served itself (LoadBalancer), sets traffic or client-address settings."""
    if snapshot.kind(Ingress) or any(snapshot.kind(cls) for cls in ROUTE_MODELS
                                     if cls.KIND not in PATCHED_KINDS):
        return False
    for key in keys:
        for service in (before.get(Service, *key), snapshot.get(Service, *key)):
            if service is not None and (service_is_ours(service, opts) is not False
                                        or not _plain_service(service)
                                        or sets_traffic(service)):
                return False
    return True


def _plain_service(service: Service | None) -> bool:
    """A Service whose pools' client-address settings and warnings depend on nothing else."""
    if service is None:
        return True
    annotations = service.metadata.annotations
    return (ann.PROXY_PROTOCOL.name not in annotations and ann.CLIENT_IP.name not in annotations
            and ann.ENGINE.name not in annotations
            and service.spec.session_affinity != "ClientIP")


def _add_pool(snapshot: Snapshot, opts: TranslateOptions, memo: StructureMemo, live: Live,
              spec: PoolSpec, *, problems: list[Problem]) -> PoolSpec | None:
    """A newly used pool as ``translate_structure`` makes it: mode, traffic, client address."""

    backing = snapshot.get(Service, *spec.service)
    if not _plain_service(backing):
        return None
    if backing is not None:
        kept = memo.modes.get(spec.name)
        if kept is None or kept[0] is not spec or kept[1] is not backing:
            kept = (spec, backing, in_mode(spec, backing, opts, snapshot.backend_modes))
        memo.modes[spec.name] = kept
        spec = kept[2]
    made = lone_pool(snapshot, spec, memo.traffic)
    if made is None:
        return None
    live.services[spec.service] += 1
    if live.services[spec.service] == 1 and backing is not None:
        warnings = mode_warnings(backing, opts, snapshot.backend_modes)
        memo.warnings[spec.service] = (backing, warnings)
        problems.extend(warnings)
    return made


def _drop_pool(snapshot: Snapshot, memo: StructureMemo, live: Live, spec: PoolSpec,
               problems: list[Problem]) -> bool:
    """Forget a pool no route uses any more; False when its going could change more."""
    backing = snapshot.get(Service, *spec.service)
    if not _plain_service(backing) or (backing is not None and sets_traffic(backing)):
        return False
    # Its memo entries go with it (a whole run keeps only the pools it made): its mode, and
    # the traffic settings made from the spec that mode gave.
    moded = memo.modes.pop(spec.name, None)
    if moded is not None:
        held = memo.traffic.get(id(moded[2]))
        if held is not None and held.spec is moded[2]:
            del memo.traffic[id(moded[2])]
    live.services[spec.service] -= 1
    if live.services[spec.service] <= 0:
        del live.services[spec.service]
        kept = memo.warnings.pop(spec.service, None)
        if kept is not None:
            problems.extend(kept[1])
    return True


def _remove(problems: list[Problem], problem: Problem) -> bool:
    key = problem_order(problem)
    at = bisect_left(problems, key, key=problem_order)
    while at < len(problems) and problem_order(problems[at]) == key:
        if problems[at] == problem:
            del problems[at]
            return True
        at += 1
    return False


def _insert(problems: list[Problem], problem: Problem) -> bool:
    """Insert in order; False when an unequal problem sorts alike (the order would differ)."""
    key = problem_order(problem)
    at = bisect_right(problems, key, key=problem_order)
    if at > 0 and problem_order(problems[at - 1]) == key and problems[at - 1] != problem:
        return False
    problems.insert(at, problem)
    return True


#: Kinds whose changes ``patch_structure`` takes (the routes, and the Services they name).
PATCHABLE = PATCHED_KINDS | {Service.KIND}

__all__ = ["PATCHABLE", "Live", "Patched", "patch_structure", "pool_refs", "problem_order"]
