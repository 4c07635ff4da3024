"""What one Gateway API translation keeps for the next, so a route change costs O(change).

``GatewayTranslation`` re-runs on every structural change. Most of its work is per route and
depends on few inputs, so each part is kept with the inputs it was made from and reused while
they are the same objects (the sources keep an unchanged object's identity in the snapshot):

* *resolutions*: a backendRef → ``PoolSpec`` (or ``RefIssue``), kept with the Service object it
  read; valid while that Service is the same object and the ReferenceGrants and BackendTLSPolicy
  targets are unchanged (``dependencies``). A reused resolution is the very same ``PoolSpec``,
  so everything downstream can compare pools by identity.
* *compiled routes*: a route's rules → matches, actions, pools; kept with the route object and
  each resolution it asked for; valid while the route is the same object and each of those
  refs resolves to the very same result.
* *attachments*: a route's parentRef outcomes (before placement adjusts them), kept with the
  route object; valid while the route is the same object and the *epoch* is unchanged: the
  Gateways' prepared listeners (by value), the Namespaces (their labels select routes) and
  which Gateways exist at all (a route naming a missing one is warned). An
  unchanged epoch also reuses the previous ``GatewayInfo`` objects, which the outcomes point at.
* *virtual hosts*: one per (IR listener, hostname), kept with the entries (placed route, Gateway
  listener) it was made from, in order, and the Gateway listener that owns the hostname.
* *placements*: what placing an HTTPRoute or GRPCRoute did (listeners counted, virtual-host
  entries added, pools), replayed while the route, its resolutions and the epoch are the same.
* *route statuses* (and the problems they give rise to): kept with everything
  ``route_status`` reads.
* *live state* (``Live``): the port builders and pools of the last run, which a run that only
  changes HTTPRoutes/GRPCRoutes patches instead of visiting every route (``gateway.delta``).

Invariant: a translation with a memo returns what the same translation without one returns
(``tests/unit/translate/test_incremental_routes.py`` checks it over random change sequences).
Each run replaces the memo's maps with the parts it used, so a deleted route's parts go with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from podway.ir import VirtualHost
from podway.model import ObjectRef
from podway.model.core import Service
from podway.model.gateway_routes import AnyRoute, BackendObjectReference
from podway.translate.core.status import ObjectStatus
from podway.translate.gateway.attach import ParentOutcome
from podway.translate.gateway.httproute import CompiledRoute, Issue
from podway.translate.gateway.l4routes import CompiledL4
from podway.translate.gateway.listeners import GatewayInfo
from podway.translate.gateway.refs import RefIssue
from podway.translate.pools.backends import PoolSpec

Resolution = PoolSpec | RefIssue
RouteKey = tuple[str, str, str]  # (kind, namespace, name)
ResolveKey = tuple[object, ...]  # (route kind, route namespace, ref group, kind, ns, name, port)


@dataclass(frozen=True, slots=True)
class CompiledPart:
    route: AnyRoute
    deps: tuple[tuple[BackendObjectReference, Resolution], ...]
    compiled: CompiledRoute | CompiledL4


@dataclass(frozen=True, slots=True)
class AttachedPart:
    route: AnyRoute
    hostnames: tuple[str, ...]
    issues: tuple[Issue, ...]
    outcomes: tuple[ParentOutcome, ...]  # pristine: copied before each use


@dataclass(frozen=True, slots=True)
class VhostPart:
    signature: tuple[object, ...]  # (owner, sources, the entries of each source)
    vhost: VirtualHost
    shadows: tuple[Any, ...]  # assemble.Shadow records found while building it


@dataclass(frozen=True, slots=True)
class StatusPart:
    state: object  # the RouteState it was made from (a replayed route keeps its state)
    signature: tuple[object, ...]
    status: ObjectStatus
    problems: tuple[Any, ...]  # the route's problems that status gives rise to


@dataclass(slots=True)
class Placement:
    """What placing one HTTPRoute or GRPCRoute did (recorded to be replayed)."""

    counted: list[Any] = field(default_factory=list)  # GwListeners whose attachedRoutes grew
    adds: list[tuple[tuple[str, int, Any], str, tuple[Any, ...]]] = field(
        default_factory=list)  # (port key, hostname, virtual-host entries)
    pools: list[PoolSpec] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Replay:
    """Everything one HTTPRoute or GRPCRoute contributed to a run, to be done again while the
    route is the same object, its resolutions are the same and the epoch is unchanged (the
    same Gateway listener objects and port builders' keys). L4 routes are never replayed:
    which of them owns a TCP or UDP listener depends on the others."""

    route: AnyRoute
    ref: ObjectRef
    attached: AttachedPart
    compiled: CompiledPart
    state: Any  # status.RouteState, reused as is
    problems: tuple[Any, ...]
    counted: tuple[Any, ...]
    adds: tuple[tuple[tuple[str, int, Any], str, tuple[Any, ...]], ...]
    pools: tuple[PoolSpec, ...]
    resolved: tuple[tuple[ResolveKey, tuple[Service | None, Resolution]], ...] = ()


@dataclass(slots=True)
class Live:
    """The last run's working state, kept so the next run can patch it (``gateway.delta``):
    the port builders with their virtual-host entries and last virtual hosts, the pools the
    routes contributed (the oldest route's spec per name) and how many placements use each."""

    ports: dict[Any, Any]  # PortKey → assemble.PortBuilder
    pools: dict[str, PoolSpec]
    uses: Counter[str]
    # (port key, hostname) → placements naming it: a hostname stays in its builder while
    # one does, even when it brought no entries (a route whose every rule was dropped)
    hosts: Counter[tuple[Any, str]]
    # Service (namespace, name) → the placed routes that resolved a backendRef to it
    by_service: dict[tuple[str, str], set[RouteKey]]
    # resolution → placements whose replay recorded it: a patch forgets a resolution (in
    # ``GatewayMemo.resolved``) with its last placement, so the memo does not grow per change
    resolving: Counter[ResolveKey] = field(default_factory=Counter)


@dataclass(slots=True)
class GatewayMemo:
    dependencies: tuple[object, ...] | None = None  # (grants map, BackendTLS targets)
    services: object = None  # the snapshot's Service map the resolutions were made with
    resolved: dict[ResolveKey, tuple[Service | None, Resolution]] = field(default_factory=dict)
    compiled: dict[RouteKey, CompiledPart] = field(default_factory=dict)
    epoch: tuple[object, ...] | None = None
    infos: dict[tuple[str, str], GatewayInfo] = field(default_factory=dict)
    attached: dict[RouteKey, AttachedPart] = field(default_factory=dict)
    replays: dict[RouteKey, Replay] = field(default_factory=dict)
    vhosts: dict[tuple[str, str], VhostPart] = field(default_factory=dict)
    statuses: dict[ObjectRef, StatusPart] = field(default_factory=dict)
    live: Live | None = None  # None: the last run cannot be patched, the next one runs whole


def services_of(replay: Replay) -> set[tuple[str, str]]:
    """The Services (namespace, name) a placed route's backendRefs named, found or not."""
    return {(str(key[4] or key[1]), str(key[5])) for key, _ in replay.resolved
            if key[2] == "" and key[3] == "Service"}


def copy_outcomes(outcomes: tuple[ParentOutcome, ...]) -> list[ParentOutcome]:
    """Fresh outcomes (placement changes their verdicts and attachment lists)."""
    return [ParentOutcome(o.ref, o.info, o.accepted, list(o.attachments)) for o in outcomes]


def info_signature(info: GatewayInfo) -> tuple[object, ...]:
    """Everything attachment and placement read from a freshly prepared Gateway."""
    return (info.gateway, info.address, info.address_issue, info.class_issue,
            tuple(info.extra_addresses), info.backend_certificate, info.backend_issue,
            tuple((ls.spec, ls.index, ls.protocol, ls.kinds, ls.accepted, ls.resolved,
                   ls.conflicted, tuple(ls.certificates), tuple(ls.warnings), ls.blocked,
                   ls.unbound, ls.owner)
                  for ls in info.listeners),
            tuple((s.obj, s.attached) for s in info.sets))


def adopt(kept: Mapping[tuple[str, str], GatewayInfo],
          fresh: Mapping[tuple[str, str], GatewayInfo]) -> dict[tuple[str, str], GatewayInfo]:
    """The kept infos, reset to the fresh ones' state (their signatures are equal): what the
    previous run changed on them (attached counts, unbound ports, dropped addresses) undone."""
    out: dict[tuple[str, str], GatewayInfo] = {}
    for key, new in fresh.items():
        old = kept[key]
        old.extra_addresses = list(new.extra_addresses)
        for was, now in zip(old.listeners, new.listeners, strict=True):
            was.attached = now.attached
            was.unbound = now.unbound
        out[key] = old
    return out


def route_state_signature(generation: int, outcomes: list[ParentOutcome],
                          ref_issues: list[tuple[RefIssue, str]], issues: list[Issue],
                          all_rules_dropped: bool) -> tuple[object, ...]:
    """Everything ``status.route_status`` reads from a route's state."""
    return (generation, tuple((o.ref, o.accepted) for o in outcomes), tuple(ref_issues),
            tuple(issues), all_rules_dropped)


__all__ = [
    "AttachedPart",
    "CompiledPart",
    "GatewayMemo",
    "Live",
    "Placement",
    "Replay",
    "StatusPart",
    "VhostPart",
    "adopt",
    "copy_outcomes",
    "info_signature",
    "route_state_signature",
    "services_of",
]
