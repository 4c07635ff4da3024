"""A controller's long-lived loops end when they are cancelled, whatever they were awaiting at
that moment: a loop that swallows its own cancel hangs the controller's ``TaskGroup`` (and a
test's ``stop_controller``) until something else breaks it."""

from __future__ import annotations

import asyncio

from podway.base.tasks import cancel_and_wait
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.pipeline import Pipeline
from podway.programs.controller.leader import Fence, Unelected
from podway.programs.controller.main import leader_states
from podway.sources.base import SourceUpdate

from .bed import options

WEB = """
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {type: LoadBalancer, ports: [{port: %d, targetPort: 80}]}
"""


def update(port: int) -> SourceUpdate:
    return SourceUpdate(Snapshot.of_objects(load_text(WEB % port).objects), ())


class NeverAgain(Unelected):
    """The leader in term 1 for good; while the follower waits for a later term it says so
    (``waiting``), and when that wait is cancelled it cancels ``victim`` at that very moment:
    the controller's ``TaskGroup`` cancelling the follower while it reaps its waiters."""

    def __init__(self) -> None:
        self.victim: asyncio.Task[None] | None = None
        self.waiting = asyncio.Event()

    async def wait_leader(self, *, after_term: int = 0) -> Fence:
        if after_term < 1:
            return self.fence()
        self.waiting.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            assert self.victim is not None
            self.victim.cancel()
            raise
        raise AssertionError("unreachable")


async def test_the_write_back_follower_ends_when_cancelled_while_reaping_its_waiters() -> None:
    """A new state wakes the follower; its cancel arrives while it cancels and awaits the
    leadership waiter it no longer needs: the follower ends cancelled instead of taking the
    cancel for the waiter's own and following on."""
    pipeline = Pipeline(None, translate=options())  # type: ignore[arg-type]  # apply() only
    pipeline.apply(update(8080))
    leadership = NeverAgain()
    seen: list[tuple[int, bool]] = []

    followed_on = asyncio.Event()

    async def follow() -> None:
        async for state, leads in leader_states(pipeline, leadership):
            seen.append((state.version, leads))
            if len(seen) > 1:
                followed_on.set()

    task = asyncio.create_task(follow(), name="follower")
    leadership.victim = task
    async with asyncio.timeout(10):
        await leadership.waiting.wait()
    pipeline.apply(update(8081))
    went_on = asyncio.create_task(followed_on.wait())
    async with asyncio.timeout(10):
        await asyncio.wait({task, went_on}, return_when=asyncio.FIRST_COMPLETED)
    await cancel_and_wait(task, went_on)
    assert not followed_on.is_set(), f"the follower swallowed its cancel and went on: {seen}"
    assert seen == [(1, True)]
