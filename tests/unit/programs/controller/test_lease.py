"""The election's decisions without I/O (client-go's rules): when a lease may be taken, what a
take and a renewal write, what a hand-back writes, and timings that would break the guard."""

from __future__ import annotations

import pytest

from podway.base.errors import ConfigError
from podway.programs.controller.leader import ElectionSettings, parse_enabled
from podway.programs.controller.lease import Candidate, LeaseRecord, micro_time

OTHER = LeaseRecord(holder="b", duration_s=15, acquire_time="t0", renew_time="t0",
                    transitions=3)


def test_no_lease_yet_is_created_with_no_transition() -> None:
    """Nobody ever led: the first candidate creates the record, leaseTransitions 0."""
    mine = Candidate("a", duration_s=15).want(None, now=100.0, wall="w")
    assert mine == LeaseRecord(holder="a", duration_s=15, acquire_time="w", renew_time="w",
                               transitions=0)


def test_a_live_lease_is_taken_only_after_its_duration_on_the_local_clock() -> None:
    """Another holder's unchanged record is taken once it was seen for leaseDurationSeconds
    (from when this replica first saw it, not from its renewTime); the take counts a
    transition and sets acquireTime."""
    me = Candidate("a", duration_s=10)
    assert me.want(OTHER, now=1000.0, wall="w1") is None
    assert me.want(OTHER, now=1014.9, wall="w2") is None
    taken = me.want(OTHER, now=1015.0, wall="w3")
    assert taken == LeaseRecord(holder="a", duration_s=10, acquire_time="w3", renew_time="w3",
                                transitions=4)


def test_a_renewing_holder_is_never_taken_over() -> None:
    """Each change of the record restarts the wait: a leader that renews keeps the lease."""
    me = Candidate("a", duration_s=15)
    for step in range(10):
        renewed = LeaseRecord(holder="b", duration_s=15, renew_time=f"t{step}", transitions=3)
        assert me.want(renewed, now=1000.0 + 10 * step, wall="w") is None


def test_a_released_lease_is_taken_at_once() -> None:
    """An empty holder (a leader that stopped cleanly) is free right away."""
    released = LeaseRecord(holder="", duration_s=1, renew_time="t", transitions=5)
    taken = Candidate("a", duration_s=15).want(released, now=5.0, wall="w")
    assert taken is not None
    assert taken.holder == "a"
    assert taken.transitions == 6


def test_renewing_keeps_acquire_time_and_transitions() -> None:
    """The holder's own record: only renewTime (and the duration) move."""
    mine = LeaseRecord(holder="a", duration_s=9, acquire_time="t0", renew_time="t1",
                       transitions=2)
    renewed = Candidate("a", duration_s=15).want(mine, now=5.0, wall="t2")
    assert renewed == LeaseRecord(holder="a", duration_s=15, acquire_time="t0",
                                  renew_time="t2", transitions=2)


def test_hand_back_only_when_ours() -> None:
    """Release writes an empty holder with a 1 s lease, and only over a record this replica
    holds as far as it last saw."""
    me = Candidate("a", duration_s=15)
    assert me.release(wall="w") is None
    me.observe(OTHER, now=1.0)
    assert me.release(wall="w") is None
    mine = me.want(None, now=2.0, wall="t")
    assert mine is not None
    me.wrote(mine, now=2.0)
    released = me.release(wall="w")
    assert released is not None
    assert (released.holder, released.duration_s, released.transitions) == ("", 1, 0)


def test_record_round_trip_and_bad_fields() -> None:
    """The spec round-trips; fields of the wrong type count as absent (never a crash)."""
    record = LeaseRecord(holder="a", duration_s=15, acquire_time=micro_time(),
                         renew_time=micro_time(), transitions=7)
    assert LeaseRecord.from_spec(record.to_spec()) == record
    odd = LeaseRecord.from_spec({"holderIdentity": 5, "leaseDurationSeconds": "15",
                                 "leaseTransitions": True, "renewTime": 3})
    assert odd == LeaseRecord()
    assert LeaseRecord.from_spec(None) == LeaseRecord()


def test_micro_time_always_has_six_fraction_digits() -> None:
    """The API server parses MicroTime with exactly six digits, even at .000000."""
    from datetime import UTC, datetime

    assert micro_time(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000000Z"


@pytest.mark.parametrize(("settings", "expected"), [
    ({"lease_duration_s": 10, "renew_deadline_s": 10.0}, "--renew-deadline-s must be shorter"),
    ({"lease_duration_s": 0}, "--lease-duration-s must be at least 1"),
    ({"retry_period_s": 9.0}, "--retry-period-s"),
    ({"retry_period_s": 0.0}, "--retry-period-s"),
    ({"namespace": ""}, "needs a namespace"),
])
def test_timings_that_break_the_guard_are_one_line(settings: dict[str, object],
                                                   expected: str) -> None:
    """A renew deadline as long as the lease would let two replicas write at once: refused."""
    base: dict[str, object] = {"namespace": "ns", "identity": "a"}
    with pytest.raises(ConfigError, match=expected):
        ElectionSettings(**{**base, **settings}).check()  # type: ignore[arg-type]


def test_leader_elect_values() -> None:
    """--leader-elect takes Kubernetes' true/false; anything else is one line."""
    assert parse_enabled("--leader-elect", "false") is False
    assert parse_enabled("--leader-elect", "True") is True
    with pytest.raises(ConfigError, match="--leader-elect must be true or false"):
        parse_enabled("--leader-elect", "maybe")
