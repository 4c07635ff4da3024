"""The garbage collector policy: settled (collected, frozen) only once a first state exists,
frozen cyclic garbage reclaimed at the next refreeze, and everything undone when it ends."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from podway.gc_policy import GcPolicy, Settled, keep_settled, settle
from podway.pipeline import PipelineStopped


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


@pytest.fixture(autouse=True)
def collector() -> Iterator[None]:
    """This test process's collector as it was, whatever the test did."""
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_settle_collects_then_freezes() -> None:
    """A settle frees cyclic garbage first, then freezes what is alive."""
    dead = Cycle()
    gone = weakref.ref(dead)
    del dead
    done = settle(unfreeze=False)
    assert gone() is None
    assert done.collected >= 1
    assert done.frozen == gc.get_freeze_count() > 0


async def test_settles_after_the_first_state_and_refreezes() -> None:
    """Thresholds at once; the first settle only once a state exists; cyclic garbage that was
    alive at a freeze survives collections (frozen) until the next settle reclaims it."""
    feed = Feed()
    settles: asyncio.Queue[tuple[Settled, Version | None]] = asyncio.Queue()
    policy = GcPolicy(young_threshold=12_345, quiet_s=0.01, refreeze_s=0.2)
    task = asyncio.create_task(keep_settled(
        feed, policy, on_settled=lambda s: settles.put_nowait((s, feed.state))))
    try:
        kept = Cycle()
        gone = weakref.ref(kept)
        feed.publish(1)
        first, at = await asyncio.wait_for(settles.get(), 10)
        assert gc.get_threshold()[0] == 12_345
        assert at == Version(1)
        assert first.frozen > 0
        del kept  # garbage now, but frozen: no collection looks at it
        gc.collect()
        assert gone() is not None
        second, _ = await asyncio.wait_for(settles.get(), 10)  # the refreeze
        assert gone() is None
        assert second.collected >= 1
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@pytest.mark.parametrize("ending", ["cancelled", "pipeline stopped"])
async def test_policy_is_undone_when_it_ends(ending: str) -> None:
    """Cancelled or its pipeline stopped: the previous thresholds are back, nothing frozen."""
    before = gc.get_threshold()
    feed = Feed()
    settled = asyncio.Event()
    task = asyncio.create_task(keep_settled(feed, GcPolicy(quiet_s=0.01),
                                            on_settled=lambda _: settled.set()))
    feed.publish(1)
    await asyncio.wait_for(settled.wait(), 10)
    assert gc.get_freeze_count() > 0
    if ending == "cancelled":
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        feed.stop()
        await asyncio.wait_for(task, 10)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
