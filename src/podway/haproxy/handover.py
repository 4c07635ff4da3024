"""Make before break for the HAProxy engine, as ``podway.envoy.xds.handover`` is for Envoy.

A member HAProxy gets at runtime takes no request before its first check passes
(``podway.haproxy.slots.commands``), and that check comes on the slot's running schedule:
within one check interval, not at once as in Envoy. So a change that takes ready members out
of an actively checked pool while no member it keeps or gets is up in HAProxy's view (a
wholesale replacement, a rollout step that removes the old pod a moment after adding the new
one, or the last terminating pod of a rollout leaving) would leave the pool with no server
up. The leaving members are *held* instead: served as they were (a rollout's fallback stays a
backup server), in their own slots, until a ready member that is not held is up (``up``) or
the hold's bound (``hold_s``) ends. A held member gets requests only while no other is up;
the engine ends the hold within a poll of one coming up.

Invariants (as Envoy's): nothing is held for a pool without active checks, nor when the new
pool has no ready member (an emptied pool is the truth), nor while a member it keeps or gets is
up; a member the new pool lists (not ready, draining) is never held back; a later change that
only adds to the pool the hold began with (``carries``) keeps the hold's own members to the
hold's first end, any other is compared with the pool as served. Pure: the timing lives in
``podway.haproxy.process``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from podway.engines.member_health import Health, HostKey, HostState
from podway.haproxy.slots import MemberKey, fallback, key
from podway.ir import HealthCheck, Member, MemberState, Pool

HOLD_CAP_S = 30.0


@dataclass(frozen=True, slots=True)
class Hold:
    departing: tuple[Member, ...]  # the members kept serving
    began_with: frozenset[MemberKey]  # every member the pool that began the hold listed
    until: float  # monotonic seconds


def hold_s(check: HealthCheck) -> float:
    """How long departing members stay: a new member's first check (within one interval, on
    its slot's schedule) and, should it fail (a pod not listening yet), the quick checks that
    bring it up (``healthy_threshold`` of them), each with its timeout; at most
    ``HOLD_CAP_S``."""
    first = check.interval_ms + check.timeout_ms
    retries = (check.quick_interval_ms + check.timeout_ms) * check.healthy_threshold
    return min((first + retries) / 1000, HOLD_CAP_S)


def leaving(served: Pool | None, new: Pool) -> tuple[Member, ...]:
    """The members of ``served`` that took requests (ready, or a rollout's fallback) and that
    ``new`` no longer lists, when ``new`` has a ready member and an active check (else there
    is nothing to bridge: an emptied pool is the truth)."""
    if served is None or new.settings.health_check is None or not any(
            m.state is MemberState.READY for m in new.members):
        return ()
    listed = {key(m) for m in new.members}
    return tuple(sorted((m for m in served.members
                         if (m.state is MemberState.READY or fallback(m)) and key(m) not in listed),
                        key=key))


def departing(served: Pool | None, new: Pool, view: Mapping[HostKey, HostState]
              ) -> tuple[Member, ...]:
    """The members to hold: those ``leaving``, unless a member of ``new`` is up in the
    engine's ``view`` (one that stays, or a new one that already passed a check)."""
    gone = leaving(served, new)
    return () if not gone or up(new, view) else gone


def carries(hold: Hold, new: Pool) -> bool:
    """Whether ``new`` only adds to the pool the hold began with: each of its members still
    listed and none draining (a readiness flip keeps the pod; a draining one is leaving)."""
    listed = {key(m): m.state for m in new.members}
    return all(k in listed and listed[k] is not MemberState.DRAINING for k in hold.began_with)


def interim(pool: Pool, held: tuple[Member, ...]) -> Pool:
    """``pool`` with the held members beside its own, as they were served (a fallback stays
    in its backup slot); a held member the pool lists again is the pool's, as listed."""
    listed = {key(m) for m in pool.members}
    extra = tuple(m for m in held if key(m) not in listed)
    return replace(pool, members=pool.members + extra) if extra else pool


def without(pool: Pool | None, held: tuple[Member, ...]) -> Pool | None:
    """``pool`` without the ``held`` members (a hold whose bound passed)."""
    if pool is None:
        return None
    gone = {key(m) for m in held}
    return replace(pool, members=tuple(m for m in pool.members if key(m) not in gone))


def up(pool: Pool, view: Mapping[HostKey, HostState], hold: Hold | None = None) -> bool:
    """Whether a ready member of ``pool`` (not one ``hold`` holds) is up in the ``view``."""
    held = {key(m) for m in hold.departing} if hold is not None else set()
    for member in pool.members:
        if member.state is not MemberState.READY or key(member) in held:
            continue
        state = view.get((pool.name, f"{member.address}:{member.port}"))
        if state is not None and state.health is Health.HEALTHY:
            return True
    return False
