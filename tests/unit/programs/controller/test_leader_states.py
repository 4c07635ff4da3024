"""``leader_states``: the write-back's feed of states and terms waits, it does not spin.

Before the first state (the first LISTs running, or retried) a leader's feed waited for "a
state or a new term", and a leader's wait for a new term answered at once: the loop went round
as fast as the event loop let it for as long as no state came (3,504 rounds during a
10,000-route cold start of the controller bench, taking turns with the LISTs' parsing)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from podway.programs.controller.leader import Fence, Unelected, leader_states
from tests.waiting import eventually


class Feed:
    """A pipeline's ``state`` and ``wait_for``, counting the waits."""

    def __init__(self) -> None:
        self.state: Any = None
        self.waits = 0
        self._changed = asyncio.Event()

    def publish(self, version: int) -> None:
        self.state = SimpleNamespace(version=version)
        self._changed.set()

    async def wait_for(self, predicate: Callable[[Any], bool]) -> Any:
        self.waits += 1
        while self.state is None or not predicate(self.state):
            self._changed.clear()
            await self._changed.wait()
        return self.state


class LaterTerm(Unelected):
    """Leads from term 2 once ``elected`` is set (term 1 never leads)."""

    def __init__(self) -> None:
        self.elected = asyncio.Event()

    def fence(self) -> Fence:
        return Fence(2, lambda _: True) if self.elected.is_set() else Fence(0, lambda _: False)

    async def wait_leader(self, *, after_term: int = 0) -> Fence:
        if after_term >= 2:
            await asyncio.Event().wait()
        await self.elected.wait()
        return self.fence()


async def _follow(feed: Feed, leadership: Unelected, seen: list[tuple[int, bool]]) -> None:
    async for state, leads in leader_states(feed, leadership):  # type: ignore[arg-type]
        seen.append((state.version, leads))


async def test_a_leader_with_no_state_yet_waits_for_the_first_one() -> None:
    feed, seen = Feed(), []
    task = asyncio.create_task(_follow(feed, Unelected(), seen))
    try:
        await asyncio.sleep(0.2)  # no state: the LISTs are still running
        assert feed.waits == 1, f"the feed went round {feed.waits} times with nothing to yield"
        feed.publish(1)
        await eventually(lambda: seen, within=5)
        assert seen == [(1, True)]  # the first state, with the term it found: written at once
        await asyncio.sleep(0.1)
        assert seen == [(1, True)]
        assert feed.waits == 2  # then it waits for a newer state (and a later term)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_term_gained_before_the_first_state_comes_with_it() -> None:
    feed, seen, leadership = Feed(), [], LaterTerm()
    task = asyncio.create_task(_follow(feed, leadership, seen))
    try:
        leadership.elected.set()
        await asyncio.sleep(0.1)
        assert feed.waits == 1
        feed.publish(1)
        await eventually(lambda: seen, within=5)
        assert seen == [(1, True)]
        feed.publish(2)
        await eventually(lambda: len(seen) == 2, within=5)
        assert seen == [(1, True), (2, False)]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
