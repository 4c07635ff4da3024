"""``cancel_and_wait``: the tasks given have ended when it returns, their outcomes are dropped,
and a cancel of the caller arriving while it waits is raised (not taken for the tasks')."""

from __future__ import annotations

import asyncio

import pytest

from podway.base.tasks import cancel_and_wait


async def slow_to_stop(stopping: asyncio.Event, release: asyncio.Event) -> None:
    """Ends only once ``release`` is set after its cancel (cleanup that takes a while)."""
    try:
        await asyncio.Event().wait()
    finally:
        stopping.set()
        await release.wait()


async def test_the_callers_own_cancel_is_raised_while_it_waits() -> None:
    """The caller is cancelled while a helper is still ending: the caller ends cancelled, and
    does not carry on after the helper has ended."""
    stopping, release = asyncio.Event(), asyncio.Event()
    helper = asyncio.create_task(slow_to_stop(stopping, release))
    await asyncio.sleep(0)  # the helper is in its wait
    went_on: list[bool] = []

    async def caller() -> None:
        await cancel_and_wait(helper)
        went_on.append(True)

    task = asyncio.create_task(caller())
    async with asyncio.timeout(10):
        await stopping.wait()
    task.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert went_on == []
    async with asyncio.timeout(10):
        await asyncio.wait({helper})
    assert helper.cancelled()


async def test_returns_once_every_task_ended_and_drops_their_outcomes() -> None:
    """Tasks that end cancelled, with an error or with a result: all ended, nothing raised."""
    async def fails_on_cancel() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    done = asyncio.create_task(asyncio.sleep(0, result=7))
    await done
    waiting = asyncio.create_task(asyncio.Event().wait())
    failing = asyncio.create_task(fails_on_cancel())
    await asyncio.sleep(0)
    await cancel_and_wait(done, waiting, failing)
    assert all(t.done() for t in (done, waiting, failing))
    assert waiting.cancelled()
    assert isinstance(failing.exception(), RuntimeError)
    await cancel_and_wait()  # nothing to stop
