"""PendingMembers only for waits that last; a Normal MembersReady once they end."""

from __future__ import annotations

from podway.programs.controller.events import Due
from podway.programs.controller.pending import PendingWarnings

WEB = ("default", "web")


def reasons(due: list[Due]) -> list[tuple[str, str]]:
    return [(d.type, d.reason) for d in due]


def test_a_short_wait_is_not_an_event() -> None:
    """The agent annotated within the grace: nothing to say, neither Warning nor Normal."""
    tracker = PendingWarnings(grace_s=5)
    assert tracker.due({WEB: ("web-a",)}, now=0) == []
    assert tracker.due({WEB: ("web-a",)}, now=4.9) == []
    assert tracker.due({}, now=5.5) == []


def test_a_lasting_wait_warns_once_per_set_then_says_it_is_over() -> None:
    tracker = PendingWarnings(grace_s=5)
    assert tracker.due({WEB: ("web-a",)}, now=0) == []
    due = tracker.due({WEB: ("web-a",)}, now=5)
    assert reasons(due) == [("Warning", "PendingMembers")]
    assert "web-a" in due[0].message
    assert "agent" in due[0].message
    assert tracker.due({WEB: ("web-a",)}, now=9) == []  # the same set: not repeated
    assert reasons(tracker.due({WEB: ("web-a", "web-b")}, now=10)) == [
        ("Warning", "PendingMembers")]  # a changed set that still waits
    assert reasons(tracker.due({}, now=11)) == [("Normal", "MembersReady")]
    assert tracker.due({}, now=12) == []


def test_a_wait_that_restarts_counts_from_its_own_start() -> None:
    tracker = PendingWarnings(grace_s=5)
    tracker.due({WEB: ("web-a",)}, now=0)
    tracker.due({}, now=3)  # over before the grace: forgotten
    assert tracker.due({WEB: ("web-b",)}, now=6) == []
    assert reasons(tracker.due({WEB: ("web-b",)}, now=11)) == [("Warning", "PendingMembers")]
