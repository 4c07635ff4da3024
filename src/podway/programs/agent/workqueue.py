"""A de-duplicating work queue of pod keys with per-key exponential backoff (client-go style).

Invariants: a key is queued at most once; a key is never handed to two workers at once (added
while processing, it is queued again when the worker is done). Handlers only ``add``; merged
adds are harmless because workers reconcile from the current cache (level-triggered).
"""

from __future__ import annotations

import asyncio

from podway.base.backoff import Backoff
from podway.programs.agent.types import PodKey

RETRY = Backoff(base=0.05)  # a failed reconcile retries soon: most failures are transient


class WorkQueue:
    def __init__(self, *, backoff: Backoff | None = None) -> None:
        self.backoff = backoff or RETRY
        self._queue: asyncio.Queue[PodKey] = asyncio.Queue()
        self._dirty: set[PodKey] = set()
        self._processing: set[PodKey] = set()
        self._failures: dict[PodKey, int] = {}
        self._timers: dict[PodKey, asyncio.TimerHandle] = {}

    def __len__(self) -> int:
        return len(self._dirty)

    def add(self, key: PodKey) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.put_nowait(key)

    async def get(self) -> PodKey:
        key = await self._queue.get()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: PodKey) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.put_nowait(key)

    def forget(self, key: PodKey) -> None:
        """The key succeeded: its next failure starts the backoff again."""
        self._failures.pop(key, None)

    def retry_later(self, key: PodKey) -> float:
        """Re-add ``key`` after its backoff delay; returns the delay."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        delay = self.backoff.delay(failures)
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(delay, self._fire, key)
        return delay

    def idle(self) -> bool:
        """Nothing queued, nothing being processed, no retry waiting: every key is settled."""
        return not self._dirty and not self._processing and not self._timers

    def failures(self, key: PodKey) -> int:
        return self._failures.get(key, 0)

    def _fire(self, key: PodKey) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
