"""``MemoTranslation``: a Gateway translation that reuses what the previous run made.

It extends ``translation.GatewayTranslation`` and wraps its steps, never its logic: each step
first looks in the memo (``memo.GatewayMemo``, kept between runs by the incremental translator)
for a result made from the very same inputs, else runs the plain step and records its result for
the next run. Wrapped: the start and end of a build (what carries over, what is kept, whether the
next run may be a patch: ``delta``), attaching a route, compiling it, placing it (a ``Replay``),
and its status. A re-run after an unrelated change so costs O(change); the result equals a plain
translation's (``tests/unit/translate/test_incremental_routes.py``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from podway.model import ObjectRef
from podway.model.core import Namespace, Service
from podway.model.gateway import BackendTLSPolicy, Gateway, ListenerSet, ReferenceGrant
from podway.model.gateway_routes import AnyRoute, BackendObjectReference
from podway.translate.gateway import status as st
from podway.translate.gateway.httproute import CompiledRoute, Resolve
from podway.translate.gateway.l4routes import CompiledL4
from podway.translate.gateway.memo import (
    AttachedPart,
    CompiledPart,
    GatewayMemo,
    Live,
    Placement,
    Replay,
    StatusPart,
    adopt,
    info_signature,
    route_state_signature,
    services_of,
)
from podway.translate.gateway.refs import ReferenceGrants, RefIssue
from podway.translate.gateway.translation import GatewayTranslation
from podway.translate.pools.backends import PoolSpec


@dataclass(slots=True)
class MemoTranslation(GatewayTranslation):
    """A ``GatewayTranslation`` that reads and refreshes ``memo``."""

    memo: GatewayMemo = field(default_factory=GatewayMemo)
    _next: GatewayMemo = field(default_factory=GatewayMemo)
    _same_epoch: bool = False
    _all_resolved: bool = False

    def _begin(self) -> None:
        """Carry over what the previous run made from inputs that are still the same."""
        memo = self.memo
        dependencies = (self.snapshot.kind(ReferenceGrant), self._tls.targets)
        services = self.snapshot.kind(Service)
        if memo.dependencies is not None and memo.dependencies == dependencies:
            self._carried = memo.resolved
            # Not one Service changed either: every resolution made last run still holds.
            self._all_resolved = memo.services is services
        self._next.dependencies = dependencies
        self._next.services = services
        # Which Gateways exist at all matters too: a route naming one that does not gets a
        # warning (``_missing_parents``), whichever class it belongs to.
        epoch = (tuple(info_signature(i) for i in self._infos.values()),
                 self.snapshot.kind(Namespace), self.snapshot.kind(Gateway).keys(),
                 self.snapshot.kind(ListenerSet).keys())
        self._same_epoch = memo.epoch is not None and memo.epoch == epoch \
            and memo.infos.keys() == self._infos.keys()
        if self._same_epoch:
            self._infos = adopt(memo.infos, self._infos)
        self._next.epoch = epoch
        self._next.infos = self._infos

    def _ports_shared(self) -> None:
        for port_builder in self._ports.values():
            port_builder.memo = self.memo.vhosts
            port_builder.memo_next = self._next.vhosts

    def _end(self) -> None:
        """What this run made becomes the memo; ``live`` when the next run may patch it."""
        memo, nxt = self.memo, self._next
        memo.dependencies, memo.resolved = nxt.dependencies, self._used
        memo.services = nxt.services
        memo.compiled, memo.attached = nxt.compiled, nxt.attached
        memo.epoch, memo.infos, memo.vhosts = nxt.epoch, nxt.infos, nxt.vhosts
        memo.replays = nxt.replays
        memo.live = None
        if (self._patchable and self._infos and not self._tls.targets and not self._tls.claims
                and not self.snapshot.kind(BackendTLSPolicy)
                and not any(i.extra_addresses for i in self._infos.values())):
            memo.live = Live(ports=self._ports, pools=dict(self.pools),
                             uses=Counter(s.name for r in nxt.replays.values() for s in r.pools),
                             hosts=Counter((port, host) for r in nxt.replays.values()
                                           for port, host, _ in r.adds),
                             by_service={},
                             resolving=Counter(k for r in nxt.replays.values()
                                               for k, _ in r.resolved))
            for key, replay in nxt.replays.items():
                for service in services_of(replay):
                    memo.live.by_service.setdefault(service, set()).add(key)

    def _attach(self, route: AnyRoute) -> AttachedPart:
        """The previous run's attachment while the route and the Gateways are the same."""
        key = (route.KIND, *route.key)
        kept = self.memo.attached.get(key) if self._same_epoch else None
        if kept is not None and kept.route is route:
            self._next.attached[key] = kept
            return kept
        part = GatewayTranslation._attach(self, route)
        self._next.attached[key] = part
        return part

    def _compile(self, route: AnyRoute, resolve: Resolve) -> CompiledRoute | CompiledL4:
        """The previous run's compilation while the route is the same object and every
        backendRef it resolved resolves to the very same result."""
        key = (route.KIND, *route.key)
        kept = self.memo.compiled.get(key)
        if kept is not None and kept.route is route and all(
                resolve(ref) is result for ref, result in kept.deps):
            self._next.compiled[key] = kept
            return kept.compiled
        deps: list[tuple[BackendObjectReference, PoolSpec | RefIssue]] = []

        def recording(ref: BackendObjectReference) -> PoolSpec | RefIssue:
            result = resolve(ref)
            deps.append((ref, result))
            return result

        compiled = GatewayTranslation._compile(self, route, recording)
        self._next.compiled[key] = CompiledPart(route, tuple(deps), compiled)
        return compiled

    def _route(self, route: AnyRoute, grants: ReferenceGrants) -> None:
        """The previous run's placement replayed while the route and what it resolved are the
        same; else the route translated, and its placement recorded (HTTP and gRPC routes)."""
        kind = route.KIND
        ns = route.metadata.namespace
        resolve = self._resolver(kind, ns, grants)
        replays = self._replays()
        if replays is not None:
            kept = replays.get((kind, ns, route.metadata.name))
            if kept is not None and kept.route is route and (
                    self._all_resolved or all(resolve(ref) is result
                                              for ref, result in kept.compiled.deps)):
                self._used.update(kept.resolved)
                self._replay(kept)
                return
        problems_before = len(self.problems)
        record = Placement()
        done = self._translate_route(route, resolve, record)
        if done is None or not isinstance(done[1], CompiledRoute):
            return
        attached = done[0]
        key = (kind, ns, route.metadata.name)
        self._next.replays[key] = Replay(
            route=route, ref=route.ref, attached=attached,
            compiled=self._next.compiled[key], state=self._routes[route.ref],
            problems=tuple(self.problems[problems_before:]), counted=tuple(record.counted),
            adds=tuple(record.adds), pools=tuple(record.pools),
            resolved=tuple((k, self._used[k]) for k in (
                (kind, ns, ref.group, ref.kind, ref.namespace, ref.name, ref.port)
                for ref, _ in self._next.compiled[key].deps)))

    def _replays(self) -> dict[tuple[str, str, str], Replay] | None:
        """The previous run's placements, when they can be replayed: same Gateways and
        Namespaces (so the same listener objects), no BackendTLSPolicy claims (whose status
        placement also updates)."""
        if not self._same_epoch or self._tls.claims:
            return None
        return self.memo.replays

    def _replay(self, kept: Replay) -> None:
        """What ``_route`` did for this route last time, done again (see ``Replay``)."""
        key = (kept.route.KIND, *kept.route.key)
        nxt = self._next
        nxt.replays[key] = kept
        nxt.attached[key] = kept.attached
        nxt.compiled[key] = kept.compiled
        self.problems.extend(kept.problems)
        self._routes[kept.ref] = kept.state
        for ls in kept.counted:
            ls.attached += 1
        ports = self._ports
        for port, host, entries in kept.adds:
            ports[port].hosts.setdefault(host, []).extend(entries)
        pools = self.pools
        for spec in kept.pools:
            pools.setdefault(spec.name, spec)

    def _route_statuses(self) -> dict[ObjectRef, StatusPart]:
        """The previous run's status of a route whose state is the same (replayed) or
        equal (same signature); what is made here is the memo's for the next run."""
        kept = self.memo.statuses
        made: dict[ObjectRef, StatusPart] = {}
        for ref, state in self._routes.items():
            hit = kept.get(ref)
            if hit is None or hit.state is not state:  # a replayed route keeps its state
                signature = route_state_signature(state.generation, state.outcomes,
                                                  state.ref_issues, state.issues,
                                                  state.all_rules_dropped)
                status = (hit.status if hit is not None and hit.signature == signature
                          else st.route_status(state))
                hit = StatusPart(state, signature, status, st.route_problems(ref, state))
            made[ref] = hit
        self.memo.statuses = made
        return made


__all__ = ["MemoTranslation"]
