"""Weighted L4 backends served by one cluster: the UDP proxy's way to split by weight, and
client-IP affinity across a TCP split.

Envoy's UDP proxy sends a listener's datagrams to one cluster, so the weighted backends of a
UDP listener's route become one synthetic cluster, ``split/<listener>``. A TCP listener splits
natively (``weighted_clusters``), but picks the backend anew for every connection, so a client
with client-IP affinity would alternate between backends: when the route asks for affinity and
every backend is usable and alike (equal pool settings: the same checks, transport and
balancing), its backends become one split cluster too, which hashes the client to one member
of one backend. The split's load assignment holds every backend's members with weights scaled
so that each backend gets its share:

    member weight ~ backend weight * member weight / the backend's ready member weight

Exact in integers where the sums allow it (the least common multiple of the backends' ready
weights), otherwise rounded to a total of about a million (a share off by at most one part in a
million per member). A member shared by two backends gets the sum of its weights. Members that
are not ready keep their state (they get nothing) and weight 1; a backend with no ready member
gets nothing, so its share goes to the others (a datagram has no connection to refuse), and so
does a share without a usable backend. The cluster takes the settings of the first backend's
pool, hashing on the client address when the route asks for it (``client_ip_affinity``), so a
client's datagrams stay on one member of one backend.

The backends' own clusters stay as they are; nothing but the split's load assignment changes
when their members do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from podway.ir import (
    L4Route,
    Listener,
    ListenerProtocol,
    Member,
    MemberState,
    Persistence,
    PersistenceKind,
    Pool,
    PoolSettings,
)

_EXACT_LIMIT = 1 << 31  # Envoy: the weights of a locality must sum below 2^32
_ROUNDED_TOTAL = 1_000_000


def split_route(listener: Listener, pools: Mapping[str, Pool] | None = None
                ) -> L4Route | None:
    """The route whose weighted backends are served as one synthetic cluster, else None.

    UDP: the first route with two or more usable shares. TCP (only with ``pools``): the first
    route with client-IP affinity and two or more shares, every one usable (a share without a
    pool must stay refusable) and every pool with the same settings."""
    if not listener.l4_routes:
        return None
    route = listener.l4_routes[0]
    shares = [b for b in route.backends if b.weight > 0]
    usable = {b.pool for b in shares if b.pool}
    if len(usable) < 2:
        return None
    if listener.protocol is ListenerProtocol.UDP:
        return route
    if (listener.protocol is not ListenerProtocol.TCP or pools is None
            or not route.client_ip_affinity or len(usable) != len({b.pool for b in shares})
            or not all(name in pools for name in usable)):
        return None
    settings = {pools[name].settings for name in usable}
    return route if len(settings) == 1 else None


def split_name(listener: Listener) -> str:
    return f"split/{listener.name}"


def split_pools(route: L4Route, pools: Mapping[str, Pool]) -> tuple[tuple[Pool, int], ...]:
    """(pool, summed weight) of each usable share, in route order."""
    weights: dict[str, int] = {}
    for share in route.backends:
        if share.pool and share.weight > 0 and share.pool in pools:
            weights[share.pool] = weights.get(share.pool, 0) + share.weight
    return tuple((pools[name], weight) for name, weight in weights.items())


def split_settings(route: L4Route, shares: tuple[tuple[Pool, int], ...]) -> PoolSettings:
    settings = shares[0][0].settings if shares else PoolSettings()
    if route.client_ip_affinity and settings.persistence is None:
        settings = replace(settings, persistence=Persistence(kind=PersistenceKind.SOURCE_IP))
    return settings


def split_members(shares: tuple[tuple[Pool, int], ...]) -> tuple[Member, ...]:
    """Every backend's members, weighted so each backend gets its share (module docstring)."""
    ready = [(pool, weight, sum(m.weight for m in _ready(pool))) for pool, weight in shares]
    live = [(pool, weight, total) for pool, weight, total in ready if total > 0]
    lcm = math.lcm(*(total for _, _, total in live)) if live else 1
    grand = sum(weight for _, weight, _ in live) or 1
    exact = lcm * grand < _EXACT_LIMIT  # the exact weights sum to lcm * grand
    out: dict[tuple[str, int], Member] = {}
    for pool, weight, total in ready:
        for member in pool.members:
            if member.state is not MemberState.READY or member.weight <= 0 or total == 0:
                scaled = 1
            elif exact:
                scaled = weight * member.weight * (lcm // total)
            else:
                scaled = max(1, round(_ROUNDED_TOTAL * weight * member.weight / (total * grand)))
            key = (member.address, member.port)
            held = out.get(key)
            if held is None:
                out[key] = replace(member, weight=scaled)
            elif member.state is MemberState.READY and held.state is MemberState.READY:
                out[key] = replace(held, weight=held.weight + scaled)
            elif member.state is MemberState.READY:
                out[key] = replace(member, weight=scaled)  # the ready entry wins
    return tuple(out.values())


def _ready(pool: Pool) -> list[Member]:
    return [m for m in pool.members if m.state is MemberState.READY and m.weight > 0]
