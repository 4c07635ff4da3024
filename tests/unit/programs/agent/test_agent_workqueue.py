"""The work queue: de-duplication, one worker per key, exponential backoff."""

from __future__ import annotations

import asyncio

from podway.base.backoff import Backoff
from podway.programs.agent.types import PodKey
from podway.programs.agent.workqueue import WorkQueue

A, B = PodKey("ns/a"), PodKey("ns/b")


async def test_adds_are_merged_and_a_key_is_never_processed_twice_at_once() -> None:
    """Repeated adds merge; an add during processing re-queues only after done()."""
    queue = WorkQueue()
    queue.add(A)
    queue.add(A)
    queue.add(B)
    assert await queue.get() == A
    queue.add(A)  # while A is being processed
    assert await queue.get() == B
    assert len(queue) == 1
    queue.done(B)
    getter = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    assert not getter.done()  # A not handed out while still processing
    queue.done(A)
    assert await asyncio.wait_for(getter, 1) == A


async def test_retry_later_requeues_after_delay_and_forget_resets() -> None:
    """A failed key comes back after its backoff; forget() resets its failure count."""
    queue = WorkQueue(backoff=Backoff(base=0.01, cap=1.0, jitter=0))
    assert queue.retry_later(A) == 0.01
    assert queue.retry_later(A) == 0.02
    assert await asyncio.wait_for(queue.get(), 1) == A
    queue.forget(A)
    assert queue.failures(A) == 0
    queue.close()


async def test_idle_only_when_nothing_is_queued_in_flight_or_due_to_retry() -> None:
    """idle() is false while a key is queued, being processed, or waiting for its retry."""
    queue = WorkQueue(backoff=Backoff(base=0.01))
    assert queue.idle()
    queue.add(A)
    assert not queue.idle()
    assert await queue.get() == A
    assert len(queue) == 0
    assert not queue.idle()  # empty queue, but A is in flight
    queue.retry_later(A)
    queue.done(A)
    assert not queue.idle()  # A's retry is pending
    assert await asyncio.wait_for(queue.get(), 1) == A
    queue.done(A)
    assert queue.idle()
