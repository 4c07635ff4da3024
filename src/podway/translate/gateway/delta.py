"""A Gateway API run that changes only some HTTPRoutes/GRPCRoutes, done as a patch: O(change).

A whole run (``MemoTranslation``) visits every route, even when it replays most of them from
the memo. When nothing but a few HTTPRoutes or GRPCRoutes changed since the last run, and that
run left its working state (``memo.Live``: the port builders with their virtual-host entries),
``patch_routes`` instead takes each changed route's recorded contribution (``memo.Replay``:
listeners counted, virtual-host entries, pools, problems, status) out, places the new object
with the very same code a whole run uses, and rebuilds only the virtual hosts whose entries
changed (``assemble.PortBuilder.refresh``).

Why the result equals a whole run: the epoch (Gateways, Namespaces) and every other kind are
unchanged, so every other route's contribution is what a whole run would replay; placement
order matters only for which equal pool spec is kept per name (specs of one name are made from
one Service port and are equal) and for shadowing, and a patch touching a virtual host that
shadows anything, or a wildcard hostname (whose routes reach other hosts), is refused.

A refused patch returns None *after* it may have changed the live state: the caller drops
``memo.live`` and runs whole. The memo's other parts stay valid, each being checked against the
inputs it was made from when reused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from podway.ir import Listener, VirtualHost
from podway.model import ObjectRef
from podway.model.gateway import ReferenceGrant
from podway.model.gateway_routes import GRPCRoute, HTTPRoute
from podway.model.snapshot import Snapshot
from podway.translate.core.options import TranslateOptions
from podway.translate.core.problems import Problem
from podway.translate.core.status import ObjectStatus
from podway.translate.gateway import status as st
from podway.translate.gateway.assemble import PortKey
from podway.translate.gateway.memo import (
    GatewayMemo,
    Live,
    ResolveKey,
    RouteKey,
    StatusPart,
    route_state_signature,
    services_of,
)
from podway.translate.gateway.memoized import MemoTranslation
from podway.translate.gateway.refs import ReferenceGrants

PATCHED_KINDS = frozenset({HTTPRoute.KIND, GRPCRoute.KIND})


@dataclass(slots=True)
class Patch:
    """What a patch changed: the rebuilt IR listeners (by name), each changed virtual host
    (old, new; None where absent), problems and statuses. ``memo.live.pools`` holds the
    routes' pool specs afterwards."""

    listeners: dict[str, Listener] = field(default_factory=dict)
    vhosts: dict[str, list[tuple[VirtualHost | None, VirtualHost | None]]] = field(
        default_factory=dict)  # by listener name
    problems_removed: list[Problem] = field(default_factory=list)
    problems_added: list[Problem] = field(default_factory=list)
    statuses: dict[ObjectRef, ObjectStatus | None] = field(default_factory=dict)  # None: gone


def patch_routes(memo: GatewayMemo, snapshot: Snapshot, opts: TranslateOptions,
                 keys: Iterable[RouteKey], services: Iterable[tuple[str, str]] = ()
                 ) -> Patch | None:
    """Patch the last run for the changed routes ``keys`` ((kind, namespace, name), kinds of
    ``PATCHED_KINDS`` only) and the routes naming a changed Service of ``services``; None when
    this cannot be done (see the module docstring)."""
    live = memo.live
    if live is None or any(info.sets for info in memo.infos.values()):
        return None  # ListenerSets: a whole run (their statuses follow their routes' counts)
    redo = dict.fromkeys(keys)
    for service in services:
        redo.update(dict.fromkeys(sorted(live.by_service.get(service, ()))))
    patcher = _Patcher(memo, live, MemoTranslation(snapshot=snapshot, opts=opts, memo=memo))
    for key in redo:  # every contribution out first: specs of one pool name must agree
        patcher.take_out(key)
    for key in redo:
        route = _route(snapshot, key)
        if route is not None and not patcher.put_in(key, route):
            return None
    memo.resolved.update(patcher.run._used)
    # Resolutions no placement records any more are forgotten, as a whole run forgets them
    # (only now: a changed route put back in carried its unchanged ones over).
    for resolved in patcher.unused:
        if resolved not in live.resolving:
            memo.resolved.pop(resolved, None)
    out = patcher.out
    for port, hosts in patcher.changed.items():
        builder = live.ports[port]
        if not builder.can_refresh(hosts):
            return None
        shadows = len(builder.shadowed)
        out.vhosts[builder.name] = builder.refresh(hosts)
        if len(builder.shadowed) != shadows:
            return None
        out.listeners[builder.name] = builder.listener()
    for info in memo.infos.values():
        out.statuses[info.gateway.ref] = st.gateway_status(info)
    return out


def _route(snapshot: Snapshot, key: RouteKey) -> HTTPRoute | GRPCRoute | None:
    kind, ns, name = key
    if kind == HTTPRoute.KIND:
        return snapshot.get(HTTPRoute, ns, name)
    return snapshot.get(GRPCRoute, ns, name)


@dataclass(slots=True)
class _Patcher:
    memo: GatewayMemo
    live: Live
    run: MemoTranslation
    out: Patch = field(default_factory=Patch)
    changed: dict[PortKey, set[str]] = field(default_factory=dict)  # hosts whose entries changed
    unused: list[ResolveKey] = field(default_factory=list)  # resolutions whose last user went

    def __post_init__(self) -> None:
        run, memo = self.run, self.memo
        run._infos, run._ports, run._same_epoch = memo.infos, self.live.ports, True
        run._carried = memo.resolved
        run._grants = ReferenceGrants(run.snapshot.kind(ReferenceGrant))
        for builder in self.live.ports.values():
            builder.memo = builder.memo_next = memo.vhosts

    def take_out(self, key: RouteKey) -> None:
        """Undo what the route's last placement did (its ``Replay``), and its status."""
        memo, live = self.memo, self.live
        old = memo.replays.pop(key, None)
        memo.attached.pop(key, None)
        memo.compiled.pop(key, None)
        if old is not None:
            for service in services_of(old):
                users = live.by_service.get(service)
                if users is not None:
                    users.discard(key)
                    if not users:  # else one empty set per Service ever named
                        del live.by_service[service]
            for resolved, _ in old.resolved:
                live.resolving[resolved] -= 1
                if live.resolving[resolved] <= 0:
                    del live.resolving[resolved]
                    self.unused.append(resolved)
            for ls in old.counted:
                ls.attached -= 1
            for port, host, entries in old.adds:
                hosts = live.ports[port].hosts
                gone = {id(e) for e in entries}
                hosts[host] = [e for e in hosts.get(host, ()) if id(e) not in gone]
                live.hosts[(port, host)] -= 1
                if live.hosts[(port, host)] <= 0:
                    del live.hosts[(port, host)]
                    hosts.pop(host, None)
                self.changed.setdefault(port, set()).add(host)
            for spec in old.pools:
                live.uses[spec.name] -= 1
                if live.uses[spec.name] <= 0:
                    del live.uses[spec.name]
                    del live.pools[spec.name]
            self.out.problems_removed.extend(old.problems)
        ref = ObjectRef(kind=key[0], namespace=key[1], name=key[2])
        part = memo.statuses.pop(ref, None)
        if part is not None:
            self.out.problems_removed.extend(part.problems)
            self.out.statuses[ref] = None

    def put_in(self, key: RouteKey, route: HTTPRoute | GRPCRoute) -> bool:
        """Place the route as a whole run does and record it; False when it cannot be."""
        memo, live, run = self.memo, self.live, self.run
        assert run._grants is not None
        run._route(route, run._grants)
        placed = run._next.replays.get(key)
        if placed is None:
            # Attached nowhere: no contribution, no status (a state without a record is not a
            # route this patch understands).
            return route.ref not in run._routes
        memo.replays[key] = placed
        live.resolving.update(k for k, _ in placed.resolved)
        for service in services_of(placed):
            live.by_service.setdefault(service, set()).add(key)
        memo.attached[key] = placed.attached
        memo.compiled[key] = placed.compiled
        for port, host, _ in placed.adds:
            live.hosts[(port, host)] += 1
            self.changed.setdefault(port, set()).add(host)
        for spec in placed.pools:
            held = live.pools.setdefault(spec.name, spec)
            if held is not spec and held != spec:
                return False
            live.uses[spec.name] += 1
        self.out.problems_added.extend(placed.problems)
        state = run._routes[route.ref]
        signature = route_state_signature(state.generation, state.outcomes, state.ref_issues,
                                          state.issues, state.all_rules_dropped)
        status = st.route_status(state)
        made = StatusPart(state, signature, status, st.route_problems(route.ref, state))
        memo.statuses[route.ref] = made
        self.out.statuses[route.ref] = status
        self.out.problems_added.extend(made.problems)
        return True


__all__ = ["PATCHED_KINDS", "Patch", "patch_routes"]
