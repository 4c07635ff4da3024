"""A cold controller sends its first state's clusters and load assignments ahead of the
listeners and route tables (``Pipeline(clusters_first=True)``, as ``podway run``): an engine
warms the pools while the rest is still being built (issue 24, cold start at 10,000 routes)."""

from __future__ import annotations

import asyncio
import contextlib

from podway.envoy import types
from podway.envoy.xds.cache import Cache

from .bed import Bed
from .test_status import seed_gateway


async def test_the_first_state_sets_clusters_and_assignments_before_the_rest(bed: Bed) -> None:
    seed_gateway(bed, routes=3)
    seen: list[dict[str, bool]] = []

    async def watch(cache: Cache) -> None:
        while True:
            await cache.changed().wait()
            seen.append({t: cache.is_set(t) for t in types.PUSH_ORDER})

    controller_task = asyncio.create_task(bed.start())
    await asyncio.sleep(0)  # ``start`` made the controller; its cache exists once it started
    assert bed.controller is not None
    async with asyncio.timeout(20):
        await bed.controller.started.wait()  # its pipeline runs from the next turn on
    watcher = asyncio.create_task(watch(bed.pipeline.cache))
    try:
        await controller_task
        state = await bed.until(lambda s: bool(s.ir.listeners) and bool(s.ir.pools))
        assert types.CLUSTER in state.changed_types
        assert types.ROUTE in state.changed_types
        assert seen, "the cache never changed"
        assert seen[0] == {t: t in (types.CLUSTER, types.ENDPOINT) for t in types.PUSH_ORDER}
        assert all(seen[-1].values())
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
