"""Make before break in the engines that check members themselves: which members are held,
for how long, and when a later change keeps or ends the hold (``podway.engines.handover``)."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from podway.engines import handover
from podway.engines.member_health import Health, HostState
from podway.ir import IR, HealthCheck, HealthCheckKind, Member, MemberState, Pool, PoolSettings

NAME = "pool/default/web/80"
CHECK = HealthCheck(kind=HealthCheckKind.HTTP)


def _m(n: int, state: MemberState = MemberState.READY, *, weight: int = 1) -> Member:
    return Member(address=f"10.0.0.{n}", port=80, state=state, weight=weight)


def _pool(*members: Member, check: HealthCheck | None = CHECK) -> Pool:
    return Pool(name=NAME, settings=PoolSettings(health_check=check), members=members)


def _keys(pool: Pool) -> list[tuple[str, int, MemberState]]:
    return [(m.address, m.port, m.state) for m in pool.members]


def test_ready_members_leaving_a_checked_pool_are_held_while_no_other_is_up() -> None:
    old, new = _m(1, weight=3), _m(2)
    up, pending = HostState(Health.HEALTHY), HostState(Health.PENDING)
    assert handover.departing(_pool(old), _pool(new), {}) == (old,)
    # a rollout step: the new member was added a moment ago and is not up yet
    assert handover.departing(_pool(old, new), _pool(new), {(NAME, "10.0.0.2:80"): pending}) \
        == (old,)
    assert handover.departing(_pool(old, new), _pool(new), {(NAME, "10.0.0.2:80"): up}) == ()
    assert handover.departing(_pool(old, _m(3)), _pool(_m(3), new),
                              {(NAME, "10.0.0.3:80"): up}) == ()  # one that stays is up
    assert handover.departing(_pool(old), _pool(new, check=None), {}) == ()  # nothing to bridge
    assert handover.departing(_pool(old), _pool(_m(2, MemberState.NOT_READY)), {}) == ()
    assert handover.departing(None, _pool(new), {}) == ()  # a new pool
    # a leaving member the new pool still lists (draining) is the pool's, not held
    assert handover.departing(_pool(old, _m(3)),
                              _pool(new, _m(3, MemberState.DRAINING)), {}) == (old,)
    # a rollout's last terminating pod (the fallback) leaving before a new one is up
    fallback = dataclasses.replace(_m(5, MemberState.DRAINING), serving=True)
    assert handover.departing(_pool(fallback, new), _pool(new), {}) == (fallback,)
    assert handover.departing(_pool(_m(6, MemberState.DRAINING), new), _pool(new), {}) == ()
    # a not-ready member that is up takes no request: it bridges nothing
    assert handover.departing(_pool(old), _pool(new, _m(4, MemberState.NOT_READY)),
                              {(NAME, "10.0.0.4:80"): up}) == (old,)


def test_the_interim_serves_the_held_members_as_they_were_beside_the_new_ones() -> None:
    old = _m(1, MemberState.READY, weight=3)
    fallback = dataclasses.replace(_m(5, MemberState.DRAINING), serving=True)
    got = handover.interim(_pool(_m(2)), (old, fallback))
    assert _keys(got) == [("10.0.0.2", 80, MemberState.READY), ("10.0.0.1", 80, MemberState.READY),
                          ("10.0.0.5", 80, MemberState.DRAINING)]
    assert got.members[1].weight == 3
    assert got.members[2].serving  # a rollout's fallback stays a backup server
    listed = _pool(_m(2), _m(1, MemberState.NOT_READY))
    assert handover.interim(listed, (old,)) is listed  # listed again: as the pool lists it


def test_a_later_change_carries_the_hold_only_while_it_adds() -> None:
    hold = handover.Hold((_m(1),), frozenset({("10.0.0.2", 80)}), until=10.0)
    assert handover.carries(hold, _pool(_m(2), _m(3)))
    assert handover.carries(hold, _pool(_m(2, MemberState.NOT_READY)))  # a readiness flip
    assert not handover.carries(hold, _pool(_m(3)))  # the new member went
    assert not handover.carries(hold, _pool(_m(2, MemberState.DRAINING)))


def test_the_hold_ends_once_a_member_that_is_not_held_is_up() -> None:
    hold = handover.Hold((_m(1),), frozenset({("10.0.0.2", 80)}), until=10.0)
    pool = handover.interim(_pool(_m(2)), hold.departing)
    up, pending = HostState(Health.HEALTHY), HostState(Health.PENDING)
    assert not handover.up(pool, {(NAME, "10.0.0.1:80"): up, (NAME, "10.0.0.2:80"): pending},
                           hold)
    assert handover.up(pool, {(NAME, "10.0.0.2:80"): up}, hold)


def test_the_hold_covers_a_first_check_a_whole_interval_away_and_its_retries() -> None:
    assert handover.hold_s(CHECK) == (5000 + 1000 + (1000 + 1000)) / 1000
    slow = dataclasses.replace(CHECK, interval_ms=60_000)
    assert handover.hold_s(slow) == handover.HOLD_CAP_S


def _ir(pool: Pool) -> IR:
    return IR(pools=MappingProxyType({pool.name: pool}))


def test_the_holds_last_to_the_bound_and_through_an_addition() -> None:
    """``Holds``: the IR an engine serves for each IR given, and when a hold ends."""
    book = handover.Holds()

    def serve(pool: Pool, now: float = 0.0) -> list[str]:
        ir = _ir(pool)
        served = book.serve(ir, book.changed(ir), {}, now)
        return [m.address for m in served.pools[NAME].members]

    assert serve(_pool(_m(1))) == ["10.0.0.1"]  # the first IR: nothing to hold
    assert serve(_pool(_m(2))) == ["10.0.0.2", "10.0.0.1"]
    assert book.next_end() == handover.hold_s(CHECK)
    # only adds: the same hold, the same held member
    assert serve(_pool(_m(2), _m(3))) == ["10.0.0.2", "10.0.0.3", "10.0.0.1"]
    # replaced again while held: the interim as served departs, held anew
    assert serve(_pool(_m(4))) == ["10.0.0.4", "10.0.0.1", "10.0.0.2", "10.0.0.3"]
    # the bound passed: the pool as given, and not held again for what was held
    assert serve(_pool(_m(4)), now=100.0) == ["10.0.0.4"]
    assert book.holds == {}
    assert book.next_end() is None


def test_a_hold_settles_once_another_member_is_up_or_its_bound_passed() -> None:
    book = handover.Holds()
    for pool in (_pool(_m(1)), _pool(_m(2))):
        book.serve(_ir(pool), book.changed(_ir(pool)), {}, 0.0)
    assert NAME in book.holds
    held_up = {(NAME, "10.0.0.1:80"): HostState(Health.HEALTHY)}
    assert not book.settle(held_up, 1.0)  # the held member being up ends nothing
    assert not book.settle(None, 1.0)  # the engine did not answer
    assert book.settle({(NAME, "10.0.0.2:80"): HostState(Health.HEALTHY)}, 1.0)
    assert book.given is not None
    again = book.serve(book.given, book.changed(book.given), {}, 1.0)
    assert [m.address for m in again.pools[NAME].members] == ["10.0.0.2"]
    third = _ir(_pool(_m(3)))  # a new hold, ended by its bound
    book.serve(third, book.changed(third), {}, 2.0)
    assert NAME in book.holds
    assert book.settle({}, 2.0 + handover.hold_s(CHECK))
