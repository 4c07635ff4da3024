"""The controller's first status pass waits for the engines' first apply (issue 24, cold start).

At a cold start the first pass writes a status to every route (10,000 PATCHes: seconds of the
controller's CPU and the API server's) just while the engines apply the first state, which on
a small machine is the CPU the engines need to serve it. So the first pass waits until every
engine connected over ADS holds everything its cache has (``podway.envoy.xds.served``), at most
``HOLD_S``; with no engine connected it does not wait. The statuses are the same, only later;
later passes never wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from podway.envoy.xds.server import AdsServicer

HOLD_S = 5.0  # at most: an engine that never settles holds no status longer
EVERY_S = 0.02  # how often the engines are looked at


async def until_served(servicer: AdsServicer, *, limit_s: float | None = None,
                       every_s: float = EVERY_S,
                       clock: Callable[[], float] = time.monotonic) -> bool:
    """Wait while an engine connected is not served yet, at most ``limit_s`` (``HOLD_S``);
    True if every one was served (or none connected) in time."""
    deadline = clock() + (HOLD_S if limit_s is None else limit_s)
    while not servicer.served():
        if clock() >= deadline:
            return False
        await asyncio.sleep(every_s)
    return True
