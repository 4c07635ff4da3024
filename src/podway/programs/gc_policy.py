"""The cyclic garbage collector's policy for Podway's long-running processes.

Why: CPython's cyclic collector holds the GIL, and with it the event loop, for as long as a
collection takes, and it starts one whenever allocations cross a threshold, at no particular
moment. Measured in bench/convergence.py (``docs/performance.md``, "Route changes"):

* at 1,000 routes the controller holds ~270,000 tracked objects; a full collection took
  90-430 ms, 8 of them per 100 route changes, plus ~1,000 young ones (0.6-1.1 s in all); on the
  slowest 8 of 100 new routes a full one fell between the cache set and the push;
* at 10,000 routes (~1.6 million objects) full collections took up to 2.4 s, and the young
  collection owed for the translation's allocations (the translator pauses the collector while
  it runs, ``podway.translate.translator.gc_paused``) fired in the build, right before the push:
  up to 0.5 s there;
* all the while the controller made ~14 objects of cyclic garbage per change: the collector
  found almost nothing to free. Reference counting frees everything else at once.

So, for as long as ``keep_settled`` runs: no automatic collection at all. Instead *settles*
(a collection, then ``gc.freeze()``: what is alive moves to the permanent generation, which
later collections skip), each at a quiet moment (no new state for ``quiet_s``):

* the first once the first state is published, or ``settle_every_s`` after the start if none
  comes (the API away: retries make garbage too). The first only freezes, it does not collect:
  startup makes next to no cyclic garbage (0 objects at 10,000 routes) while a collection of the
  whole new heap took 2.2 s there, holding the loop while Envoy waited for its first config and
  the first status pass ran (docs/performance.md, "Cold start"); what startup left is
  reclaimed by the first full settle;
* then every ``settle_every_s``, or sooner once more than ``growth`` times the frozen heap (at
  least ``min_growth``) objects were made since the last one (``gc.get_count()``): a settle
  scans only what is not frozen, i.e. what was made since the last one;
* every ``unfreeze_every``-th settle unfreezes first: a full collection, the one long pause the
  policy keeps, so cyclic garbage among frozen objects (alive when frozen, dead since) is
  reclaimed too.

Invariants: reference counting is untouched; cyclic garbage waits about ``settle_every_s``
at most (made since the last settle), or ``unfreeze_every`` times that (frozen before it died);
growth between settles is bounded as above; no collection starts inside a change's translate,
build or push unless the pipeline was never quiet for ``settle_within_s`` (a change that
arrives during a settle waits for it: 0.1-0.3 s at 1,000 routes, 1-2.4 s at 10,000). When the
task ends (cancelled, or the pipeline stopped) the collector is enabled again if it was and the
heap unfrozen: the policy lasts exactly as long as the process serves with it. (The status
writer's CPU share cannot be lowered instead: ``nice`` and affinity act on processes or
threads, and it is a coroutine of this one.)
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from podway.base.errors import PodwayError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class GcPolicy:
    """Settings of ``keep_settled`` (see the module docstring for the trade-offs)."""

    quiet_s: float = 1.0
    """A settle waits until no new state came for this long (so it never delays a change)."""
    settle_within_s: float = 30.0
    """…but no longer than this once it is due (a pipeline that is never quiet)."""
    settle_every_s: float = 600.0
    """Seconds between settles when the heap does not grow."""
    growth: float = 1.0
    """Settle sooner once this many times the frozen heap was made since the last settle."""
    min_growth: int = 200_000
    """…and at least this many objects (a small heap is not settled after every change)."""
    unfreeze_every: int = 6
    """Every n-th settle also looks at the frozen objects (a full collection)."""

    def check(self) -> None:
        if min(self.quiet_s, self.settle_within_s, self.growth, self.min_growth) < 0 \
                or self.settle_every_s <= 0 or self.unfreeze_every < 1:
            raise PodwayError(f"invalid garbage collector policy: {self}")


@dataclass(frozen=True, slots=True)
class Settled:
    """One settle: whether frozen objects were looked at too (full), objects frozen after it,
    garbage objects it collected, and how long the pause was."""

    full: bool
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


def settle(*, full: bool, collect: bool = True) -> Settled:
    """Collect what is not frozen (everything when ``full``; nothing without ``collect``), then
    freeze what is alive."""
    began = time.perf_counter()
    if full:
        gc.unfreeze()
    collected = gc.collect() if collect else 0
    gc.freeze()
    return Settled(full=full, frozen=gc.get_freeze_count(), collected=collected,
                   seconds=time.perf_counter() - began)


async def keep_settled(pipeline: StateFeed, policy: GcPolicy, *,
                       on_settled: Callable[[Settled], None] = lambda _: None) -> None:
    """Apply ``policy`` to this process until cancelled or the pipeline stops (see the module
    docstring); ``on_settled`` hears of each settle."""
    from podway.pipeline import PipelineStopped  # the pipeline imports the translator: late

    policy.check()
    enabled = gc.isenabled()
    gc.disable()
    try:
        await _due(pipeline, policy, frozen=0, first=True)
        settles = 0
        while True:
            await _quiet(pipeline, quiet_s=policy.quiet_s, within_s=policy.settle_within_s)
            done = settle(full=settles > 0 and settles % policy.unfreeze_every == 0,
                          collect=settles > 0)
            settles += 1
            log.info("gc: %d objects frozen, %d collected, %.0f ms%s", done.frozen,
                     done.collected, done.seconds * 1000, " (full)" if done.full else "")
            on_settled(done)
            await _due(pipeline, policy, frozen=done.frozen)
    except PipelineStopped:
        return
    finally:
        if enabled:
            gc.enable()
        gc.unfreeze()


async def _due(pipeline: StateFeed, policy: GcPolicy, *, frozen: int,
               first: bool = False) -> None:
    """Until the next settle is due: ``settle_every_s`` from now, or (looked at with each new
    state, and every ``GROWTH_CHECK_S`` when none comes: a heap also grows between states) once
    the objects made since the last settle exceed the growth allowed; with ``first``, the first
    state instead of growth (startup allocates a whole heap)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + policy.settle_every_s
    limit = max(policy.min_growth, int(frozen * policy.growth))
    while (left := deadline - loop.time()) > 0:
        if first:
            if pipeline.state is not None:
                return
        elif gc.get_count()[0] > limit:
            return
        await _newer_within(pipeline, min(left, GROWTH_CHECK_S))


GROWTH_CHECK_S = 1.0  # how often ``_due`` looks at the growth while no state comes


async def _quiet(pipeline: StateFeed, *, quiet_s: float, within_s: float) -> None:
    """Until no new state came for ``quiet_s``, or ``within_s`` has passed."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within_s
    while (left := give_up - loop.time()) > 0:
        if not await _newer_within(pipeline, min(quiet_s, left)):
            return


async def _newer_within(pipeline: StateFeed, limit_s: float) -> bool:
    """Whether a state newer than the current one is published within ``limit_s``."""
    state = pipeline.state
    seen = state.version if state is not None else 0
    try:
        async with asyncio.timeout(limit_s):
            await pipeline.wait_for(functools.partial(_newer, seen))
    except TimeoutError:
        return False
    return True


def _newer(version: int, state: _Versioned) -> bool:
    return state.version > version
