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

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType

from podway.base import collector
from podway.ir import IR, IRChange, Pool, PoolSettings
from podway.model import EndpointSlice, ObjectRef
from podway.model.snapshot import Key, Snapshot
from podway.translate.core.options import TranslateOptions
from podway.translate.core.problems import Problem, Severity
from podway.translate.core.status import ObjectStatus
from podway.translate.delta import PATCHABLE, patch_structure, problem_order
from podway.translate.pools.backends import PoolSpec, ServiceKey
from podway.translate.pools.members import (
    EndpointIndex,
    MemberContext,
    MemberResolver,
    resolver_for,
)
from podway.translate.structure import (
    PoolsFirst,
    Structure,
    StructureMemo,
    finish_structure,
    no_statuses,
    structure_pools,
    translate_structure,
)


@dataclass(frozen=True, slots=True)
class Result:
    ir: IR
    problems: tuple[Problem, ...] = ()
    statuses: Mapping[ObjectRef, ObjectStatus] = field(default_factory=no_statuses)
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
    return tuple(sorted([*structure, *extra], key=problem_order))


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
    _first: PoolsFirst | None = None  # ``first_pools``' run, finished by ``update``

    def first_pools(self, snapshot: Snapshot) -> Mapping[str, PoolSettings]:
        """Before the first ``update``: the settings of ``snapshot``'s pools by name, from the
        structure phase's first step (``structure.structure_pools``); the ``update`` of this
        very snapshot that follows finishes that structure and resolves the members. A first
        start sends these pools' clusters meanwhile (``podway.pipeline``)."""
        if self._structure is not None:
            raise RuntimeError("first_pools is for the first translation only")
        with gc_paused():
            self._first = structure_pools(snapshot, self.opts, self._memo)
        return {name: spec.settings for name, spec in self._first.pools.items()}

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
        self._structure = (finish_structure(first) if first is not None
                           and first.snapshot is snapshot
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
