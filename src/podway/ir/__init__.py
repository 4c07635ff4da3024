"""Podway's intermediate representation: what the engine should serve, free of Kubernetes.

Every node is a frozen, slotted dataclass with a stable hierarchical name and a reference to the
object it came from. Tuples, never lists; order is meaningful and deterministic. The IR doubles
as golden test data and as ``podway validate --ir`` output (see ``podway.ir.dump``).

``IR.pools`` is keyed by pool name; routes refer to pools by that name, so a change of members
replaces one pool and leaves listeners and routes untouched (identity-equal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from podway.ir.listener import (
    EngineKind,
    L4Route,
    Listener,
    ListenerProtocol,
    ListenerSection,
    TLSCertificate,
    TLSOptions,
    VirtualHost,
    WildcardMode,
)
from podway.ir.pool import (
    HASHING,
    HealthCheck,
    HealthCheckKind,
    LBPolicy,
    Member,
    MemberState,
    OutlierDetection,
    Persistence,
    PersistenceKind,
    Pool,
    PoolProtocol,
    PoolSettings,
    RetryBudget,
    UpstreamTLS,
)
from podway.ir.route import (
    CORS,
    AccessRule,
    Action,
    Authorization,
    AuthRequest,
    BasicAuth,
    BodyLimit,
    ClaimRule,
    ClientAccess,
    DirectResponse,
    ErrorPages,
    ExtAuth,
    Filter,
    Forward,
    HeaderMatch,
    HeaderModifier,
    Jwt,
    JwtProvider,
    Mirror,
    Oidc,
    PathKind,
    PathMatch,
    QueryMatch,
    RateLimit,
    Redirect,
    RetryOn,
    RetryPolicy,
    Route,
    RouteMatch,
    StringMatchKind,
    URLRewrite,
    WeightedPool,
)
from podway.model.base import ObjectRef


@dataclass(frozen=True, slots=True, kw_only=True)
class IR:
    listeners: tuple[Listener, ...] = ()
    pools: Mapping[str, Pool] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True, kw_only=True)
class IRChange:
    """How an IR differs from the one made before it: a hint that lets a consumer (the
    builder) work in O(change). Never needed for correctness: without it, or when ``base`` is
    not the IR the consumer saw last, everything is compared.

    ``pools``: every pool name added, removed or replaced (any other pool is the very same
    ``Pool`` object as in ``base``). ``vhosts``: per listener name, its virtual hosts that
    changed as (old, new) pairs (None where absent); a listener named here is otherwise made
    of the same virtual-host objects, in ``host_order``, as in ``base``. Listeners not named
    may still be new objects (compare them by identity: there are few).
    """

    base: IR
    pools: frozenset[str] = frozenset()
    vhosts: Mapping[str, tuple[tuple[VirtualHost | None, VirtualHost | None], ...]] = field(
        default_factory=lambda: MappingProxyType({}))


__all__ = [
    "CORS",
    "HASHING",
    "IR",
    "AccessRule",
    "Action",
    "AuthRequest",
    "Authorization",
    "BasicAuth",
    "BodyLimit",
    "ClaimRule",
    "ClientAccess",
    "DirectResponse",
    "EngineKind",
    "ErrorPages",
    "ExtAuth",
    "Filter",
    "Forward",
    "HeaderMatch",
    "HeaderModifier",
    "HealthCheck",
    "HealthCheckKind",
    "IRChange",
    "Jwt",
    "JwtProvider",
    "L4Route",
    "LBPolicy",
    "Listener",
    "ListenerProtocol",
    "ListenerSection",
    "Member",
    "MemberState",
    "Mirror",
    "ObjectRef",
    "Oidc",
    "OutlierDetection",
    "PathKind",
    "PathMatch",
    "Persistence",
    "PersistenceKind",
    "Pool",
    "PoolProtocol",
    "PoolSettings",
    "QueryMatch",
    "RateLimit",
    "Redirect",
    "RetryBudget",
    "RetryOn",
    "RetryPolicy",
    "Route",
    "RouteMatch",
    "StringMatchKind",
    "TLSCertificate",
    "TLSOptions",
    "URLRewrite",
    "UpstreamTLS",
    "VirtualHost",
    "WeightedPool",
    "WildcardMode",
]
