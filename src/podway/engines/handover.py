"""Make before break for the engines that check members themselves (HAProxy, the kernel),
as ``podway.envoy.xds.handover`` is for Envoy: pure, on the IR and the engine's own view.

A member such an engine gets takes no request before its first check passes, and that check
may come later than at once (HAProxy checks a slot on its running schedule: within one check
interval). So a change that takes serving members out of an actively checked pool while no
member it keeps or gets is up in the engine's view (a wholesale replacement, a rollout step
that removes the old pod a moment after adding the new one, or the last terminating pod of a
rollout leaving) would leave the pool with nothing to send to. The leaving members are *held*
instead: served as they were (a rollout's fallback stays a fallback), beside the others, until
a ready member that is not held is up (``up``) or the hold's bound (``hold_s``) ends. A held
member gets requests only while no other is up; the engine ends the hold once one is.

Invariants (as Envoy's): nothing is held for a pool without active checks, nor when the new
pool has no ready member (an emptied pool is the truth), nor while a member it keeps or gets is
up; a member the new pool lists (not ready, draining) is never held back; a later change that
only adds to the pool the hold began with (``carries``) keeps the hold's own members to the
hold's first end, any other is compared with the pool as served. The timing is the engine's
(``podway.haproxy.process``, ``podway.kernel.engine``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from podway.engines.member_health import Health, HostKey, HostState
from podway.ir import IR, HealthCheck, Member, MemberState, Pool

MemberKey = tuple[str, int]  # (address, port)

HOLD_CAP_S = 30.0


def key(member: Member) -> MemberKey:
    return (member.address, member.port)


def _serving(member: Member) -> bool:
    """Ready, or a rollout's fallback."""
    return member.state is MemberState.READY or member.fallback


@dataclass(frozen=True, slots=True)
class Hold:
    departing: tuple[Member, ...]  # the members kept serving
    began_with: frozenset[MemberKey]  # every member the pool that began the hold listed
    until: float  # monotonic seconds


def hold_s(check: HealthCheck) -> float:
    """How long departing members stay: a new member's first check (within one interval on
    HAProxy's slot schedule; within a tenth of it in the kernel engine) and, should it fail (a
    pod not listening yet), the quick checks that bring it up (``healthy_threshold`` of them),
    each with its timeout; at most ``HOLD_CAP_S``."""
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
                         if _serving(m) and key(m) not in listed),
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


@dataclass(slots=True)
class Holds:
    """One engine's holds: the IR as given, as served (with the held members), each pool's
    hold. The engine asks for ``changed`` pools, gives its view of those ``losing`` members,
    serves what ``serve`` returns, and ends holds with ``settle`` (a new member up, a bound
    passed) before serving ``given`` again."""

    given: IR | None = None
    served: IR | None = None
    holds: dict[str, Hold] = field(default_factory=dict)

    def changed(self, ir: IR) -> list[str]:
        """The pools of ``ir`` held, or changed since the last IR given (by identity): O(pools)
        identity checks, O(change) work. Empty on the first IR: nothing was served."""
        if self.given is None:
            return []
        given = self.given.pools
        return [name for name, pool in ir.pools.items()
                if name in self.holds or given.get(name) is not pool]

    def losing(self, ir: IR, changed: list[str]) -> tuple[str, ...]:
        """The ``changed`` pools that lose a serving member: those whose view ``serve`` needs."""
        served = self.served.pools if self.served is not None else {}
        return tuple(name for name in changed if leaving(served.get(name), ir.pools[name]))

    def serve(self, ir: IR, changed: list[str], view: Mapping[HostKey, HostState],
              now: float) -> IR:
        """``ir`` with the held members of holds that go on and of new ones (``departing``
        in the engine's ``view``); recorded as given and as served."""
        served = self.served.pools if self.served is not None else {}
        holds: dict[str, Hold] = {}
        for name in changed:
            pool, before = ir.pools[name], served.get(name)
            hold = self.holds.get(name)
            if hold is not None and now >= hold.until:  # as if the pool as given was served
                before, hold = without(before, hold.departing), None
            elif hold is not None and not carries(hold, pool):
                hold = None  # compared with the pool as served, held members included
            check = pool.settings.health_check
            if hold is None and check is not None:
                gone = departing(before, pool, view)
                if gone:
                    hold = Hold(gone, frozenset(key(m) for m in pool.members),
                                now + hold_s(check))
            if hold is not None:
                holds[name] = hold
        self.holds = holds
        out = ir
        if holds:
            pools: dict[str, Pool] = dict(ir.pools)
            for name, hold in holds.items():
                pools[name] = interim(pools[name], hold.departing)
            out = IR(listeners=ir.listeners, pools=MappingProxyType(pools))
        self.given, self.served = ir, out
        return out

    def settle(self, view: Mapping[HostKey, HostState] | None, now: float) -> bool:
        """End the holds whose pool has another member up in ``view`` (None: not known) or
        whose bound passed; whether any ended (then serve ``given`` again)."""
        given = self.given.pools if self.given is not None else {}
        ended = [name for name, hold in self.holds.items()
                 if now >= hold.until or name not in given or (
                     view is not None and up(given[name], view, hold))]
        for name in ended:
            del self.holds[name]
        return bool(ended)

    def next_end(self) -> float | None:
        """The earliest bound of a hold (monotonic seconds), None without holds."""
        return min((hold.until for hold in self.holds.values()), default=None)
