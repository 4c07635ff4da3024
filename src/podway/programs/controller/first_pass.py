"""The controller's first status pass waits for the engines' first apply (issue 24, cold start).

At a cold start the first pass writes a status to every route (10,000 PATCHes: seconds of the
controller's CPU and the API server's) just while the engines apply the first state, which on
a small machine is the CPU the engines need to serve it. So the first pass waits until every
engine connected over ADS holds everything its cache has (``podway.envoy.xds.served``): while
the engines answer (an ACK or NACK at least every ``IDLE_S``: a loaded machine's Envoy may take
many seconds to apply 10,000 routes), at most ``HOLD_S``; with no engine connected it does not
wait. The statuses are the same, only later; later passes never wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from podway.envoy.xds.server import AdsServicer

HOLD_S = 60.0  # at most, however busy the engines are
IDLE_S = 5.0  # no engine answered for this long: stuck, the statuses go out
EVERY_S = 0.02  # how often the engines are looked at


async def until_served(servicer: AdsServicer, *, limit_s: float | None = None,
                       every_s: float = EVERY_S,
                       clock: Callable[[], float] = time.monotonic) -> bool:
    """Wait while an engine connected is not served yet and the engines answer (``IDLE_S``),
    at most ``limit_s`` (``HOLD_S``); True if every one was served (or none connected).
    ``clock``: as ``servicer.answered_at``'s."""
    began = clock()
    deadline = began + (HOLD_S if limit_s is None else limit_s)
    while not servicer.served():
        now = clock()
        if now >= deadline or now - max(began, servicer.answered_at) >= IDLE_S:
            return False
        await asyncio.sleep(every_s)
    return True
