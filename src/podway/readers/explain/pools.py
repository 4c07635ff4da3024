"""The pool stage of a walk, pure: what a pool is and which of its members take new requests
(``pool_view``), and the one-line verdict of a route's shares (``summary``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from podway.ir import MemberState, Pool, Route
from podway.model.base import ObjectRef
from podway.readers.explain.model import MemberView, Outcome, OutcomeKind, PoolView
from podway.readers.explain.words import backend_mode, hostport

# pool name -> "address:port" -> the engine's health flags ("healthy", "/failed_active_hc", …)
Health = Mapping[str, Mapping[str, str]]


def pool_view(pool: Pool, percent: float, *, engine_health: Health | None, mode: str
              ) -> PoolView:
    """What ``pool`` is and which of its members take new requests (``engine_health``: the engine's
    live member health, when known; ``mode``: the default backend mode)."""
    live = engine_health.get(pool.name, {}) if engine_health is not None else None
    members = []
    # A draining member that still serves is the fallback: it takes new requests only while no
    # ready member passes the engine's checks (podway.envoy.config.endpoints).
    proven = any(m.state is MemberState.READY and (
        live is None or live.get(hostport(m.address, m.port)) == "healthy")
        for m in pool.members)
    for m in pool.members:
        health = live.get(hostport(m.address, m.port)) if live is not None else None
        receives = m.state is MemberState.READY
        why = {MemberState.NOT_READY: "not ready (endpoint condition)",
               MemberState.DRAINING: "terminating: finishes what it has, takes nothing new",
               }.get(m.state, "ready")
        if m.fallback:
            receives = not proven
            why = ("terminating, still serving: the fallback, taking new requests while no ready "
                   "member passes the engine's checks" if receives else
                   "terminating, still serving: the fallback while no ready member passes the "
                   "engine's checks; one does, so it takes nothing new")
        if receives and health is not None and health != "healthy":
            receives, why = False, f"failing the engine's checks ({health.strip('/')})"
        elif receives and live is not None and health is None:
            why = "ready (the engine does not list it yet)"
        members.append(MemberView(address=m.address, port=m.port, state=str(m.state),
                                  receives=receives, why=why, weight=m.weight,
                                  node=m.node, origin=m.origin, health=health))
    return PoolView(name=pool.name, percent=percent, exists=True,
                    mode=backend_mode(pool, mode),
                    protocol=str(pool.settings.protocol),
                    lb_policy=str(pool.settings.lb_policy), origin=pool.origin,
                    members=tuple(members))


def persistence_note(pool: Pool, source_ip: str | None) -> str:
    """How the pool's requests stick to a member, as a clause of the pool step."""
    p = pool.settings.persistence
    if p is None:
        return ""
    if p.kind == "source_ip":
        client = f" ({source_ip})" if source_ip else ""
        return f"; sticky by source address{client}"
    return f"; sticky by {p.kind} {p.name}"


def summary(outcomes: list[Outcome], route: Route | None, http: bool,
             notes: Mapping[str, str]) -> str:
    where = f" (route {route.name}, from {route.origin})" if route else ""
    parts = []
    for o in outcomes:
        share = f"{o.percent:.0f} %: " if len(outcomes) > 1 else ""
        if o.kind is OutcomeKind.SERVED:
            parts.append(f"{share}served by {o.pool}")
        elif o.kind is OutcomeKind.NO_MEMBER:
            what = "503" if http else "closed"
            note = f" ({notes[o.pool]})" if o.pool is not None and o.pool in notes else ""
            parts.append(f"{share}{what} because pool {o.pool} has no member that takes new "
                         f"requests{note}")
        elif o.kind is OutcomeKind.NO_POOL:
            what = "503" if http else "closed"
            parts.append(f"{share}{what} because pool {o.pool or '(none)'} is not served")
        else:
            parts.append(f"{share}{o.status} because a backend reference is invalid (see the "
                         "problems below)")
    return "; ".join(parts) + where


def unique(refs: Iterable[ObjectRef]) -> list[ObjectRef]:
    out: list[ObjectRef] = []
    for r in refs:
        if r not in out:
            out.append(r)
    return out
