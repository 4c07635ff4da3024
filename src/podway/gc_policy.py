"""The cyclic garbage collector's policy for Podway's long-running processes.

Why: CPython's cyclic collector holds the GIL, and with it the event loop, for as long as a
collection takes, and a full (generation-2) collection visits every tracked object. After the
first state at 1,000 routes the controller holds ~270,000 of them; a full collection took
90-120 ms, fired by allocation counts at no particular moment, and on the slowest 8 of 100 new
routes it fell between the cache set and Envoy's ACK of the new route table (bench/convergence,
``docs/performance.md``, "Route changes"): those 8 were the whole p99. The translator already
pauses the collector while it runs (``podway.translate.translator.gc_paused``), which only moved
the deferred collection to right after it, i.e. into the push.

What ``keep_settled`` does, for as long as it runs:

* Young collections every ``young_threshold`` net new container objects instead of CPython's
  700: one change's translation allocates far more than 700, nearly all freed by reference
  counting before any collection could matter, so the default only rescans survivors.
* Once the first state is published and the pipeline has been quiet for ``quiet_s``: one full
  collection, then ``gc.freeze()``: everything alive then moves to the permanent generation,
  which no collection visits. Later collections see only objects made since.
* Every ``refreeze_s``, again when quiet: ``gc.unfreeze()``, a full collection, a freeze. This is
  the one full pause the policy keeps, at a quiet moment, once per period.

Invariants: reference counting is untouched, so acyclic garbage (nearly all of it) is freed at
once, frozen or not; cyclic garbage among frozen objects waits at most ``refreeze_s`` (then the
unfreeze hands it to a full collection), so nothing leaks for longer. When the task ends
(cancelled, or the pipeline stopped) the previous thresholds come back and the heap is unfrozen:
the policy lasts exactly as long as the process serves with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from podway.errors import PodwayError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class GcPolicy:
    """Settings of ``keep_settled`` (see the module docstring for the trade-offs)."""

    young_threshold: int = 50_000
    """Net new container objects between young collections (CPython: 700). Cyclic garbage
    waits for at most this many allocations (a few MB)."""
    quiet_s: float = 1.0
    """A settle waits until no new state came for this long (a change is not delayed by it)."""
    settle_within_s: float = 30.0
    """…but no longer than this after it is due (a pipeline that is never quiet)."""
    refreeze_s: float = 600.0
    """Seconds between full collections (unfreeze, collect, freeze again)."""

    def check(self) -> None:
        if self.young_threshold < 1 or min(self.quiet_s, self.settle_within_s) < 0 \
                or self.refreeze_s <= 0:
            raise PodwayError(f"invalid garbage collector policy: {self}")


@dataclass(frozen=True, slots=True)
class Settled:
    """One settle: objects frozen, garbage objects collected, how long the pause was."""

    frozen: int
    collected: int
    seconds: float


class _Versioned(Protocol):
    @property
    def version(self) -> int: ...


class StateFeed(Protocol):
    """What the policy reads of a ``Pipeline``: its newest state's version, and a wait."""

    @property
    def state(self) -> _Versioned | None: ...

    async def wait_for(self, predicate: Callable[[Any], bool]) -> object: ...


def settle(*, unfreeze: bool) -> Settled:
    """One full collection (of the frozen objects too when ``unfreeze``), then freeze."""
    began = time.perf_counter()
    if unfreeze:
        gc.unfreeze()
    collected = gc.collect()
    gc.freeze()
    return Settled(frozen=gc.get_freeze_count(), collected=collected,
                   seconds=time.perf_counter() - began)


async def keep_settled(pipeline: StateFeed, policy: GcPolicy, *,
                       on_settled: Callable[[Settled], None] = lambda _: None) -> None:
    """Apply ``policy`` to this process until cancelled or the pipeline stops (see the module
    docstring); ``on_settled`` hears of each settle."""
    from podway.pipeline import PipelineStopped  # the pipeline imports the translator: late

    policy.check()
    previous = gc.get_threshold()
    gc.set_threshold(policy.young_threshold, previous[1], previous[2])
    try:
        await pipeline.wait_for(lambda _: True)
        unfreeze = False
        while True:
            await _quiet(pipeline, quiet_s=policy.quiet_s, within_s=policy.settle_within_s)
            done = settle(unfreeze=unfreeze)
            log.info("gc: %d objects frozen, %d collected, %.0f ms", done.frozen,
                     done.collected, done.seconds * 1000)
            on_settled(done)
            unfreeze = True
            with contextlib.suppress(TimeoutError):  # the period, unless the pipeline stops
                async with asyncio.timeout(policy.refreeze_s):
                    await pipeline.wait_for(_never)
    except PipelineStopped:
        return
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()


async def _quiet(pipeline: StateFeed, *, quiet_s: float, within_s: float) -> None:
    """Until no new state came for ``quiet_s``, or ``within_s`` has passed."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within_s
    while (left := give_up - loop.time()) > 0:
        state = pipeline.state
        seen = state.version if state is not None else 0
        try:
            async with asyncio.timeout(min(quiet_s, left)):
                await pipeline.wait_for(functools.partial(_newer, seen))
        except TimeoutError:
            return


def _newer(version: int, state: _Versioned) -> bool:
    return state.version > version


def _never(_: object) -> bool:
    return False
