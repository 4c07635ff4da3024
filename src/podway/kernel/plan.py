"""Which IR listeners the kernel engine serves, and how: IR in, ``Service`` values out (pure).

The kernel engine is L4 DNAT and nothing else: a TCP or UDP listener on an IPv4 address (or
``0.0.0.0``: every local address) whose every pool is plain TCP/UDP
(``podway.ir.engines.kernel_unsupported``). What it cannot do — TLS, HTTP, PROXY protocol, TLS
to the members, IPv6 — is never approximated: such a listener is left out with a ``Skipped``
saying why, so the caller can report it (another engine serves it, or nobody does, but never a
kernel-served imitation of it).

A listener's shares are flattened into one weighted list of members: a member's share is its
pool's share of the route times its own share of its pool, kept as exact integers (reduced by
their greatest common divisor). Only the members ``usable`` says may take new flows are listed;
a pool none of whose members is usable contributes nothing (its share is not redistributed
when other pools remain: the IR said so many flows go there, and with Envoy they would fail too).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from podway.ir import IR, EngineKind, ListenerProtocol, Member, MemberState, Pool
from podway.ir.engines import kernel_unsupported

# (pool name, member) → may it take new flows now (its health as the checker sees it)
Usable = Callable[[str, Member], bool]

_L4 = {ListenerProtocol.TCP: "tcp", ListenerProtocol.UDP: "udp"}
MAX_SLOTS = 4096  # a flattened weight list longer than this is scaled down (largest remainder)


@dataclass(frozen=True, slots=True, order=True)
class Backend:
    """One member as the kernel sees it: where to DNAT and its integer share."""

    address: str
    port: int
    weight: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Service:
    """One kernel-served listener (a VIP:port and protocol)."""

    name: str  # the IR listener's name
    address: str  # IPv4; "0.0.0.0": any local address
    port: int
    protocol: str  # "tcp" | "udp"
    affinity: bool  # sessionAffinity ClientIP: hash the client address, not random
    transparent: bool  # keep the client address (no SNAT)
    backends: tuple[Backend, ...]  # empty: nothing usable, the packet is not DNATed
    pools: tuple[str, ...]  # the pools behind it (for explain and health)


@dataclass(frozen=True, slots=True, kw_only=True)
class Skipped:
    """A listener the kernel engine does not serve, and why (one line); with ``served``, a
    listener it serves without some of its members (IPv6 members of an IPv4 listener)."""

    name: str
    reason: str
    served: bool = False


def plan(ir: IR, usable: Usable, *, every_l4: bool = True
         ) -> tuple[tuple[Service, ...], tuple[Skipped, ...]]:
    """The services to install for ``ir`` (sorted by name) and the listeners left out.

    ``every_l4``: serve every TCP/UDP listener the kernel can (the kernel is this host's
    engine); else only the listeners the translator gave the kernel (``Listener.engine``:
    Services annotated ``podway.io/engine: kernel``), beside an Envoy serving the rest."""
    services: list[Service] = []
    skipped: list[Skipped] = []
    for listener in ir.listeners:
        if not every_l4 and listener.engine is not EngineKind.KERNEL:
            continue
        names = [b.pool for r in listener.l4_routes for b in r.backends if b.pool]
        why = kernel_unsupported(listener, ((n, ir.pools[n].settings) for n in names
                                            if n in ir.pools))
        if why is not None:
            skipped.append(Skipped(name=listener.name, reason=why))
            continue
        route = listener.l4_routes[0]
        shares: list[tuple[int, Pool]] = []
        for share in route.backends:
            pool = ir.pools.get(share.pool) if share.pool else None
            if pool is not None and share.weight > 0:
                shares.append((share.weight, pool))
        v6 = sorted({m.address for _, p in shares for m in p.members if ":" in m.address})
        if v6:
            more = ", ..." if len(v6) > 3 else ""
            skipped.append(Skipped(
                name=listener.name, served=True,
                reason=f"IPv6 members left out ({', '.join(v6[:3])}{more}): the kernel engine "
                       "DNATs IPv4 to IPv4 only"))
        services.append(Service(
            name=listener.name, address=listener.address, port=listener.port,
            protocol=_L4[listener.protocol], affinity=route.client_ip_affinity,
            transparent=listener.transparent, backends=flatten(shares, usable),
            pools=tuple(sorted({p.name for _, p in shares}))))
    return tuple(sorted(services, key=lambda s: s.name)), tuple(skipped)


def members_for_new_flows(pool: Pool, usable: Usable) -> list[Member]:
    """The members of ``pool`` that take new flows: ready ones ``usable`` accepts; when none
    is, every ready one (panic, as Envoy: better some traffic to unchecked members than none).
    Draining and not-ready members never do (established flows finish through conntrack)."""
    ready = [m for m in pool.members
             if m.state is MemberState.READY and m.weight > 0 and ":" not in m.address]
    healthy = [m for m in ready if usable(pool.name, m)]
    return healthy or ready


def flatten(shares: Iterable[tuple[int, Pool]], usable: Usable) -> tuple[Backend, ...]:
    """Weighted members of weighted pools → one integer weight per member (module docstring)."""
    per_pool = [(weight, members_for_new_flows(pool, usable)) for weight, pool in shares]
    per_pool = [(w, ms) for w, ms in per_pool if ms]
    if not per_pool:
        return ()
    common = math.lcm(*(sum(m.weight for m in ms) for _, ms in per_pool))
    raw: dict[tuple[str, int], int] = {}
    for weight, members in per_pool:
        scale = weight * common // sum(m.weight for m in members)
        for m in members:
            key = (m.address, m.port)
            raw[key] = raw.get(key, 0) + m.weight * scale
    divisor = math.gcd(*raw.values())
    weights = {k: v // divisor for k, v in raw.items()}
    if sum(weights.values()) > MAX_SLOTS:
        weights = _scale(weights, MAX_SLOTS)
    return tuple(sorted(Backend(a, p, w) for (a, p), w in weights.items() if w > 0))


def _scale(weights: dict[tuple[str, int], int], slots: int) -> dict[tuple[str, int], int]:
    """``weights`` scaled to about ``slots`` in total (largest remainder; every member keeps
    at least one slot)."""
    total = sum(weights.values())
    exact = {k: v * slots / total for k, v in weights.items()}
    out = {k: max(1, math.floor(v)) for k, v in exact.items()}
    left = slots - sum(out.values())
    for k in sorted(exact, key=lambda k: (math.floor(exact[k]) - exact[k], k))[:max(left, 0)]:
        out[k] += 1
    return out


@dataclass(frozen=True, slots=True, order=True)
class StaleFlows:
    """UDP flows conntrack keeps sending to a member no longer chosen for new flows."""

    address: str  # the service's VIP ("0.0.0.0": any local address)
    port: int
    member: str
    member_port: int


def stale_udp(before: tuple[Service, ...], after: tuple[Service, ...]) -> tuple[StaleFlows, ...]:
    """The UDP (service, member) pairs in ``before`` and not in ``after``.

    DNAT is chosen on a flow's first packet; a UDP client that keeps one source port (DNS,
    QUIC, media) refreshes its conntrack entry forever, so without deleting those entries it
    would keep talking to a member that failed or left. TCP is left alone: a new connection
    meets the new rules, and established ones finish (draining)."""
    def pairs(services: tuple[Service, ...]) -> set[StaleFlows]:
        return {StaleFlows(s.address, s.port, b.address, b.port)
                for s in services if s.protocol == "udp" for b in s.backends}

    return tuple(sorted(pairs(before) - pairs(after)))


# (protocol, this host's address, NodePortLocal port) → (pod address, pod port)
LocalPorts = dict[tuple[str, str, int], tuple[str, int]]


def through_local_ports(services: tuple[Service, ...], local: LocalPorts
                        ) -> tuple[Service, ...]:
    """``services`` with each member that is a NodePortLocal port of this very host replaced
    by the pod behind it (``local``: the host's own agent's mappings).

    Why: the kernel engine DNATs the VIP to the member in the NAT hook, and a flow is DNATed
    once. A member ``NodeIP:port`` of the engine's own node would turn the packet into one for
    the host itself: it goes up the host's stack (nothing listens there: refused), never
    through the agent's DNAT to the pod. The pod is reachable from its node directly, so the
    engine DNATs there itself (what the agent's rule would have done)."""
    if not local:
        return services
    out = []
    for service in services:
        backends = []
        for b in service.backends:
            pod = local.get((service.protocol, b.address, b.port))
            backends.append(b if pod is None else Backend(pod[0], pod[1], b.weight))
        out.append(replace(service, backends=tuple(sorted(backends))))
    return tuple(out)
