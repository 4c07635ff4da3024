"""The garbage collector policy: no automatic collection; settles (collect, freeze) once a first
state exists, then by period or growth; frozen cyclic garbage reclaimed by the full settles;
everything undone when it ends."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from podway.pipeline import PipelineStopped
from podway.programs.gc_policy import GcPolicy, Settled, keep_settled, settle


@dataclass(frozen=True)
class Version:
    version: int


class Feed:
    """What the policy reads of a pipeline: the newest state and a wait for a newer one."""

    def __init__(self) -> None:
        self.state: Version | None = None
        self.stopped = False
        self._changed = asyncio.Event()

    def publish(self, version: int) -> None:
        self.state = Version(version)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def stop(self) -> None:
        self.stopped = True
        self._changed.set()

    async def wait_for(self, predicate: Callable[[Any], bool]) -> object:
        while True:
            state, changed = self.state, self._changed
            if state is not None and predicate(state):
                return state
            if self.stopped:
                raise PipelineStopped("stopped")
            await changed.wait()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_settle_collects_then_freezes() -> None:
    """A settle frees cyclic garbage first, then freezes what is alive."""
    dead = Cycle()
    gone = weakref.ref(dead)
    del dead
    done = settle(full=False)
    assert gone() is None
    assert done.collected >= 1
    assert done.frozen == gc.get_freeze_count() > 0


async def test_no_collection_until_the_first_state_then_settles_and_full_ones() -> None:
    """Automatic collections off; the first settle once a state exists; a cycle alive at a
    freeze and dead since survives ordinary settles, and the full one reclaims it."""
    feed = Feed()
    settles: asyncio.Queue[tuple[Settled, Version | None]] = asyncio.Queue()
    policy = GcPolicy(quiet_s=0.01, settle_every_s=0.05, unfreeze_every=2)
    task = asyncio.create_task(keep_settled(
        feed, policy, on_settled=lambda s: settles.put_nowait((s, feed.state))))
    try:
        kept = Cycle()
        gone = weakref.ref(kept)
        startup = Cycle()
        startup_gone = weakref.ref(startup)
        del startup  # garbage before the first settle
        feed.publish(1)
        first, at = await asyncio.wait_for(settles.get(), 10)
        assert not gc.isenabled()
        assert at == Version(1)
        assert not first.full
        assert first.frozen > 0
        # The first settle only freezes (a collection of the whole new heap cost seconds at
        # 10,000 routes, for next to no garbage): startup's garbage waits for the full one.
        assert first.collected == 0
        assert startup_gone() is not None
        del kept  # garbage now, but frozen: no collection but a full one looks at it
        gc.collect()
        second, _ = await asyncio.wait_for(settles.get(), 10)
        assert not second.full
        assert gone() is not None
        third, _ = await asyncio.wait_for(settles.get(), 10)
        assert third.full
        assert gone() is None
        assert startup_gone() is None
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@pytest.mark.parametrize("new_state", [True, False])
async def test_growth_brings_the_next_settle_forward(new_state: bool) -> None:
    """More objects made than the growth allows: settled at the next state, not a period on;
    and while no state comes (the status writer's pass after a state, retries, resyncs),
    within a growth check."""
    feed = Feed()
    settles: asyncio.Queue[Settled] = asyncio.Queue()
    policy = GcPolicy(quiet_s=0.01, settle_every_s=3600, growth=0.0, min_growth=10_000)
    task = asyncio.create_task(keep_settled(feed, policy, on_settled=settles.put_nowait))
    try:
        feed.publish(1)
        await asyncio.wait_for(settles.get(), 10)
        made: list[list[int]] = [[] for _ in range(20_000)]  # tracked objects, all alive
        if new_state:
            feed.publish(2)
        second = await asyncio.wait_for(settles.get(), 10)
        assert second.frozen >= len(made)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@pytest.mark.parametrize("ending", ["cancelled", "pipeline stopped"])
async def test_policy_is_undone_when_it_ends(ending: str) -> None:
    """Cancelled or its pipeline stopped: the collector is on again, nothing frozen."""
    feed = Feed()
    settled = asyncio.Event()
    task = asyncio.create_task(keep_settled(feed, GcPolicy(quiet_s=0.01),
                                            on_settled=lambda _: settled.set()))
    feed.publish(1)
    await asyncio.wait_for(settled.wait(), 10)
    assert gc.get_freeze_count() > 0
    assert not gc.isenabled()
    if ending == "cancelled":
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        feed.stop()
        await asyncio.wait_for(task, 10)
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


async def test_settles_by_period_while_no_state_comes() -> None:
    """No first state (the API away): settled anyway once a period has passed."""
    feed = Feed()
    settles: asyncio.Queue[tuple[Settled, Version | None]] = asyncio.Queue()
    task = asyncio.create_task(keep_settled(
        feed, GcPolicy(quiet_s=0.01, settle_every_s=0.05),
        on_settled=lambda s: settles.put_nowait((s, feed.state))))
    try:
        settled, at = await asyncio.wait_for(settles.get(), 10)
        assert at is None
        assert settled.frozen > 0
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
